// One run's data, kept live: the task, its event log, conversation, tool calls,
// subtasks and webhook deliveries, loaded once and then updated in place from the
// task's event stream (and its children's state changes), never by a reload.

import { useEffect, useRef, useState } from "preact/hooks";
import { api, follow, query } from "../../api.js";
import { TERMINAL } from "../../ui.jsx";

const PAGE = 200;
const SUBTASK_DEPTH = 4;

// `fn` at most once per `ms`, the last call winning; `.cancel()` drops a pending one.
export function debounce(fn, ms) {
  let timer = null;
  const wrapped = () => {
    clearTimeout(timer);
    timer = setTimeout(fn, ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}

// Every page of a paged list, read on from `after`.
async function allAfter(path, key, after, next) {
  const rows = [];
  let cursor = after;
  for (;;) {
    const page = await api.get(`${path}${query({ after: cursor, limit: PAGE })}`);
    rows.push(...page[key]);
    if (page.next_after === null || page.next_after === undefined || !page[key].length) return rows;
    cursor = next(page);
  }
}

// The subtasks of `parent`, each with its own (to `SUBTASK_DEPTH` levels).
async function subtaskTree(parent, depth = 1) {
  const listed = await api.get(`/v1/tasks${query({ parent_id: parent, limit: 50 })}`);
  return Promise.all(listed.tasks.map(async (task) => ({
    task,
    children: depth < SUBTASK_DEPTH ? await subtaskTree(task.id, depth + 1) : [],
  })));
}

// Where each webhook sends (a delivery names its webhook only): the task's own
// webhooks, then the tenant's for any other.
async function webhookUrls(taskId, deliveries, known) {
  const urls = { ...known };
  if (deliveries.some((d) => !(d.webhook_id in urls))) {
    const own = await api.get(`/v1/tasks/${taskId}/webhooks`).catch(() => ({ webhooks: [] }));
    for (const hook of own.webhooks) urls[hook.id] = hook.url;
  }
  for (const d of deliveries) {
    if (!(d.webhook_id in urls)) {
      urls[d.webhook_id] = await api.get(`/v1/webhooks/${d.webhook_id}`).then((hook) => hook.url, () => null);
    }
  }
  return urls;
}

// `usage` (the task's own, from an event or a snapshot) with the subtree figure the
// task shown has, until a read brings a new one.
const withSubtree = (usage, shown) =>
  usage && !usage.subtree && shown?.usage?.subtree ? { ...usage, subtree: shown.usage.subtree } : usage;

export function useRun(id) {
  const [task, setTask] = useState(null);
  const [error, setError] = useState(null);
  const [events, setEvents] = useState([]);
  const [messages, setMessages] = useState([]);
  const [calls, setCalls] = useState([]);
  const [subtasks, setSubtasks] = useState(null);
  const [deliveries, setDeliveries] = useState(null);
  const [urls, setUrls] = useState({});
  const [progress, setProgress] = useState(null);
  // The model response being written: { attempt, position, parts: [{ kind, tool, text }] }.
  const [writing, setWriting] = useState(null);
  const loaders = useRef({});

  useEffect(() => {
    let current = true;
    let stream = null;
    let children = null;
    const timers = [];
    const known = { position: -1, urls: {}, seqs: new Set(), subtree: false };
    setTask(null);
    setError(null);
    setEvents([]);
    setMessages([]);
    setCalls([]);
    setSubtasks(null);
    setDeliveries(null);
    setUrls({});
    setProgress(null);
    setWriting(null);

    const failed = (failure) => current && console.warn(failure); // eslint-disable-line no-console
    // The task as read (GET): its usage's subtree figure, which only that read has,
    // is kept through the snapshots and `usage` events that show the rest.
    const read = (found) => {
      known.subtree = Boolean(found.usage?.subtree);
      setTask(found);
    };
    const loadTask = debounce(() => api.get(`/v1/tasks/${id}`).then((found) => current && read(found), failed), 50);
    const loadMessages = debounce(async () => {
      const fresh = await allAfter(`/v1/tasks/${id}/messages`, "messages", known.position, (p) => p.next_after)
        .catch(() => []);
      if (!current || !fresh.length) return;
      known.position = fresh[fresh.length - 1].position;
      setMessages((shown) => [...shown.filter((m) => m.position < fresh[0].position), ...fresh]);
      // The persisted message replaces the one written live.
      setWriting((live) => (live && live.position <= known.position ? null : live));
    }, 100);
    const loadCalls = debounce(async () => {
      const all = await allAfter(`/v1/tasks/${id}/calls`, "calls", 0, (p) => p.next_after).catch(() => null);
      if (current && all) setCalls(all);
    }, 150);
    const loadSubtasks = debounce(async () => {
      const tree = await subtaskTree(id).catch(() => null);
      if (current && tree) setSubtasks(tree);
    }, 250);
    const loadDeliveries = debounce(async () => {
      const page = await api.get(`/v1/tasks/${id}/deliveries${query({ limit: 100 })}`).catch(() => null);
      if (!current || !page) return;
      known.urls = await webhookUrls(id, page.deliveries, known.urls);
      if (!current) return;
      setUrls(known.urls);
      setDeliveries(page.deliveries);
    }, 300);
    // Deliveries go out after the state change that makes them: look again as they go.
    const deliveriesSoon = () => {
      for (const ms of [0, 1500, 4000, 10000]) timers.push(setTimeout(loadDeliveries, ms));
    };
    loaders.current = { loadTask, loadMessages, loadCalls, loadSubtasks, loadDeliveries, deliveriesSoon };

    const handlers = {
      snapshot: (snapshot) => current && setTask((shown) => ({ ...snapshot, usage: withSubtree(snapshot.usage, shown) })),
      delta: (delta) => {
        if (delta.position <= known.position) return;
        setWriting((live) => {
          const same = live && live.attempt === delta.attempt && live.position === delta.position;
          const parts = same ? [...live.parts] : [];
          const part = parts[delta.part] || { kind: delta.kind, tool: delta.tool, text: "" };
          parts[delta.part] = { ...part, tool: delta.tool ?? part.tool, text: part.text.slice(0, delta.offset) + delta.text };
          return { attempt: delta.attempt, position: delta.position, parts };
        });
      },
    };
    for (const type of ["state_change", "claimed", "released", "recovered", "stalled", "throttled", "followup",
      "message", "usage", "tool_call", "tool_result", "progress", "log", "webhook_disabled", "paused", "resumed",
      "approval"]) {
      handlers[type] = (event) => {
        if (!current) return;
        if (known.seqs.has(event.seq)) return; // seen before the stream reopened
        known.seqs.add(event.seq);
        setEvents((log) => [...log, event]);
        if (type === "state_change") {
          loadTask();
          loadSubtasks();
          if (TERMINAL.has(event.data.to)) {
            // The stream ends after the terminal change: nothing more to follow.
            stream.close();
            setWriting(null);
            loadMessages();
            loadCalls();
            deliveriesSoon();
          } else loadDeliveries();
        } else if (type === "message") loadMessages();
        else if (type === "tool_call" || type === "tool_result") {
          loadCalls();
          loadSubtasks();
        } else if (type === "progress") setProgress(event.data);
        else if (type === "usage") {
          setTask((t) => (t ? { ...t, usage: withSubtree(event.data, t) } : t));
          if (known.subtree) loadTask(); // the subtree's figure grew too
        }
        else if (type === "approval") {
          loadTask();
          loadCalls();
        } else if (["claimed", "released", "recovered", "followup", "paused", "resumed"].includes(type)) loadTask();
      };
    }

    api.get(`/v1/tasks/${id}`).then(
      (found) => {
        if (!current) return;
        read(found);
        stream = follow(`/v1/tasks/${id}/events?stream=true`, id, handlers);
        // Its subtasks' state changes, for the tree.
        children = follow(`/v1/events${query({ type: "state_change", parent_id: id })}`, null, {
          state_change: () => {
            if (!current) return;
            loadSubtasks();
            loadTask(); // the subtree's figure
          },
        });
        loadMessages();
        loadCalls();
        loadSubtasks();
        loadDeliveries();
      },
      (failure) => current && setError(failure),
    );
    return () => {
      current = false;
      for (const timer of timers) clearTimeout(timer);
      for (const load of [loadTask, loadMessages, loadCalls, loadSubtasks, loadDeliveries]) load.cancel();
      if (stream) stream.close();
      if (children) children.close();
    };
  }, [id]);

  return { task, setTask, error, events, messages, calls, subtasks, deliveries, urls, progress, writing, loaders };
}
