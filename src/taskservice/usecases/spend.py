"""Spend budgets as the use cases and runs see them (`db/spend_budgets.py` keeps
them in PostgreSQL, shared by every process): a tenant's (the operator's default,
`TASKSERVICE_TENANT_BUDGET`, or an admin's own for the tenant) and an agent
profile's total (its `budget`), each per UTC day or month.

- A submit of a tenant whose budget is spent this period is refused (`BudgetExhausted`:
  429, `Retry-After` at the period's end), whichever way it comes (REST, A2A, MCP, a
  subtask); a schedule's slot waits. What is spent is read at most once a second per
  process and tenant (`CACHE_SECONDS`): a submit within that second of the budget
  running out is taken, and its first model request is the one refused.
- A run reserves what each model request may cost at most from every budget of its
  task (`budgets_of`) before sending it, and settles the real figure after
  (`worker/budget.py`).

Which budgets exist is read once a second too, so that a run with none makes no
statement for them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal

from taskservice.common.pricing import SpendLimit, decimal_text
from taskservice.db.spend_budgets import (
    BudgetState,
    Refused,
    Reserved,
    SpendBudgetStore,
    profile_key,
    tenant_key,
)
from taskservice.domain.errors import BudgetExhausted

CACHE_SECONDS = 1.0


def describe(state: BudgetState) -> str:
    """`tenant acme's monthly budget ($10: $10.02 spent, 1200 tokens)`."""
    who = f"tenant {state.tenant}" if state.tenant is not None else state.key.replace(":", " ", 1)
    limit = state.limit
    limits = []
    if limit.max_cost is not None:
        limits.append(f"${decimal_text(limit.max_cost)}")
    if limit.max_tokens is not None:
        limits.append(f"{limit.max_tokens} tokens")
    period = "daily" if limit.period == "day" else "monthly"
    spent = f"${decimal_text(state.spent_cost)} and {state.spent_tokens} tokens spent"
    return f"{who}'s {period} budget ({' and '.join(limits)}; {spent})"


def seconds_until(end: datetime | None) -> int:
    """Whole seconds from now until `end` (at least 1)."""
    if end is None:
        return 1
    return max(1, math.ceil((end - datetime.now(UTC)).total_seconds()))


class SpendControl:
    def __init__(
        self,
        store: SpendBudgetStore,
        *,
        default: SpendLimit | None = None,
        profiles: Mapping[str, SpendLimit] | None = None,
    ) -> None:
        self.store = store
        self.default = default
        self.profiles = dict(profiles or {})
        self._spent: dict[str, tuple[BudgetState | None, float]] = {}
        self._keys: tuple[frozenset[str], float] = (frozenset(), -math.inf)
        self._defaulted: set[str] = set()  # tenants whose default row this process made

    async def start(self) -> None:
        """The profiles' budgets as this process was configured."""
        await self.store.configure_profiles(self.profiles)

    # -- tenants ----------------------------------------------------------------

    async def of_tenant(self, tenant: str) -> BudgetState | None:
        """The tenant's budget and what it spent this period (None: it has none)."""
        state = await self.store.read(tenant_key(tenant))
        if state is None and self.default is not None:
            return BudgetState(
                key=tenant_key(tenant),
                tenant=tenant,
                limit=self.default,
                period_start=None,
                period_end=None,
                spent_cost=Decimal(0),
                spent_tokens=0,
                exhausted=False,
                source="settings",
                set_by=None,
            )
        return state

    async def refuse_if_spent(self, tenant: str) -> None:
        """`BudgetExhausted` when the tenant's budget has nothing left this period."""
        now = time.monotonic()
        cached = self._spent.get(tenant)
        if cached is None or cached[1] <= now:
            if len(self._spent) > 10_000:
                self._spent.clear()
            state = await self.of_tenant(tenant) if await self._may_have(tenant) else None
            cached = (state, now + CACHE_SECONDS)
            self._spent[tenant] = cached
        state = cached[0]
        if state is not None and state.over:
            raise BudgetExhausted(
                f"{describe(state)} is spent until {state.period_end:%Y-%m-%d %H:%M} UTC: "
                "nothing is submitted for it before then",
                retry_after=seconds_until(state.period_end),
                budget=state.key,
            )

    async def set_tenant(self, tenant: str, limit: SpendLimit, *, by: str) -> BudgetState:
        state = await self.store.set_tenant(tenant, limit, by=by)
        self._forget()
        return state

    async def clear_tenant(self, tenant: str) -> BudgetState | None:
        """Drop the tenant's own budget: the default applies again (what was spent
        this period still counts), or none."""
        if self.default is not None:
            await self.store.default_tenant(tenant, self.default, replace=True)
        else:
            await self.store.clear_tenant(tenant)
        self._forget()
        return await self.of_tenant(tenant)

    # -- runs -------------------------------------------------------------------

    async def budgets_of(self, tenant: str, profile: str) -> list[str]:
        """The keys of the budgets a request of the tenant's task on `profile` spends
        from (none: it is not budgeted)."""
        keys = []
        if self.default is not None and tenant not in self._defaulted:
            await self.store.default_tenant(tenant, self.default)
            self._defaulted.add(tenant)
            self._forget()
        existing = await self._existing()
        for key in (tenant_key(tenant), profile_key(profile)):
            if key in existing:
                keys.append(key)
        return keys

    async def reserve(self, keys: list[str], *, cost: Decimal, tokens: int) -> Reserved | Refused:
        return await self.store.reserve(keys, cost=cost, tokens=tokens)

    async def settle(self, reserved: Reserved, *, cost: Decimal, tokens: int) -> None:
        await self.store.settle(reserved, cost=cost, tokens=tokens)

    # -- which budgets exist ------------------------------------------------------

    async def _existing(self) -> frozenset[str]:
        keys, until = self._keys
        now = time.monotonic()
        if until <= now:
            keys = frozenset(await self.store.keys())
            self._keys = (keys, now + CACHE_SECONDS)
        return keys

    async def _may_have(self, tenant: str) -> bool:
        return self.default is not None or tenant_key(tenant) in await self._existing()

    def _forget(self) -> None:
        self._keys = (frozenset(), -math.inf)
        self._spent.clear()
