"""The JSON-RPC 2.0 binding of A2A, both generations on one endpoint: a request
object in, one response out, or for the streaming methods a stream of them (the
transport sends each as an SSE event). The methods and the version check are
`a2a.methods`; here is only the envelope. Each generation's errors have their own
form (0.3: `data` an object; 1.0: `data` a list of typed details).

One request object per call (no batches). A streaming method's refusal (bad
parameters, an unknown task) is a plain response, not a stream; an error after
the stream began is its last event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from taskservice.a2a import v03, v10
from taskservice.a2a.errors import A2AError, Kind
from taskservice.a2a.methods import (
    METHODS,
    Call,
    Events,
    Method,
    a2a_error,
    call_unary,
    check_version,
    open_stream,
    requested_version,
)
from taskservice.domain.errors import ServiceError

Response = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Stream:
    """The responses of a streaming method, in order."""

    responses: AsyncIterator[Response]


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
    method: Method
    params: Any


def parse(body: bytes, asked: str | None) -> Parsed | Response:
    """A well-formed request of a known method in the requested version (None: the
    method's own), or the error response."""
    version = asked or v03.VERSION  # what errors before the method is known look like
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
    if name not in METHODS:
        return error(request_id, A2AError(Kind.METHOD_NOT_FOUND, method=name), version)
    try:
        method = check_version(name, asked)
    except A2AError as exc:  # in the form of the version the client said it speaks
        return error(request_id, exc, version)
    if request.get("params") is not None and not isinstance(request["params"], dict):
        invalid = A2AError(Kind.INVALID_PARAMS, violations=[(("params",), "is an object")])
        return error(request_id, invalid, method.version)
    return Parsed(request_id, method, request.get("params"))


async def _responses(request_id: Any, events: Events, version: str) -> AsyncIterator[Response]:
    try:
        async for event in events:
            yield _result(request_id, event)
    except (A2AError, ServiceError) as exc:  # told in the stream, which then ends
        yield error(request_id, a2a_error(exc), version)


async def respond(call: Call, body: bytes, version_header: str | None) -> Response | Stream:
    """The answer to one JSON-RPC request body (errors are answers too)."""
    try:
        asked = requested_version(version_header)
    except A2AError as exc:
        return error(_id_of(body), exc, v10.VERSION)
    parsed = parse(body, asked)
    if isinstance(parsed, dict):
        return parsed
    method, request_id = parsed.method, parsed.request_id
    try:
        if method.unary is not None:
            return _result(request_id, await call_unary(method, call, parsed.params))
        events = await open_stream(method, call, parsed.params)
    except A2AError as exc:
        return error(request_id, exc, method.version)
    return Stream(_responses(request_id, events, method.version))


def _id_of(body: bytes) -> Any:
    try:
        request = json.loads(body)
    except ValueError:
        return None
    request_id = request.get("id") if isinstance(request, dict) else None
    return request_id if isinstance(request_id, str | int) else None
