// A new task: an agent picker, the input, a model.

import { api, h, report } from "./core.js";

export function newTask(main) {
  const agents = h("select", { name: "agent" });
  const form = h("form", { class: "card", id: "new-task", onsubmit: async (event) => {
    event.preventDefault();
    const data = Object.fromEntries([...new FormData(form)].filter(([, v]) => v));
    try {
      const task = await api.post("/v1/tasks", data);
      location.hash = `#/tasks/${task.id}`;
    } catch (error) { report(error); }
  } },
    h("label", {}, "agent", agents),
    h("label", {}, "input", h("textarea", { name: "input", required: true,
      placeholder: "For the demo agent: take 20s, ask, spawn 2" })),
    h("label", {}, "model (optional, from the allow-list)", h("input", { name: "model" })),
    h("p", {}, h("button", { type: "submit" }, "Submit")));
  main.replaceChildren(h("h1", {}, "New task"), form);
  return [api.get("/v1/agents").then(({ agents: list }) => {
    agents.append(...list.map((a) => h("option", { value: a.name, selected: a.name === "demo" },
      `${a.name}${a.description ? ` — ${a.description}` : ""}`)));
  }), () => {}];
}
