// The public API, as the console uses it: JSON over fetch, with the API key kept in
// this tab's sessionStorage (none in open development mode); event streams over
// EventSource with short-lived stream tokens, never the key in a URL.

export const KEY = "taskservice.apiKey";
const REOPEN_MS = 1000;

export class SignInNeeded extends Error {}

// An application/problem+json answer, as an error: `message` is its detail.
export class Problem extends Error {
  constructor(problem, status) {
    super(problem.detail || problem.title || `request failed (${status})`);
    this.problem = problem;
    this.status = status;
  }
}

// Whoever shows the sign-in form (the app shell) listens here.
const signInListeners = new Set();
export const onSignInNeeded = (listener) => {
  signInListeners.add(listener);
  return () => signInListeners.delete(listener);
};

export const api = {
  key: () => sessionStorage.getItem(KEY),
  signIn: (key) => sessionStorage.setItem(KEY, key.trim()),
  signOut: () => sessionStorage.removeItem(KEY),

  async call(method, path, body, { signal } = {}) {
    const headers = { Accept: "application/json" };
    const key = api.key();
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    // Relative to the page (`../v1/...` from /ui/): right behind a path prefix.
    const response = await fetch(`..${path}`, {
      method,
      headers,
      signal,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401) {
      for (const listener of signInListeners) listener();
      throw new SignInNeeded("sign in");
    }
    const data = response.status === 204 ? null : await response.json().catch(() => null);
    if (!response.ok) throw new Problem(data || {}, response.status);
    return data;
  },

  get: (path, options) => api.call("GET", path, undefined, options),
  post: (path, body, options) => api.call("POST", path, body ?? {}, options),
  patch: (path, body, options) => api.call("PATCH", path, body, options),
  delete: (path, options) => api.call("DELETE", path, undefined, options),

  // An event stream's URL: with a stream token when signed in with a key.
  async streamUrl(path, taskId) {
    if (!api.key()) return `..${path}`;
    const minted = await api.post("/v1/stream-tokens", taskId ? { task_id: taskId } : {});
    return `..${path}${path.includes("?") ? "&" : "?"}token=${encodeURIComponent(minted.token)}`;
  },
};

// A query string from an object: empty values left out, arrays repeated.
export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    for (const one of Array.isArray(value) ? value : [value]) {
      if (one !== undefined && one !== null && one !== "") search.append(name, String(one));
    }
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

// An EventSource that resumes where it stopped: the browser reconnects by itself
// (sending Last-Event-ID); when it gives up (a stream token expired, a server gone)
// it is opened again with a fresh token, after the last id it saw. `handlers` maps
// event names to functions of the parsed data. Returns { close }.
export function follow(path, taskId, handlers) {
  let source = null;
  let closed = false;
  let last = null;
  async function open() {
    if (closed) return;
    const after = last === null ? "" : `${path.includes("?") ? "&" : "?"}after=${last}`;
    let url;
    try {
      url = await api.streamUrl(path + after, taskId);
    } catch {
      if (!closed) setTimeout(open, REOPEN_MS * 3);
      return;
    }
    if (closed) return;
    source = new EventSource(url);
    for (const [name, handle] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => {
        if (event.lastEventId) last = event.lastEventId;
        handle(JSON.parse(event.data));
      });
    }
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED && !closed) setTimeout(open, REOPEN_MS);
    };
  }
  open();
  return {
    close() {
      closed = true;
      if (source) source.close();
    },
  };
}
