"""Spend budgets: what a run's model requests may cost, checked before each is sent.

```
model request ──▶ SpendCheckedModel (agents/spending.py)
                    │ estimate: input tokens as the rate limits count them
                    │ (`rate_limits.estimate_tokens`), output tokens bounded by the
                    │ request's `max_tokens` setting or TASKSERVICE_BUDGET_OUTPUT_TOKENS;
                    │ priced at the requesting model's price (unpriced: 0 dollars)
                    ▼
               SpendGate.reserve (worker/spend.RunSpend) ── each Budget in turn:
                    │   the task's own (TaskBudget), later its profile's and tenant's
                    │   exhausted ──▶ BudgetExhausted: the request is not sent
                    ▼
               the request ──▶ SpendGate.settle(actual response): the real usage, priced
```

A budget never lets a request start that it has no room for, by its estimate, so
the only overrun is the one request whose real usage came out above its estimate.
A model nobody prices costs 0 dollars to the cost budget (its requests are counted
as unpriced in the task's usage): only a token budget, or an operator's price
(`TASKSERVICE_MODEL_PRICES`), bounds it.

Pure, like `rate_limits.py`: the port, the run's budgets and the task's own budget
(kept in memory: one run holds a task at a time); what a run calls is found in its
context (`CURRENT_SPEND`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from taskservice.common.pricing import decimal_text


@dataclass(frozen=True, slots=True)
class Charge:
    """What a request costs (or may cost, reserved): dollars (0 when `priced` is
    false: nobody prices its model) and tokens (input + output)."""

    cost: Decimal
    tokens: int
    priced: bool = True


NOTHING = Charge(Decimal(0), 0)


@dataclass(frozen=True, slots=True)
class Exhausted:
    """Why a request may not start: budget `name` (`max_cost`, `max_tokens`) of
    `scope` (`task`; later `agent`, `tenant`) allows `limit`, `spent` went already,
    and the request may take `needed` more."""

    scope: str
    name: str
    limit: Decimal | int
    spent: Decimal | int
    needed: Decimal | int
    period: str | None = None  # a shared budget's: `day` or `month` (UTC)

    def describe(self) -> str:
        per = f" per {self.period}" if self.period else ""
        if self.name == "max_cost":
            return (
                f"the {self.scope}'s max_cost of {_usd(self.limit)} USD{per}: "
                f"{_usd(self.spent)} spent, the next model request may cost up to "
                f"{_usd(self.needed)}"
            )
        return (
            f"the {self.scope}'s max_tokens of {self.limit}{per}: {self.spent} tokens used, "
            f"the next model request may take up to {self.needed}"
        )

    def shown(self) -> dict[str, Any]:
        """As the task's error carries it (dollars as decimal strings)."""

        def value(amount: Decimal | int) -> str | int:
            return _usd(amount) if self.name == "max_cost" else int(amount)

        shown: dict[str, Any] = {
            "scope": self.scope,
            "name": self.name,
            "limit": value(self.limit),
            "spent": value(self.spent),
            "next_request": value(self.needed),
        }
        if self.period is not None:
            shown["period"] = self.period
        return shown


def _usd(amount: Decimal | int) -> str:
    return decimal_text(Decimal(amount))


class BudgetExhausted(Exception):
    """A model request would pass a budget: it is not sent (`model`: the model it
    was for, as tasks name it)."""

    def __init__(self, exhausted: Exhausted, *, model: str) -> None:
        super().__init__(f"a request to {model} would pass {exhausted.describe()}")
        self.exhausted = exhausted
        self.model = model


class Budget(Protocol):
    """One budget a run's requests draw from (the task's own; a profile's or a
    tenant's, shared in PostgreSQL, reserve in one conditional statement)."""

    async def reserve(self, charge: Charge) -> Exhausted | None:
        """Take `charge` from the budget, or say why it does not fit (nothing taken)."""

    async def settle(self, reserved: Charge, actual: Charge) -> None:
        """A request that reserved `reserved` cost `actual` (NOTHING: it was not made)."""


class TaskBudget:
    """A task's own `max_cost` and `max_tokens` (None: not limited), with what its
    runs spent so far (the ledger's figures when the run began). In memory: one run
    holds a task at a time."""

    scope = "task"

    def __init__(
        self,
        *,
        max_cost: Decimal | None,
        max_tokens: int | None,
        spent_cost: Decimal,
        spent_tokens: int,
    ) -> None:
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        self.cost = spent_cost  # spent and reserved
        self.tokens = spent_tokens

    async def reserve(self, charge: Charge) -> Exhausted | None:
        if self.max_tokens is not None and self.tokens + charge.tokens > self.max_tokens:
            return Exhausted(self.scope, "max_tokens", self.max_tokens, self.tokens, charge.tokens)
        if self.max_cost is not None and self.cost + charge.cost > self.max_cost:
            return Exhausted(self.scope, "max_cost", self.max_cost, self.cost, charge.cost)
        self.cost += charge.cost
        self.tokens += charge.tokens
        return None

    async def settle(self, reserved: Charge, actual: Charge) -> None:
        self.cost += actual.cost - reserved.cost
        self.tokens += actual.tokens - reserved.tokens


@dataclass(frozen=True, slots=True)
class ModelCall:
    """The model a request goes to: `model` as tasks name it (`openai-chat:gpt-4o`),
    `model_name` and `provider` as its provider does (for prices), `fallback`: the
    profile's fallback model, not the task's."""

    model: str
    model_name: str | None
    provider: str | None = None
    provider_url: str | None = None
    fallback: bool = False


class SpendGate(Protocol):
    """What a spend-checked model request calls (the worker's `RunSpend`, one per run)."""

    async def reserve(self, call: ModelCall, *, input_tokens: int, output_tokens: int) -> Charge:
        """Reserve what a request of about `input_tokens` and at most `output_tokens`
        may cost on `call`'s model, in every budget; or raise `BudgetExhausted`."""

    async def settle(self, call: ModelCall, reserved: Charge, response: Any) -> None:
        """The request was answered with `response` (a model response: its usage is
        priced), or None (not answered: nothing spent)."""


# The spend gate of the run in this context (set by the executor around a run).
CURRENT_SPEND: contextvars.ContextVar[SpendGate | None] = contextvars.ContextVar(
    "taskservice_spend_gate", default=None
)


@contextmanager
def spending(gate: SpendGate | None) -> Iterator[None]:
    """Model requests made in this context are checked against `gate`'s budgets."""
    token = CURRENT_SPEND.set(gate)
    try:
        yield
    finally:
        CURRENT_SPEND.reset(token)
