// The run's time drawn to scale: its attempts (from the event log), its model
// requests (from the messages' times) and its tool calls (from the ledger), each a
// bar from its start to its end on one axis from the run's creation to its end.

import { TERMINAL, short, span, useNow } from "../../ui.jsx";
import { ApprovalSaid } from "./approvals.jsx";

const MAX_ROWS = 150; // a long run's first bars; the tables below have every call
const ms = (iso) => (iso ? new Date(iso).getTime() : null);

// Attempts: from each change to running (or claim) to the change, release or lease
// expiry that ended it.
function attempts(events, task, now) {
  const rows = [];
  let open = null;
  const close = (at, how) => {
    if (!open) return;
    rows.push({ ...open, end: at, how });
    open = null;
  };
  for (const event of events) {
    const at = ms(event.created_at);
    const { data } = event;
    if (event.type === "state_change") {
      if (data.to === "running") {
        if (open && data.attempt && data.attempt !== open.attempt) close(at, "ended");
        if (!open) open = { start: at, attempt: data.attempt ?? rows.length + 1 };
      } else close(at, data.to);
    } else if (event.type === "claimed") {
      // A claim names its attempt (a change to running after an answer does not).
      if (!open) open = { start: at, attempt: data.attempt ?? rows.length + 1 };
      else if (data.attempt) open.attempt = data.attempt;
    } else if (event.type === "released") close(at, `released${data.reason ? ` (${data.reason})` : ""}`);
    else if (event.type === "recovered") close(at, "lease expired");
  }
  if (open) rows.push({ ...open, end: TERMINAL.has(task.state) ? ms(task.finished_at) ?? now : now, how: "running", live: true });
  return rows.map((row) => ({
    key: `a${row.start}`,
    lane: "attempt",
    label: `attempt ${row.attempt}`,
    start: row.start,
    end: row.end,
    status: row.how === "lease expired" ? "lost" : row.live ? "in_progress" : row.how,
    title: `attempt ${row.attempt}: ${row.how}`,
  }));
}

// Model requests: each response, from the moment the run could send its request
// (the latest of: the attempt's start, the response before it, a tool call ending);
// the request message itself is stored with its response, at the same time.
function requests(messages, calls, attemptRows) {
  const marks = [
    ...attemptRows.map((row) => row.start),
    ...messages.filter((m) => m.kind === "response").map((m) => ms(m.created_at)),
    ...calls.map((call) => ms(call.finished_at)).filter((t) => t !== null),
  ];
  return messages
    .filter((message) => message.kind === "response")
    .map((message) => {
      const end = ms(message.created_at);
      const before = marks.filter((t) => t < end);
      return {
        key: `m${message.position}`,
        lane: "request",
        label: `model #${message.position}`,
        start: before.length ? Math.max(...before) : end,
        end,
        status: "completed",
        title: `model request answered by message #${message.position}`,
      };
    });
}

function toolCalls(calls, now) {
  return calls.map((call) => ({
    key: `c${call.id}`,
    lane: "call",
    label: call.name,
    start: ms(call.started_at ?? call.created_at),
    end: call.finished_at ? ms(call.finished_at) : now,
    status: call.status,
    title: `${call.name}: ${call.status}${call.error ? ` (${call.error.slice(0, 200)})` : ""}`,
  }));
}

export function Timeline({ task, events, messages, calls }) {
  const now = useNow(TERMINAL.has(task.state) ? null : 1000);
  const attemptRows = attempts(events, task, now);
  const rows = [...attemptRows, ...requests(messages, calls, attemptRows), ...toolCalls(calls, now)]
    .filter((row) => row.start !== null && row.end !== null);
  rows.sort((a, b) => a.start - b.start || a.lane.localeCompare(b.lane));
  const from = ms(task.created_at);
  const to = Math.max(from + 1, ms(task.finished_at) ?? now, ...rows.map((row) => row.end));
  const total = to - from;
  const pct = (t) => `${Math.min(100, Math.max(0, ((t - from) / total) * 100))}%`;
  return (
    <section class="timeline-section">
      <h2>Timeline</h2>
      {!rows.length ? (
        <p class="muted">Nothing has run yet.</p>
      ) : (
        <div class="timeline" id="timeline" role="list">
          <div class="axis muted">
            <span>created</span>
            <span>{span(total / 1000)}</span>
          </div>
          {rows.slice(0, MAX_ROWS).map((row) => (
            <div class={`lane ${row.lane}`} role="listitem" key={row.key} data-lane={row.lane}>
              <span class="label mono" title={row.title}>{row.label}</span>
              <span class="track">
                <span
                  class={`bar ${row.lane} ${row.status}`}
                  title={`${row.title} · ${span((row.end - row.start) / 1000)}`}
                  style={{ left: pct(row.start), width: `max(2px, calc(${pct(row.end)} - ${pct(row.start)}))` }}
                />
              </span>
              <span class="took muted">{span(Math.max(0, row.end - row.start) / 1000)}</span>
            </div>
          ))}
          {rows.length > MAX_ROWS && <p class="muted more">… and {rows.length - MAX_ROWS} more</p>}
          <div class="legend muted" aria-hidden="true">
            <span><i class="swatch attempt" /> attempt</span>
            <span><i class="swatch request" /> model request</span>
            <span><i class="swatch call" /> tool call</span>
            <span><i class="swatch failed" /> failed or lost</span>
          </div>
        </div>
      )}
    </section>
  );
}

// The tool calls as the ledger has them: arguments, status, result or error, time.
export function Calls({ calls }) {
  if (!calls.length) return null;
  return (
    <section class="calls-section">
      <h2>Tool calls</h2>
      <div class="table-scroll" id="calls">
        <table>
          <thead><tr><th>tool</th><th>status</th><th>took</th><th>arguments</th><th>result or error</th></tr></thead>
          <tbody>
            {calls.map((call) => (
              <tr data-call={call.tool_call_id} key={call.id}>
                <td class="mono">{call.name}</td>
                <td class={`call-status ${call.status}`}>{call.status}<ApprovalSaid approval={call.approval} /></td>
                <td class="muted">{call.started_at && call.finished_at ? span((ms(call.finished_at) - ms(call.started_at)) / 1000) : "…"}</td>
                <td>
                  <code class="clip">{short(call.approval?.edited ? call.approval.arguments : call.arguments, 120)}</code>
                  {call.approval?.edited && <span class="muted edited">edited (the model asked {short(call.arguments, 60)})</span>}
                </td>
                <td>
                  {call.error
                    ? <code class="clip error">{short(call.error, 160)}</code>
                    : <code class="clip">{short(call.result, 160)}</code>}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
