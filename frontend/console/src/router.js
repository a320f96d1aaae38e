// Hash routes: `#/runs?state=failed&agent=billing` is a page and its filters, so a
// view is a URL to keep or share, and the page works behind any path prefix.

import { useEffect, useState } from "preact/hooks";

export function parse(hash = location.hash) {
  const raw = hash.replace(/^#/, "") || "/";
  const [path, search = ""] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(search) };
}

export function href(parts, params) {
  const path = "#/" + parts.map(encodeURIComponent).join("/");
  const search = params ? new URLSearchParams(params).toString() : "";
  return search ? `${path}?${search}` : path;
}

// Go to a route; `replace`: without a new history entry (filters as they are typed).
export function navigate(to, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  window.dispatchEvent(new HashChangeEvent("hashchange"));
}

export function useRoute() {
  const [route, setRoute] = useState(parse);
  useEffect(() => {
    const changed = () => setRoute(parse());
    window.addEventListener("hashchange", changed);
    return () => window.removeEventListener("hashchange", changed);
  }, []);
  return route;
}
