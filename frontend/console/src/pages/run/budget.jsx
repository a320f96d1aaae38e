// A run's budget in its head: what its own budget allows, with what it spent so far
// against each limit; and, for a run a budget stopped (`error.code` budget_exhausted),
// which budget it was, what it allowed and what was spent, with a fork that has room.

import { BudgetMeter, Until, budgetText, largerBudget, limitText, periodEnd, scopeText } from "../../budget.jsx";
import { ForkButton, forkNeeds } from "./fork.jsx";

const set = (value) => value !== null && value !== undefined;

// "budget $0.50 · 12,000 tokens", a meter per limit of what the run spent of it.
export function RunBudget({ task }) {
  const text = budgetText(task);
  if (!text) return null;
  const usage = task.usage || {};
  const used = (usage.input_tokens ?? 0) + (usage.output_tokens ?? 0);
  return (
    <div class="run-budget-row">
      <dt>budget</dt>
      <dd id="run-budget">
        <span class="budget-text">{text}</span>
        {set(task.max_cost) && (
          <BudgetMeter name="max_cost" label="cost" spent={usage.cost ?? "0"} limit={task.max_cost} />
        )}
        {set(task.max_tokens) && <BudgetMeter name="max_tokens" label="tokens" spent={used} limit={task.max_tokens} />}
      </dd>
    </div>
  );
}

// Which budget stopped the run, and a fork of it with a larger one (the task's own
// budget), or the moment a shared budget starts afresh (a tenant's, a profile's total:
// a fork draws from the same one).
export function BudgetStop({ task, messages }) {
  const budget = task.error?.budget;
  if (task.error?.code !== "budget_exhausted" || !budget) return null;
  const own = budget.scope === "task";
  const figure = (value) => limitText(budget.name, value);
  const kind = budget.name === "max_cost" ? "max_cost (USD)" : "max_tokens";
  return (
    <div class="budget-stop" id="budget-stop" data-scope={budget.scope} data-name={budget.name}>
      <span>
        Stopped by <strong class="scope">{scopeText(budget)}</strong> budget <span class="mono name">{kind}</span>:
        limit <span class="limit">{figure(budget.limit)}</span>, spent <span class="spent">{figure(budget.spent ?? 0)}</span>
        {set(budget.next_request) && <>, and the next model request could take up to {figure(budget.next_request)}</>}.
      </span>
      {!own && budget.period && task.finished_at && (
        <span class="muted resets">
          That budget starts afresh at <Until at={periodEnd(budget.period, new Date(task.finished_at))} />.
        </span>
      )}
      <ForkButton
        task={task}
        at={null}
        id="fork-budget"
        label={own ? "Fork with a larger budget" : "Fork"}
        title={own ? "Fork this run with a larger budget" : "Fork this run"}
        needs={forkNeeds(messages.map((m) => m.message), messages.length) ?? "optional"}
        budget={own ? largerBudget(budget) : {}}
        explain={
          own
            ? "A new run begins with all of this run's conversation and goes on from there, with the budget below (its spend starts at zero)."
            : "A new run begins with all of this run's conversation and goes on from there; it draws on the same shared budget, so it needs room there."
        }
      />
    </div>
  );
}
