// Runs: the tenant's tasks, newest first, filtered by what the URL says (a view is
// a URL), subtasks folded under their parents, kept live from the firehose.

import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { api, follow, query } from "../api.js";
import { Cost } from "../money.jsx";
import { href, navigate } from "../router.js";
import { Ago, Duration, Empty, Failure, STATES, StateBadge, TERMINAL, short, useLoad, shortId } from "../ui.jsx";
import { Run } from "./run.jsx";

// The filters the list takes from the URL, as the API names them.
const FILTERS = ["state", "agent", "paused", "context_id", "parent_id", "created_after", "created_before"];
const PAUSED = { "": "any", true: "paused", false: "not paused" };
const SINCE = {
  "": "any time",
  "1h": "last hour",
  "24h": "last 24 hours",
  "7d": "last 7 days",
  custom: "between…",
};
const HOURS = { "1h": 1, "24h": 24, "7d": 168 };
const PAGE = 50;
const LIVE_MS = 400; // the live list catches up at most this often

export function Runs({ route }) {
  if (route.parts[1]) return <Run id={route.parts[1]} route={route} />;
  return <RunList params={route.params} />;
}

function apiFilters(params) {
  const filters = {};
  for (const name of FILTERS) {
    const values = params.getAll(name).filter(Boolean);
    if (values.length) filters[name] = name === "state" ? values : values[0];
  }
  const since = params.get("since");
  if (since && HOURS[since] && !filters.created_after) {
    filters.created_after = new Date(Date.now() - HOURS[since] * 3600e3).toISOString();
  }
  return filters;
}

// The browser's local time of an ISO instant, for a datetime-local input; and back.
const local = (instant) => {
  if (!instant) return "";
  const at = new Date(instant);
  return new Date(at.getTime() - at.getTimezoneOffset() * 60e3).toISOString().slice(0, 16);
};
const iso = (value) => (value ? new Date(value).toISOString() : "");

// `list` with `read` merged in: each task shown replaced by its newer read, each new
// one put in its place by creation (newest first; ids are time-ordered UUIDv7s), but
// past the last shown while older pages remain ("Older" brings those).
function merge(list, read, olderPages) {
  const byId = new Map(read.map((task) => [task.id, task]));
  let merged = list.map((task) => byId.get(task.id) || task);
  const shown = new Set(list.map((task) => task.id));
  for (const task of read) {
    if (shown.has(task.id)) continue;
    const after = merged.findIndex((one) => one.id < task.id);
    if (after >= 0) merged = [...merged.slice(0, after), task, ...merged.slice(after)];
    else if (!olderPages) merged = [...merged, task];
  }
  return merged;
}

function RunList({ params }) {
  const key = params.toString();
  const filters = useMemo(() => apiFilters(params), [key]);
  const [tasks, setTasks] = useState([]);
  const [cursor, setCursor] = useState(null);
  const [total, setTotal] = useState(null);
  const [error, setError] = useState(null);
  const [fresh, setFresh] = useState(new Set());
  const shown = useRef(tasks);
  shown.current = tasks;
  const more = useRef(cursor);
  more.current = cursor;

  useEffect(() => {
    let current = true;
    setTasks([]);
    setError(null);
    api.get(`/v1/tasks${query({ ...filters, limit: PAGE, count: "exact" })}`).then(
      (page) => {
        if (!current) return;
        setTasks(page.tasks);
        setCursor(page.next_cursor);
        setTotal(page.total);
      },
      (failure) => current && setError(failure),
    );
    // Pauses and resumes change no state: followed too, for the mark and the filter.
    const live = { type: ["state_change", "paused", "resumed"] };
    for (const name of ["agent", "context_id", "parent_id"]) if (filters[name]) live[name] = filters[name];
    // Live: the tenant's state changes, filtered as the list is. A burst of them
    // costs one read of the first page (at most every LIVE_MS), not a read per task:
    // the page, filtered by the server, brings the new tasks and those entering a
    // state the list shows; the tasks shown from older pages are read one by one.
    let changed = new Set();
    let timer = null;
    async function catchUp() {
      timer = null;
      const ids = changed;
      changed = new Set();
      const page = await api.get(`/v1/tasks${query({ ...filters, limit: PAGE })}`).catch(() => null);
      if (!current || !page) return;
      const first = new Set(page.tasks.map((task) => task.id));
      const older = [...ids].filter((id) => !first.has(id) && shown.current.some((task) => task.id === id));
      const reread = await Promise.all(older.map((id) => api.get(`/v1/tasks/${id}`).catch(() => null)));
      if (!current) return;
      const known = new Set(shown.current.map((task) => task.id));
      const added = page.tasks.filter((task) => !known.has(task.id));
      setTasks((list) => merge(list, [...page.tasks, ...reread.filter(Boolean)], more.current));
      if (added.length) setTotal((count) => (typeof count === "number" ? count + added.length : count));
      setFresh((fresh) => new Set([...fresh, ...ids].filter((id) => first.has(id) || older.includes(id))));
    }
    // A task not on the page comes in when it is new, or enters a state the list shows
    // (a list of failed tasks gains each that fails), or is paused in a list of paused
    // tasks (resumed, in a list of those not paused).
    const heard = (entering) => (event) => {
      const known = shown.current.some((task) => task.id === event.task_id);
      if (!known && !entering(event)) return;
      changed.add(event.task_id);
      if (timer === null) timer = setTimeout(catchUp, LIVE_MS);
    };
    const stream = follow(`/v1/events${query(live)}`, null, {
      state_change: heard((event) => event.data.from === null || filters.state?.includes(event.data.to)),
      paused: heard(() => filters.paused === "true"),
      resumed: heard(() => filters.paused === "false"),
    });
    return () => {
      current = false;
      clearTimeout(timer);
      stream.close();
    };
  }, [key]);

  async function older() {
    try {
      const page = await api.get(`/v1/tasks${query({ ...filters, limit: PAGE, cursor })}`);
      setTasks((list) => [...list, ...page.tasks]);
      setCursor(page.next_cursor);
    } catch (failure) {
      setError(failure);
    }
  }

  return (
    <section class="runs">
      <div class="title">
        <h1>Runs</h1>
        {total !== null && total !== undefined && <span class="muted count">{total} {total === 1 ? "task" : "tasks"}</span>}
        <a class="button primary" href="#/new">New task</a>
      </div>
      <Filters params={params} />
      <Failure error={error} />
      <RunTable tasks={tasks} fresh={fresh} />
      {!error && tasks.length === 0 && <Empty>No task matches these filters.</Empty>}
      {cursor && <button type="button" onClick={older}>Older</button>}
    </section>
  );
}

function Filters({ params }) {
  const agents = useLoad(() => api.get("/v1/agents"), []);
  const chosen = new Set(params.getAll("state"));
  // A range in the URL (created_after/before) is a custom one, whoever wrote it.
  const ranged = params.get("created_after") || params.get("created_before");
  const since = ranged ? "custom" : params.get("since") || "";
  function pick(value) {
    const next = new URLSearchParams(params);
    for (const name of ["since", "created_after", "created_before"]) next.delete(name);
    if (value) next.set("since", value);
    navigate(href(["runs"], next), { replace: true });
  }
  function set(name, values) {
    const next = new URLSearchParams(params);
    next.delete(name);
    for (const value of [].concat(values)) if (value) next.append(name, value);
    navigate(href(["runs"], next), { replace: true });
  }
  return (
    <form class="filters" onSubmit={(event) => event.preventDefault()}>
      <fieldset class="states">
        <legend>state</legend>
        {STATES.map((state) => (
          <label class={`chip ${chosen.has(state) ? "on" : ""}`}>
            <input
              type="checkbox"
              name="state"
              value={state}
              checked={chosen.has(state)}
              onChange={(event) => {
                const next = new Set(chosen);
                if (event.currentTarget.checked) next.add(state);
                else next.delete(state);
                set("state", [...next]);
              }}
            />
            {state === "input_required" ? "input required" : state}
          </label>
        ))}
      </fieldset>
      <label>
        agent
        <select name="agent" value={params.get("agent") || ""} onChange={(event) => set("agent", event.currentTarget.value)}>
          <option value="">any</option>
          {(agents.data?.agents || []).map((agent) => <option value={agent.name}>{agent.name}</option>)}
        </select>
      </label>
      <label>
        paused
        <select name="paused" value={params.get("paused") || ""} onChange={(event) => set("paused", event.currentTarget.value)}>
          {Object.entries(PAUSED).map(([value, label]) => <option value={value}>{label}</option>)}
        </select>
      </label>
      <label>
        created
        <select name="since" value={since} onChange={(event) => pick(event.currentTarget.value)}>
          {Object.entries(SINCE).map(([value, label]) => <option value={value}>{label}</option>)}
        </select>
      </label>
      {since === "custom" && (
        <>
          <label>
            from
            <input type="datetime-local" name="created_after" value={local(params.get("created_after"))}
              onChange={(event) => set("created_after", iso(event.currentTarget.value))} />
          </label>
          <label>
            to
            <input type="datetime-local" name="created_before" value={local(params.get("created_before"))}
              onChange={(event) => set("created_before", iso(event.currentTarget.value))} />
          </label>
        </>
      )}
      <label>
        context
        <input name="context_id" value={params.get("context_id") || ""} placeholder="any"
          onChange={(event) => set("context_id", event.currentTarget.value.trim())} />
      </label>
      <label>
        parent
        <input name="parent_id" value={params.get("parent_id") || ""} placeholder="any" size={12}
          onChange={(event) => set("parent_id", event.currentTarget.value.trim())} />
      </label>
      {[...params.keys()].length > 0 && (
        <a class="clear" href="#/runs">Clear filters</a>
      )}
    </form>
  );
}

// The page's tasks with each subtask under its parent (when its parent is on the page).
function fold(tasks) {
  const ids = new Set(tasks.map((task) => task.id));
  const children = new Map();
  for (const task of tasks) {
    if (task.parent_id && ids.has(task.parent_id)) {
      if (!children.has(task.parent_id)) children.set(task.parent_id, []);
      children.get(task.parent_id).push(task);
    }
  }
  const rows = [];
  const visit = (task, depth) => {
    rows.push({ task, depth, children: children.get(task.id)?.length || 0 });
    for (const child of children.get(task.id) || []) visit(child, depth + 1);
  };
  for (const task of tasks) if (!(task.parent_id && ids.has(task.parent_id))) visit(task, 0);
  return rows;
}

export function RunTable({ tasks, fresh = new Set() }) {
  const [open, setOpen] = useState(new Set());
  const rows = fold(tasks);
  const hidden = new Set();
  for (const { task, depth } of rows) {
    if (depth > 0 && (hidden.has(task.parent_id) || !open.has(task.parent_id))) hidden.add(task.id);
  }
  const toggle = (id) => setOpen((ids) => {
    const next = new Set(ids);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    return next;
  });
  return (
    <div class="table-scroll">
      <table class="run-table" id="tasks">
        <thead>
          <tr>
            <th>task</th><th>state</th><th>agent</th><th class="wide">input</th>
            <th>created</th><th>duration</th><th>finished</th><th class="num">cost</th>
          </tr>
        </thead>
        <tbody>
          {rows.filter(({ task }) => !hidden.has(task.id)).map(({ task, depth, children }) => (
            <tr data-task={task.id} data-paused={task.paused && !TERMINAL.has(task.state) ? "" : undefined}
              class={`${fresh.has(task.id) ? "fresh" : ""} depth-${Math.min(depth, 4)}`} key={task.id}>
              <td class="id">
                {children > 0 && (
                  <button type="button" class="fold" aria-expanded={open.has(task.id)}
                    aria-label={`${open.has(task.id) ? "Hide" : "Show"} ${children} subtasks`} onClick={() => toggle(task.id)}>
                    {open.has(task.id) ? "▾" : "▸"} {children}
                  </button>
                )}
                <a class="mono" href={`#/runs/${task.id}`} title={task.id}>{shortId(task.id)}</a>
              </td>
              <td class="state-cell"><StateBadge task={task} /></td>
              <td>{task.agent.profile}</td>
              <td class="wide"><span class="clip">{short(task.input, 120)}</span></td>
              <td><Ago iso={task.created_at} /></td>
              <td><Duration task={task} /></td>
              <td>{task.finished_at ? <Ago iso={task.finished_at} /> : ""}</td>
              <td class="num cost-cell"><Cost usage={task.usage} /></td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
