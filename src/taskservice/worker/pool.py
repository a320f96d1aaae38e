"""The worker pool: claim, lease, run, write the outcome.

```
         NOTIFY (pending) ─┐
   poll interval elapsed ──┼─▶ claim up to free slots (SKIP LOCKED) ─▶ run ─▶ fenced write
          stop requested ──┘                 │
                                 heartbeat every lease/3 ─ lost? ─▶ stop the run, write nothing
```

Every write is fenced on (state, lease owner, attempt): a worker that lost its task
(cancelled, or re-offered after its lease expired) writes nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

from taskservice.db import TRANSIENT_ERRORS
from taskservice.db.store import TaskStore
from taskservice.events import EventHub, EventNotice
from taskservice.models import Lease, Task
from taskservice.settings import Settings
from taskservice.states import TaskState
from taskservice.worker.executor import Completed, Executor, Failed, Outcome

log = logging.getLogger(__name__)

CLAIM_RETRY_DELAY = 1.0  # seconds, after a failed claim (database unavailable)


def new_worker_id() -> str:
    """Fresh at every process start: a restarted process never inherits old leases."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class WorkerPool:
    def __init__(
        self,
        *,
        store: TaskStore,
        executor: Executor,
        hub: EventHub,
        settings: Settings,
    ) -> None:
        self.store = store
        self.executor = executor
        self.hub = hub
        self.settings = settings
        self.worker_id = new_worker_id()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._runs: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._unsubscribe = hub.subscribe(self._on_event)
        hub.on_reconnect(self._wake.set)

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        self._loop_task = asyncio.create_task(self._claim_loop(), name="worker-claim-loop")
        log.info(
            "worker %s started: concurrency %d, lease %.0fs",
            self.worker_id,
            self.settings.worker_concurrency,
            self.settings.lease_seconds,
        )

    async def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._loop_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        runs = list(self._runs.values())
        for run in runs:
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        self._unsubscribe()

    @property
    def running(self) -> int:
        return len(self._runs)

    # -- claiming ---------------------------------------------------------------

    def _on_event(self, notice: EventNotice) -> None:
        if notice.type == "state_change" and notice.target == TaskState.PENDING.value:
            self._wake.set()
        elif notice.target == TaskState.CANCELLED.value and notice.task_id in self._runs:
            # The API already wrote `cancelled`; stop the agent now.
            self._runs[notice.task_id].cancel()

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            free = self.settings.worker_concurrency - len(self._runs)
            claimed: list[Task] = []
            if free > 0:
                try:
                    claimed = await self.store.claim(
                        owner=self.worker_id, limit=free, lease_seconds=self.settings.lease_seconds
                    )
                except TRANSIENT_ERRORS as exc:
                    log.warning("claim failed (%s); retrying", exc)
                    await asyncio.sleep(CLAIM_RETRY_DELAY)
                    continue
                for task in claimed:
                    self._runs[task.id] = asyncio.create_task(
                        self._execute(task), name=f"run-{task.id}"
                    )
            if claimed and len(claimed) == free:
                continue  # maybe more are waiting: claim again when a slot frees
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.settings.poll_interval)

    # -- running ----------------------------------------------------------------

    async def _execute(self, task: Task) -> None:
        lease = task.lease
        assert lease is not None
        run = asyncio.create_task(self._run_agent(task), name=f"agent-{task.id}")
        heartbeat = asyncio.create_task(self._heartbeat(task, lease, run))
        try:
            outcome = await run
            await self._finish(task, lease, outcome)
        except asyncio.CancelledError:
            # Cancelled by the API, lease lost, or shutdown: the task is not ours to write.
            run.cancel()
            log.info("task %s: run stopped (attempt %d)", task.id, lease.attempt)
        except TRANSIENT_ERRORS:
            # The outcome could not be written; the lease will expire and the task
            # will be offered again.
            log.exception("task %s: could not record the outcome", task.id)
        finally:
            heartbeat.cancel()
            self._runs.pop(task.id, None)
            self._wake.set()  # a slot is free

    async def _run_agent(self, task: Task) -> Outcome:
        try:
            return await self.executor.run(task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("task %s: agent run raised", task.id)
            return Failed({"type": "internal_error", "message": f"{type(exc).__name__}: {exc}"}, {})

    async def _finish(self, task: Task, lease: Lease, outcome: Outcome) -> None:
        if isinstance(outcome, Completed):
            target = TaskState.COMPLETED
            values = {"result": outcome.result, "usage": outcome.usage}
        else:
            target = TaskState.FAILED
            values = {"error": outcome.error, "usage": outcome.usage}
        written = await self.store.transition(
            task.id, source=TaskState.RUNNING, target=target, lease=lease, values=values
        )
        if written is None:
            log.info("task %s: outcome dropped, the task is no longer ours", task.id)

    async def _heartbeat(self, task: Task, lease: Lease, run: asyncio.Task[Outcome]) -> None:
        interval = self.settings.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                still_ours = await self.store.heartbeat(
                    task.id, lease=lease, lease_seconds=self.settings.lease_seconds
                )
            except TRANSIENT_ERRORS as exc:
                log.warning("task %s: heartbeat failed (%s)", task.id, exc)
                continue
            if not still_ours:
                log.info("task %s: lease lost; stopping the run", task.id)
                run.cancel()
                return
