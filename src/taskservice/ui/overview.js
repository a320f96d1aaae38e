// The overview: live state counts, what finished per minute, workers, webhooks.

import { COLOURS, ago, api, badge, debounce, follow, h, report, svg, when } from "./core.js";

function chart(finished, minutes, now) {
  const width = 600, height = 150, pad = 24;
  const end = Math.floor(now / 60000) * 60000;
  const slots = [...Array(minutes).keys()].map((i) => end - (minutes - 1 - i) * 60000);
  const by = new Map(slots.map((t) => [t, { completed: 0, failed: 0, cancelled: 0, p50: null }]));
  for (const row of finished) {
    const slot = by.get(new Date(row.minute).getTime());
    if (!slot) continue;
    slot[row.state] += row.tasks;
    if (row.state === "completed") slot.p50 = row.p50_seconds;
  }
  const peak = Math.max(1, ...[...by.values()].map((s) => s.completed + s.failed + s.cancelled));
  const slow = Math.max(0.001, ...[...by.values()].map((s) => s.p50 ?? 0));
  const step = (width - pad) / slots.length;
  const bars = [];
  const line = [];
  slots.forEach((t, i) => {
    const slot = by.get(t);
    let y = height - pad;
    for (const state of ["completed", "failed", "cancelled"]) {
      const size = (slot[state] / peak) * (height - pad * 2);
      if (size > 0) {
        y -= size;
        bars.push(svg("rect", {
          x: pad + i * step + 2, y, width: Math.max(1, step - 4), height: size,
          fill: COLOURS[state],
        }, svg("title", {}, `${slot[state]} ${state}`)));
      }
    }
    if (slot.p50 !== null) {
      line.push(`${pad + i * step + step / 2},${height - pad - (slot.p50 / slow) * (height - pad * 2)}`);
    }
  });
  return svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "tasks finished per minute" },
    svg("text", { x: 0, y: 12 }, `${peak}/min`),
    svg("text", { x: pad, y: height - 6 }, `${minutes} min ago`),
    svg("text", { x: width - 30, y: height - 6 }, "now"),
    ...bars,
    line.length > 1
      ? svg("polyline", { points: line.join(" "), fill: "none", stroke: COLOURS.line, "stroke-width": 1.5 })
      : [],
  );
}

export function overview(main) {
  const minutes = 15;
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  main.replaceChildren(h("h1", {}, "Overview"), body);
  async function refresh() {
    const o = await api.get(`/v1/overview?minutes=${minutes}`);
    const now = new Date(o.at).getTime();
    const done = (state) => o.finished.filter((r) => r.state === state).reduce((n, r) => n + r.tasks, 0);
    body.replaceChildren(
      h("div", { class: "grid", id: "counts" },
        ...["pending", "running", "input_required"].map((state) =>
          h("div", { class: "stat", "data-count": state },
            h("div", { class: "n" }, o.live[state]), h("div", { class: "label" }, badge(state)))),
        ...["completed", "failed", "cancelled"].map((state) =>
          h("div", { class: "stat", "data-count": state },
            h("div", { class: "n" }, done(state)),
            h("div", { class: "label" }, badge(state), ` last ${minutes} min`))),
        h("div", { class: "stat" },
          h("div", { class: "n" }, o.oldest_pending_at ? ago(o.oldest_pending_at, now) : "–"),
          h("div", { class: "label" }, "oldest pending")),
        h("div", { class: "stat", "data-count": "scheduled" },
          h("div", { class: "n" }, o.scheduled),
          h("div", { class: "label" }, "pending for later")),
        h("div", { class: "stat", "data-count": "throttled" },
          h("div", { class: "n" }, o.throttled),
          h("div", { class: "label" }, "waiting for a rate limit"))),
      h("h2", {}, "Finished per minute, and the median time from submit to end"),
      h("section", { class: "card" }, chart(o.finished, minutes, now),
        h("div", { class: "legend" },
          ...["completed", "failed", "cancelled"].map((s) => h("span", {}, h("i", { style: `background: ${COLOURS[s]}` }), s)),
          h("span", {}, "line: p50 latency"))),
      h("h2", {}, "Workers holding tasks"),
      o.workers.length
        ? h("table", {}, h("tr", {}, h("th", {}, "worker"), h("th", {}, "leases"), h("th", {}, "next expiry")),
          ...o.workers.map((w) => h("tr", {}, h("td", { class: "mono" }, w.worker), h("td", {}, w.leases),
            h("td", {}, when(w.next_expiry)))))
        : h("p", { class: "muted" }, "No worker holds a task of yours right now."),
      h("h2", {}, "Webhooks"),
      h("div", { class: "grid" },
        h("div", { class: "stat" }, h("div", { class: "n" }, o.webhooks.pending), h("div", { class: "label" }, "waiting to be sent")),
        h("div", { class: "stat" }, h("div", { class: "n" }, o.webhooks.failing), h("div", { class: "label" }, "retrying after a failure")),
        h("div", { class: "stat" }, h("div", { class: "n" }, o.webhooks.given_up), h("div", { class: "label" }, `given up, last ${minutes} min`)),
        h("div", { class: "stat" }, h("div", { class: "n" }, o.webhooks.oldest_due_at ? ago(o.webhooks.oldest_due_at, now) : "–"),
          h("div", { class: "label" }, "oldest due"))),
    );
  }
  const soon = debounce(refresh, 300);
  let stream = null;
  let timer = null;
  const ready = refresh().then(() => {
    stream = follow("/v1/events?type=state_change", null, { state_change: soon });
    timer = setInterval(() => refresh().catch(report), 5000);
  });
  return [ready, () => { stream?.close(); clearInterval(timer); }];
}
