"""The reaper: recovers the tasks of workers that stopped renewing their leases.

Every process that opens the runtime runs one (`serve`, with or without workers, and
`worker`): recovery needs no particular process to stay alive, and an API-only
replica still moves a crashed worker's task on (re-offered, or failed on its last
attempt) for whichever worker runs next. Reaping is fenced SQL that re-checks the
expiry on the locked row, so any number of reapers are safe together.

It reaps at start, then sleeps until the earliest held lease expires (a little
after), or a jittered `reap_interval` if that comes first: a task whose worker
died is recovered about `lease_seconds` after its last renewal, however briefly
the processes around it live (a crash-looping worker that reaped only after a
whole interval never reaped at all).

Each pass also sweeps the live output (`task_live`) of tasks no longer running the
attempt that wrote it: a finished run's, or a dead worker's; and cancels the live
subtasks (but the detached) of parents that failed or were cancelled without taking
them along.
"""

from __future__ import annotations

import asyncio
import logging
import random

from taskservice.common.metrics import INTERRUPTIONS
from taskservice.db import TRANSIENT_ERRORS
from taskservice.db.leases import LeaseStore
from taskservice.db.live import LiveStore
from taskservice.db.outage import OUTAGE
from taskservice.db.steps import LedgerStore
from taskservice.db.tasks import TaskStore
from taskservice.domain.states import TaskState
from taskservice.settings import Settings

log = logging.getLogger(__name__)

# After the earliest expiry, so that lease has lapsed on the database's clock too.
_EXPIRY_MARGIN = 0.05
# However soon the next expiry: a lease that cannot be reaped yet (locked by another
# reaper) must not make this loop spin.
_MIN_SLEEP = 0.25


class Reaper:
    def __init__(
        self,
        *,
        leases: LeaseStore,
        ledger: LedgerStore,
        tasks: TaskStore,
        settings: Settings,
        live: LiveStore | None = None,
    ) -> None:
        self.leases = leases
        self.ledger = ledger
        self.tasks = tasks
        self.live = live
        self.settings = settings
        self._loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="reaper")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)

    async def pass_once(self) -> float | None:
        """One pass; returns the seconds until the next lease expires (None: none held)."""
        recovered, failed = await self.leases.reap(log_cap=self.settings.max_log_lines)
        for task in failed:
            if task["parent_id"] is not None:
                await self.ledger.subtask_ended(
                    task["parent_id"], task["id"], TaskState.FAILED, task["error"]
                )
        stalled = await self.leases.mark_stalled(stall_seconds=self.settings.stall_seconds)
        # Subtasks of parents that failed (just above, too) or were cancelled without
        # taking them along: the backstop of `WorkerPool._end_subtasks`.
        orphans = await self.tasks.cancel_orphans()
        INTERRUPTIONS.labels("recovered").inc(recovered)
        INTERRUPTIONS.labels("exhausted").inc(len(failed))
        INTERRUPTIONS.labels("stalled").inc(stalled)
        # Backstop for parents whose resume was missed (a process stopped between a
        # subtask's end and its parent's resume).
        recovered += await self.ledger.resume_parents()
        if self.live is not None:
            await self.live.sweep()
        if recovered or failed or stalled or orphans:
            log.info(
                "reaper: %d recovered, %d failed (no attempts left), %d stalled, "
                "%d orphaned subtasks cancelled",
                recovered,
                len(failed),
                stalled,
                orphans,
            )
        return await self.leases.next_expiry()

    async def _run(self) -> None:
        while True:
            # Jitter keeps replicas from reaping in lockstep.
            delay = self.settings.reap_interval * random.uniform(0.5, 1.5)
            try:
                until_expiry = await self.pass_once()
            except TRANSIENT_ERRORS as exc:
                OUTAGE.failed("reaper", exc)
            else:
                if until_expiry is not None:
                    delay = min(delay, max(_MIN_SLEEP, until_expiry + _EXPIRY_MARGIN))
            await asyncio.sleep(delay)
