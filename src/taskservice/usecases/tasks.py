"""The use cases: submit (and spawn a subtask), get, list, cancel, pause and resume
(and the brake on an agent profile), wait for and follow a task, read the event log,
the conversation and the tool calls; messages to a task (answers and follow-ups) are
the inbox's (`usecases/inbox.TaskInbox`), a use case of its own.

Transport-independent: the REST routes and the A2A binding are thin adapters over
`TaskService`, and a running agent's subtasks go through it too. Every rule about
what a request may do lives here; every SQL statement lives in `db`.

Four modules are named `tasks`: this one is the use case (`TaskService`); the tasks'
SQL is `db/tasks.py`, the REST routes over this one `api/routes/tasks.py`, and how
MCP shows a task `mcp/tasks.py`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

from taskservice.agents.catalog import AgentCatalog
from taskservice.agents.profiles import AgentProfile
from taskservice.common.tracing import Tracing
from taskservice.db.eventlog import EventLog
from taskservice.db.overview import OverviewStore
from taskservice.db.pauses import PauseStore
from taskservice.db.retention import RetentionStore
from taskservice.db.sql import Row
from taskservice.db.steps import LedgerStore
from taskservice.db.tasks import AlsoWrite, TaskStore
from taskservice.db.usage import Counts, Report, UsageStore
from taskservice.domain.content import check_new_task, field_json
from taskservice.domain.errors import Conflict, InvalidRequest, NotFound
from taskservice.domain.forks import ForkRequest
from taskservice.domain.ids import decode_cursor, encode_cursor, parse_uuid
from taskservice.domain.models import (
    AgentSpec,
    CountMode,
    EventFilter,
    EventPage,
    NewTask,
    StatusQuery,
    Task,
    TaskEvent,
    TaskFilter,
    TaskPage,
    Total,
)
from taskservice.domain.requests import TaskRequest
from taskservice.domain.states import TaskState
from taskservice.domain.webhooks import Subscription
from taskservice.following.deltas import LiveFeed
from taskservice.following.follower import TaskFollower, moved_to
from taskservice.following.hub import TaskWatchers
from taskservice.settings import Settings
from taskservice.usecases.forks import fork_submit
from taskservice.usecases.submission import NewTasks
from taskservice.usecases.subscriptions import WebhookService


@dataclass(frozen=True, slots=True)
class Brake:
    """An agent profile held for a tenant (`TaskService.pause_agent`): who pulled the
    brake, when, why; `tasks`: how many tasks the last change paused or let go."""

    profile: str
    by: str
    at: datetime
    reason: str | None
    tasks: int = 0


@dataclass(frozen=True, slots=True)
class Submitted:
    """What a submit made: the task; whether it was created (False: the idempotency
    key's task from before); the task's webhooks, with their secrets."""

    task: Task
    created: bool
    webhooks: tuple[Subscription, ...] = ()


# A cancel re-reads and retries when the task moved under it; the state machine has
# few enough states that a handful of rounds always settles.
_CANCEL_ROUNDS = 8


def _settles(state: TaskState | None, *, finished: bool = False) -> bool:
    """Nothing more happens to a task in `state` without someone acting on it (with
    `finished`: nothing more happens to it at all)."""
    if state is None:
        return False
    return state.is_terminal or (not finished and state is TaskState.INPUT_REQUIRED)


class TaskService:
    def __init__(
        self,
        *,
        store: TaskStore,
        log: EventLog,
        ledger: LedgerStore,
        catalog: AgentCatalog,
        settings: Settings,
        watchers: TaskWatchers | None = None,
        webhooks: WebhookService | None = None,
        live: LiveFeed | None = None,
        tracing: Tracing | None = None,
        new_tasks: NewTasks | None = None,
    ) -> None:
        self._tracing = tracing or Tracing(False)
        self._watchers = watchers
        self._follower = (
            TaskFollower(store=store, log=log, watchers=watchers, settings=settings, live=live)
            if watchers is not None
            else None
        )
        self._webhooks = webhooks
        self._store = store
        self._pauses = PauseStore(store.db)
        self._log = log
        self._ledger = ledger
        self._catalog = catalog
        self._settings = settings
        self._new_tasks = new_tasks or NewTasks(
            store=store, catalog=catalog, settings=settings, tracing=self._tracing
        )

    async def submit(self, request: TaskRequest) -> Submitted:
        """Create a pending task, or (`Submitted.created` False) find the one the
        idempotency key was used for before with the same request.

        `request.webhooks` become the task's own subscriptions, committed with the
        task, so no state change can happen before they exist; they come back with
        their secrets (a replay reads them again: it answers the same request as
        before). Everything else is checked by `NewTasks.prepare`, whichever
        transport built the request."""
        if request.webhooks and self._webhooks is None:
            raise InvalidRequest("webhooks are not available here", field="webhooks")
        new = await self._new_tasks.prepare(request)
        if not request.webhooks or self._webhooks is None:
            task, created = await self._create(new)
            return Submitted(task, created)
        webhooks = self._webhooks
        prepared = await webhooks.prepare_all(request.webhooks)
        made: list[Subscription] = []

        async def subscribe(conn: Any, task_id: uuid.UUID) -> None:
            made[:] = await webhooks.insert_for_task(
                conn, tenant=request.tenant, task_id=task_id, prepared=prepared
            )

        task, created = await self._create(new, also=subscribe)
        if not created:
            subs = await webhooks.subscriptions(
                tenant=task.tenant, task_id=task.id, before=None, limit=100
            )
            made = subs[::-1]  # oldest first, as registered
        return Submitted(task, created, tuple(made))

    async def fork(self, request: ForkRequest) -> Submitted:
        """A new task from the first `request.at` messages of the caller's task
        `request.task_id` (`usecases/forks.py`): created as a submit is, its ledger
        copied in the same transaction. The source is only read."""
        source = await self.get(tenant=request.tenant, task_id=request.task_id)
        rows = await self._ledger.all_messages(source.id)
        messages = [row["message"] for row in rows]
        return await self.submit(
            fork_submit(request, source, messages, catalog=self._catalog, settings=self._settings)
        )

    async def spawn(
        self,
        parent: Task,
        *,
        call_id: str,
        input: str,
        system_prompt: str | None = None,
        detached: bool = False,
        profile: str | None = None,
    ) -> Task:
        """A subtask a running agent starts (its `spawn_subtask` tool): checked like any
        submit; it inherits the parent's tenant, agent, context, limits and priority
        (a parent waiting on it must not wait behind its own backlog). One subtask
        per tool call: a call executed again (a resumed run) gets the same child.
        `detached`: it is not cancelled when the parent fails or is cancelled.
        `profile`: the subtask is of that agent profile instead (`ask_agent`)."""
        metadata = {"spawned_by": {"task_id": str(parent.id), "tool_call_id": call_id}}
        check_new_task(input, metadata, (system_prompt,), self._settings)
        agent = parent.agent
        if profile is not None:
            agent = self._catalog.resolve(profile=profile)  # unknown: InvalidRequest
        if system_prompt:
            agent = AgentSpec(agent.profile, agent.model, system_prompt)
        new = NewTask(
            tenant=parent.tenant,
            input=input,
            agent=agent,
            metadata=metadata,
            max_attempts=parent.max_attempts,
            timeout_seconds=parent.timeout_seconds,
            parent_id=parent.id,
            context_id=parent.context_id,
            idempotency_key=f"subtask:{parent.id}:{call_id}",
            detached=detached,
            trace_context=self._tracing.carrier(),  # the parent's run: one trace
            priority=parent.priority,
            quiet=parent.quiet,  # streamed if its parent is
        )
        task, _ = await self._create(new)
        return task

    async def _create(self, new: NewTask, *, also: AlsoWrite | None = None) -> tuple[Task, bool]:
        task, created = await self._store.create(new, also=also)
        if not created and task.request_hash != new.request_hash:
            raise Conflict(
                "this Idempotency-Key was already used with a different request",
                task_id=str(task.id),
            )
        return task, created

    async def get(self, *, tenant: str, task_id: str | uuid.UUID) -> Task:
        parsed = task_id if isinstance(task_id, uuid.UUID) else parse_uuid(task_id)
        task = await self._store.get(parsed, tenant=tenant) if parsed else None
        if task is None:
            raise NotFound(f"task {task_id} not found")
        return task

    @property
    def follower(self) -> TaskFollower:
        """Follows a task: the snapshot, then its events as they commit."""
        if self._follower is None:
            raise RuntimeError("this service was built without the event hub's watchers")
        return self._follower

    async def wait(self, *, tenant: str, task_id: str, seconds: float) -> Task:
        """Long poll: the task as soon as it is finished or waits for input, else as it
        is when `seconds` (capped) have passed. Woken by the event hub, not a loop."""
        return await self.settle(await self.get(tenant=tenant, task_id=task_id), seconds)

    async def settle(
        self,
        task: Task,
        seconds: float,
        *,
        finished: bool = False,
        on_event: Callable[[TaskEvent], Awaitable[None]] | None = None,
    ) -> Task:
        """`wait` for a task the caller has just read (or created); with `finished`,
        through waits for input, until it ends. `on_event` sees each event meanwhile
        (an MCP call's progress)."""
        if self._follower is None or seconds <= 0 or _settles(task.state, finished=finished):
            return task
        deadline = self._deadline(seconds)
        if on_event is None:  # the state is enough: no read of the event log

            async def read() -> tuple[Task, None] | None:
                fresh = await self._store.get(task.id, tenant=task.tenant)
                return (fresh, None) if fresh is not None else None

            settled, _ = await self._follower.until_settled(
                task,
                deadline=deadline,
                settles=lambda state: _settles(state, finished=finished),
                read=read,
            )
            return settled
        follow = self._follower.follow(tenant=task.tenant, task_id=task.id, deadline=deadline)
        async with aclosing(follow) as updates:
            async for update in updates:
                if isinstance(update, Task):
                    if _settles(update.state, finished=finished):
                        return update
                elif isinstance(update, TaskEvent):
                    if on_event is not None:
                        await on_event(update)
                    if _settles(moved_to(update), finished=finished):
                        break
        return await self.get(tenant=task.tenant, task_id=task.id)

    async def settle_with_messages(
        self, task: Task, seconds: float
    ) -> tuple[Task, list[dict[str, Any]] | None]:
        """`settle`, reading the task's ledger messages (`position`, `message`) with
        its last state in one statement: None when the task was not read again (it
        had settled already, or there was no time to wait)."""
        if self._follower is None or seconds <= 0 or _settles(task.state):
            return task, None
        return await self._follower.until_settled(
            task,
            deadline=self._deadline(seconds),
            settles=_settles,
            read=lambda: self._store.get_with_messages(task.id, tenant=task.tenant),
        )

    def _deadline(self, seconds: float) -> float:
        """The loop time at which a wait of `seconds` (capped) ends."""
        return asyncio.get_running_loop().time() + min(seconds, self._settings.max_wait_seconds)

    async def list_tasks(
        self,
        *,
        tenant: str,
        filter: TaskFilter,
        cursor: str | None = None,
        limit: int | None = None,
        count: CountMode | None = None,
    ) -> TaskPage:
        """A page, newest first; with `count`, how many tasks the filter matches."""
        size = self.page_size(limit)
        before = decode_cursor(cursor) if cursor else None
        rows = await self._store.list_tasks(
            tenant=tenant, filter=filter, before_id=before, limit=size + 1
        )
        more = len(rows) > size
        page = rows[:size]
        total = None
        if count is not None:
            total = await self._store.count_tasks(
                tenant=tenant, filter=filter, mode=count, timeout_ms=self._settings.count_timeout_ms
            )
        return TaskPage(page, encode_cursor(page[-1].id) if more else None, total)

    async def list_by_status(
        self, *, tenant: str, query: StatusQuery, limit: int
    ) -> tuple[list[Task], Total]:
        """A page by status time, newest first (A2A's ListTasks), and the total."""
        timeout = self._settings.count_timeout_ms
        return await self._store.list_by_status(
            tenant=tenant, query=query, limit=limit, timeout_ms=timeout
        )

    async def cancel(self, *, tenant: str, task_id: str, reason: str | None = None) -> Task:
        """Cancel a pending, running or input_required task.

        Cancelling a cancelled task is a no-op; any other terminal state is a 409.
        The state is written at once, with every live task below it, and their open
        tool calls are closed; a worker running one of them learns of it and stops.
        """
        field_json("reason", reason)
        for _ in range(_CANCEL_ROUNDS):
            task = await self.get(tenant=tenant, task_id=task_id)
            if task.state is TaskState.CANCELLED:
                return task
            if task.state.is_terminal:
                raise Conflict(
                    f"task is already {task.state.value} and cannot be cancelled",
                    state=task.state.value,
                )
            cancelled = await self._store.cancel(
                task.id, source=task.state, tenant=tenant, reason=reason
            )
            if cancelled is not None:
                if cancelled.parent_id is not None:  # a parked parent may now resume
                    parent, reason = cancelled.parent_id, cancelled.cancel_reason
                    await self._ledger.subtask_ended(parent, cancelled.id, cancelled.state, reason)
                return cancelled
        raise Conflict("the task kept changing state; retry the cancel")

    async def pause(self, *, tenant: str, task_id: str, by: str, reason: str | None = None) -> Task:
        """Hold a live task: it is not claimed until resumed; a worker running it gives
        it back (a model request in flight abandoned, a tool call in flight finished
        first); one waiting for input waits on. Pausing a paused task is a no-op; a
        finished task is a 409."""
        field_json("reason", reason)
        task = await self.get(tenant=tenant, task_id=task_id)
        paused = await self._pauses.pause(task.id, tenant=tenant, by=by, reason=reason)
        if paused is not None:
            return paused
        return self._unchanged(await self.get(tenant=tenant, task_id=task.id), "paused")

    async def resume(self, *, tenant: str, task_id: str, by: str) -> Task:
        """Let a paused task go: it is claimable again (a `resumed` event wakes the
        workers), and its run goes on from its ledger. Resuming a task that is not
        paused is a no-op; a finished task is a 409. A task its profile's brake holds
        may be resumed alone: it runs while the brake holds the others."""
        task = await self.get(tenant=tenant, task_id=task_id)
        resumed = await self._pauses.resume(task.id, tenant=tenant, by=by)
        if resumed is not None:
            return resumed
        return self._unchanged(await self.get(tenant=tenant, task_id=task.id), "resumed")

    @staticmethod
    def _unchanged(task: Task, verb: str) -> Task:
        """A pause or resume that changed nothing: the task as it is, unless it is
        finished (a 409)."""
        if task.state.is_terminal:
            raise Conflict(
                f"task is already {task.state.value} and cannot be {verb}",
                state=task.state.value,
            )
        return task

    async def brakes(self, *, tenant: str) -> dict[str, Brake]:
        """The tenant's agent profiles held by the brake, by name."""
        return {name: _brake(row) for name, row in (await self._pauses.brakes(tenant)).items()}

    async def pause_agent(
        self, *, tenant: str, profile: str, by: str, reason: str | None = None
    ) -> Brake:
        """The operators' brake: pause every live task of the profile for the tenant,
        and hold the tasks submitted to it from now on (created paused), until
        `resume_agent`. Pulling a pulled brake is a no-op (`tasks` 0)."""
        field_json("reason", reason)
        self._known_profile(profile)
        row, swept = await self._pauses.pull_brake(
            tenant=tenant, profile=profile, by=by, reason=reason
        )
        return _brake(row, swept)

    async def resume_agent(self, *, tenant: str, profile: str, by: str) -> Brake | None:
        """Release the brake: every task it paused is resumed (a task paused alone
        stays paused). None when the profile was not held (a no-op)."""
        self._known_profile(profile)
        released = await self._pauses.release_brake(tenant=tenant, profile=profile, by=by)
        if released is None:
            return None
        row, swept = released
        return _brake(row, swept)

    def _known_profile(self, name: str) -> None:
        if self._catalog.profile(name) is None:
            raise NotFound(f"agent profile {name!r} not found")

    async def end_subtasks(self, parent_id: uuid.UUID, *, timed_out: bool) -> int:
        """The parent failed (or timed out): cancel its live subtasks, but those spawned
        detached, with theirs (cause `parent_failed`, `parent_timeout`)."""
        return await self._store.cancel_subtasks(
            parent_id,
            cause="parent_timeout" if timed_out else "parent_failed",
            reason=f"its parent task {'timed out' if timed_out else 'failed'}",
        )

    async def events_pruned_before(self) -> int:
        """Events with a lower id may have been deleted by retention (0: none was)."""
        return await RetentionStore(self._store.db).events_pruned_before()

    async def queue(self) -> dict[str, Any]:
        """The whole service's queue, every tenant's (the metrics' gauges)."""
        return await OverviewStore(self._store.db).queue()

    async def overview(self, *, tenant: str, minutes: int) -> dict[str, Any]:
        """The tenant's tasks at a glance (`db.overview`): live states, what finished
        per minute, the workers holding its tasks, the webhook outbox."""
        return await OverviewStore(self._store.db).read(tenant, minutes=minutes)

    async def usage(
        self,
        *,
        tenant: str,
        since: date,
        until: date,
        group_by: tuple[str, ...] = (),
        agent: str | None = None,
        model: str | None = None,
        limit: int = 100,
    ) -> Report:
        """What the tenant's model requests spent from `since` to `until` (UTC days,
        both included), in total and grouped (`db/usage.py`: from the rollup kept as
        usage is written)."""
        if since > until:
            raise InvalidRequest(f"`from` ({since}) is after `to` ({until})")
        return await UsageStore(self._store.db).report(
            tenant=tenant,
            since=since,
            until=until,
            group_by=group_by,
            agent=agent,
            model=model,
            limit=limit,
        )

    async def subtree_usage(self, task: Task) -> tuple[int, Counts]:
        """What the task and every task below it spent together, and how many they
        are."""
        return await UsageStore(self._store.db).subtree(task.id, tenant=task.tenant)

    async def firehose_page(
        self, *, tenant: str, after: int, upto: int, filter: EventFilter
    ) -> list[TaskEvent]:
        """The tenant's events after `after` up to the watermark `upto`, in order."""
        return await self._log.firehose(
            tenant=tenant, after=after, upto=upto, filter=filter, limit=self._settings.max_page_size
        )

    async def messages(
        self,
        *,
        tenant: str,
        task_id: str,
        after: int = -1,
        limit: int | None = None,
        count: CountMode | None = None,
    ) -> tuple[list[Row], int | None, Total | None]:
        task = await self.get(tenant=tenant, task_id=task_id)
        size = self.page_size(limit)
        rows = await self._ledger.messages(task.id, after=after, limit=size)
        next_after = rows[-1]["position"] if len(rows) == size else None
        return rows, next_after, await self._count_steps("messages", task.id, count)

    async def calls(
        self,
        *,
        tenant: str,
        task_id: str,
        after: int = 0,
        limit: int | None = None,
        count: CountMode | None = None,
    ) -> tuple[list[Row], int | None, Total | None]:
        task = await self.get(tenant=tenant, task_id=task_id)
        size = self.page_size(limit)
        rows = await self._ledger.calls(task.id, after=after, limit=size)
        next_after = rows[-1]["id"] if len(rows) == size else None
        return rows, next_after, await self._count_steps("calls", task.id, count)

    async def _count_steps(
        self, table: Literal["messages", "calls"], task_id: uuid.UUID, mode: CountMode | None
    ) -> Total | None:
        if mode is None:
            return None
        timeout = self._settings.count_timeout_ms
        return await self._ledger.count(table, task_id, mode=mode, timeout_ms=timeout)

    def profiles(self) -> list[AgentProfile]:
        """The agent profiles a task may name, by name."""
        return sorted(self._catalog.profiles.values(), key=lambda p: p.name)

    def profile(self, name: str) -> AgentProfile | None:
        return self._catalog.profile(name)

    async def conversation(self, task: Task) -> list[Row]:
        """All the messages of the task's run, in order (its ledger)."""
        return await self._ledger.all_messages(task.id)

    def page_size(self, limit: int | None) -> int:
        return min(limit or self._settings.default_page_size, self._settings.max_page_size)

    async def events(
        self,
        *,
        tenant: str,
        task_id: str,
        after: int = 0,
        limit: int | None = None,
        types: frozenset[str] = frozenset(),
    ) -> EventPage:
        task = await self.get(tenant=tenant, task_id=task_id)
        size = self.page_size(limit)
        events = await self._log.page(task.id, after=after, limit=size, types=types)
        return EventPage(events, events[-1].seq if len(events) == size else None)


def _brake(row: Row, tasks: int = 0) -> Brake:
    return Brake(
        profile=row["profile"],
        by=row["paused_by"],
        at=row["at"],
        reason=row["reason"],
        tasks=tasks,
    )
