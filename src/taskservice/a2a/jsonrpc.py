"""The JSON-RPC 2.0 adapter of the A2A handler.

One request object per call (no batches). A method answers with one response, or,
for `message/stream` and `tasks/resubscribe`, with a stream of them (the transport
sends them as SSE events), its errors too: clients read the stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from taskservice.a2a.handler import A2AHandler
from taskservice.a2a.protocol import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    A2AError,
    SendParams,
    TaskIdParams,
    from_service,
    params,
)
from taskservice.errors import ServiceError
from taskservice.models import Task

Response = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Stream:
    """The responses of a streaming method, in order."""

    responses: AsyncIterator[Response]


async def _send(handler: A2AHandler, raw: Any) -> Response:
    return await handler.send(params(SendParams, raw))


async def _get(handler: A2AHandler, raw: Any) -> Response:
    return await handler.get(params(TaskIdParams, raw).id)


async def _cancel(handler: A2AHandler, raw: Any) -> Response:
    return await handler.cancel(params(TaskIdParams, raw).id)


async def _push_config(handler: A2AHandler, raw: Any) -> Response:
    return await handler.push_config()


async def _stream_send(handler: A2AHandler, raw: Any) -> Task:
    return await handler.deliver(params(SendParams, raw))


async def _resubscribe(handler: A2AHandler, raw: Any) -> Task:
    return await handler.find(params(TaskIdParams, raw).id)


METHODS: dict[str, Callable[[A2AHandler, Any], Awaitable[Response]]] = {
    "message/send": _send,
    "tasks/get": _get,
    "tasks/cancel": _cancel,
    "tasks/pushNotificationConfig/set": _push_config,
    "tasks/pushNotificationConfig/get": _push_config,
    "tasks/pushNotificationConfig/list": _push_config,
    "tasks/pushNotificationConfig/delete": _push_config,
}
# Streaming methods: find or start the task, then follow it.
STREAMS: dict[str, Callable[[A2AHandler, Any], Awaitable[Task]]] = {
    "message/stream": _stream_send,
    "tasks/resubscribe": _resubscribe,
}
NAMES = sorted([*METHODS, *STREAMS])


def error(request_id: Any, exc: A2AError) -> Response:
    body: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.data is not None:
        body["data"] = exc.data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def _result(request_id: str | int, result: Any) -> Response:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


Parsed = tuple[str | int, str, Any]


def parse(body: bytes) -> Parsed | Response:
    """(id, method, params) of a well-formed request, or the error response."""
    try:
        request = json.loads(body)
    except ValueError:
        return error(None, A2AError(PARSE_ERROR, "Invalid JSON payload"))
    if not isinstance(request, dict):
        return error(None, A2AError(INVALID_REQUEST, "one JSON-RPC request object, no batch"))
    request_id = request.get("id")
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        return error(None, A2AError(INVALID_REQUEST, "Request payload validation error"))
    if request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
        return error(request_id, A2AError(INVALID_REQUEST, "Request payload validation error"))
    name = request["method"]
    if name not in METHODS and name not in STREAMS:
        return error(request_id, A2AError(METHOD_NOT_FOUND, "Method not found"))
    return request_id, name, request.get("params")


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


async def _updates(
    handler: A2AHandler, task: Task, request_id: str | int
) -> AsyncIterator[Response]:
    async for update in handler.updates(task):
        yield _result(request_id, update)


async def respond(handler: A2AHandler, body: bytes) -> Response | Stream:
    """The answer to one JSON-RPC request body (errors are answers too)."""
    parsed = parse(body)
    if isinstance(parsed, dict):
        return parsed
    request_id, name, raw = parsed
    if name in METHODS:
        ok, result = await _attempt(METHODS[name](handler, raw))
        return _result(request_id, result) if ok else error(request_id, result)
    ok, task = await _attempt(STREAMS[name](handler, raw))
    if not ok:
        return Stream(_one(error(request_id, task)))
    return Stream(_updates(handler, task, request_id))
