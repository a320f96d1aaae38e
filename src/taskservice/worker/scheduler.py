"""The scheduler: time-driven work, in every process (like the reaper).

Each tick
- makes claimable the tasks whose `run_at` has come (`db/schedules.py`), and wakes
  this process's workers when any did, or when a task it knew to be due at this
  moment was made claimable by another process (an API-only replica, say);
- fires the slots of the schedules that are due (`usecases/schedules.ScheduleService`):
  exactly once across processes, each slot's task committed with the schedule's
  move to its next slot.
- about once a second, applies the approval deadlines that have passed
  (`usecases/approvals.ApprovalDesk.expire`): a task nobody decided for in time has
  its calls denied, or fails, as its profile says.

It ticks every `TICK` seconds, sooner when the next delayed task or schedule is due
sooner, so a task starts within about `TICK` of its time, at once when that time
was known at the last tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from taskservice.db import TRANSIENT_ERRORS
from taskservice.db.outage import OUTAGE
from taskservice.db.schedules import ScheduleStore

log = logging.getLogger(__name__)

TICK = 0.5  # seconds: at most this late after a task's run_at or a schedule's slot
EXPIRE_EVERY = 1.0  # seconds: at most about this late after an approval's deadline
_MIN_SLEEP = 0.005
_RETRY_DELAY = 1.0  # after a database error


class Scheduler:
    def __init__(
        self,
        store: ScheduleStore,
        *,
        fire: Callable[[], Awaitable[int]] | None = None,
        expire: Callable[[], Awaitable[int]] | None = None,
        tick: float = TICK,
    ) -> None:
        """`fire()` starts the due schedules' slots, returning how many it fired;
        `expire()` applies the approval deadlines that passed."""
        self.store = store
        self.tick = tick
        self._fire = fire
        self._expire = expire
        self._expired_at = 0.0  # when `expire` last ran (the loop's clock)
        self._wakers: list[Callable[[], None]] = []
        self._expecting = False  # the last tick knew a task would be due by the next
        self._loop: asyncio.Task[None] | None = None

    def on_due(self, wake: Callable[[], None]) -> None:
        """Call `wake` when tasks became claimable (the worker pool's claim loop)."""
        self._wakers.append(wake)

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="scheduler")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    async def tick_once(self) -> float:
        """One tick; returns the seconds to sleep before the next. Wakes the workers
        when tasks became claimable, or when the last tick knew a task would be due by
        now (another process may have promoted it first)."""
        expected, self._expecting = self._expecting, False
        now = asyncio.get_running_loop().time()
        if self._expire is not None and now - self._expired_at >= EXPIRE_EVERY:
            self._expired_at = now
            await self._expire()  # the tasks it resumes wake the workers by their events
        tick = await self.store.tick()
        while tick.full:  # a backlog after downtime: all of it, batch by batch
            self._wake()
            tick = await self.store.tick()
        if tick.promoted or expected:
            self._wake()
        self._expecting = tick.task_in is not None and tick.task_in < self.tick
        schedule_in = tick.schedule_in
        if schedule_in is not None and schedule_in <= 0 and self._fire is not None:
            await self._fire()  # its tasks' events wake the workers everywhere
            schedule_in = None  # re-read at the next tick
        soonest = min((s for s in (tick.task_in, schedule_in) if s is not None), default=self.tick)
        return max(min(soonest, self.tick), _MIN_SLEEP)

    def _wake(self) -> None:
        for wake in self._wakers:
            wake()

    async def _run(self) -> None:
        while True:
            try:
                sleep = await self.tick_once()
            except TRANSIENT_ERRORS as exc:
                OUTAGE.failed("scheduler", exc)
                self._expecting = True  # whatever came due meanwhile
                await asyncio.sleep(_RETRY_DELAY)
                continue
            await asyncio.sleep(sleep)
