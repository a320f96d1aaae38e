"""The pruner: deletes finished tasks past their retention (`db/retention.py`), in
every process, one at a time across replicas (the store's advisory lock), every
`RETENTION_INTERVAL_SECONDS` (jittered), a batch of trees at a time with a pause
between batches, so that a large backlog of expired tasks never crowds out the
service's own statements."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from taskservice.db import TRANSIENT_ERRORS
from taskservice.db.outage import OUTAGE
from taskservice.db.retention import Policy, Pruned, RetentionStore, prune

log = logging.getLogger(__name__)
PAUSE = 0.05  # seconds between batches


class Pruner:
    def __init__(self, store: RetentionStore, policy: Policy, *, interval: float) -> None:
        self.store = store
        self.policy = policy
        self.interval = interval
        self._loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="pruner")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    async def pass_once(self) -> Pruned | None:
        """One walk over every root; None when another process was pruning."""
        pruned = await prune(self.store, self.policy, pause=PAUSE)
        if pruned is not None and pruned.tasks:
            log.info(
                "retention: %d tasks deleted, with %d events and %d webhook deliveries",
                pruned.tasks,
                pruned.events,
                pruned.deliveries,
            )
        return pruned

    async def _run(self) -> None:
        # Replicas started together do not all wake at once (the lock would turn all
        # but one away anyway).
        await asyncio.sleep(random.uniform(0, self.interval))
        while True:
            try:
                await self.pass_once()
            except TRANSIENT_ERRORS as exc:
                OUTAGE.failed("pruner", exc)
            await asyncio.sleep(self.interval * random.uniform(0.75, 1.25))
