"""Every error leaves as `application/problem+json` (RFC 9457)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from taskservice.db import is_unavailable
from taskservice.errors import ServiceError

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
        403: "A stream token used for anything but an event stream",
        404: "No such task for this tenant",
        409: "Conflict with the task's current state",
        413: "Request, input or metadata too large",
        415: "The body is not JSON",
        422: "Request failed validation",
        503: "Database unavailable (nothing was changed; retry) or not ready",
    }
    return {
        status: {
            "model": Problem,
            "description": described[status],
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


def _documented(status: int) -> dict[str, Any]:
    doc = problem_responses(status)[status]
    del doc["model"]  # a schema reference is already in its content
    return doc


def document_problems(schema: dict[str, Any], *, jsonrpc_paths: Collection[str] = ()) -> None:
    """Say in the OpenAPI `schema` what every route really answers: a route taking a
    body can answer 400, 413 and 415 (`limits.RequestGuard`, before the route runs;
    a JSON-RPC path answers malformed JSON with a JSON-RPC error), one behind a key
    503 when the database is unavailable, and every 422 is a problem document, not
    FastAPI's default `HTTPValidationError`."""
    for path, item in schema.get("paths", {}).items():
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


async def _service_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
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
    detail = "; ".join(f"{_location(e['loc'])}: {e['msg']}" for e in errors)
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


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    if is_unavailable(exc):
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        return problem(
            503,
            "Service unavailable",
            "the database is unavailable; nothing was changed, retry shortly",
            type="https://taskservice.dev/problems/unavailable",
            instance=request.url.path,
            headers={"Retry-After": "1"},
        )
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem(500, "Internal server error", "the error was logged", instance=request.url.path)


def install(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
