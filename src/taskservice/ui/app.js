// The taskservice dashboard: plain ES modules, no build step, no dependencies.
//
// It is a client of the public API like any other: JSON over fetch with the API key
// kept in sessionStorage (none in open development mode), and live updates over
// EventSource with short-lived stream tokens (never the key in a URL). Views are
// hash routes: #/ (overview), #/tasks (live list), #/tasks/<id> (a task), #/new.
// Every element is built with `h()` (text nodes, never innerHTML), so nothing a
// task says can run as markup.

import { KEY, Problem, SignInNeeded, api, errors, h, report } from "./core.js";
import { newTask } from "./new.js";
import { overview } from "./overview.js";
import { taskPage } from "./task.js";
import { tasks } from "./tasks.js";

function signIn(main, retry) {
  const input = h("input", { name: "key", type: "password", placeholder: "ts_…", required: true });
  main.replaceChildren(
    h("section", { class: "card signin" },
      h("h1", {}, "Sign in"),
      h("p", { class: "muted" },
        "Paste an API key (taskservice keys create). It is kept in this tab's session " +
        "storage only, and never put in a URL."),
      h("form", {
        onsubmit: (event) => {
          event.preventDefault();
          sessionStorage.setItem(KEY, input.value.trim());
          retry();
        },
      }, input, h("p", {}, h("button", { type: "submit" }, "Sign in")))));
}

// -- the router -------------------------------------------------------------------

const main = document.getElementById("view");
let cleanup = () => {};

errors.handle = (error) => {
  if (error instanceof SignInNeeded) {
    cleanup();
    cleanup = () => {};
    signIn(main, route);
    return;
  }
  const message = error instanceof Problem ? error.message : String(error);
  main.prepend(h("p", { class: "card error", role: "alert" }, message));
};

function route() {
  cleanup();
  const [path, query = ""] = location.hash.replace(/^#\/?/, "").split("?");
  const parts = path.split("/").filter(Boolean);
  const params = new URLSearchParams(query);
  for (const link of document.querySelectorAll("header nav a")) {
    link.classList.toggle("active", link.dataset.nav === (parts[0] ?? "overview"));
  }
  document.getElementById("sign-out").hidden = !api.key();
  let view;
  if (parts[0] === "tasks" && parts[1]) view = taskPage(main, parts[1]);
  else if (parts[0] === "tasks") view = tasks(main, params);
  else if (parts[0] === "new") view = newTask(main);
  else view = overview(main);
  const [ready, stop] = view;
  cleanup = stop;
  ready.catch(report);
}

document.getElementById("jump").addEventListener("submit", (event) => {
  event.preventDefault();
  const id = new FormData(event.target).get("id").trim();
  if (id) location.hash = `#/tasks/${id}`;
});
document.getElementById("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  route();
});
window.addEventListener("hashchange", route);
route();
