// Shared by every view: building elements, the API, event streams, error reports.
//
// Every element is built with `h()` (text nodes, never innerHTML), so nothing a
// task says can run as markup. The API key lives in sessionStorage only; event
// streams open with short-lived stream tokens, never with the key in a URL.

export const KEY = "taskservice.apiKey";
export const TERMINAL = new Set(["completed", "failed", "cancelled"]);
export const STATES = ["pending", "running", "input_required", "completed", "failed", "cancelled"];
export const COLOURS = { completed: "#12b76a", failed: "#d92d20", cancelled: "#667085", line: "#1d2330" };
const REOPEN_MS = 1000;

// Where failures go: the router shows them (or the sign-in form, on a 401).
export const errors = { handle: (error) => console.warn(error) };
export const report = (error) => errors.handle(error);

// -- DOM --------------------------------------------------------------------------

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "style") el.style.cssText = value; // CSSOM: allowed by the page's CSP
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children.flat()) {
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export const badge = (state) => h("span", { class: `state ${state}`, "data-state": state }, state);
export const when = (iso) => (iso ? new Date(iso).toLocaleTimeString() : "");
export const text = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));
export const short = (value, n = 90) => {
  const s = typeof value === "string" ? value : JSON.stringify(value ?? "");
  return s.length > n ? `${s.slice(0, n)}…` : s;
};
export const ago = (iso, now = Date.now()) => {
  const seconds = Math.max(0, (now - new Date(iso).getTime()) / 1000);
  return seconds < 90 ? `${seconds.toFixed(0)} s` : `${(seconds / 60).toFixed(1)} min`;
};

// Run `fn` once, `ms` after the last call (its failure reported, never unhandled).
export function debounce(fn, ms) {
  let timer = null;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(() => Promise.resolve().then(fn).catch(report), ms);
  };
}

// -- the API ----------------------------------------------------------------------

export class SignInNeeded extends Error {}

export class Problem extends Error {
  constructor(problem) {
    super(problem.detail || problem.title || "request failed");
    this.problem = problem;
  }
}

export const api = {
  key: () => sessionStorage.getItem(KEY),

  async call(method, path, body) {
    const headers = { Accept: "application/json" };
    const key = api.key();
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401) throw new SignInNeeded();
    const data = response.status === 204 ? null : await response.json();
    if (!response.ok) throw new Problem(data || {});
    return data;
  },

  get: (path) => api.call("GET", path),
  post: (path, body) => api.call("POST", path, body ?? {}),

  // An event stream's URL: with a stream token when signed in with a key.
  async streamUrl(path, taskId) {
    if (!api.key()) return path;
    const minted = await api.post("/v1/stream-tokens", taskId ? { task_id: taskId } : {});
    return `${path}${path.includes("?") ? "&" : "?"}token=${encodeURIComponent(minted.token)}`;
  },
};

// An EventSource that resumes where it stopped: the browser reconnects by itself
// (sending Last-Event-ID); when it gives up (a stream token expired, a server gone)
// it is opened again with a fresh token, after the last id it saw.
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
    } catch (error) {
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
