"""A run's model gate (`common/rate_limits.ModelGate`): each budgeted model request
takes its slot from the shared budgets (`db/budgets.py`) before it is sent.

A slot due now, or within `INLINE_WAIT`, is taken at once; a later one is reserved
and the run stops with `Throttled`: the pool gives the task back until the slot
(`LeaseStore.park`), holding no worker slot meanwhile, and the run that resumes it
sends its first request on the slot it reserved (`Task.paid_slot`), without
reserving again. A provider's 429 blocks the budgets for its `Retry-After` (or
`DEFAULT_RETRY_AFTER`), and the request waits for a new slot the same way.
"""

from __future__ import annotations

import asyncio
from typing import Any

from taskservice.common.metrics import MODEL_THROTTLED
from taskservice.common.rate_limits import INLINE_WAIT, Throttled
from taskservice.db.budgets import BudgetStore

DEFAULT_RETRY_AFTER = 1.0  # seconds, when a 429 says nothing
MAX_RETRY_AFTER = 600.0  # a longer Retry-After is taken as this


class RunGate:
    """One run's gate: `model` is the task's model name (for the metrics), `paid` the
    slot a throttled task reserved, spent by this run's first budgeted request."""

    def __init__(self, store: BudgetStore, *, model: str, paid: dict[str, Any] | None) -> None:
        self.store = store
        self.model = model
        self._paid = paid

    async def acquire(self, keys: tuple[str, ...], tokens: int) -> int:
        if self._paid is not None:
            paid, self._paid = self._paid, None  # reserved by the throttled attempt
            return int(paid.get("tokens", 0))
        slot = await self.store.reserve(keys, tokens)
        if slot.wait <= INLINE_WAIT:
            if slot.wait > 0:
                await asyncio.sleep(slot.wait)
            return tokens
        MODEL_THROTTLED.labels(self.model, "budget").inc()
        raise Throttled(keys, until=slot.at, wait=slot.wait, tokens=tokens, reason="budget")

    async def settle(self, keys: tuple[str, ...], reserved: int, used: int) -> None:
        await self.store.settle(keys, used - reserved)

    async def refused(self, keys: tuple[str, ...], retry_after: float | None) -> None:
        seconds = DEFAULT_RETRY_AFTER if retry_after is None else retry_after
        await self.store.block(keys, min(max(seconds, 0.0), MAX_RETRY_AFTER))
        # The request goes back in the queue, after the block.
        slot = await self.store.reserve(keys, 1)
        MODEL_THROTTLED.labels(self.model, "provider_429").inc()
        wait = max(slot.wait, 0.0)
        raise Throttled(keys, until=slot.at, wait=wait, tokens=1, reason="provider_429")


def paid_slot(throttled: Throttled) -> dict[str, Any]:
    """What a throttled task keeps for the run that resumes it."""
    return {
        "keys": list(throttled.keys),
        "tokens": throttled.tokens,
        "slot": throttled.until.isoformat(),
    }
