// What every page is made of: states as a person reads them, times and durations,
// JSON shown as JSON, long text folded, a confirmation before anything that acts.
// Everything is rendered as text by Preact (never as HTML): nothing a task carries
// can run as markup in the page.

import { useEffect, useRef, useState } from "preact/hooks";

export const TERMINAL = new Set(["completed", "failed", "cancelled"]);
export const STATES = ["pending", "running", "input_required", "completed", "failed", "cancelled"];

// A task's state as a person reads it: a parent waiting for its subtasks is not
// waiting for you; a tool call waiting for approval is; a task not due yet is scheduled.
export function stateOf(task) {
  const { state } = task;
  if (state === "input_required") {
    const kind = task.input_request && task.input_request.kind;
    if (kind === "questions") return { key: "needs-you", label: "needs you", title: "waits for an answer to its question" };
    if (kind === "approvals") return { key: "needs-you", label: "needs approval", title: "a tool call waits for your approval" };
    return { key: "waiting", label: "waiting for subtasks", title: "resumes when its subtasks end" };
  }
  if (state === "pending" && task.run_at && new Date(task.run_at) > Date.now()) {
    return { key: "scheduled", label: "scheduled", title: `not before ${dateTime(task.run_at)}` };
  }
  return { key: state, label: state, title: state };
}

// Who paused a task and why, in words: "paused by key:… (its profile's brake): why".
export function pausedText(task) {
  const { by, reason, scope } = task.paused;
  const brake = scope === "agent" ? ` (the ${task.agent?.profile ?? "profile"} profile's brake)` : "";
  return `paused by ${by ?? "someone"}${brake}${reason ? `: ${reason}` : ""}`;
}

// The state, and beside it the hold on a task that is paused (a pause is not a state:
// the badge stays the state). A finished task keeps the pause it ended with, unshown.
export function StateBadge({ task }) {
  const { key, label, title } = stateOf(task);
  return (
    <>
      <span class={`state ${key}`} data-state={task.state} title={title}>
        {label}
      </span>
      {task.paused && !TERMINAL.has(task.state) && (
        <span class="paused-mark" title={pausedText(task)}>paused</span>
      )}
    </>
  );
}

// -- times ---------------------------------------------------------------------------

export const dateTime = (iso) => (iso ? new Date(iso).toLocaleString() : "");

// "3 s", "2.5 min", "1.2 h", "3 d"
export function span(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 90) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  if (seconds < 90 * 60) return `${(seconds / 60).toFixed(1)} min`;
  if (seconds < 36 * 3600) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toFixed(1)} d`;
}

export const between = (from, to) =>
  from ? ((to ? new Date(to) : new Date()).getTime() - new Date(from).getTime()) / 1000 : null;

// A moment, as "12 s ago" with the full date on hover; kept current.
export function Ago({ iso }) {
  const now = useNow(5000);
  if (!iso) return null;
  const seconds = Math.max(0, (now - new Date(iso).getTime()) / 1000);
  return <time dateTime={iso} title={dateTime(iso)}>{span(seconds)} ago</time>;
}

// How long a task ran (or has been running), from its start to its end.
export function Duration({ task }) {
  const now = useNow(task.finished_at ? null : 1000);
  if (!task.started_at) return null;
  const end = task.finished_at ? new Date(task.finished_at) : new Date(now);
  return <span class="duration">{span((end - new Date(task.started_at)) / 1000)}</span>;
}

export function useNow(every) {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!every) return undefined;
    const timer = setInterval(() => setNow(Date.now()), every);
    return () => clearInterval(timer);
  }, [every]);
  return now;
}

// -- content -------------------------------------------------------------------------

// Text or JSON, folded past `lines` lines (a 250 KB input is one line of a page).
export function Content({ value, lines = 12 }) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  const [open, setOpen] = useState(false);
  if (text === undefined) return null;
  const all = text.split("\n");
  const long = all.length > lines || text.length > 4000;
  const shown = open || !long ? text : all.slice(0, lines).join("\n").slice(0, 4000);
  return (
    <div class={`content ${typeof value === "string" ? "text" : "json"}`}>
      <pre>{shown}{!open && long ? "…" : ""}</pre>
      {long && (
        <button type="button" class="link" onClick={() => setOpen(!open)}>
          {open ? "Show less" : `Show all (${all.length} lines, ${kb(text.length)})`}
        </button>
      )}
    </div>
  );
}

const kb = (n) => (n < 1024 ? `${n} B` : `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KB`);

// An id as a list shows it: its last 8 characters (UUIDv7s made together share
// their first ones, the time), the whole id on hover.
export const shortId = (id) => `…${String(id).slice(-8)}`;

export const short = (value, n = 90) => {
  const s = typeof value === "string" ? value : JSON.stringify(value ?? "");
  return s.length > n ? `${s.slice(0, n)}…` : s;
};

// -- actions -------------------------------------------------------------------------

// A button that asks before it acts: a dialog saying what will happen, and the
// action's own error shown in it if it fails.
// `dismiss`: the button that does nothing ("Keep it": the thing the action would end).
export function ConfirmButton({ label, title, detail, confirm = label, dismiss = "Keep it", danger, onConfirm, ...rest }) {
  const dialog = useRef(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  async function act(event) {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await onConfirm();
      dialog.current.close();
    } catch (failure) {
      setError(failure.message || String(failure));
    } finally {
      setBusy(false);
    }
  }
  return (
    <>
      <button type="button" class={danger ? "danger" : ""} onClick={() => dialog.current.showModal()} {...rest}>
        {label}
      </button>
      <dialog ref={dialog} class="confirm">
        <form method="dialog" onSubmit={act}>
          <h2>{title || `${label}?`}</h2>
          {detail && <p>{detail}</p>}
          {error && <p class="error" role="alert">{error}</p>}
          <div class="buttons">
            <button type="button" onClick={() => dialog.current.close()}>{dismiss}</button>
            <button type="submit" class={danger ? "danger" : "primary"} disabled={busy}>{confirm}</button>
          </div>
        </form>
      </dialog>
    </>
  );
}

// A ConfirmButton whose dialog asks for an optional reason too: `onConfirm(reason)`,
// the reason trimmed (or null when none was given).
export function ReasonButton({ detail, onConfirm, ...rest }) {
  const reason = useRef(null);
  return (
    <ConfirmButton
      {...rest}
      detail={
        <>
          {detail}
          <label class="reason">
            reason (optional)
            <input name="reason" ref={reason} maxLength={2000} placeholder="why" />
          </label>
        </>
      }
      onConfirm={async () => {
        await onConfirm(reason.current?.value.trim() || null);
        if (reason.current) reason.current.value = "";
      }}
    />
  );
}

// A form's action: `run(act)` awaits `act()` with `busy` set, and keeps its failure
// in `error` (shown next to the form) instead of throwing it. { busy, error, setError, run }
export function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  async function run(act) {
    setBusy(true);
    try {
      return await act();
    } catch (failure) {
      setError(failure);
      return undefined;
    } finally {
      setBusy(false);
    }
  }
  return { busy, error, setError, run };
}

// -- loading -------------------------------------------------------------------------

// The result of `load()` (an async function), again whenever `deps` change.
// { data, error, loading, reload }
export function useLoad(load, deps) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let current = true;
    setState((before) => ({ ...before, loading: true }));
    load().then(
      (data) => current && setState({ data, error: null, loading: false }),
      (error) => current && setState({ data: null, error, loading: false }),
    );
    return () => {
      current = false;
    };
  }, [...deps, tick]);
  return { ...state, reload: () => setTick((n) => n + 1) };
}

export function Failure({ error }) {
  if (!error) return null;
  return <p class="error card" role="alert">{error.message || String(error)}</p>;
}

export function Empty({ children }) {
  return <p class="empty">{children}</p>;
}
