"""Every error leaves as `application/problem+json` (RFC 9457), and every request
gets an answer.

Starlette answers an unexpected exception through the `Exception` handler and then
re-raises it to the server, which logs a traceback and closes the keep-alive
connection: the client's next request on it got no answer at all. `guarded`, the
outermost layer, takes that re-raise (already answered and logged), answers what
escaped every handler, and ends a stream that broke midway cleanly (a browser's
EventSource resumes it with `Last-Event-ID`).

Three modules are named `errors`: this one is how the REST transport answers with an
error; the errors themselves are the domain's (`domain/errors.py`), and A2A has its own
kinds and forms (`a2a/errors.py`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path
from starlette.types import Message, Receive, Scope, Send

from taskservice.db import is_unavailable
from taskservice.db.outage import OUTAGE
from taskservice.domain.errors import BudgetExhausted, DatabaseUnavailable, ServiceError

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None


def problem(
    status: int,
    title: str,
    detail: str | None = None,
    *,
    type: str = "about:blank",
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    **extensions: Any,
) -> JSONResponse:
    body: dict[str, Any] = {"type": type, "title": title, "status": status}
    if detail is not None:
        body["detail"] = detail
    if instance is not None:
        body["instance"] = instance
    body.update(extensions)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation for the problem responses a route can give."""
    described = {
        400: "Malformed request (e.g. invalid JSON)",
        401: "Missing, unknown or revoked API key",
        403: "Not allowed with these credentials (a stream token used for anything but an "
        "event stream, an admin route without an admin key)",
        404: "No such task for this tenant",
        409: "Conflict with the task's current state",
        413: "Request, input or metadata too large",
        415: "The body is not JSON",
        422: "Request failed validation",
        429: "The tenant's spend budget is spent for this period (type "
        "`…/budget-exhausted`; `Retry-After`: when the period ends)",
        503: "Database unavailable (type `…/database-unavailable`; retry after "
        "`Retry-After`, with the same Idempotency-Key) or not ready",
    }
    docs: dict[int | str, dict[str, Any]] = {
        status: {
            "model": Problem,
            "description": described[status],
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }
    for status in (429, 503):
        if status not in docs:
            continue
        docs[status]["headers"] = {
            "Retry-After": {
                "description": "Seconds to wait before retrying.",
                "schema": {"type": "integer"},
            }
        }
    return docs


def _documented(status: int) -> dict[str, Any]:
    doc = problem_responses(status)[status]
    del doc["model"]  # a schema reference is already in its content
    return doc


def document_problems(
    schema: dict[str, Any], *, jsonrpc_paths: Collection[str] = (), own_errors: str = "-"
) -> None:
    """Say in the OpenAPI `schema` what every route really answers: a route taking a
    body can answer 400, 413 and 415 (`limits.RequestGuard`, before the route runs;
    a JSON-RPC path answers malformed JSON with a JSON-RPC error), one behind a key
    503 when the database is unavailable, and every 422 is a problem document, not
    FastAPI's default `HTTPValidationError`. Paths under `own_errors` (A2A's
    HTTP+JSON binding) document their own errors."""
    for path, item in schema.get("paths", {}).items():
        if path.startswith(own_errors):
            continue
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            if "requestBody" in operation:
                statuses = (413, 415) if path in jsonrpc_paths else (400, 413, 415)
                for status in statuses:
                    responses.setdefault(str(status), _documented(status))
            if "401" in responses:  # the routes behind a key are the ones that read the database
                responses.setdefault("503", _documented(503))
            if "422" in responses:
                responses["422"] = _documented(422)
    components = schema.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        if f"#/components/schemas/{unused}" not in json.dumps(schema):
            components.pop(unused, None)


def _allowed_methods(request: Request) -> str:
    """The methods the OpenAPI document gives this path. Starlette's
    own `Allow` names only the methods of the first route whose path matched (`POST`
    for `/v1/webhooks`, which also has `GET`)."""
    table: list[tuple[re.Pattern[str], set[str]]] | None = getattr(
        request.app.state, "allowed_methods", None
    )
    if table is None:
        table = [
            (compile_path(path)[0], {method.upper() for method in item})
            for path, item in request.app.openapi().get("paths", {}).items()
        ]
        request.app.state.allowed_methods = table
    methods = set().union(*(m for regex, m in table if regex.match(request.url.path)))
    return ", ".join(sorted(methods))


def _location(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc)


def _said(error: dict[str, Any]) -> str:
    """A validation error's message, without pydantic's "Value error, " before what a
    validator of ours said."""
    message: str = error["msg"]
    return message.removeprefix("Value error, ") if error["type"] == "value_error" else message


async def service_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    headers = None
    if exc.status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    elif isinstance(exc, DatabaseUnavailable):
        OUTAGE.failed(f"{request.method} {request.url.path}", exc)
        headers = {"Retry-After": "1"}
    elif isinstance(exc, BudgetExhausted):
        headers = {"Retry-After": str(exc.retry_after)}
    return problem(
        exc.status,
        exc.title,
        exc.detail,
        type=exc.type,
        instance=request.url.path,
        headers=headers,
        **exc.extensions,
    )


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")}
        for err in exc.errors()
    ]
    if any(err["type"] == "json_invalid" for err in errors):
        return problem(
            400,
            "Malformed JSON",
            "the request body is not valid JSON",
            type="https://taskservice.dev/problems/malformed-json",
            instance=request.url.path,
        )
    detail = "; ".join(f"{_location(e['loc'])}: {_said(e)}" for e in errors)
    return problem(
        422,
        "Invalid request",
        detail,
        type="https://taskservice.dev/problems/invalid-request",
        instance=request.url.path,
        errors=errors,
    )


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request) or headers.get("Allow", "")
    return problem(
        exc.status_code,
        str(exc.detail) if exc.status_code != 404 else "Not found",
        str(exc.detail),
        instance=request.url.path,
        headers=headers,
    )


def _unexpected_problem(method: str, path: str, exc: BaseException) -> JSONResponse:
    """The answer to an exception no handler knew: 503 in the one shape of
    `DatabaseUnavailable` if the database failed under it, else a logged 500."""
    if is_unavailable(exc):
        unavailable = DatabaseUnavailable(str(exc))
        OUTAGE.failed(f"{method} {path}", exc)
        return problem(
            503,
            unavailable.title,
            unavailable.detail,
            type=unavailable.type,
            instance=path,
            headers={"Retry-After": "1"},
        )
    log.error("unhandled error on %s %s", method, path, exc_info=exc)
    return problem(500, "Internal server error", "the error was logged", instance=path)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    return _unexpected_problem(request.method, request.url.path, exc)


async def guarded(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """Run `app`; no exception reaches the server (see the module's docstring)."""
    if scope["type"] != "http":
        await app(scope, receive, send)
        return
    progress = [False, False]  # response started, response complete

    async def tracking(message: Message) -> None:
        if message["type"] == "http.response.start":
            progress[0] = True
        elif message["type"] == "http.response.body" and not message.get("more_body"):
            progress[1] = True
        await send(message)

    try:
        await app(scope, receive, tracking)
    except Exception as exc:
        started, complete = progress
        if complete:
            return  # answered by the `Exception` handler, which logged it
        method, path = scope.get("method", ""), scope.get("path", "")
        if not started:
            await _unexpected_problem(method, path, exc)(scope, receive, send)
            return
        # A stream broke midway: say why in the log, and end it where it is.
        if is_unavailable(exc):
            OUTAGE.failed(f"stream {path}", exc)
        else:
            log.error("stream %s %s failed", method, path, exc_info=exc)
        with contextlib.suppress(OSError):  # the client is gone already
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def install(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, service_problem)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
