// Around the run: its subtask tree, its forks, its webhook deliveries, its raw event log.

import { useEffect, useState } from "preact/hooks";
import { api, query } from "../../api.js";
import { Cost } from "../../money.jsx";
import { Ago, ConfirmButton, Duration, StateBadge, dateTime, short, shortId } from "../../ui.jsx";

function Tree({ nodes, at = false }) {
  return (
    <ul class="tree">
      {nodes.map(({ task, children }) => (
        <li key={task.id} data-task={task.id}>
          <StateBadge task={task} /> <a class="mono" href={`#/runs/${task.id}`} title={task.id}>{shortId(task.id)}</a>{" "}
          {at && task.forked_from && <span class="muted">at #{task.forked_from.at} · </span>}
          <span class="muted">{task.agent.profile} · <Duration task={task} /> · <Cost usage={task.usage} /></span>{" "}
          <span class="input">{short(task.input, 70)}</span>
          {children.length > 0 && <Tree nodes={children} at={at} />}
        </li>
      ))}
    </ul>
  );
}

export function Subtasks({ tree }) {
  return (
    <section class="subtasks-section">
      <h2>Subtasks</h2>
      <div id="subtasks">
        {tree === null ? <p class="muted">Loading…</p> : tree.length ? <Tree nodes={tree} /> : <p class="muted">No subtasks.</p>}
      </div>
    </section>
  );
}

const FORK_DEPTH = 3;

// The forks of `id`, each with its own (to `FORK_DEPTH` levels).
async function forkTree(id, depth = 1) {
  const listed = await api.get(`/v1/tasks${query({ forked_from: id, limit: 50 })}`);
  return Promise.all(listed.tasks.map(async (task) => ({
    task,
    children: depth < FORK_DEPTH ? await forkTree(task.id, depth + 1) : [],
  })));
}

// Where this run came from and what was forked from it: the lineage, as a tree.
export function Forks({ task }) {
  const [tree, setTree] = useState(null);
  useEffect(() => {
    let current = true;
    setTree(null);
    forkTree(task.id).then((found) => current && setTree(found), () => current && setTree([]));
    return () => {
      current = false;
    };
  }, [task.id]);
  return (
    <section class="forks-section">
      <h2>Forks</h2>
      <div id="forks">
        {tree === null ? (
          <p class="muted">Loading…</p>
        ) : tree.length ? (
          <Tree nodes={tree} at />
        ) : (
          <p class="muted">No forks of this run.</p>
        )}
      </div>
    </section>
  );
}

export function Deliveries({ deliveries, urls, onRedeliver }) {
  return (
    <section class="deliveries-section">
      <h2>Webhook deliveries</h2>
      <div id="deliveries">
        {deliveries === null ? (
          <p class="muted">Loading…</p>
        ) : !deliveries.length ? (
          <p class="muted">No webhook deliveries.</p>
        ) : (
          <div class="table-scroll">
            <table>
              <thead>
                <tr><th>event</th><th>to</th><th>status</th><th>attempts</th><th /></tr>
              </thead>
              <tbody>
                {deliveries.map((d) => (
                  <tr data-delivery={d.id} key={d.id}>
                    <td><span class="muted">#{d.event_seq}</span> {d.state}</td>
                    <td class="url mono">{urls[d.webhook_id] ?? d.webhook_id}</td>
                    <td class={`status ${d.status}`}>
                      {d.status}{d.in_flight ? " (sending)" : ""}
                      {d.next_attempt_at && d.status === "pending" && <div class="muted">next <time>{dateTime(d.next_attempt_at)}</time></div>}
                      {d.last_error && <div class="error">{short(d.last_error, 120)}</div>}
                    </td>
                    <td>
                      <ol class="attempt-log">
                        {d.attempt_log.map((a) => (
                          <li key={a.attempt}>
                            <span class="mono">#{a.attempt} {a.status_code ?? a.error ?? ""}</span>
                            <span class="muted"> · {Math.round(a.duration_ms)} ms · <Ago iso={a.started_at} /></span>
                          </li>
                        ))}
                      </ol>
                    </td>
                    <td>
                      <ConfirmButton
                        class="redeliver"
                        label="Redeliver"
                        title="Send this delivery again?"
                        detail={`The same event (the same webhook-id) goes to ${urls[d.webhook_id] ?? "its webhook"} once more, as a new attempt; the receiver should treat it as a duplicate if it has it.`}
                        confirm="Redeliver"
                        onConfirm={async () => {
                          await api.post(`/v1/deliveries/${d.id}/redeliver`);
                          onRedeliver();
                        }}
                      />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </div>
    </section>
  );
}

export function EventLog({ events }) {
  return (
    <details class="event-log" id="events">
      <summary>Event log ({events.length})</summary>
      <div class="table-scroll">
        <table>
          <thead><tr><th>seq</th><th>type</th><th>data</th><th>at</th></tr></thead>
          <tbody>
            {events.map((event) => (
              <tr key={event.seq}>
                <td>{event.seq}</td>
                <td class="mono">{event.type}</td>
                <td><pre class="data">{short(event.data, 300)}</pre></td>
                <td><time dateTime={event.created_at}>{dateTime(event.created_at)}</time></td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </details>
  );
}
