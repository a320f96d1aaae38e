// Budgets as a person reads them: what a limit allows ("$0.50 · 12,000 tokens"), a
// meter of what was spent against it, when a shared budget's period ends, and a larger
// budget to offer a fork of a run that ran out. Money stays an exact decimal string in
// every figure shown (money.jsx); a float is used only for a meter's fill and for the
// rounded figure a fork is offered.

import "./budget.css";
import { money } from "./money.jsx";
import { dateTime, span, useNow } from "./ui.jsx";

const tokens = (n) => `${Number(n ?? 0).toLocaleString()} tokens`;

// One limit's figure: `name` "max_cost" (a decimal string, USD) or "max_tokens".
export const limitText = (name, value) => (name === "max_cost" ? money(value).shown : tokens(value));

// What a task's own budget allows: "$0.50 · 12,000 tokens", "" when it has none.
export function budgetText({ max_cost: cost, max_tokens: most }) {
  const parts = [];
  if (cost !== null && cost !== undefined) parts.push(money(cost).shown);
  if (most !== null && most !== undefined) parts.push(tokens(most));
  return parts.join(" · ");
}

// A meter of `spent` against `limit` (decimal strings for money, whole numbers for
// tokens), its figures beside it: "$8.02 of $10 (80%)". Past 80% it warns, at the
// limit it is full and says so.
export function BudgetMeter({ name, spent, limit, label }) {
  const used = Number(spent ?? 0);
  const most = Number(limit);
  const share = most > 0 ? used / most : 0;
  const percent = share >= 1 ? "100%" : `${Math.floor(share * 100)}%`;
  const shown = name === "max_cost" ? money(spent ?? "0") : { shown: Number(spent ?? 0).toLocaleString(), exact: `${spent ?? 0} tokens` };
  return (
    <div class={`budget-meter ${share >= 1 ? "full" : share >= 0.8 ? "high" : ""}`} data-budget={name}>
      {label && <span class="budget-label">{label}</span>}
      <meter min={0} max={most || 1} value={Math.min(used, most || 1)} low={most * 0.8} high={most * 0.95} optimum={0}
        aria-label={`${label || name}: ${percent} spent`} />
      <span class="budget-figures">
        <span class="spent" title={shown.exact}>{shown.shown}</span> of{" "}
        <span class="limit">{limitText(name, limit)}</span> <span class="muted percent">({percent})</span>
      </span>
    </div>
  );
}

// When a shared budget's `period` ("day" or "month", UTC) that holds `at` ends: the
// next UTC midnight, or the first of the next month.
export function periodEnd(period, at = new Date()) {
  const day = new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate()));
  if (period === "month") return new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + 1, 1));
  return new Date(day.getTime() + 86400 * 1000);
}

// A moment to come, as a local date and time and how far off it is: "21/05/2026,
// 02:00:00 (in 5.2 h)".
export function Until({ at }) {
  const now = useNow(30000);
  const when = new Date(at);
  const seconds = Math.max(0, (when.getTime() - now) / 1000);
  return (
    <span class="until">
      <time dateTime={when.toISOString()}>{dateTime(when.toISOString())}</time>{" "}
      <span class="muted">(in {span(seconds)})</span>
    </span>
  );
}

export const PERIODS = { day: "daily", month: "monthly" };

// Who a budget is (an error's `budget.scope`): "the task's", "the tenant's daily",
// "the researcher profile's daily total".
export function scopeText({ scope, period }) {
  const per = period ? `${PERIODS[period] ?? period} ` : "";
  if (scope === "task") return "the task's own";
  if (scope === "tenant") return `the tenant's ${per}`.trimEnd();
  if (String(scope).startsWith("agent ")) return `the ${String(scope).slice(6)} profile's ${per}total`;
  return `the ${scope}'s ${per}`.trimEnd();
}

// A round figure above `x` (two significant digits), as plain digits: 2100, 0.0035.
function roundUp(x) {
  if (!(x > 0)) return null;
  const step = 10 ** (Math.floor(Math.log10(x)) - 1);
  const places = Math.max(0, -Math.floor(Math.log10(step)));
  return (Math.ceil(x / step - 1e-9) * step).toFixed(places);
}

// The budget to offer a fork of a run that `exhausted` stopped: room for twice what it
// had spent and its next request, and at least twice the old limit.
export function largerBudget({ name, limit, spent, next_request: next }) {
  const wanted = Math.max(Number(limit) * 2, (Number(spent ?? 0) + Number(next ?? 0)) * 2);
  const figure = roundUp(wanted);
  if (figure === null) return {};
  return name === "max_cost" ? { max_cost: figure } : { max_tokens: String(Math.ceil(Number(figure))) };
}
