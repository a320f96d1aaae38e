"""The A2A binding (protocol 0.3, JSON-RPC 2.0): the agent card and `POST /a2a`.

Another agent talks to taskservice as to any A2A agent: `message/send` starts a
task (or, with `taskId`, answers the task that waits for input), `tasks/get` and
`tasks/cancel` follow it; `message/stream` and `tasks/resubscribe` answer with SSE:
the task, then a status update per state it moves to, read from its event log and
woken by the event hub like the REST event stream, until the final one (terminal,
or waiting for input). The methods run on the same service as the REST API, so
tenants, limits, idempotency and the state machine are the same. Push notification
configs are not built (they answer A2A's error, and the card says so): register
webhooks with `/v1/webhooks`.

| taskservice      | A2A              |
| ---------------- | ---------------- |
| `pending`        | `submitted`      |
| `running`        | `working`        |
| `input_required` | `input-required` |
| `completed`      | `completed`      |
| `failed`         | `failed`         |
| `cancelled`      | `canceled`       |
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sse_starlette import ServerSentEvent

from taskservice import __version__
from taskservice.api.deps import CallerContext, get_caller
from taskservice.api.errors import problem_responses
from taskservice.api.sse import SSE_CONTENT
from taskservice.api.streams import event_stream
from taskservice.errors import Conflict, DatabaseUnavailable, NotFound, ServiceError
from taskservice.events import TaskWatchers
from taskservice.models import Task
from taskservice.states import TaskState

router = APIRouter(tags=["a2a"])
PATH = "/a2a"  # the JSON-RPC endpoint

PROTOCOL_VERSION = "0.3.0"
_CONTEXTS = uuid.UUID("5b0c2f0e-8d55-4b8a-9a57-3f6d2f1a2a00")  # names made-up contexts
_STATES = {
    TaskState.PENDING: "submitted",
    TaskState.RUNNING: "working",
    TaskState.INPUT_REQUIRED: "input-required",
    TaskState.COMPLETED: "completed",
    TaskState.FAILED: "failed",
    TaskState.CANCELLED: "canceled",
}

# JSON-RPC 2.0 and A2A error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
CONTENT_TYPE_NOT_SUPPORTED = -32005


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


# -- params ------------------------------------------------------------------------


class _Params(BaseModel):
    model_config = ConfigDict(extra="ignore")


class A2AMessage(_Params):
    kind: Literal["message"] = "message"
    role: Literal["user", "agent"]
    parts: list[dict[str, Any]] = Field(min_length=1)
    message_id: str = Field(alias="messageId", min_length=1, max_length=200)
    task_id: str | None = Field(default=None, alias="taskId")
    context_id: str | None = Field(default=None, alias="contextId", max_length=200)
    metadata: dict[str, Any] | None = None


class SendConfiguration(_Params):
    blocking: bool = False


class SendParams(_Params):
    message: A2AMessage
    configuration: SendConfiguration | None = None
    metadata: dict[str, Any] | None = None


class TaskIdParams(_Params):
    id: str


# -- mapping -------------------------------------------------------------------------


def _content(parts: list[dict[str, Any]]) -> Any:
    """A task's input from a message's parts: its text parts joined, or the data of
    a lone data part. Files are not accepted."""
    texts: list[str] = []
    data: list[Any] = []
    for part in parts:
        kind = part.get("kind")
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "data" and "data" in part:
            data.append(part["data"])
        elif kind == "file":
            raise RpcError(CONTENT_TYPE_NOT_SUPPORTED, "file parts are not supported; send text")
        else:
            raise RpcError(INVALID_PARAMS, f"unknown or malformed part: {part.get('kind')!r}")
    if texts and not data:
        return "\n".join(texts)
    if len(data) == 1 and not texts:
        return data[0]
    raise RpcError(INVALID_PARAMS, "send text parts, or one data part")


def _context(task: Task) -> str:
    """A2A requires a context: a task submitted over REST without one is its own."""
    return task.context_id or str(task.id)


def _agent_message(task: Task, text: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "agent",
        "messageId": f"{task.id}:{task.event_seq}",
        "taskId": str(task.id),
        "contextId": _context(task),
        "parts": [{"kind": "text", "text": text}],
    }


def _status(task: Task, state: TaskState) -> dict[str, Any]:
    """The A2A status of `task` in `state` (its state now, or the one an event moved
    it to): the question it waits on, or the error it failed with, as the message."""
    status: dict[str, Any] = {"state": _STATES[state], "timestamp": task.updated_at.isoformat()}
    if state is not task.state:
        return status
    if state is TaskState.INPUT_REQUIRED:
        request = task.input_request or {}
        questions = [str(q.get("question") or "") for q in request.get("questions", [])]
        waiting = "\n".join(questions) if questions else "waiting for its subtasks"
        status["message"] = _agent_message(task, waiting)
    elif state is TaskState.FAILED and task.error:
        status["message"] = _agent_message(task, str(task.error.get("message", task.error)))
    return status


def _artifact(task: Task) -> dict[str, Any]:
    result = task.result
    if isinstance(result, str):
        part: dict[str, Any] = {"kind": "text", "text": result}
    else:  # a data part holds an object
        part = {"kind": "data", "data": result if isinstance(result, dict) else {"result": result}}
    return {"artifactId": f"{task.id}:result", "name": "result", "parts": [part]}


def a2a_task(task: Task) -> dict[str, Any]:
    status = _status(task, task.state)
    out: dict[str, Any] = {
        "kind": "task",
        "id": str(task.id),
        "contextId": _context(task),
        "status": status,
        "metadata": {**task.metadata, "taskservice": {"state": task.state.value}},
    }
    if task.state is TaskState.COMPLETED:
        out["artifacts"] = [_artifact(task)]
    return out


def _params(model: type[_Params], raw: Any) -> Any:
    try:
        return model.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors(include_url=False)]
        raise RpcError(INVALID_PARAMS, "invalid params", {"errors": errors}) from None


# -- methods -------------------------------------------------------------------------


async def _deliver(caller: CallerContext, params: SendParams) -> Task:
    """A message's task: a new one, or the waiting task the message answers."""
    message = params.message
    if message.role != "user":
        raise RpcError(INVALID_PARAMS, "a message to the agent has role 'user'")
    content = _content(message.parts)
    service = caller.service
    if message.task_id is not None:
        # A reply to a task that waits for input answers its question.
        if not isinstance(content, str):
            raise RpcError(INVALID_PARAMS, "answer a question with text")
        return await service.provide_input(
            tenant=caller.tenant, task_id=message.task_id, answer=content
        )
    options = {**(params.metadata or {}), **(message.metadata or {})}
    agent, model = options.get("agent"), options.get("model")
    task, _ = await service.submit(
        tenant=caller.tenant,
        input=content,
        agent=agent if isinstance(agent, str) else None,
        model=model if isinstance(model, str) else None,
        metadata={"a2a": {"messageId": message.message_id}},
        # A message without a context starts one, named after the message so that a
        # retry names the same one.
        context_id=message.context_id or str(uuid.uuid5(_CONTEXTS, message.message_id)),
        # A retried message (same messageId) finds the task it created.
        idempotency_key=f"a2a:{message.message_id}",
    )
    return task


async def message_send(caller: CallerContext, raw: Any) -> dict[str, Any]:
    params: SendParams = _params(SendParams, raw)
    task = await _deliver(caller, params)
    if params.configuration is not None and params.configuration.blocking:
        service = caller.service
        task = await service.wait(
            tenant=caller.tenant, task_id=str(task.id), seconds=service.settings.max_wait_seconds
        )
    return a2a_task(task)


async def tasks_get(caller: CallerContext, raw: Any) -> dict[str, Any]:
    params: TaskIdParams = _params(TaskIdParams, raw)
    return a2a_task(await caller.service.get(tenant=caller.tenant, task_id=params.id))


async def tasks_cancel(caller: CallerContext, raw: Any) -> dict[str, Any]:
    params: TaskIdParams = _params(TaskIdParams, raw)
    try:
        task = await caller.service.cancel(tenant=caller.tenant, task_id=params.id)
    except Conflict as exc:
        raise RpcError(TASK_NOT_CANCELABLE, "Task cannot be canceled", exc.detail) from None
    return a2a_task(task)


async def _no_push(caller: CallerContext, raw: Any) -> dict[str, Any]:
    raise RpcError(
        PUSH_NOT_SUPPORTED,
        "Push Notification is not supported",
        "register webhooks with POST /v1/webhooks instead",
    )


async def stream_send(caller: CallerContext, raw: Any) -> Task:
    return await _deliver(caller, _params(SendParams, raw))


async def stream_resubscribe(caller: CallerContext, raw: Any) -> Task:
    params: TaskIdParams = _params(TaskIdParams, raw)
    return await caller.service.get(tenant=caller.tenant, task_id=params.id)


Method = Callable[[CallerContext, Any], Awaitable[dict[str, Any]]]
StreamStart = Callable[[CallerContext, Any], Awaitable[Task]]
# Streaming methods answer with SSE: each event's data a JSON-RPC response.
STREAMS: dict[str, StreamStart] = {
    "message/stream": stream_send,
    "tasks/resubscribe": stream_resubscribe,
}
METHODS: dict[str, Method] = {
    "message/send": message_send,
    "tasks/get": tasks_get,
    "tasks/cancel": tasks_cancel,
    "tasks/pushNotificationConfig/set": _no_push,
    "tasks/pushNotificationConfig/get": _no_push,
    "tasks/pushNotificationConfig/list": _no_push,
    "tasks/pushNotificationConfig/delete": _no_push,
}


def _error(request_id: Any, error: RpcError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        body["data"] = error.data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def _from_service(exc: ServiceError) -> RpcError:
    data = {"detail": exc.detail, **exc.extensions}
    if isinstance(exc, NotFound):
        return RpcError(TASK_NOT_FOUND, "Task not found", data)
    if isinstance(exc, DatabaseUnavailable):
        return RpcError(INTERNAL_ERROR, "Internal error", {**data, "retryable": True})
    return RpcError(INVALID_PARAMS, exc.detail, data)


Parsed = tuple[str | int, str, Any]


def _parse(body: bytes) -> Parsed | dict[str, Any]:
    """(id, method, params) of a well-formed request, or the error response."""
    try:
        request = json.loads(body)
    except ValueError:
        return _error(None, RpcError(PARSE_ERROR, "Invalid JSON payload"))
    if not isinstance(request, dict):
        return _error(None, RpcError(INVALID_REQUEST, "one JSON-RPC request object, no batch"))
    request_id = request.get("id")
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        return _error(None, RpcError(INVALID_REQUEST, "Request payload validation error"))
    if request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
        return _error(request_id, RpcError(INVALID_REQUEST, "Request payload validation error"))
    name = request["method"]
    if name not in METHODS and name not in STREAMS:
        return _error(request_id, RpcError(METHOD_NOT_FOUND, "Method not found"))
    return request_id, name, request.get("params")


async def _answer(request_id: str | int, call: Awaitable[Any]) -> tuple[bool, Any]:
    """(True, result), or (False, the error response)."""
    try:
        return True, await call
    except RpcError as exc:
        return False, _error(request_id, exc)
    except ServiceError as exc:
        return False, _error(request_id, _from_service(exc))


async def _call(caller: CallerContext, parsed: Parsed) -> dict[str, Any]:
    """The response to a parsed, non-streaming request (errors are responses too)."""
    request_id, name, params = parsed
    ok, result = await _answer(request_id, METHODS[name](caller, params))
    return {"jsonrpc": "2.0", "id": request_id, "result": result} if ok else result


def _frame(request_id: str | int, result: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}))


def _pauses(state: TaskState) -> bool:
    """The states that end a stream: terminal, or waiting for the client's reply."""
    return state.is_terminal or state is TaskState.INPUT_REQUIRED


async def updates(
    caller: CallerContext, watchers: TaskWatchers, task: Task, request_id: str | int
) -> AsyncIterator[ServerSentEvent]:
    """The task, then a status update for each state it moves to (the result as an
    artifact before `completed`), from its event log; the last one is `final`.
    Woken by the event hub, as the REST event stream is."""
    service, tenant = caller.service, caller.tenant
    settings = service.settings
    with watchers.watch(task.id) as changed:
        # Read once watching: whatever happens next wakes us.
        current = await service.get(tenant=tenant, task_id=task.id)
        yield _frame(request_id, a2a_task(current))
        if _pauses(current.state):
            return
        last = current.event_seq
        clock = asyncio.get_running_loop().time
        while True:
            changed.clear()
            page = await service.events(
                tenant=tenant, task_id=str(task.id), after=last, limit=settings.max_page_size
            )
            for event in page.events:
                last = event.seq
                if event.type != "state_change":
                    continue
                state = TaskState(event.data["to"])
                current = await service.get(tenant=tenant, task_id=task.id)
                ids = {"taskId": str(current.id), "contextId": _context(current)}
                if state is TaskState.COMPLETED and current.state is TaskState.COMPLETED:
                    update = {"kind": "artifact-update", **ids, "artifact": _artifact(current)}
                    yield _frame(request_id, update | {"lastChunk": True})
                final = _pauses(state)
                status = _status(current, state)
                yield _frame(
                    request_id, {"kind": "status-update", **ids, "status": status, "final": final}
                )
                if final:
                    return
            if page.next_after is not None:
                continue  # more to read
            changed.due = clock() + settings.stream_poll_seconds
            await changed.wait()


async def _error_stream(response: dict[str, Any]) -> AsyncIterator[ServerSentEvent]:
    yield ServerSentEvent(data=json.dumps(response))


# -- routes --------------------------------------------------------------------------

_RPC_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["jsonrpc", "id", "method"],
                    "properties": {
                        "jsonrpc": {"const": "2.0"},
                        "id": {"type": ["string", "integer"]},
                        "method": {"enum": sorted([*METHODS, *STREAMS])},
                        "params": {"type": "object"},
                    },
                }
            }
        },
    }
}


@router.post(
    PATH,
    operation_id="a2aJsonRpc",
    summary="A2A JSON-RPC 2.0: message/send, message/stream, tasks/get, tasks/cancel, "
    "tasks/resubscribe",
    response_description="A JSON-RPC response: `result`, or `error` with an A2A code; "
    "for message/stream and tasks/resubscribe, an SSE stream of them",
    responses={
        200: {
            "description": "A JSON-RPC response; for message/stream and tasks/resubscribe "
            "an SSE stream whose events are JSON-RPC responses",
            "content": SSE_CONTENT,
        },
        **problem_responses(401, 413, 415),
    },
    openapi_extra=_RPC_BODY,
)
async def a2a_rpc(request: Request) -> Response:
    caller = await get_caller(request)  # a missing or bad key is a 401, as on /v1
    body = await request.body()
    parsed = _parse(body)
    if isinstance(parsed, dict) or parsed[1] not in STREAMS:
        response = parsed if isinstance(parsed, dict) else await _call(caller, parsed)
        return Response(json.dumps(response), media_type="application/json")
    # A streaming method answers with SSE, its errors too (clients read the stream).
    request_id, name, params = parsed
    runtime = request.app.state.runtime
    settings = runtime.settings
    ok, started = await _answer(request_id, STREAMS[name](caller, params))
    if not ok:
        return event_stream(_error_stream(started), settings)
    watchers = runtime.service.watchers
    assert watchers is not None  # the runtime always gives the service its watchers
    return event_stream(updates(caller, watchers, started, request_id), settings)


@router.get(
    "/.well-known/agent-card.json",
    operation_id="a2aAgentCard",
    summary="The A2A agent card: skills (agent profiles), endpoint, auth",
)
async def agent_card(request: Request) -> dict[str, Any]:
    runtime = request.app.state.runtime
    profiles = runtime.catalog.profiles.values()
    base = str(request.base_url).rstrip("/")
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "name": "taskservice",
        "description": "Runs LLM sub-agents as durable tasks. Pick a skill (an agent "
        "profile) with the message's `metadata.agent`, and a model with `metadata.model`.",
        "url": f"{base}/a2a",
        "preferredTransport": "JSONRPC",
        "version": __version__,
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [
            {
                "id": profile.name,
                "name": profile.name,
                "description": profile.description or f"the {profile.name} agent profile",
                "tags": ["agent-profile"],
            }
            for profile in profiles
        ],
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "security": [{"bearer": []}],
    }
