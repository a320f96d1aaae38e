// The task list: newest first, filtered, paged, and patched live from the firehose.

import { STATES, api, badge, follow, h, report, short, when } from "./core.js";

function taskRow(task) {
  return h("tr", { "data-task": task.id },
    h("td", { class: "mono" }, h("a", { href: `#/tasks/${task.id}` }, task.id)),
    h("td", { class: "state-cell" }, badge(task.state)),
    h("td", {}, task.agent.profile),
    h("td", { class: "priority" }, String(task.priority ?? 0)),
    h("td", {}, short(task.input, 70)),
    h("td", {}, when(task.created_at)));
}

export function tasks(main, query) {
  const filters = Object.fromEntries(query);
  const rows = h("tbody");
  const more = h("button", { class: "secondary", type: "button", hidden: true }, "Older");
  const agents = h("select", { name: "agent" }, h("option", { value: "" }, "any"));
  const form = h("form", { class: "filters", onchange: () => {
      const chosen = new URLSearchParams([...new FormData(form)].filter(([, v]) => v));
      location.hash = `#/tasks${chosen.size ? `?${chosen}` : ""}`;
    }, onsubmit: (e) => e.preventDefault() },
    h("label", {}, "state", h("select", { name: "state" }, h("option", { value: "" }, "any"),
      ...STATES.map((s) => h("option", { value: s, selected: filters.state === s }, s)))),
    h("label", {}, "agent", agents),
    h("label", {}, "context", h("input", { name: "context_id", value: filters.context_id ?? "" })),
    h("label", {}, "parent", h("input", { name: "parent_id", value: filters.parent_id ?? "", size: 36 })));
  main.replaceChildren(h("h1", {}, "Tasks"), form,
    h("table", { id: "tasks" }, h("thead", {}, h("tr", {}, ...["id", "state", "agent", "priority", "input", "created"].map((c) => h("th", {}, c)))), rows),
    h("p", {}, more));
  api.get("/v1/agents").then(({ agents: list }) => {
    agents.append(...list.map((a) => h("option", { value: a.name, selected: filters.agent === a.name }, a.name)));
  }).catch(report);

  const params = new URLSearchParams(Object.entries(filters));
  let cursor = null;
  async function page() {
    const q = new URLSearchParams(params);
    q.set("limit", "50");
    if (cursor) q.set("cursor", cursor);
    const listed = await api.get(`/v1/tasks?${q}`);
    rows.append(...listed.tasks.map(taskRow));
    cursor = listed.next_cursor;
    more.hidden = !cursor;
  }
  more.addEventListener("click", () => page().catch(report));

  // Live: state changes of the tenant's tasks (the firehose, filtered as the list is).
  const live = new URLSearchParams({ type: "state_change" });
  for (const name of ["agent", "context_id", "parent_id"]) if (filters[name]) live.set(name, filters[name]);
  let stream = null;
  const ready = page().then(() => { stream = follow(`/v1/events?${live}`, null, {
    state_change: async (event) => {
      const row = rows.querySelector(`tr[data-task="${event.task_id}"]`);
      if (row) {
        row.querySelector(".state-cell").replaceChildren(badge(event.data.to));
        row.classList.remove("fresh");
        void row.offsetWidth;
        row.classList.add("fresh");
      } else if (event.data.from === null && (!filters.state || filters.state === "pending")) {
        const task = await api.get(`/v1/tasks/${event.task_id}`);
        if (!rows.querySelector(`tr[data-task="${task.id}"]`)) {
          const fresh = taskRow(task);
          fresh.classList.add("fresh");
          rows.prepend(fresh);
        }
      }
    },
  }); });
  return [ready, () => stream?.close()];
}
