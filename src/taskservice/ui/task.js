// A task's page: its state, conversation (the answer streaming in), tool calls,
// subtasks, webhook deliveries and event log, followed live; cancel and answer.

import { TERMINAL, api, badge, debounce, follow, h, report, short, text, when } from "./core.js";

function renderPart(part) {
  switch (part.part_kind) {
    case "user-prompt":
      return h("pre", {}, text(part.content));
    case "system-prompt":
      return h("pre", { class: "muted" }, `system: ${part.content}`);
    case "text":
      return h("pre", {}, part.content);
    case "thinking":
      return h("pre", { class: "muted" }, `thinking: ${part.content}`);
    case "tool-call":
      return h("pre", {}, `→ ${part.tool_name}(${typeof part.args === "string" ? part.args : JSON.stringify(part.args)})`);
    case "tool-return":
      return h("pre", {}, `← ${part.tool_name}: ${short(part.content, 400)}`);
    case "retry-prompt":
      return h("pre", { class: "error" }, `retry ${part.tool_name ?? ""}: ${short(part.content, 400)}`);
    default:
      return h("pre", { class: "muted" }, short(part, 200));
  }
}

function callTimeline(calls) {
  if (!calls.length) return h("p", { class: "muted" }, "No tool calls.");
  const starts = calls.map((c) => new Date(c.started_at ?? c.created_at).getTime());
  const ends = calls.map((c, i) => (c.finished_at ? new Date(c.finished_at).getTime() : Date.now()) || starts[i]);
  const t0 = Math.min(...starts);
  const span = Math.max(1, Math.max(...ends) - t0);
  return h("table", { id: "calls" },
    h("tr", {}, ...["tool", "arguments", "status", "result or error", "duration", ""].map((c) => h("th", {}, c))),
    ...calls.map((call, i) => h("tr", { "data-call": call.tool_call_id },
      h("td", { class: "mono" }, call.name),
      h("td", {}, h("pre", {}, short(call.arguments, 200))),
      h("td", {}, call.status),
      h("td", {}, call.error ? h("pre", { class: "error" }, short(call.error, 160)) : h("pre", {}, short(call.result, 160))),
      h("td", {}, call.finished_at ? `${((ends[i] - starts[i]) / 1000).toFixed(2)} s` : "…"),
      h("td", { style: "width: 30%" }, h("div", { class: "timeline" },
        h("div", { class: `bar ${call.status}`,
          style: `margin-left: ${((starts[i] - t0) / span) * 100}%; width: ${((ends[i] - starts[i]) / span) * 100}%` }))))));
}

export function taskPage(main, id) {
  const head = h("section", { class: "card", id: "task-head" });
  const actions = h("div", { id: "actions" });
  const conversation = h("div", { id: "conversation" });
  const writing = h("div", { id: "writing" });
  const calls = h("div");
  const subtasks = h("div", { id: "subtasks" });
  const deliveries = h("div", { id: "deliveries" });
  const timeline = h("ol", { id: "timeline" });
  const log = h("tbody");
  main.replaceChildren(
    head, actions,
    h("div", { class: "columns" },
      h("div", {},
        h("h2", {}, "Conversation"), conversation, writing),
      h("div", {},
        h("h2", {}, "States"), timeline,
        h("h2", {}, "Subtasks"), subtasks,
        h("h2", {}, "Webhook deliveries"), deliveries)),
    h("h2", {}, "Tool calls"), calls,
    h("details", { id: "raw" }, h("summary", {}, "Event log"),
      h("table", {}, h("tr", {}, ...["seq", "type", "data", "at"].map((c) => h("th", {}, c))), log)));

  let task = null;
  let progress = null;
  const live = { key: null, parts: new Map() };

  function showHead() {
    const usage = task.usage || {};
    head.replaceChildren(
      h("div", { class: "row" }, h("h1", { class: "mono" }, task.id), badge(task.state)),
      h("div", { class: "row muted" },
        `agent ${task.agent.profile} · model ${task.agent.model} · attempt ${task.attempt} (${task.lost_attempts ?? 0}/${task.max_attempts} lost)`,
        ` · priority ${task.priority ?? 0} · created ${when(task.created_at)}`,
        task.run_at && new Date(task.run_at) - new Date(task.created_at) > 1000 ? ` · runs at ${when(task.run_at)}` : "",
        task.finished_at ? ` · finished ${when(task.finished_at)}` : "",
        ` · ${usage.requests ?? 0} requests, ${usage.input_tokens ?? 0} in / ${usage.output_tokens ?? 0} out tokens`,
        task.parent_id ? h("span", {}, " · parent ", h("a", { href: `#/tasks/${task.parent_id}` }, task.parent_id)) : ""),
      progress && !TERMINAL.has(task.state) ? h("div", {}, h("div", { class: "progress" }, h("div", { style: `width: ${progress.percent}%` })),
        h("span", { class: "muted" }, `${progress.percent}% ${progress.note ?? ""}`)) : "",
      h("h2", {}, "Input"), h("pre", {}, text(task.input)),
      task.result !== null ? h("div", {}, h("h2", {}, "Result"), h("pre", { id: "result" }, text(task.result))) : "",
      task.error ? h("div", {}, h("h2", {}, "Error"), h("pre", { class: "error" }, text(task.error))) : "",
      task.cancel_reason ? h("p", { class: "muted" }, `cancelled: ${task.cancel_reason}`) : "");
    showActions();
  }

  let shownFor = null; // the state the actions were built for: typing is not wiped by events
  function showActions() {
    const key = `${task.state}:${JSON.stringify(task.input_request)}`;
    if (key === shownFor) return;
    shownFor = key;
    const parts = [];
    const questions = task.state === "input_required" && task.input_request?.kind === "questions"
      ? task.input_request.questions : [];
    if (questions.length) {
      const form = h("form", { class: "card", id: "answer", onsubmit: async (event) => {
        event.preventDefault();
        const answers = Object.fromEntries(new FormData(form));
        try {
          task = await api.post(`/v1/tasks/${id}/input`, { answers });
          showHead();
        } catch (error) { report(error); }
      } }, h("h2", {}, "The agent asks"),
        ...questions.map((q) => h("label", {}, q.question, h("textarea", { name: q.id, required: true }))),
        h("p", {}, h("button", { type: "submit" }, "Answer")));
      parts.push(form);
    }
    if (!TERMINAL.has(task.state)) {
      const reason = h("input", { name: "reason", placeholder: "reason (optional)" });
      parts.push(h("form", { class: "row", id: "cancel", onsubmit: async (event) => {
        event.preventDefault();
        try {
          task = await api.post(`/v1/tasks/${id}/cancel`, reason.value ? { reason: reason.value } : {});
          showHead();
        } catch (error) { report(error); }
      } }, reason, h("button", { type: "submit", class: "danger" }, "Cancel task")));
    }
    actions.replaceChildren(...parts);
  }

  function showWriting() {
    if (!live.key) return writing.replaceChildren();
    const shown = [...live.parts.entries()].sort(([a], [b]) => a - b).map(([, part]) =>
      part.kind === "text" ? h("pre", {}, part.text)
        : h("pre", { class: "muted" }, part.kind === "tool_call" ? `→ ${part.tool}(${part.text}` : part.text));
    writing.replaceChildren(h("div", { class: "bubble live" },
      h("div", { class: "who" }, "model, writing…"), ...shown, h("span", { class: "caret" })));
  }

  const loadMessages = debounce(async () => {
    const page = await api.get(`/v1/tasks/${id}/messages?limit=200`);
    conversation.replaceChildren(...page.messages.map((m) =>
      h("div", { class: `bubble ${m.kind}`, "data-position": m.position },
        h("div", { class: "who" }, m.kind === "request" ? "to the model" : "model"),
        ...m.message.parts.map(renderPart))));
    const persisted = page.messages.length ? page.messages[page.messages.length - 1].position : -1;
    if (live.key && live.key[1] <= persisted) {
      live.key = null;
      live.parts.clear();
      showWriting();
    }
  }, 100);
  const loadCalls = debounce(async () => {
    calls.replaceChildren(callTimeline((await api.get(`/v1/tasks/${id}/calls?limit=200`)).calls));
  }, 150);
  const loadSubtasks = debounce(async () => {
    async function tree(parent, depth) {
      const listed = await api.get(`/v1/tasks?parent_id=${parent}&limit=50`);
      if (!listed.tasks.length) return null;
      return h("ul", { class: "tree" }, ...(await Promise.all(listed.tasks.map(async (child) =>
        h("li", {}, badge(child.state), " ", h("a", { class: "mono", href: `#/tasks/${child.id}` }, child.id),
          " ", h("span", { class: "muted" }, short(child.input, 50)),
          depth < 3 ? await tree(child.id, depth + 1) : null)))));
    }
    subtasks.replaceChildren((await tree(id, 1)) ?? h("p", { class: "muted" }, "No subtasks."));
  }, 300);
  const loadDeliveries = debounce(async () => {
    const page = await api.get(`/v1/tasks/${id}/deliveries`);
    deliveries.replaceChildren(page.deliveries.length ? h("table", {},
      h("tr", {}, ...["state", "status", "attempts", ""].map((c) => h("th", {}, c))),
      ...page.deliveries.map((d) => h("tr", { "data-delivery": d.id },
        h("td", {}, d.state), h("td", {}, d.status),
        h("td", {}, h("ul", { class: "tree" }, ...d.attempt_log.map((a) =>
          h("li", {}, `#${a.attempt} ${a.status_code ?? a.error ?? ""} · ${a.duration_ms.toFixed(0)} ms`)))),
        h("td", {}, h("button", { class: "secondary", type: "button", onclick: async () => {
          try {
            await api.post(`/v1/deliveries/${d.id}/redeliver`);
            // The dispatcher sends it in the background: look again as it goes.
            for (const ms of [0, 1500, 4000]) setTimeout(loadDeliveries, ms);
          } catch (error) { report(error); }
        } }, "Redeliver")))))
      : h("p", { class: "muted" }, "No webhook deliveries."));
  }, 500);

  const handlers = {
    snapshot: (snapshot) => { task = snapshot; showHead(); },
    delta: (delta) => {
      const key = [delta.attempt, delta.position];
      if (!live.key || key[0] !== live.key[0] || key[1] !== live.key[1]) {
        live.key = key;
        live.parts.clear();
      }
      const part = live.parts.get(delta.part) ?? { kind: delta.kind, tool: delta.tool, text: "" };
      part.text = part.text.slice(0, delta.offset) + delta.text;
      part.tool = delta.tool ?? part.tool;
      live.parts.set(delta.part, part);
      showWriting();
    },
  };
  for (const type of ["state_change", "claimed", "released", "recovered", "stalled", "throttled", "followup",
    "message", "usage", "tool_call", "tool_result", "progress", "log", "webhook_disabled"]) {
    handlers[type] = (event) => {
      log.append(h("tr", {}, h("td", {}, event.seq), h("td", {}, event.type),
        h("td", {}, h("pre", {}, short(event.data, 300))), h("td", {}, when(event.created_at))));
      if (type === "state_change") {
        timeline.append(h("li", {}, badge(event.data.to), ` ${when(event.created_at)}`,
          event.data.cause ? ` (${event.data.cause})` : "", event.data.reason ? ` — ${event.data.reason}` : ""));
        api.get(`/v1/tasks/${id}`).then((fresh) => { task = fresh; showHead(); }).catch(report);
        loadDeliveries();
        if (TERMINAL.has(event.data.to)) { stream.close(); loadMessages(); loadCalls(); loadSubtasks(); }
      } else if (type === "throttled") {
        timeline.append(h("li", { class: "muted" }, `waiting for ${event.data.budgets.join(", ")}'s rate limit `
          + `until ${when(event.data.until)}`, event.data.reason === "provider_429" ? " (the provider answered 429)" : ""));
      } else if (type === "message") loadMessages();
      else if (type === "tool_call" || type === "tool_result") { loadCalls(); loadSubtasks(); }
      else if (type === "progress") { progress = event.data; if (task) showHead(); }
      else if (type === "usage" && task) { task.usage = event.data; showHead(); }
    };
  }
  let stream = null;
  const ready = api.get(`/v1/tasks/${id}`).then((found) => {
    task = found;
    showHead();
    stream = follow(`/v1/tasks/${id}/events`, id, handlers);
    loadMessages(); loadCalls(); loadSubtasks(); loadDeliveries();
  });
  return [ready, () => stream?.close()];
}
