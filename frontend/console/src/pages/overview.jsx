// Overview: the tenant's live work as a person reads it (running, pending, scheduled,
// throttled, needs you, waiting for subtasks: each its own figure, each a link to the
// runs it counts), what finished in the last minutes drawn with uPlot (throughput by
// outcome, latency percentiles, the backlog), the workers holding tasks and the
// webhook outbox. Live: read again every few seconds and on every state change.

import "./tenant.css";
import { useEffect, useMemo, useState } from "preact/hooks";
import { api, follow } from "../api.js";
import { COUNTS, Chart, axis, bar, colour, line, shown, stack, upFrom0 } from "../charts.jsx";
import { Failure, dateTime, span } from "../ui.jsx";

const MINUTES = 30; // the window of the charts and of the finished figures
const EVERY_MS = 5000;
const OUTCOMES = ["completed", "failed", "cancelled"];

// -- charts --------------------------------------------------------------------------

const halfMinuteEachSide = (_u, min, max) => [min - 30, max + 30];

// Throughput as stacked bars (completed at the bottom); the legend tells each
// outcome's own count.
const STACKED = ["cancelled", "failed", "completed"];
let finishedCounts = {};
const throughputOptions = () => ({
  scales: { x: { time: true, range: halfMinuteEachSide }, y: { range: upFrom0 } },
  axes: [axis(), axis({ label: "tasks / min", size: 48, incrs: COUNTS })],
  series: [{}, ...STACKED.map((state) => bar(state, colour(state), (i) => `${finishedCounts[state]?.[i] ?? 0}/min`))],
});

const latencyOptions = () => ({
  scales: { x: { time: true, range: halfMinuteEachSide }, y: { range: upFrom0 } },
  axes: [axis(), axis({ label: "seconds", size: 56, values: (_u, splits) => splits.map((s) => span(s)) })],
  series: [
    {},
    line("p50", "running", { value: shown(span), spanGaps: false }),
    line("p95", "needs-you", { value: shown(span), spanGaps: false }),
  ],
});

// The backlog's scale of time ends now, whatever the samples (a page just opened
// has one).
let backlogEnd = Date.now() / 1000;
const backlogOptions = () => ({
  scales: {
    x: { time: true, range: () => [backlogEnd - MINUTES * 60, backlogEnd] },
    y: { range: upFrom0 },
    age: { range: upFrom0 },
  },
  axes: [
    axis(),
    axis({ label: "tasks", size: 48, incrs: COUNTS }),
    axis({ scale: "age", side: 1, label: "oldest waiting", size: 56, grid: { show: false },
      values: (_u, splits) => splits.map((s) => span(s)) }),
  ],
  series: [
    {},
    line("pending", "pending", { value: shown(String) }),
    line("running", "running", { value: shown(String) }),
    line("oldest pending", "scheduled", { scale: "age", dash: [4, 3], value: shown(span) }),
  ],
});

// -- the figures ---------------------------------------------------------------------

// The minutes of the window, and per minute what finished by outcome, and the
// latency of those completed (percentiles of outcomes apart cannot be merged).
function perMinute(overview) {
  const end = Math.floor(new Date(overview.at).getTime() / 60000) * 60;
  const times = Array.from({ length: MINUTES }, (_, i) => end - (MINUTES - 1 - i) * 60);
  const at = new Map(times.map((time, i) => [time, i]));
  const counts = Object.fromEntries(OUTCOMES.map((state) => [state, times.map(() => 0)]));
  const p50 = times.map(() => null);
  const p95 = times.map(() => null);
  for (const row of overview.finished) {
    const i = at.get(new Date(row.minute).getTime() / 1000);
    if (i === undefined || !counts[row.state]) continue;
    counts[row.state][i] += row.tasks;
    if (row.state === "completed") {
      p50[i] = row.p50_seconds;
      p95[i] = row.p95_seconds;
    }
  }
  finishedCounts = counts;
  return {
    throughput: [times, ...stack([...STACKED].reverse().map((state) => counts[state]))],
    latency: [times, p50, p95],
    finished: Object.fromEntries(OUTCOMES.map((state) => [state, counts[state].reduce((a, b) => a + b, 0)])),
  };
}

// The backlog over time, as this page has read it (the API tells the present only):
// kept while the console is open, across pages.
const samples = [];
function sample(overview) {
  const at = new Date(overview.at).getTime() / 1000;
  const oldest = overview.oldest_pending_at
    ? Math.max(0, at - new Date(overview.oldest_pending_at).getTime() / 1000)
    : 0;
  if (samples.length && samples[samples.length - 1].at >= at) return;
  samples.push({
    at,
    pending: overview.live.pending - overview.scheduled,
    running: overview.live.running - overview.throttled,
    oldest,
  });
  while (samples.length && samples[0].at < at - MINUTES * 60) samples.shift();
  backlogEnd = at;
}
const backlogData = () => [
  samples.map((s) => s.at),
  samples.map((s) => s.pending),
  samples.map((s) => s.running),
  samples.map((s) => s.oldest),
];

function Tile({ count, n, label, title, to, tone }) {
  return (
    <a class={`tile ${tone || count}`} data-count={count} href={to} title={title}>
      <span class="n">{n}</span>
      <span class="label">{label}</span>
    </a>
  );
}

export function Overview() {
  const [overview, setOverview] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    let current = true;
    let soon = null;
    const refresh = () =>
      api.get(`/v1/overview?minutes=${MINUTES}`).then(
        (read) => {
          if (!current) return;
          sample(read);
          setOverview(read);
          setError(null);
        },
        (failure) => current && setError(failure),
      );
    refresh();
    const timer = setInterval(refresh, EVERY_MS);
    const stream = follow("/v1/events?type=state_change", null, {
      state_change: () => {
        clearTimeout(soon);
        soon = setTimeout(refresh, 300);
      },
    });
    return () => {
      current = false;
      clearInterval(timer);
      clearTimeout(soon);
      stream.close();
    };
  }, []);
  const minutes = useMemo(() => (overview ? perMinute(overview) : null), [overview]);
  const backlog = useMemo(backlogData, [overview]);

  if (!overview) return error ? <Failure error={error} /> : <p class="muted">Loading…</p>;
  const o = overview;
  const now = new Date(o.at).getTime();
  const age = (iso) => (iso ? span(Math.max(0, (now - new Date(iso).getTime()) / 1000)) : "–");
  return (
    <section class="overview">
      <div class="title">
        <h1>Overview</h1>
        <span class="muted live" title={dateTime(o.at)}>live</span>
      </div>
      <Failure error={error} />
      <h2 class="first">Live work</h2>
      <div class="tiles" id="counts">
        <Tile count="running" n={o.live.running - o.throttled} label="running" to="#/runs?state=running"
          title="held by a worker now" />
        <Tile count="pending" n={o.live.pending - o.scheduled} label="pending" to="#/runs?state=pending"
          title="may run: waiting for a worker" />
        <Tile count="scheduled" n={o.scheduled} label="scheduled" to="#/runs?state=pending"
          title="pending, not before their run_at" />
        <Tile count="throttled" n={o.throttled} label="throttled" to="#/runs?state=running"
          title="waiting, without a worker, for their model's rate limit" />
        <Tile count="needs-you" n={o.needs_input} label="needs you" to="#/runs?state=input_required"
          title="waiting for an answer to their question" />
        <Tile count="waiting" n={o.waiting_for_subtasks} label="waiting for subtasks" to="#/runs?state=input_required"
          title="parents that resume when their subtasks end: nobody need act" />
        <div class="tile plain" data-count="oldest-pending" title="since when the oldest task that may run has waited">
          <span class="n">{age(o.oldest_pending_at)}</span>
          <span class="label">oldest pending</span>
        </div>
      </div>
      <h2>Finished, last {MINUTES} min</h2>
      <div class="tiles">
        {OUTCOMES.map((state) => (
          <Tile count={state} n={minutes.finished[state]} label={state} to={`#/runs?state=${state}`}
            title={`tasks ${state} in the last ${MINUTES} minutes`} />
        ))}
      </div>
      <div class="charts">
        <figure class="card chart-card wide" id="throughput">
          <figcaption>Throughput: tasks finished per minute, by outcome</figcaption>
          <Chart options={throughputOptions} data={minutes.throughput} label="tasks finished per minute" />
        </figure>
        <figure class="card chart-card" id="latency">
          <figcaption>Latency of completed tasks, submit to end (p50, p95)</figcaption>
          <Chart options={latencyOptions} data={minutes.latency} label="latency percentiles per minute" />
        </figure>
        <figure class="card chart-card" id="backlog">
          <figcaption>Backlog: tasks waiting and running, since this page opened</figcaption>
          <Chart options={backlogOptions} data={backlog} label="pending and running tasks over time" />
        </figure>
      </div>
      <h2>Workers holding tasks</h2>
      {o.workers.length ? (
        <div class="table-scroll">
          <table id="workers">
            <thead><tr><th>worker</th><th>leases</th><th>next expiry</th></tr></thead>
            <tbody>
              {o.workers.map((w) => (
                <tr key={w.worker}>
                  <td class="mono">{w.worker}</td>
                  <td>{w.leases}</td>
                  <td title={dateTime(w.next_expiry)}>in {span(Math.max(0, (new Date(w.next_expiry).getTime() - now) / 1000))}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : (
        <p class="muted">No worker holds a task of yours right now.</p>
      )}
      <h2>Webhooks</h2>
      <div class="tiles" id="webhooks">
        <div class="tile plain" data-count="webhooks-pending">
          <span class="n">{o.webhooks.pending}</span><span class="label">waiting to be sent</span>
        </div>
        <div class={`tile plain ${o.webhooks.failing ? "warn" : ""}`} data-count="webhooks-failing">
          <span class="n">{o.webhooks.failing}</span><span class="label">retrying after a failure</span>
        </div>
        <div class={`tile plain ${o.webhooks.given_up ? "bad" : ""}`} data-count="webhooks-given-up">
          <span class="n">{o.webhooks.given_up}</span><span class="label">given up, last {MINUTES} min</span>
        </div>
        <div class="tile plain" data-count="webhooks-oldest">
          <span class="n">{age(o.webhooks.oldest_due_at)}</span><span class="label">oldest due</span>
        </div>
      </div>
    </section>
  );
}
