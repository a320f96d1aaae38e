"""A2A 1.0's HTTP+JSON binding under `/a2a/rest` (the card announces it; also at the
root, see `ALIAS`): a route per
operation of `a2a.rest`, each authenticating as `/v1` does, then handing the path,
query, body and `A2A-Version` to the adapter. Refusals, a missing key's included,
are `google.rpc.Status` bodies (`application/a2a+json`, or `application/json` for a
client that does not name the former: `rest.media_type`), as an A2A client reads
them; an unknown path below the base is a 404 `METHOD_NOT_FOUND`, a known one with
another verb a 405.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel
from sse_starlette import ServerSentEvent
from starlette.routing import compile_path

from taskservice.a2a import rest
from taskservice.a2a.errors import A2AError, Kind
from taskservice.a2a.methods import Call, Events
from taskservice.api.deps import get_caller
from taskservice.api.routes.a2a import VERSION_HEADER, a2a_handler, extended_card_for
from taskservice.api.sse import SSE_CONTENT
from taskservice.api.streams import event_stream
from taskservice.domain.errors import ServiceError

router = APIRouter(tags=["a2a"])
BASE = "/a2a/rest"
# The operations are at the root too, undocumented there, where the A2A SDK's servers
# mount them: for clients that join absolute paths to the interface URL and so drop
# its path (the 1.0 conformance kit's default branch does).
ALIAS = ""
PREFIXES = (BASE + "/", ALIAS + "/message:", ALIAS + "/tasks")  # where errors are Statuses

# The gRPC status an HTTP refusal before the method (authentication) is told with.
_STATUS_OF = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 503: "UNAVAILABLE"}


def _json(
    request: Request, status: int, body: Any, headers: dict[str, str] | None = None
) -> Response:
    media_type = rest.media_type(request.headers.get("content-type"), request.headers.get("accept"))
    return Response(json.dumps(body), status_code=status, media_type=media_type, headers=headers)


def _refused(request: Request, exc: ServiceError) -> Response:
    status = {"code": exc.status, "status": _STATUS_OF.get(exc.status, "UNKNOWN")}
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    body = {"error": {**status, "message": exc.detail, "details": []}}
    return _json(request, exc.status, body, headers)


async def _events(events: Events) -> AsyncIterator[ServerSentEvent]:
    try:
        async for event in events:
            yield ServerSentEvent(data=json.dumps(event))
    except A2AError as exc:  # the stream began: the error is its last event
        yield ServerSentEvent(data=json.dumps(exc.status()), event="error")


def _endpoint(operation: rest.Operation) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            caller = await get_caller(request)  # a missing or bad key is a 401
        except ServiceError as exc:
            return _refused(request, exc)
        answer = await rest.respond(
            Call(
                a2a_handler(caller),
                lambda: extended_card_for(request, caller),
            ),
            operation,
            path={name: str(value) for name, value in request.path_params.items()},
            query=list(request.query_params.multi_items()),
            body=await request.body() if operation.takes_body else b"",
            version=request.headers.get(
                VERSION_HEADER, request.query_params.get(rest.VERSION_PARAMETER)
            ),
        )
        if isinstance(answer, rest.Answer):
            return _json(request, answer.status, answer.body)
        return event_stream(_events(answer), caller.settings)

    return endpoint


def _documented(operation: rest.Operation) -> dict[str, Any]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in operation.path_parameters
    ]
    extra: dict[str, Any] = {"parameters": parameters}
    if operation.takes_body:
        schema = {"type": "object", "description": f"The {operation.method} request (ProtoJSON)"}
        extra["requestBody"] = {
            "required": operation.method in ("SendMessage", "SendStreamingMessage"),
            "content": {t: {"schema": schema} for t in rest.MEDIA_TYPES},
        }
    return extra


class A2AStatusError(BaseModel):
    code: int
    status: str
    message: str
    details: list[dict[str, Any]] = []


class A2AStatus(BaseModel):
    """A google.rpc.Status (AIP-193): the HTTP status, the gRPC status, a message, and
    typed details (an ErrorInfo naming the A2A error; a BadRequest naming the wrong
    fields)."""

    error: A2AStatusError


_STATUS_REF = {"$ref": "#/components/schemas/A2AStatus"}
_REFUSALS = {
    400: "Invalid parameters, not JSON, not allowed in the task's state, or another A2A version",
    401: "Missing, unknown or revoked API key",
    404: "No such task for this tenant",
    413: "The body is too large",
    415: "The body is not JSON",
    503: "The database is unavailable",
}
_streaming = {"SendStreamingMessage", "SubscribeToTask"}
_twice = {"SubscribeToTask"}  # by GET and by POST
for _operation in rest.OPERATIONS:
    router.add_api_route(
        BASE + _operation.path,
        _endpoint(_operation),
        methods=[_operation.verb],
        operation_id=f"a2aRest{_operation.method}"
        + (_operation.verb.title() if _operation.method in _twice else ""),
        summary=f"A2A HTTP+JSON: {_operation.summary} ({_operation.method})",
        response_description="The answer (ProtoJSON), or a `google.rpc.Status` error; "
        "`application/a2a+json` to a client that names it, else `application/json`",
        responses={
            200: {
                "description": "An SSE stream of StreamResponses"
                if _operation.method in _streaming
                else "The answer",
                "content": SSE_CONTENT
                if _operation.method in _streaming
                else {t: {"schema": {"type": "object"}} for t in rest.MEDIA_TYPES},
            },
            **{
                status: {
                    "description": why,
                    "model": A2AStatus,  # as application/json; and the same as a2a+json:
                    "content": {rest.MEDIA_TYPE: {"schema": _STATUS_REF}},
                }
                for status, why in _REFUSALS.items()
                if _operation.takes_body or status not in (413, 415)
            },
        },
        openapi_extra=_documented(_operation),
    )
    router.add_api_route(
        ALIAS + _operation.path,
        _endpoint(_operation),
        methods=[_operation.verb],
        include_in_schema=False,
    )

_KNOWN = [(compile_path(op.path)[0], op.path) for op in rest.OPERATIONS]


def _verbs(path: str) -> list[str]:
    """The verbs of the operations on `path`: of the first pattern it matches, as a
    router tries them (`/tasks/x:cancel` is the cancel operation's, not `/tasks/{id}`'s)."""
    found = next((pattern for regex, pattern in _KNOWN if regex.match(path)), None)
    return sorted({op.verb for op in rest.OPERATIONS if op.path == found})


@router.api_route(
    BASE + "/{rest_of_path:path}",
    methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
    include_in_schema=False,
)
async def a2a_rest_unknown(request: Request, rest_of_path: str) -> Response:
    path = "/" + rest_of_path
    verbs = _verbs(path)
    if verbs:
        refused = A2AError(
            Kind.METHOD_NOT_FOUND,
            f"{request.method} is not an operation on {path}; it takes {', '.join(verbs)}",
            http_status=405,
        )
        return _json(request, 405, refused.status(), {"Allow": ", ".join(verbs)})
    unknown = A2AError(Kind.METHOD_NOT_FOUND, f"no A2A operation at {path}", path=path)
    return _json(request, 404, unknown.status())
