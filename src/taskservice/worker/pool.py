"""The worker pool: claim, lease, run, write the outcome; recover others' tasks.

```
       NOTIFY (pending, released, …) ─┐
           poll interval elapsed ─────┼─▶ claim ≤ free slots (fair per tenant, SKIP LOCKED)
                  stop requested ─────┘        │
                                                ▼
   heartbeat thread ── renews leases ──▶ run agent (timeout) ──▶ fenced write of the outcome
        │ lease lost / NOTIFY cancelled ──▶ stop the run, write nothing
```

Recovering other workers' tasks is the reaper's (`worker.reaper`), which every
process runs, workers or not.

A slot is one agent run (`worker_concurrency`); a delegated task's run (an `a2a`
profile's: it waits on a remote agent) takes none, up to `delegation_concurrency`
of them, beyond which they take slots too.

Every write is fenced on (state, lease owner, attempt): a worker that lost its task
writes nothing more. On shutdown the pool stops claiming, lets runs finish within
a grace period, then stops the rest and releases their leases so that another
process resumes them at once.

A paused task's run (told by the `paused` notice, or by the heartbeat should that be
lost) stops as soon as no tool call is in flight (`worker/ledger.RunLedger.pause`)
and is released the same way (reason `paused`), with the time it ran: the paused flag
keeps it from being claimed until it is resumed, and the run that resumes it gets
what was left of its timeout.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from typing import Any

from opentelemetry.trace import SpanKind

from taskservice.common import logs
from taskservice.common.metrics import CLAIM_LATENCY, INTERRUPTIONS, RUN_DURATION
from taskservice.common.pricing import Pricing
from taskservice.common.tracing import Tracing, failed
from taskservice.db import TRANSIENT_ERRORS, retried
from taskservice.db.leases import LeaseStore
from taskservice.db.outage import OUTAGE
from taskservice.db.steps import Finished, LedgerStore
from taskservice.domain.ids import new_worker_id
from taskservice.domain.models import Lease, Task
from taskservice.domain.states import TaskState
from taskservice.following.hub import EventHub, EventNotice
from taskservice.settings import Settings
from taskservice.usecases.inbox import TaskInbox
from taskservice.usecases.tasks import TaskService
from taskservice.worker.budget import paid_slot
from taskservice.worker.claims import ClaimLoop
from taskservice.worker.executor import Executor
from taskservice.worker.heartbeat import Heartbeat
from taskservice.worker.ledger import LeaseLost, RunLedger
from taskservice.worker.outcomes import (
    Completed,
    Ended,
    Failed,
    NeedsInput,
    Outcome,
    WaitsForBudget,
)

log = logging.getLogger(__name__)

# A follow-up was queued: the task's run (if here) looks for it at its next step.
_FOLLOWUP = "followup"
# A task was paused: its run here, if any, stops and gives it back.
_PAUSED = "paused"
_RESUMED = "resumed"
# Events after which a task may be claimable: wake the claim loop.
_WAKE_TYPES = frozenset({"recovered", "released", "resumed"})
_WAKE_TARGETS = frozenset({TaskState.PENDING.value, TaskState.RUNNING.value})


class WorkerPool:
    def __init__(
        self,
        *,
        service: TaskService,
        inbox: TaskInbox,
        leases: LeaseStore,
        ledger: LedgerStore,
        executor: Executor,
        hub: EventHub,
        settings: Settings,
        database_url: str,
        tracing: Tracing | None = None,
    ) -> None:
        self.service = service
        self.inbox = inbox
        self.tracing = tracing or Tracing(False)
        self.leases = leases
        self.ledger = ledger
        self.executor = executor
        self.hub = hub
        self.settings = settings
        self.pricing = Pricing(settings.model_prices)  # what each model response costs
        self.pricing.preload()
        self.worker_id = new_worker_id()
        self.heartbeat = Heartbeat(
            database_url=database_url,
            owner=self.worker_id,
            lease_seconds=settings.lease_seconds,
            on_lost=self._on_leases_lost,
            on_paused=self._on_paused,
        )
        self._claims = ClaimLoop(
            "worker claim",
            capacity=settings.worker_concurrency,
            busy=lambda: len(self._runs) - len(self._delegations),
            claim=self._claim,
            start=self._start,
            poll_interval=settings.poll_interval,
        )
        self._runs: dict[uuid.UUID, asyncio.Task[None]] = {}
        # Runs that delegate to a remote agent, up to `delegation_concurrency`: they
        # wait on the network, and take no worker slot.
        self._delegations: set[uuid.UUID] = set()
        self._ledgers: dict[uuid.UUID, RunLedger] = {}
        # Runs paused before their ledger was made: paused as soon as it is.
        self._paused_early: set[uuid.UUID] = set()
        self._leases: dict[uuid.UUID, Lease] = {}
        # Runs writing their outcome: the fenced write decides whether it still
        # counts, so a cancellation or a lost-lease report must not interrupt what
        # follows its commit (resuming a parked parent).
        self._finishing: set[uuid.UUID] = set()
        self._unsubscribe = hub.subscribe(self._on_event)
        hub.on_reconnect(self._claims.wake)

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        self.heartbeat.start()
        self._claims.start()
        log.info(
            "worker %s started: concurrency %d, lease %.0fs",
            self.worker_id,
            self.settings.worker_concurrency,
            self.settings.lease_seconds,
            extra=logs.STARTUP,
        )

    async def stop(self) -> None:
        """Stop claiming; let runs finish within the grace period; stop and release
        the rest so another process takes them over at once."""
        await self._claims.stop()
        runs = dict(self._runs)
        if runs:
            grace = self.settings.shutdown_grace_seconds
            log.info("waiting up to %.0fs for %d run(s) to finish", grace, len(runs))
            _, unfinished = await asyncio.wait(runs.values(), timeout=grace)
            stopped = [task_id for task_id, run in runs.items() if run in unfinished]
            leases = {task_id: self._leases[task_id] for task_id in stopped}
            for task_id in stopped:
                runs[task_id].cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
            for task_id, lease in leases.items():
                await self._release(task_id, lease)
        await self.heartbeat.stop()
        self._unsubscribe()

    async def _release(
        self,
        task_id: uuid.UUID,
        lease: Lease,
        reason: str = "shutdown",
        *,
        within: float = 0.0,
        ran_seconds: float | None = None,
    ) -> None:
        """Give the task back (fenced: a release that did commit before its answer was
        lost finds the task no longer ours when tried again), trying for up to
        `within` seconds while the database is unavailable."""
        try:
            released = await retried(
                lambda: self.leases.release(
                    task_id, lease=lease, reason=reason, ran_seconds=ran_seconds
                ),
                where=f"task {task_id} release",
                within=within,
            )
        except TRANSIENT_ERRORS:
            log.info("task %s: could not release; its lease will expire", task_id)
            return
        if released:
            INTERRUPTIONS.labels("released").inc()
        log.info("task %s: %s", task_id, "released" if released else "no longer ours")

    @property
    def running(self) -> int:
        return len(self._runs)

    def wake(self) -> None:
        """Claim now: tasks became claimable (the scheduler's delayed tasks)."""
        self._claims.wake()

    # -- claiming ---------------------------------------------------------------

    def _on_event(self, notice: EventNotice) -> None:
        if notice.type == _FOLLOWUP:
            ledger = self._ledgers.get(notice.task_id)
            if ledger is not None:
                ledger.tell()
            return
        if notice.type == _PAUSED:
            self._on_paused({notice.task_id})
            return
        if notice.type == _RESUMED:
            self._paused_early.discard(notice.task_id)
            ledger = self._ledgers.get(notice.task_id)
            if ledger is not None:
                ledger.unpause()
        if notice.type in _WAKE_TYPES or (
            notice.type == "state_change" and notice.target in _WAKE_TARGETS
        ):
            self._claims.wake()
        if (
            notice.target == TaskState.CANCELLED.value
            and notice.task_id in self._runs
            and notice.task_id not in self._finishing
        ):
            log.info("task %s: cancelled; stopping its run", notice.task_id)
            ledger = self._ledgers.get(notice.task_id)
            if ledger is not None:
                ledger.cancelled = True  # what the run started elsewhere is cancelled too
            self._runs[notice.task_id].cancel()

    def _on_paused(self, paused: set[uuid.UUID]) -> None:
        """Tasks paused: their runs here stop once no tool call is in flight."""
        for task_id in paused:
            if task_id not in self._runs:
                continue
            ledger = self._ledgers.get(task_id)
            if ledger is None:
                self._paused_early.add(task_id)
            elif not ledger.pausing:
                log.info("task %s: paused; its run stops and gives it back", task_id)
                ledger.pause(functools.partial(self._stop_paused, task_id))

    def _stop_paused(self, task_id: uuid.UUID) -> None:
        # A run writing its outcome is not interrupted: the outcome counts, or, if the
        # run goes on (follow-ups arrived), it stops then (`_attempt`).
        run = self._runs.get(task_id)
        if run is not None and task_id not in self._finishing:
            run.cancel()

    def _on_leases_lost(self, lost: set[uuid.UUID]) -> None:
        for task_id in lost:
            run = self._runs.get(task_id)
            # A run writing its outcome may have committed it a moment before the
            # heartbeat looked (a finished task holds no lease): its fenced write
            # tells, not this report.
            if run is not None and task_id not in self._finishing:
                log.warning("task %s: lease lost; stopping its run", task_id)
                run.cancel()

    async def _claim(self, limit: int) -> tuple[list[tuple[Task, float]], bool]:
        return await self.leases.claim_timed(
            owner=self.worker_id,
            limit=limit,
            lease_seconds=self.settings.lease_seconds,
            tenant_cap=self.settings.tenant_max_running,
        )

    def _start(self, claimed: tuple[Task, float]) -> None:
        task, waited = claimed
        CLAIM_LATENCY.labels(task.agent.profile).observe(waited)
        lease = task.lease
        assert lease is not None
        self._leases[task.id] = lease
        room = len(self._delegations) < self.settings.delegation_concurrency
        if room and self.executor.delegates(task):
            self._delegations.add(task.id)
        self.heartbeat.hold(task.id, lease.attempt)
        self._runs[task.id] = asyncio.create_task(
            self._execute(task, lease, waited), name=f"run-{task.id}"
        )

    # -- running ----------------------------------------------------------------

    async def _execute(self, task: Task, lease: Lease, waited: float) -> None:
        """An attempt, observed: its log lines name it, its trace shows its wait and
        its run (`tracing`), the metrics count its duration and outcome."""
        # A task of its own (`_start`): every line logged for this run names it.
        logs.annotate(
            task_id=task.id, tenant=task.tenant, worker=self.worker_id, attempt=lease.attempt
        )
        about = {
            "taskservice.task_id": str(task.id),
            "taskservice.tenant": task.tenant,
            "taskservice.agent": task.agent.profile,
            "taskservice.attempt": lease.attempt,
        }
        parent = task.trace_context
        # The wait, over now: a span from when it became claimable to this moment.
        with self.tracing.span("task.queued", parent, attributes=about, started_ago=waited):
            pass
        started = time.perf_counter()
        about["taskservice.worker"] = self.worker_id
        with self.tracing.span(
            "task.run", parent, kind=SpanKind.CONSUMER, attributes=about
        ) as span:
            ended = await self._attempt(task, lease)
            if span is not None:
                span.set_attribute("taskservice.outcome", ended)
                if ended in ("failed", "timed_out"):
                    failed(span, ended)
        RUN_DURATION.labels(task.agent.profile, ended).observe(time.perf_counter() - started)

    async def _attempt(self, task: Task, lease: Lease) -> str:
        """Run the task until it has an outcome written, or stops; how it ended."""
        timeout = task.timeout_seconds or self.settings.task_timeout_seconds
        loop = asyncio.get_running_loop()
        began = loop.time()
        ran_before = 0.0
        ended = "stopped"
        ledger: RunLedger | None = None
        try:
            # A run resumed after a pause has what was left of its timeout.
            ran_before = await self._ran_before(task)
            deadline = began + max(timeout - ran_before, 0.0)
            ledger = self._ledgers[task.id] = RunLedger(
                self.ledger,
                self.service,
                self.inbox,
                task,
                lease,
                patience=self.settings.outcome_retry_seconds,
                pricing=self.pricing,
            )
            if task.id in self._paused_early:  # paused as it was being claimed
                self._paused_early.discard(task.id)
                self._on_paused({task.id})
            while True:
                outcome = await self._run_agent(task, ledger, deadline)
                if isinstance(outcome, WaitsForBudget):
                    await self._park(task, lease, outcome)
                    ended = "throttled"
                    break
                self._finishing.add(task.id)
                if await self._finish(task, ledger, outcome):
                    ended = _ended(outcome)
                    break
                # Follow-ups arrived as it completed: the run goes on with them.
                self._finishing.discard(task.id)
                if ledger.pausing:  # unless it was paused meanwhile
                    raise asyncio.CancelledError
        except (asyncio.CancelledError, LeaseLost) as exc:
            if ledger is not None and ledger.pausing and not isinstance(exc, LeaseLost):
                # Paused: give it back, with the time it ran (a release the task's
                # cancel or a shutdown beat finds it no longer ours).
                ended = "paused"
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                self._finishing.add(task.id)  # a lost lease now is the release's to tell
                ran = ran_before + loop.time() - began
                await self._release(task.id, lease, reason="paused", ran_seconds=ran)
            else:
                # Cancelled by the API, lease lost, or shutdown: not ours to write.
                log.info("task %s: run stopped (attempt %d)", task.id, lease.attempt)
        except TRANSIENT_ERRORS as exc:
            # The run's ledger could not be written: give the task back, so that it
            # resumes from what the ledger holds as soon as the database answers
            # (should that fail too, once its lease expires).
            OUTAGE.failed(f"task {task.id}", exc)
            log.info("task %s: run stopped, its ledger could not be written", task.id)
            self._finishing.add(task.id)  # a lost lease now is the release's to tell
            within = self.settings.outcome_retry_seconds
            await self._release(task.id, lease, reason="ledger_unwritten", within=within)
        finally:
            self.heartbeat.drop(task.id)
            self._finishing.discard(task.id)
            self._runs.pop(task.id, None)
            self._delegations.discard(task.id)
            self._leases.pop(task.id, None)
            self._ledgers.pop(task.id, None)
            self._paused_early.discard(task.id)
            # A slot is free. Under a tenant cap a finished run may also have made
            # that tenant's next task claimable, which no notice announces.
            if self.settings.tenant_max_running is None:
                self._claims.freed()
            else:
                self._claims.wake()
        return ended

    async def _ran_before(self, task: Task) -> float:
        """How long the run had taken before it was paused and given back (the claim
        before this one, `ran_seconds` of its `released` event); 0 otherwise. Paused
        time does not count against the timeout, the time run does."""
        if task.attempt <= 1:
            return 0.0
        try:
            cause = await self.ledger.resume_cause(task.id, claim_seq=task.event_seq)
        except TRANSIENT_ERRORS:
            return 0.0  # the run's first write meets the outage and stops it
        if cause is None or cause["type"] != "released":
            return 0.0
        data = cause["data"] or {}
        if data.get("reason") != "paused":
            return 0.0
        return float(data.get("ran_seconds") or 0.0)

    async def _run_agent(self, task: Task, ledger: RunLedger, deadline: float) -> Outcome:
        """Run the agent until `deadline` (the attempt's timeout after it began)."""
        timeout = task.timeout_seconds or self.settings.task_timeout_seconds
        try:
            async with asyncio.timeout_at(deadline):
                return await self.executor.run(task, ledger)
        except TimeoutError:
            INTERRUPTIONS.labels("timed_out").inc()
            message = f"the run exceeded its timeout of {timeout:g} s"
            ledger.stage_log("error", f"{message}; the run was stopped")
            return Failed({"type": "timeout", "message": message}, ledger.usage)
        except LeaseLost:
            raise
        except TRANSIENT_ERRORS:
            raise  # the ledger could not be written: let the lease expire, resume elsewhere
        except Exception as exc:
            # A tool raised, or a bug: the task fails with what happened, and we log it.
            log.exception("task %s: agent run raised", task.id)
            error = {"type": "internal_error", "message": f"{type(exc).__name__}: {exc}"}
            return Failed(error, ledger.usage)

    async def _park(self, task: Task, lease: Lease, outcome: WaitsForBudget) -> None:
        """Give the task back until its model request's slot (a `throttled` event):
        no worker waits for it. (Should the write fail, the lease expires and the
        task resumes after it.)"""
        wait = outcome.throttled
        data = {
            "model": task.agent.model,
            "budgets": list(wait.keys),
            "until": wait.until.isoformat(),
            "wait_seconds": round(wait.wait, 3),
            "reason": wait.reason,
        }
        parked = await self.leases.park(
            task.id, lease=lease, until=wait.until, paid=paid_slot(wait), data=data
        )
        if parked:
            log.info("task %s: throttled, %s; it waits without a worker", task.id, wait)
        else:
            log.info("task %s: not throttled, it is no longer ours", task.id)

    async def _end_subtasks(self, task: Task, error: dict[str, Any]) -> None:
        """A failed task's subtasks end with it (but the detached); should the database
        be away, the reaper's orphan sweep does it."""
        try:
            timed_out = error.get("type") == "timeout"
            ended = await self.service.end_subtasks(task.id, timed_out=timed_out)
        except TRANSIENT_ERRORS as exc:
            OUTAGE.failed(f"task {task.id} subtasks", exc)
            return
        if ended:
            log.info("task %s: failed; %d of its subtasks cancelled", task.id, ended)

    async def _write_outcome(
        self, task: Task, ledger: RunLedger, target: TaskState, values: dict[str, Any]
    ) -> Finished | None:
        """The fenced outcome write, retried with backoff through a database blip for
        up to `outcome_retry_seconds`: the model's work is not thrown away for a
        dropped connection. Fencing makes retrying safe (if a failed attempt did
        commit, the next finds the task no longer ours). None: the database stayed
        unavailable."""
        try:
            return await retried(
                lambda: ledger.finish(target, values),
                where=f"task {task.id} outcome",
                within=self.settings.outcome_retry_seconds,
            )
        except TRANSIENT_ERRORS:
            return None

    async def _finish(self, task: Task, ledger: RunLedger, outcome: Ended) -> bool:
        """Write the outcome. False: not written, the run goes on (it would have
        completed with follow-ups unread)."""
        values: dict[str, Any]
        if isinstance(outcome, Completed):
            target = TaskState.COMPLETED
            values = {"result": outcome.result, "usage": outcome.usage}
        elif isinstance(outcome, NeedsInput):
            target = TaskState.INPUT_REQUIRED
            values = {
                "input_request": outcome.request,
                "usage": outcome.usage,
                "wake_at": outcome.deadline,  # an approval's deadline, or none
            }
        else:
            target = TaskState.FAILED
            values = {"error": outcome.error, "usage": outcome.usage}
            if outcome.result is not None:
                values["result"] = outcome.result
        # One fenced statement: the outcome, and the run's last messages before it.
        written = await self._write_outcome(task, ledger, target, values)
        if written is Finished.UNREAD:
            log.info("task %s: follow-ups arrived as it completed; the run goes on", task.id)
            return False
        if written is None:
            # Another worker runs it again now rather than after the lease.
            log.warning(
                "task %s: could not record the outcome for %.0f s; releasing it",
                task.id,
                self.settings.outcome_retry_seconds,
            )
            await self._release(task.id, ledger.lease, reason="outcome_unwritten")
            return True
        if written is Finished.LOST:
            log.info("task %s: outcome dropped, the task is no longer ours", task.id)
            return True
        # Parked parents resume when their last subtask finishes; a parent that just
        # parked may find its subtasks already done.
        if target is TaskState.FAILED:
            await self._end_subtasks(task, values["error"])
        if target.is_terminal and task.parent_id is not None:
            await self.ledger.subtask_ended(task.parent_id, task.id, target, values.get("error"))
        elif target is TaskState.INPUT_REQUIRED:
            await self.ledger.resume_parents(parent_id=task.id)
        return True


def _ended(outcome: Ended) -> str:
    """The run duration metric's outcome label."""
    if isinstance(outcome, Completed):
        return "completed"
    if isinstance(outcome, NeedsInput):
        return "input_required"
    return "timed_out" if outcome.error.get("type") == "timeout" else "failed"
