"""The JSON-RPC 2.0 binding of A2A, both generations on one endpoint.

The method names a generation (0.3: `message/send`, `tasks/get` …; 1.0:
`SendMessage`, `GetTask` …) and the request's `A2A-Version` (absent: 0.3) must
agree, as in the official SDK; a version this agent does not speak, or one that is
not the method's, is `VersionNotSupported` (-32009). Each generation answers in its
own shapes (`a2a.v03`, `a2a.v10`), its errors too (0.3: `data` an object; 1.0:
`data` a list of typed details).

One request object per call (no batches). A method answers with one response, or,
for the streaming methods, with a stream of them (the transport sends them as SSE
events), its errors too: clients read the stream.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from taskservice.a2a import v03, v10
from taskservice.a2a.errors import A2AError, Kind, from_service
from taskservice.a2a.handler import A2AHandler
from taskservice.a2a.shapes import TaskId, TaskQuery, Update, View, ends_stream, params
from taskservice.errors import ServiceError
from taskservice.ids import decode_status_cursor
from taskservice.models import StatusQuery

Response = dict[str, Any]
VERSIONS = (v10.VERSION, v03.VERSION)  # the versions spoken, preferred first
LIST_PAGE_SIZE = 50  # ListTasks without pageSize (at most 100)


@dataclass(frozen=True, slots=True)
class Call:
    """What a method acts with: the caller's handler, and the card it may read."""

    handler: A2AHandler
    extended_card: Callable[[], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Stream:
    """The responses of a streaming method, in order."""

    responses: AsyncIterator[Response]


Unary = Callable[[Call, Any], Awaitable[Any]]
Streaming = Callable[[Call, Any], Awaitable[AsyncIterator[dict[str, Any]]]]


@dataclass(frozen=True, slots=True)
class Method:
    version: str
    unary: Unary | None = None
    streaming: Streaming | None = None


async def _push_not_supported(call: Call, raw: Any) -> Any:
    raise A2AError(
        Kind.PUSH_NOTIFICATION_NOT_SUPPORTED,
        detail="register webhooks with POST /v1/webhooks instead",
    )


async def _card(call: Call, raw: Any) -> Any:
    return call.extended_card()


# Each method, made for a version's wire shapes (`a2a.v03`, `a2a.v10`).


def _send(wire: ModuleType, wrap: str | None = None) -> Unary:
    async def send(call: Call, raw: Any) -> Any:
        answer = wire.task(await call.handler.send(wire.send_request(raw)))
        return {wrap: answer} if wrap else answer  # 1.0 wraps it: {"task": …}

    return send


def _get(wire: ModuleType) -> Unary:
    async def get(call: Call, raw: Any) -> Any:
        query = params(TaskQuery, raw)
        return wire.task(await call.handler.get(query.id, query.history_length))

    return get


def _cancel(wire: ModuleType) -> Unary:
    async def cancel(call: Call, raw: Any) -> Any:
        return wire.task(await call.handler.cancel(params(TaskId, raw).id))

    return cancel


def _stream(wire: ModuleType) -> Streaming:
    """Send a message, then follow its task until it ends or asks."""

    async def stream(call: Call, raw: Any) -> AsyncIterator[dict[str, Any]]:
        request = wire.send_request(raw)
        task = await call.handler.deliver(request)
        length = request.history_length
        return _written(call.handler.updates(task, history_length=length, ends=ends_stream), wire)

    return stream


async def _list_10(call: Call, raw: Any) -> Any:
    query = params(v10.ListParams, raw)
    cursor = decode_status_cursor(query.page_token) if query.page_token else None
    state = v10.STATE_OF.get(query.status or "")
    where = StatusQuery(state, query.context_id, query.status_timestamp_after, cursor)
    size = query.page_size or LIST_PAGE_SIZE
    views, token, total = await call.handler.list_tasks(
        where, page_size=size, history_length=query.history_length
    )
    return v10.task_list(
        views, next_token=token, page_size=size, total=total, artifacts=query.include_artifacts
    )


async def _resubscribe_03(call: Call, raw: Any) -> AsyncIterator[dict[str, Any]]:
    query = params(TaskQuery, raw)
    task = await call.handler.find(query.id)
    updates = call.handler.updates(task, history_length=query.history_length, ends=ends_stream)
    return _written(updates, v03)


async def _subscribe_10(call: Call, raw: Any) -> AsyncIterator[dict[str, Any]]:
    task = await call.handler.subscribable(params(TaskId, raw).id)
    # A subscription lasts until the task is finished, through waits for input.
    updates = call.handler.updates(task, history_length=None, ends=lambda s: s.is_terminal)
    return _written(updates, v10)


async def _written(
    updates: AsyncIterator[Update], wire: ModuleType
) -> AsyncIterator[dict[str, Any]]:
    async for update in updates:
        final = not isinstance(update, View) and ends_stream(update.state)
        for event in wire.events(update, final=final):
            yield event


METHODS: dict[str, Method] = {
    "message/send": Method(v03.VERSION, unary=_send(v03)),
    "message/stream": Method(v03.VERSION, streaming=_stream(v03)),
    "tasks/get": Method(v03.VERSION, unary=_get(v03)),
    "tasks/cancel": Method(v03.VERSION, unary=_cancel(v03)),
    "tasks/resubscribe": Method(v03.VERSION, streaming=_resubscribe_03),
    "tasks/pushNotificationConfig/set": Method(v03.VERSION, unary=_push_not_supported),
    "tasks/pushNotificationConfig/get": Method(v03.VERSION, unary=_push_not_supported),
    "tasks/pushNotificationConfig/list": Method(v03.VERSION, unary=_push_not_supported),
    "tasks/pushNotificationConfig/delete": Method(v03.VERSION, unary=_push_not_supported),
    "agent/getAuthenticatedExtendedCard": Method(v03.VERSION, unary=_card),
    "SendMessage": Method(v10.VERSION, unary=_send(v10, wrap="task")),
    "SendStreamingMessage": Method(v10.VERSION, streaming=_stream(v10)),
    "GetTask": Method(v10.VERSION, unary=_get(v10)),
    "ListTasks": Method(v10.VERSION, unary=_list_10),
    "CancelTask": Method(v10.VERSION, unary=_cancel(v10)),
    "SubscribeToTask": Method(v10.VERSION, streaming=_subscribe_10),
    "CreateTaskPushNotificationConfig": Method(v10.VERSION, unary=_push_not_supported),
    "GetTaskPushNotificationConfig": Method(v10.VERSION, unary=_push_not_supported),
    "ListTaskPushNotificationConfigs": Method(v10.VERSION, unary=_push_not_supported),
    "DeleteTaskPushNotificationConfig": Method(v10.VERSION, unary=_push_not_supported),
    "GetExtendedAgentCard": Method(v10.VERSION, unary=_card),
}
NAMES = sorted(METHODS)
_VERSION = re.compile(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*")


def requested_version(header: str | None) -> str:
    """The Major.Minor an `A2A-Version` value asks for (absent or empty: 0.3), if
    this agent speaks it; else `VersionNotSupported`."""
    if header is None or not header.strip():
        return v03.VERSION
    match = _VERSION.fullmatch(header)
    version = f"{int(match[1])}.{int(match[2])}" if match else header
    if version not in VERSIONS:
        raise A2AError(
            Kind.VERSION_NOT_SUPPORTED,
            f"A2A-Version {header!r} is not supported; this agent speaks {', '.join(VERSIONS)}",
            supported=", ".join(VERSIONS),
        )
    return version


def error(request_id: Any, exc: A2AError, version: str) -> Response:
    body: dict[str, Any] = {"code": exc.code, "message": exc.message}
    data = exc.details() if version == v10.VERSION else exc.data_v03()
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def _result(request_id: Any, result: Any) -> Response:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


@dataclass(frozen=True, slots=True)
class Parsed:
    request_id: str | int | None
    name: str
    method: Method
    params: Any


def parse(body: bytes, version: str) -> Parsed | Response:
    """A well-formed request of a known method in the requested version, or the
    error response."""
    try:
        request = json.loads(body)
    except ValueError:
        return error(None, A2AError(Kind.PARSE_ERROR), version)
    if not isinstance(request, dict):
        batch = "one JSON-RPC request object; batches are not supported"
        return error(None, A2AError(Kind.INVALID_REQUEST, batch), version)
    request_id = request.get("id")
    if not isinstance(request_id, str | int | None) or isinstance(request_id, bool):
        return error(None, A2AError(Kind.INVALID_REQUEST, "id is a string or an integer"), version)
    if request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
        return error(request_id, A2AError(Kind.INVALID_REQUEST), version)
    name = request["method"]
    method = METHODS.get(name)
    if method is None:
        return error(request_id, A2AError(Kind.METHOD_NOT_FOUND, method=name), version)
    if method.version != version:
        wrong = A2AError(
            Kind.VERSION_NOT_SUPPORTED,
            f"{name} is an A2A {method.version} method; the request asks for A2A {version} "
            f"(send the header A2A-Version: {method.version})",
            supported=", ".join(VERSIONS),
        )
        return error(request_id, wrong, method.version)
    if request.get("params") is not None and not isinstance(request["params"], dict):
        invalid = A2AError(Kind.INVALID_PARAMS, violations=[(("params",), "is an object")])
        return error(request_id, invalid, version)
    return Parsed(request_id, name, method, request.get("params"))


async def _attempt(call: Awaitable[Any]) -> tuple[bool, Any]:
    """(True, the result), or (False, the A2A error)."""
    try:
        return True, await call
    except A2AError as exc:
        return False, exc
    except ServiceError as exc:
        return False, from_service(exc)


async def _one(response: Response) -> AsyncIterator[Response]:
    yield response


async def _responses(
    request_id: Any, events: AsyncIterator[dict[str, Any]], version: str
) -> AsyncIterator[Response]:
    try:
        async for event in events:
            yield _result(request_id, event)
    except (A2AError, ServiceError) as exc:  # told in the stream, which then ends
        yield error(request_id, exc if isinstance(exc, A2AError) else from_service(exc), version)


async def respond(call: Call, body: bytes, version_header: str | None) -> Response | Stream:
    """The answer to one JSON-RPC request body (errors are answers too)."""
    try:
        version = requested_version(version_header)
    except A2AError as exc:
        return error(_id_of(body), exc, v10.VERSION)
    parsed = parse(body, version)
    if isinstance(parsed, dict):
        return parsed
    method, request_id = parsed.method, parsed.request_id
    if method.unary is not None:
        ok, result = await _attempt(method.unary(call, parsed.params))
        return _result(request_id, result) if ok else error(request_id, result, version)
    assert method.streaming is not None
    ok, events = await _attempt(method.streaming(call, parsed.params))
    if not ok:
        return Stream(_one(error(request_id, events, version)))
    return Stream(_responses(request_id, events, version))


def _id_of(body: bytes) -> Any:
    try:
        request = json.loads(body)
    except ValueError:
        return None
    request_id = request.get("id") if isinstance(request, dict) else None
    return request_id if isinstance(request_id, str | int) else None
