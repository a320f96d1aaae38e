// Spend: what the tenant's model requests cost over a range of UTC days, from
// `GET /v1/usage`: the totals, a bar per day (split by agent profile or model), and
// tables by agent profile and by model, each with its total. Requests nobody could
// price are flagged, never counted as free; with nothing priced in the range the
// chart shows tokens. The range, the split and the filters live in the URL. Above
// them, the tenant's budget when it has one (`GET /v1/budget`): what it spent of each
// limit this period, when the period ends, and whether new tasks are refused.

import "./tenant.css";
import uPlot from "uplot";
import { api, query } from "../api.js";
import { BudgetMeter, PERIODS, Until, periodEnd } from "../budget.jsx";
import { Chart, axis, bar, colour, stack } from "../charts.jsx";
import { Cost, costOf, money } from "../money.jsx";
import { href, navigate } from "../router.js";
import { Empty, Failure, useLoad } from "../ui.jsx";

const DAY_S = 86400; // seconds
const RANGES = { "7d": "last 7 days", "30d": "last 30 days", "90d": "last 90 days", custom: "between dates" };
const DAYS = { "7d": 7, "30d": 30, "90d": 90 };
const SPLITS = { agent: "agent profile", model: "model", none: "nothing (the total)" };
const SERIES = 6; // groups drawn apart in the chart; the rest are "other"
const PALETTE = ["running", "completed", "needs-you", "waiting", "failed", "scheduled"];
const GROUPS = 1000; // the most groups asked for (the API's limit)

// -- the URL ---------------------------------------------------------------------------

const utcDay = (ms) => new Date(ms).toISOString().slice(0, 10);
const DAY_STEPS = [1, 2, 7, 14, 28, 56].map((days) => days * DAY_S); // the x axis' ticks, in seconds
const dayLabel = (seconds) =>
  new Date(seconds * 1000).toLocaleDateString(undefined, { month: "short", day: "numeric", timeZone: "UTC" });
const dayMs = (day) => Date.parse(`${day}T00:00:00Z`);

// What the URL asks for: { range, from, to, by, agent, model }, with the range's
// UTC dates (the last N days end today).
function wanted(params) {
  const range = RANGES[params.get("range")] ? params.get("range") : "30d";
  const today = utcDay(Date.now());
  let from = utcDay(Date.now() - ((DAYS[range] ?? 30) - 1) * DAY_S * 1000);
  let to = today;
  if (range === "custom") {
    from = params.get("from") || from;
    to = params.get("to") || to;
  }
  const by = SPLITS[params.get("by")] ? params.get("by") : "agent";
  return { range, from, to, by, agent: params.get("agent") || "", model: params.get("model") || "" };
}

// This page's URL with `changes` made (an empty value: the parameter removed).
function withParams(params, changes) {
  const next = new URLSearchParams(params);
  for (const [name, value] of Object.entries(changes)) {
    if (value) next.set(name, value);
    else next.delete(name);
  }
  return href(["spend"], next);
}

// -- reading ---------------------------------------------------------------------------

async function readSpend({ from, to, by, agent, model }) {
  const read = (groupBy, limit) =>
    api.get(`/v1/usage${query({ group_by: groupBy, from, to, agent, model, limit })}`);
  const [daily, agents, models] = await Promise.all([
    read(by === "none" ? ["day"] : ["day", by], GROUPS),
    read(["agent"]),
    read(["model"]),
  ]);
  return { daily, agents, models };
}

// -- the chart -------------------------------------------------------------------------

const tokensOf = (group) => (group.input_tokens ?? 0) + (group.output_tokens ?? 0);
const costValue = (group) => (group.cost === null || group.cost === undefined ? null : Number(group.cost));

// uPlot's columns and series from the per-day groups: the days of the range, a series
// per group (the SERIES largest, then "other"), each point the day's cost (or tokens,
// with `tokens`), and each point's figure for the legend.
function perDay(answer, by, tokens) {
  const days = [];
  for (let at = dayMs(answer.from); at <= dayMs(answer.to); at += DAY_S * 1000) days.push(at / 1000);
  const index = new Map(days.map((day, i) => [day, i]));
  const name = (group) => (by === "none" ? "total" : group[by] ?? "(none)");
  const weight = new Map();
  for (const group of answer.groups) {
    const w = weight.get(name(group)) ?? [0, 0];
    weight.set(name(group), [w[0] + (costValue(group) ?? 0), w[1] + group.requests]);
  }
  const ranked = [...weight.entries()].sort((a, b) => b[1][0] - a[1][0] || b[1][1] - a[1][1]).map(([n]) => n);
  const drawn = ranked.slice(0, SERIES);
  if (ranked.length > SERIES) drawn.push("other");
  const at = new Map(drawn.map((n, i) => [n, i]));
  const values = drawn.map(() => days.map(() => null));
  const shownAt = drawn.map(() => days.map(() => []));
  for (const group of answer.groups) {
    const series = at.get(name(group)) ?? at.get("other");
    const i = index.get(dayMs(group.day) / 1000);
    if (i === undefined) continue;
    const value = tokens ? tokensOf(group) : costValue(group);
    if (value !== null) values[series][i] = (values[series][i] ?? 0) + value;
    shownAt[series][i].push(group);
  }
  const legend = (series, i) => {
    const groups = shownAt[series][i];
    if (!groups.length) return tokens ? "0 tokens" : "$0";
    if (tokens) return `${groups.reduce((n, g) => n + tokensOf(g), 0).toLocaleString()} tokens`;
    if (groups.length === 1) return costOf({ currency: answer.currency, ...groups[0] }).text;
    const unpriced = groups.reduce((n, g) => n + g.unpriced_requests, 0);
    const cost = values[series][i];
    return cost === null ? "unpriced" : `${unpriced ? "≥ " : ""}${money(String(cost)).shown}${unpriced ? ` · ${unpriced} unpriced` : ""}`;
  };
  return { days, drawn, values, legend };
}

function SpendChart({ answer, by, tokens }) {
  const { days, drawn, values, legend } = perDay(answer, by, tokens);
  // Bottom first in `stack`; the bars as uPlot draws them, the tallest (all) first.
  const order = drawn.map((_, i) => i).reverse();
  const fills = drawn.map((n, i) => colour(n === "other" ? "pending" : PALETTE[i % PALETTE.length]));
  const options = () => ({
    tzDate: (seconds) => uPlot.tzDate(new Date(seconds * 1000), "Etc/UTC"),
    scales: {
      x: { time: true, range: (_u, min, max) => [min - DAY_S / 2, max + DAY_S / 2] },
      y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.15 : 1] },
    },
    axes: [
      axis({ incrs: DAY_STEPS, values: (_u, splits) => splits.map(dayLabel) }),
      axis({
        label: tokens ? "tokens" : answer.currency,
        size: 64,
        values: (_u, splits) => splits.map((s) => (tokens ? s.toLocaleString() : money(String(s), answer.currency).shown)),
      }),
    ],
    series: [
      { label: "day", value: (_u, seconds) => (seconds === null ? "–" : utcDay(seconds * 1000)) },
      ...order.map((i) => bar(drawn[i], fills[i], (point) => legend(i, point))),
    ],
  });
  const data = [days, ...stack(values)];
  const caption = tokens
    ? "Tokens per day (nothing in this range has a known price)"
    : `Cost per day${by === "none" ? "" : `, by ${SPLITS[by]}`} (UTC days)`;
  return (
    <figure class="card chart-card wide" id="spend-chart">
      <figcaption>{caption}</figcaption>
      <Chart key={`${by}:${tokens}:${drawn.join("\u0000")}`} options={options} data={data} label={caption} />
    </figure>
  );
}

// -- the tables ------------------------------------------------------------------------

const share = (group, total) => {
  const whole = costValue(total);
  const part = costValue(group);
  return whole && part !== null ? `${((part / whole) * 100).toFixed(part / whole < 0.1 ? 1 : 0)}%` : "";
};

function Figures({ group }) {
  const n = (value) => (value ?? 0).toLocaleString();
  return (
    <>
      <td class="num requests">{n(group.requests)}</td>
      <td class="num input">{n(group.input_tokens)}</td>
      <td class="num output">{n(group.output_tokens)}</td>
    </>
  );
}

// A table of the groups by `key` ("agent" or "model"), each name a link to the view
// filtered to it, its total from the API's (all groups, shown or not).
function SpendTable({ answer, by, title, params }) {
  const { groups, total, more, currency } = answer;
  return (
    <section class="spend-table">
      <h2>{title}</h2>
      <div class="table-scroll">
        <table id={`by-${by}`}>
          <thead>
            <tr>
              <th>{by === "agent" ? "agent profile" : "model"}</th><th class="num">requests</th>
              <th class="num">input tokens</th><th class="num">output tokens</th>
              <th class="num">cost</th><th class="num">share</th>
            </tr>
          </thead>
          <tbody>
            {groups.map((group) => (
              <tr data-group={group[by] ?? ""} class={group.unpriced_requests ? "unpriced" : ""} key={group[by]}>
                <td class="name">
                  <a href={withParams(params, { [by]: group[by] })} title={`only ${group[by]}`}>{group[by] ?? "(none)"}</a>
                </td>
                <Figures group={group} />
                <td class="num"><Cost usage={{ currency, ...group }} /></td>
                <td class="num muted">{share(group, total)}</td>
              </tr>
            ))}
          </tbody>
          <tfoot>
            <tr class="total">
              <th>total</th>
              <Figures group={total} />
              <td class="num"><Cost usage={{ currency, ...total }} /></td>
              <td />
            </tr>
          </tfoot>
        </table>
      </div>
      {more && <p class="muted more">More {by === "agent" ? "profiles" : "models"} than shown: the total counts them all.</p>}
    </section>
  );
}

// -- the budget ------------------------------------------------------------------------

// The tenant's budget this period: a meter per limit, when it starts afresh, who set
// it; nothing when the tenant has none.
function TenantBudget() {
  const { data, error } = useLoad(() => api.get("/v1/budget"), []);
  if (error) return <Failure error={error} />;
  const budget = data?.budget;
  if (!budget) return null;
  const ends = budget.period_end ? new Date(budget.period_end) : periodEnd(budget.period);
  const per = PERIODS[budget.period] ?? budget.period;
  return (
    <section class="card budget-card" id="budget" data-period={budget.period} data-exhausted={String(budget.exhausted)}>
      <h2>{per[0].toUpperCase() + per.slice(1)} budget</h2>
      {budget.max_cost !== null && (
        <BudgetMeter name="max_cost" label="cost" spent={budget.spent_cost} limit={budget.max_cost} />
      )}
      {budget.max_tokens !== null && (
        <BudgetMeter name="max_tokens" label="tokens" spent={budget.spent_tokens} limit={budget.max_tokens} />
      )}
      {budget.exhausted ? (
        <p class="budget-exhausted" role="alert" id="budget-exhausted">
          Exhausted: new tasks are refused until <Until at={ends} />.
        </p>
      ) : (
        <p class="muted period" id="budget-period">
          Spent this {budget.period === "month" ? "month" : "day"} (UTC); it starts afresh at <Until at={ends} />.
        </p>
      )}
      <p class="muted source">
        {budget.source === "admin"
          ? <>Set for this tenant by an operator{budget.set_by ? <> (<span class="mono">{budget.set_by}</span>)</> : null}.</>
          : "The service's default budget for every tenant."}
      </p>
    </section>
  );
}

// -- the page --------------------------------------------------------------------------

function Controls({ params, want }) {
  const go = (changes) => navigate(withParams(params, changes), { replace: true });
  return (
    <form class="filters" onSubmit={(event) => event.preventDefault()}>
      <label>
        range
        <select name="range" value={want.range} onChange={(event) => {
          const range = event.currentTarget.value;
          go(range === "custom" ? { range, from: want.from, to: want.to } : { range, from: "", to: "" });
        }}>
          {Object.entries(RANGES).map(([value, label]) => <option value={value}>{label}</option>)}
        </select>
      </label>
      {want.range === "custom" && (
        <>
          <label>
            from
            <input type="date" name="from" value={want.from} max={want.to}
              onChange={(event) => go({ from: event.currentTarget.value })} />
          </label>
          <label>
            to
            <input type="date" name="to" value={want.to} min={want.from}
              onChange={(event) => go({ to: event.currentTarget.value })} />
          </label>
        </>
      )}
      <label>
        chart by
        <select name="by" value={want.by} onChange={(event) => go({ by: event.currentTarget.value })}>
          {Object.entries(SPLITS).map(([value, label]) => <option value={value}>{label}</option>)}
        </select>
      </label>
      {["agent", "model"].filter((name) => want[name]).map((name) => (
        <span class="chip on filter" data-filter={name}>
          {name}: {want[name]}
          <a href={withParams(params, { [name]: "" })} aria-label={`Any ${name}`} title={`any ${name}`}>×</a>
        </span>
      ))}
    </form>
  );
}

function Totals({ answer }) {
  const { total, currency } = answer;
  const n = (value) => (value ?? 0).toLocaleString();
  return (
    <div class="tiles" id="spend-totals">
      <div class="tile plain" data-total="cost">
        <span class="n"><Cost usage={{ currency, ...total }} brief /></span>
        <span class="label">{total.cost === null ? "cost (nothing priced)" : total.unpriced_requests ? "cost of the priced requests" : "cost"}</span>
      </div>
      <div class="tile plain" data-total="requests"><span class="n">{n(total.requests)}</span><span class="label">model requests</span></div>
      <div class="tile plain" data-total="input"><span class="n">{n(total.input_tokens)}</span><span class="label">input tokens</span></div>
      <div class="tile plain" data-total="output"><span class="n">{n(total.output_tokens)}</span><span class="label">output tokens</span></div>
      <div class={`tile plain ${total.unpriced_requests ? "warn" : ""}`} data-total="unpriced">
        <span class="n">{n(total.unpriced_requests)}</span><span class="label">unpriced requests</span>
      </div>
    </div>
  );
}

export function Spend({ route }) {
  const params = route.params;
  const want = wanted(params);
  const spend = useLoad(() => readSpend(want), [want.from, want.to, want.by, want.agent, want.model]);
  const { data, error } = spend;
  const answer = data?.agents;
  return (
    <section class="spend">
      <div class="title">
        <h1>Spend</h1>
        {answer && <span class="muted range" id="spend-range">{answer.from} to {answer.to} (UTC)</span>}
      </div>
      <TenantBudget />
      <Controls params={params} want={want} />
      <Failure error={error} />
      {!data && !error && <p class="muted">Loading…</p>}
      {data && (
        <>
          <Totals answer={answer} />
          {answer.total.unpriced_requests > 0 && (
            <p class="card unpriced-note" role="note" id="unpriced-note">
              {answer.total.cost === null
                ? "No request in this range has a known price: no cost can be shown (the chart counts tokens)."
                : `${answer.total.unpriced_requests.toLocaleString()} of ${answer.total.requests.toLocaleString()} requests
                  had no known price: the costs shown cover only the priced ones (marked ≥).`}{" "}
              An operator can price a model with <code>TASKSERVICE_MODEL_PRICES</code>.
            </p>
          )}
          {answer.total.requests === 0 ? (
            <Empty>No model requests from {answer.from} to {answer.to}.</Empty>
          ) : (
            <>
              <div class="charts">
                <SpendChart answer={data.daily} by={want.by} tokens={answer.total.cost === null} />
              </div>
              {data.daily.more && <p class="muted more">The chart shows the first {GROUPS} groups of days.</p>}
              <SpendTable answer={data.agents} by="agent" title="By agent profile" params={params} />
              <SpendTable answer={data.models} by="model" title="By model" params={params} />
            </>
          )}
        </>
      )}
    </section>
  );
}
