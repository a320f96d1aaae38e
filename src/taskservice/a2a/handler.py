"""The A2A operations on the use cases, independent of the transport and of the
protocol version: each takes a neutral request and answers with neutral views
(`a2a.shapes`), which `a2a.v03` and `a2a.v10` write on the wire.

A message starts a task (or, naming a task, answers its question or is queued for its
run); a task is read with its history (the ledger, `a2a.conversation`), cancelled, or
followed: the task, then an update per state it moves to (the result as an artifact
before `completed`), until a state that ends the stream; while the model writes the
answer, its text as artifact chunks. Following reads the task's event log through
`usecases/tasks.TaskService.follower`, as the REST stream and the long poll do.

Two modules are named `handler`, one per protocol binding, each the protocol's
operations on the same use cases with no transport: this one is A2A's; `mcp/handler.py`
is MCP's.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from taskservice.a2a.conversation import (
    SendRequest,
    context,
    history,
    input_of,
    last,
    message_key,
)
from taskservice.a2a.errors import A2AError, Kind
from taskservice.a2a.push import PushConfigs, webhook_request
from taskservice.a2a.shapes import ArtifactChunk, TaskUpdate, Update, View
from taskservice.common.metrics import EVENT_STREAMS
from taskservice.domain.agent_options import METADATA_KEYS
from taskservice.domain.budgets import check_max_cost, check_max_tokens
from taskservice.domain.errors import Conflict, InvalidRequest
from taskservice.domain.forks import ForkRequest
from taskservice.domain.ids import encode_status_cursor
from taskservice.domain.models import Delta, EventType, StatusQuery, Task, TaskEvent
from taskservice.domain.requests import TaskRequest
from taskservice.domain.states import TaskState
from taskservice.following.follower import moved_to
from taskservice.settings import Settings
from taskservice.usecases.inbox import TaskInbox
from taskservice.usecases.subscriptions import WebhookService
from taskservice.usecases.tasks import TaskService

# Events that change what a status says without a change of state: a pause.
_HOLDS = frozenset({EventType.PAUSED.value, EventType.RESUMED.value})
_CONTEXTS = uuid.UUID("5b0c2f0e-8d55-4b8a-9a57-3f6d2f1a2a00")  # names made-up contexts


def _refused(kind: Kind, task: Task, why: str) -> A2AError:
    """The error refusing what `task`'s state does not allow, naming the task and state."""
    return A2AError(
        kind, f"the task is {task.state.value}: {why}", taskId=str(task.id), state=task.state.value
    )


def _finished(task: Task) -> A2AError:
    return _refused(Kind.UNSUPPORTED_OPERATION, task, "it takes no more messages")


# Scheduling comes by metadata, named as on REST (`domain.schedules`).
# Task options A2A gives in the message's metadata, checked as the request is built.
_SCHEDULING = ("priority", "run_at", "max_cost", "max_tokens")


def _in_metadata(exc: InvalidRequest) -> InvalidRequest:
    """A refused `priority`, `run_at`, `max_cost` or `max_tokens` named where A2A gives
    it: in the metadata."""
    field = exc.extensions.get("field")
    if field not in _SCHEDULING:
        return exc
    return InvalidRequest(
        f"metadata.{exc.detail}", **{**exc.extensions, "field": f"metadata.{field}"}
    )


class A2AHandler:
    """One caller's A2A requests: a tenant and the use cases it acts through."""

    def __init__(
        self,
        tenant: str,
        *,
        service: TaskService,
        inbox: TaskInbox,
        webhooks: WebhookService | None,
        settings: Settings,
        who: str | None = None,
    ) -> None:
        self.tenant = tenant
        self.who = who  # who acts (`key:<id>`, `open`): a decision records it
        self.service = service
        self.inbox = inbox
        self.webhooks = webhooks
        self.settings = settings

    def pushes(self) -> PushConfigs:
        """The caller's push notification configs."""
        return PushConfigs(
            self.tenant,
            service=self.service,
            webhooks=self.webhooks,
            limit=self.settings.webhook_max_per_task,
        )

    async def deliver(self, request: SendRequest, *, quiet: bool = False) -> Task:
        """A message's task: a new one, or the task it names (answering its question,
        or queued for its run: `usecases/inbox.TaskInbox`). `quiet`: the sender does not
        stream, so a new task's model responses are not streamed until a stream asks for
        them (`Task.quiet`)."""
        message = request.message
        if message.role != "user":
            raise A2AError(
                Kind.INVALID_PARAMS,
                violations=[(("message", "role"), "a message to the agent is the user's")],
            )
        if message.task_id is not None:
            task = await self.find(message.task_id)
            if message.context_id is not None and message.context_id != context(task):
                raise A2AError(
                    Kind.INVALID_PARAMS,
                    violations=[(("message", "contextId"), "is not the context of the task")],
                )
            if task.state.is_terminal:
                raise _finished(task)
            # It answers the question the task waits on, or is queued for its run; a
            # retried message finds the one queued before.
            try:
                sent = await self.inbox.send_to(
                    task,
                    input=input_of(message.parts),
                    key=message_key(request),
                    via="a2a",
                    by=self.who,
                )
            except Conflict:
                task = await self.find(str(task.id))
                if task.state.is_terminal:  # it finished meanwhile
                    raise _finished(task) from None
                raise
            if request.push is not None:  # once the message is taken: a refusal sets nothing
                await self.pushes().create(str(task.id), request.push)
            return sent.task
        given = input_of(message.parts)
        key = message_key(request)
        options = {**request.metadata, **(message.metadata or {})}
        agent, model = options.get("agent"), options.get("model")
        if message.reference_task_ids:
            return await self._fork(request, given, key, options)
        try:
            new = TaskRequest(
                tenant=self.tenant,
                input=given,
                agent=agent if isinstance(agent, str) else None,
                model=model if isinstance(model, str) else None,
                # The original design's agent keys (`system_prompt`, `model_name`,
                # `config_name`) count as on REST: the use case applies them.
                metadata={
                    "a2a": {"messageId": message.message_id},
                    **{key: options[key] for key in METADATA_KEYS if key in options},
                },
                # A message without a context starts one, named after the message so
                # that a retry names the same one.
                context_id=message.context_id or str(uuid.uuid5(_CONTEXTS, key)),
                # A retried message finds the task it created.
                idempotency_key=key,
                # Committed with the task: no state change is missed.
                webhooks=[webhook_request(request.push)] if request.push is not None else (),
                # Scheduling by metadata: checked as the request is built.
                priority=options.get("priority", 0),
                run_at=options.get("run_at"),
                quiet=quiet,
                # Its budget by metadata too (unset: its profile's default).
                max_cost=options.get("max_cost"),
                max_tokens=options.get("max_tokens"),
            )
        except InvalidRequest as exc:
            raise _in_metadata(exc) from None
        return (await self.service.submit(new)).task

    async def _fork(
        self, request: SendRequest, given: Any, key: str, options: Mapping[str, Any]
    ) -> Task:
        """A new message that refers to a task (`referenceTaskIds`) continues it: the
        new task is a fork of it (`usecases/forks.py`), its history the referenced
        task's, then this message; `metadata.fork_at` forks it from an earlier
        position instead of its end. In the referenced task's context."""
        message = request.message
        if len(message.reference_task_ids) > 1:
            raise A2AError(
                Kind.INVALID_PARAMS,
                violations=[
                    (
                        ("message", "referenceTaskIds"),
                        "a new task continues one referenced task (it is a fork of it)",
                    )
                ],
            )
        source = await self.find(message.reference_task_ids[0])
        if message.context_id is not None and message.context_id != context(source):
            raise A2AError(
                Kind.INVALID_PARAMS,
                violations=[
                    (("message", "contextId"), "is not the context of the referenced task")
                ],
            )
        at = options.get("fork_at")
        if at is not None and (isinstance(at, bool) or not isinstance(at, int)):
            raise A2AError(
                Kind.INVALID_PARAMS,
                violations=[(("metadata", "fork_at"), "is a position: an integer")],
            )
        agent, model = options.get("agent"), options.get("model")
        try:  # a larger budget than the referenced task's: how one that ran out goes on
            max_cost = check_max_cost(options.get("max_cost"))
            max_tokens = check_max_tokens(options.get("max_tokens"))
        except InvalidRequest as exc:
            raise _in_metadata(exc) from None
        fork = ForkRequest(
            tenant=self.tenant,
            task_id=str(source.id),
            at=at,
            input=given,
            agent=agent if isinstance(agent, str) else None,
            model=model if isinstance(model, str) else None,
            idempotency_key=key,  # a retried message finds the fork it made
            message_key=key,  # its history shows the message under its id
            webhooks=[webhook_request(request.push)] if request.push is not None else (),
            max_cost=max_cost,
            max_tokens=max_tokens,
        )
        return (await self.service.fork(fork)).task

    async def send(self, request: SendRequest) -> View:
        """The message's task; when the request waits, once the task is finished or
        waits for input (or the wait cap has passed)."""
        # A sender that waits is not streamed to (its answer comes whole); one that
        # returns at once is about to follow the task, by a stream perhaps.
        task = await self.deliver(request, quiet=request.wait)
        if not request.wait:
            return await self.view(task, request.history_length)
        waited = self.settings.max_wait_seconds
        if request.history_length == 0:  # no history to answer with: the task alone
            return await self.view(await self.service.settle(task, waited), 0)
        # The settled task is read with its messages, in one round trip.
        task, rows = await self.service.settle_with_messages(task, waited)
        return await self.view(task, request.history_length, rows=rows)

    async def find(self, task_id: str) -> Task:
        return await self.service.get(tenant=self.tenant, task_id=task_id)

    async def subscribable(self, task_id: str) -> Task:
        """A task that is not finished, to follow to its end."""
        task = await self.find(task_id)
        if task.state.is_terminal:
            raise _refused(Kind.UNSUPPORTED_OPERATION, task, "there is nothing to subscribe to")
        return task

    async def view(
        self,
        task: Task,
        history_length: int | None,
        *,
        rows: Sequence[Mapping[str, Any]] | None = None,
    ) -> View:
        """`task` with the last `history_length` messages of its history (all when
        None): the ledger's `rows`, read with the task, or read here when some are
        asked for."""
        if history_length == 0:
            return View(task, [])
        if rows is None:
            rows = await self.service.conversation(task)
        queued = await self.inbox.unread(task)
        return View(task, last(history(task, rows, queued), history_length))

    async def get(self, task_id: str, history_length: int | None = None) -> View:
        return await self.view(await self.find(task_id), history_length)

    async def list_tasks(
        self, query: StatusQuery, *, page_size: int, history_length: int | None
    ) -> tuple[list[View], str, int]:
        """A page of the caller's tasks by status time, newest first, with the last
        `history_length` messages of each (none unless asked); the next page's
        token ("" after the last page); how many tasks match."""
        tasks, total = await self.service.list_by_status(
            tenant=self.tenant, query=query, limit=page_size + 1
        )
        page = tasks[:page_size]
        last = page[-1] if len(tasks) > page_size else None
        token = encode_status_cursor(last.status_at, last.id) if last is not None else ""
        length = history_length or 0
        views = [await self.view(task, length) for task in page]
        return views, token, total.value if total.value is not None else len(page)

    async def cancel(self, task_id: str) -> View:
        """Cancel a task that is not finished; a finished one (cancelled included) is
        not cancelable."""
        task = await self.find(task_id)
        if not task.state.is_terminal:
            try:
                task = await self.service.cancel(tenant=self.tenant, task_id=str(task.id))
            except Conflict:
                task = await self.find(task_id)
            else:
                return await self.view(task, None)
        raise _refused(Kind.TASK_NOT_CANCELABLE, task, "it can no longer be cancelled")

    async def updates(
        self, task: Task, *, history_length: int | None, ends: Callable[[TaskState], bool]
    ) -> AsyncIterator[Update]:
        """The task, then an update for each state it moves to (the result as an
        artifact update before `completed`), until a state that `ends` the stream;
        between them, the answer's text as the model writes it (`ArtifactChunk`)."""
        follow = self.service.follower.follow(tenant=self.tenant, task_id=task.id, deltas=True)
        chunks: tuple[int, int] | None = None  # the (attempt, position) chunks extend
        with EVENT_STREAMS.labels("a2a").track_inprogress():
            async with aclosing(follow) as changes:
                async for change in changes:
                    if isinstance(change, Task):  # the snapshot, read once following
                        yield await self.view(change, history_length)
                        if ends(change.state):
                            return
                        continue
                    if isinstance(change, Delta):
                        if change.kind != "text" or not change.text:
                            continue  # the answer is text; tool calls and thinking are not
                        message = (change.attempt, change.position)
                        yield ArtifactChunk(task, change.text, append=message == chunks)
                        chunks = message
                        continue
                    if isinstance(change, TaskEvent) and change.type in _HOLDS:
                        # Paused or resumed: the same state, said again with (or
                        # without) the status message saying it is paused.
                        current = await self.find(str(task.id))
                        if not current.state.is_terminal:
                            yield TaskUpdate(current, current.state)
                        continue
                    state = moved_to(change) if isinstance(change, TaskEvent) else None
                    if state is None:
                        continue
                    current = await self.find(str(task.id))
                    if state is TaskState.COMPLETED and current.state is TaskState.COMPLETED:
                        yield TaskUpdate(current, state, artifact=True)
                    yield TaskUpdate(current, state)
                    if ends(state):
                        return
