"""`/v1/tasks`: submit, get, list, cancel, pause and resume, messages to a task, and
what it recorded (the event log, the conversation, the tool calls)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Header, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from taskservice.api import streams
from taskservice.api.deps import Caller, Reader, get_caller
from taskservice.api.errors import problem_responses
from taskservice.api.message_schemas import FollowupIn, InputGiven, MessageSent
from taskservice.api.params import INT32_MAX, INT64_MAX, Count, Timestamp
from taskservice.api.schemas import (
    CallOut,
    CallPage,
    CancelRequest,
    EventOut,
    EventPage,
    MessageOut,
    MessagePage,
    PauseRequest,
    TaskCreate,
    TaskCreated,
    TaskFork,
    TaskList,
    WebhookWithSecret,
)
from taskservice.api.sse import SSE_CONTENT
from taskservice.domain.content import IDEMPOTENCY_KEY_MAX_LENGTH
from taskservice.domain.errors import Forbidden, InvalidRequest
from taskservice.domain.models import EventType, TaskFilter
from taskservice.domain.states import TaskState
from taskservice.domain.views import TaskOut
from taskservice.usecases.tasks import Submitted

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])

TaskId = Annotated[str, "a task id (UUID)"]


IDEMPOTENCY_KEY = {
    "name": "idempotency-key",
    "in": "header",
    "required": False,
    "description": "Makes retries safe: the same key and body return the same task.",
    "schema": {"type": "string", "minLength": 1, "maxLength": IDEMPOTENCY_KEY_MAX_LENGTH},
}


def idempotency_key(request: Request) -> str | None:
    """The `Idempotency-Key` header, read here rather than as a `Header()` parameter:
    FastAPI resolves a header parameter at a cost the submit path notices."""
    key = request.headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX_LENGTH:
        raise RequestValidationError(
            [
                {
                    "loc": ("header", "idempotency-key"),
                    "msg": f"must be 1 to {IDEMPOTENCY_KEY_MAX_LENGTH} characters",
                    "type": "string_length",
                }
            ]
        )
    return key


def json_response(
    model: BaseModel, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """The model as JSON, bypassing FastAPI's re-validation of the route's own return
    value (the route's `response_model` still documents it)."""
    return Response(
        model.model_dump_json(by_alias=True),
        status_code=status_code,
        headers=headers,
        media_type="application/json",
    )


@router.post(
    "",
    operation_id="createTask",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskCreated,
    responses={
        200: {"model": TaskCreated, "description": "Idempotent replay: the task created before"},
        **problem_responses(400, 401, 409, 413, 415, 422),
    },
    summary="Submit a task",
    openapi_extra={"parameters": [IDEMPOTENCY_KEY]},
)
async def create_task(body: TaskCreate, request: Request) -> Response:
    caller = await get_caller(request)
    submitted = await caller.service.submit(body.request(caller.tenant, idempotency_key(request)))
    return _created(submitted)


def _created(submitted: Submitted) -> Response:
    """A created task's answer (201), or an idempotent replay's (200)."""
    task = submitted.task
    headers = {"Location": f"/v1/tasks/{task.id}"}
    if not submitted.created:
        headers["Idempotent-Replayed"] = "true"
    out = TaskCreated.of(task)
    # A replay shows the secrets again: it answers the same request as before.
    out.webhooks = [WebhookWithSecret.of(sub) for sub in submitted.webhooks]
    status_code = status.HTTP_201_CREATED if submitted.created else status.HTTP_200_OK
    return json_response(out, status_code, headers)


@router.get(
    "",
    operation_id="listTasks",
    response_model=TaskList,
    responses=problem_responses(401, 422),
    summary="List tasks, newest first",
)
async def list_tasks(
    caller: Caller,
    state: Annotated[list[TaskState], Query(description="Repeat to match any of several.")] = [],  # noqa: B006
    parent_id: uuid.UUID | None = None,
    context_id: str | None = None,
    agent: Annotated[
        str | None, Query(max_length=200, description="Only tasks of this agent profile.")
    ] = None,
    forked_from: Annotated[
        uuid.UUID | None, Query(description="Only the forks of this task.")
    ] = None,
    created_after: Timestamp | None = None,
    created_before: Timestamp | None = None,
    paused: Annotated[
        bool | None,
        Query(description="true: only paused tasks; false: only tasks that are not paused."),
    ] = None,
    cursor: str | None = None,
    limit: Annotated[int | None, Query(ge=1, description="Capped by the server.")] = None,
    count: Count = None,
) -> TaskList:
    page = await caller.service.list_tasks(
        tenant=caller.tenant,
        filter=TaskFilter(
            states=frozenset(state),
            parent_id=parent_id,
            context_id=context_id,
            created_after=created_after,
            created_before=created_before,
            agent=agent,
            forked_from=forked_from,
            paused=paused,
        ),
        cursor=cursor,
        limit=limit,
        count=count,
    )
    tasks = [TaskOut.of(t) for t in page.tasks]
    return TaskList(tasks=tasks, next_cursor=page.next_cursor).counted(page.total)


@router.get(
    "/{task_id}",
    operation_id="getTask",
    response_model=TaskOut,
    responses=problem_responses(401, 404),
    summary="Get a task",
)
async def get_task(
    task_id: TaskId,
    caller: Caller,
    wait: Annotated[
        float,
        Query(
            ge=0,
            allow_inf_nan=False,
            description="Long poll: answer as soon as the task is finished or waits for "
            "input, or after this many seconds (capped by the server).",
        ),
    ] = 0,
) -> Response:
    if wait:
        task = await caller.service.wait(tenant=caller.tenant, task_id=task_id, seconds=wait)
    else:
        task = await caller.service.get(tenant=caller.tenant, task_id=task_id)
    out = TaskOut.of(task)
    tasks, spent = await caller.service.subtree_usage(task)
    if tasks > 1:  # it has subtasks: what they spent with it
        out.usage = {**out.usage, "subtree": {**spent.shown(), "tasks": tasks}}
    return json_response(out)


@router.post(
    "/{task_id}/cancel",
    operation_id="cancelTask",
    response_model=TaskOut,
    responses=problem_responses(400, 401, 404, 409, 413, 415, 422),
    summary="Cancel a task",
)
async def cancel_task(
    task_id: TaskId,
    caller: Caller,
    body: Annotated[CancelRequest | None, Body()] = None,
) -> TaskOut:
    reason = body.reason if body else None
    return TaskOut.of(
        await caller.service.cancel(tenant=caller.tenant, task_id=task_id, reason=reason)
    )


@router.post(
    "/{task_id}/fork",
    operation_id="forkTask",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskCreated,
    responses={
        200: {"model": TaskCreated, "description": "Idempotent replay: the fork created before"},
        **problem_responses(400, 401, 404, 409, 413, 415, 422),
    },
    summary="Fork a task from a step of its conversation",
    description="A new task (in the source's tenant and context) whose conversation "
    "begins as the source's first `at` messages, with the finished tool calls among "
    "them, and whose run continues from there: no tool call before `at` runs again, "
    "everything after runs anew. The source is not changed, whatever its state. Its "
    "forks are listed by `GET /v1/tasks?forked_from={task_id}`.",
    openapi_extra={"parameters": [IDEMPOTENCY_KEY]},
)
async def fork_task(
    task_id: TaskId,
    request: Request,
    body: Annotated[TaskFork | None, Body()] = None,
) -> Response:
    caller = await get_caller(request)
    fork = (body or TaskFork()).request(caller.tenant, task_id, idempotency_key(request))
    submitted = await caller.service.fork(fork)
    return _created(submitted)


@router.post(
    "/{task_id}/pause",
    operation_id="pauseTask",
    response_model=TaskOut,
    responses=problem_responses(400, 401, 403, 404, 409, 413, 415, 422),
    summary="Pause a task",
    description="Holds the task (its `paused` field says who, when and why) without "
    "changing its state: a pending or scheduled task is not claimed; a running task "
    "gives its worker back within a second or so (a model request in flight is "
    "abandoned, a tool call in flight finishes and is recorded first), keeping its "
    "ledger; a task waiting for input waits on, and once answered runs only when "
    "resumed. Its time paused does not count against `timeout_seconds`. Pausing a "
    "paused task is a no-op; a finished task is a 409.",
)
async def pause_task(
    task_id: TaskId,
    caller: Caller,
    body: Annotated[PauseRequest | None, Body()] = None,
) -> TaskOut:
    reason = body.reason if body else None
    return TaskOut.of(
        await caller.service.pause(
            tenant=caller.tenant, task_id=task_id, by=caller.who, reason=reason
        )
    )


@router.post(
    "/{task_id}/resume",
    operation_id="resumeTask",
    response_model=TaskOut,
    responses=problem_responses(401, 403, 404, 409),
    summary="Resume a paused task",
    description="Lets the task go: it is claimable again at once, and its run goes on "
    "from its ledger, repeating no finished tool call. Resuming a task that is not "
    "paused is a no-op; a finished task is a 409. A task held by its profile's brake "
    "may be resumed on its own.",
)
async def resume_task(task_id: TaskId, caller: Caller) -> TaskOut:
    return TaskOut.of(
        await caller.service.resume(tenant=caller.tenant, task_id=task_id, by=caller.who)
    )


@router.get(
    "/{task_id}/events",
    operation_id="listTaskEvents",
    response_model=EventPage,
    responses={
        200: {
            "description": "JSON pages, or with `Accept: text/event-stream` a live stream: "
            "a `snapshot` of the task, then every event after `Last-Event-ID` (or `after`) "
            "with the SSE `id` set to its seq, ending after the terminal state change "
            "(also when `type` leaves state changes out). Between them, `delta` events "
            "(no `id`: they are not in the log) carry the model response being written "
            "(`DeltaOut`): on opening, the text so far of the message in progress, then "
            "each piece as it streams.",
            "content": SSE_CONTENT,
        },
        **problem_responses(401, 403, 404, 422),
    },
    summary="Read or stream a task's event log",
)
async def list_task_events(
    task_id: TaskId,
    caller: Reader,
    request: Request,
    after: Annotated[
        int, Query(ge=0, le=INT32_MAX, description="Return events with seq > after.")
    ] = 0,
    limit: Annotated[int | None, Query(ge=1, description="Capped by the server.")] = None,
    type: Annotated[
        list[EventType | Literal["delta"]],
        Query(
            description="Only events of these types (repeatable). `delta`: the live output "
            "of a stream (never in the log, so never on a JSON page)."
        ),
    ] = [],  # noqa: B006
    last_event_id: Annotated[
        int | None,
        Header(ge=0, le=INT32_MAX, description="SSE resumption: the last seq received."),
    ] = None,
) -> EventPage | Response:
    types = frozenset(str(t) for t in type)
    if "text/event-stream" in request.headers.get("accept", ""):
        task = await caller.service.get(tenant=caller.tenant, task_id=task_id)  # 404 first
        return streams.event_stream(
            streams.task_events(
                caller,
                task.id,
                after=last_event_id if last_event_id is not None else after,
                types=types,
            ),
            caller.settings,
            pings=False,  # task_events sends its own, from the watchers' shared ticker
        )
    if caller.via_token:
        raise Forbidden(
            "a stream token opens event streams only: send `Accept: text/event-stream`, "
            "or read the JSON pages with an API key"
        )
    page = await caller.service.events(
        tenant=caller.tenant, task_id=task_id, after=after, limit=limit, types=types
    )
    return EventPage(events=[EventOut.of(e) for e in page.events], next_after=page.next_after)


@router.post(
    "/{task_id}/input",
    operation_id="provideTaskInput",
    response_model=TaskOut,
    responses=problem_responses(400, 401, 404, 409, 413, 415, 422),
    summary="Answer a task that waits for input, or decide on its tool calls",
)
async def provide_task_input(task_id: TaskId, body: InputGiven, caller: Caller) -> TaskOut:
    if body.approvals is not None:
        if body.answer is not None:
            raise InvalidRequest("with `approvals`, answer questions by id (`answers`)")
        task = await caller.inbox.approvals.decide(
            tenant=caller.tenant,
            task_id=task_id,
            approvals={
                call: decision.model_dump(exclude_none=True)
                for call, decision in body.approvals.items()
            },
            answers=body.answers,
            by=caller.who,
        )
        return TaskOut.of(task)
    task = await caller.inbox.answer(
        tenant=caller.tenant, task_id=task_id, answers=body.answers, answer=body.answer
    )
    return TaskOut.of(task)


@router.post(
    "/{task_id}/messages",
    operation_id="sendTaskMessage",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=MessageSent,
    responses={
        200: {"model": MessageSent, "description": "Idempotent replay: the message sent before"},
        **problem_responses(400, 401, 404, 409, 413, 415, 422),
    },
    summary="Send a message to a task: an answer, or a follow-up for its run",
    description="A task waiting for the answer to one question takes the message as the "
    "answer. A pending or running task (or one waiting for its subtasks) queues it: its run "
    "reads it at its next model request, as a user message of the same conversation, and "
    "does not complete before it has. A finished task refuses it (409).",
    openapi_extra={"parameters": [IDEMPOTENCY_KEY]},
)
async def send_task_message(task_id: TaskId, body: FollowupIn, request: Request) -> Response:
    caller = await get_caller(request)
    sent = await caller.inbox.send(
        tenant=caller.tenant,
        task_id=task_id,
        input=body.input,
        key=idempotency_key(request),
        by=caller.who,
    )
    out = MessageSent.of(TaskOut.of(sent.task), sent.followup)
    if sent.replayed:
        return json_response(out, status.HTTP_200_OK, {"Idempotent-Replayed": "true"})
    return json_response(out, status.HTTP_202_ACCEPTED)


@router.get(
    "/{task_id}/messages",
    operation_id="listTaskMessages",
    response_model=MessagePage,
    responses=problem_responses(401, 404, 422),
    summary="Read the agent conversation",
)
async def list_task_messages(
    task_id: TaskId,
    caller: Caller,
    after: Annotated[
        int, Query(ge=-1, le=INT32_MAX, description="Messages with position > after.")
    ] = -1,
    limit: Annotated[int | None, Query(ge=1, description="Capped by the server.")] = None,
    count: Count = None,
) -> MessagePage:
    rows, next_after, total = await caller.service.messages(
        tenant=caller.tenant, task_id=task_id, after=after, limit=limit, count=count
    )
    page = MessagePage(messages=[MessageOut(**dict(r)) for r in rows], next_after=next_after)
    return page.counted(total)


@router.get(
    "/{task_id}/calls",
    operation_id="listTaskCalls",
    response_model=CallPage,
    responses=problem_responses(401, 404, 422),
    summary="Read the task's tool calls",
)
async def list_task_calls(
    task_id: TaskId,
    caller: Caller,
    after: Annotated[int, Query(ge=0, le=INT64_MAX, description="Calls with id > after.")] = 0,
    limit: Annotated[int | None, Query(ge=1, description="Capped by the server.")] = None,
    count: Count = None,
) -> CallPage:
    rows, next_after, total = await caller.service.calls(
        tenant=caller.tenant, task_id=task_id, after=after, limit=limit, count=count
    )
    return CallPage(calls=[CallOut(**dict(r)) for r in rows], next_after=next_after).counted(total)
