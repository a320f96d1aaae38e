"""A run's spend gate (`common/spending.SpendGate`): each model request reserves what
it may cost in the run's budgets before it is sent, and settles with what it cost.

The budgets are the task's own (`TaskBudget`: its `max_cost` and `max_tokens`, with
what the task spent before this run, from its ledger) first; a profile's total per
period and a tenant's budgets join the list as budgets reserved in PostgreSQL. A
request refused by one gives back what the budgets before it reserved.

When a request to the task's model does not fit and the same request to the
profile's fallback model does (`agents/spending.fallback_chain`), the run goes on
there; a `log` line says so at each switch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from typing import Any

from genai_prices import Usage

from taskservice.agents.tools import LogLevel
from taskservice.common.pricing import Pricing
from taskservice.common.spending import (
    NOTHING,
    Budget,
    BudgetExhausted,
    Charge,
    Exhausted,
    ModelCall,
    TaskBudget,
)
from taskservice.db.spend_budgets import Refused, Reserved
from taskservice.domain.models import Task
from taskservice.usecases.spend import SpendControl

Log = Callable[[LogLevel, str], Awaitable[None]]


class RunSpend:
    """One run's gate over `budgets`, pricing with `pricing`; `log` writes a line in
    the task's log (the switches to and from the fallback model)."""

    def __init__(self, budgets: Sequence[Budget], *, pricing: Pricing, log: Log) -> None:
        self.budgets = list(budgets)
        self.pricing = pricing
        self.log = log
        self._on_fallback = False
        self._refused: BudgetExhausted | None = None  # the task's model's, last

    async def reserve(self, call: ModelCall, *, input_tokens: int, output_tokens: int) -> Charge:
        usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
        price = self.pricing.price(
            usage,
            model=call.model,
            model_name=call.model_name,
            provider=call.provider,
            provider_url=call.provider_url,
        )
        charge = Charge(price or Decimal(0), input_tokens + output_tokens, price is not None)
        taken: list[Budget] = []
        for budget in self.budgets:
            refused = await budget.reserve(charge)
            if refused is not None:
                for earlier in taken:
                    await earlier.settle(charge, NOTHING)
                raise self._refuse(refused, call)
            taken.append(budget)
        await self._switching(call)
        return charge

    def _refuse(self, refused: Exhausted, call: ModelCall) -> BudgetExhausted:
        exc = BudgetExhausted(refused, model=call.model)
        if not call.fallback:
            self._refused = exc
        return exc

    async def _switching(self, call: ModelCall) -> None:
        """A `log` line when the run goes to the fallback model, or back."""
        if call.fallback and not self._on_fallback:
            why = f" ({self._refused})" if self._refused is not None else ""
            await self.log("warning", f"continuing on the fallback model {call.model}{why}")
        elif not call.fallback and self._on_fallback:
            await self.log("info", f"back on the task's model {call.model}: its request fits")
        self._on_fallback = call.fallback

    async def settle(self, call: ModelCall, reserved: Charge, response: Any) -> None:
        actual = NOTHING
        if response is not None:
            price = self.pricing.response(response, model=call.model)
            usage = response.usage
            tokens = int(usage.input_tokens or 0) + int(usage.output_tokens or 0)
            actual = Charge(price or Decimal(0), tokens, price is not None)
        for budget in self.budgets:
            await budget.settle(reserved, actual)


def task_budget(task: Task, *, cost: Decimal, usage: dict[str, Any]) -> TaskBudget | None:
    """The task's own budget, its spend so far being `cost` and `usage`'s tokens (the
    ledger's); None when it sets none."""
    if task.max_cost is None and task.max_tokens is None:
        return None
    tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    return TaskBudget(
        max_cost=task.max_cost, max_tokens=task.max_tokens, spent_cost=cost, spent_tokens=tokens
    )


class SharedBudgets:
    """The budgets of `keys` shared by every process (a tenant's, a profile's total:
    `usecases/spend.py`), as one budget of a run: a request reserves in all of them
    in one statement, or in none. A run makes one model request at a time, so the
    reservation settled is the last one made."""

    def __init__(self, spend: SpendControl, keys: list[str]) -> None:
        self.spend = spend
        self.keys = keys
        self._reserved: list[Reserved] = []

    async def reserve(self, charge: Charge) -> Exhausted | None:
        reserved = await self.spend.reserve(self.keys, cost=charge.cost, tokens=charge.tokens)
        if isinstance(reserved, Refused):
            state = reserved.budget
            limit = state.limit
            scope = "tenant" if state.tenant is not None else f"agent {state.key[6:]}"
            if limit.max_tokens is not None and state.spent_tokens + charge.tokens > (
                limit.max_tokens
            ):
                return Exhausted(
                    scope,
                    "max_tokens",
                    limit.max_tokens,
                    state.spent_tokens,
                    charge.tokens,
                    period=limit.period,
                )
            assert limit.max_cost is not None
            return Exhausted(
                scope,
                "max_cost",
                limit.max_cost,
                state.spent_cost,
                charge.cost,
                period=limit.period,
            )
        self._reserved.append(reserved)
        return None

    async def settle(self, reserved: Charge, actual: Charge) -> None:
        if not self._reserved:
            return
        made = self._reserved.pop()
        await self.spend.settle(
            made, cost=actual.cost - reserved.cost, tokens=actual.tokens - reserved.tokens
        )
