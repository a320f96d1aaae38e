"""Every error leaves as `application/problem+json` (RFC 9457)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

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
    return problem(
        exc.status_code,
        str(exc.detail) if exc.status_code != 404 else "Not found",
        str(exc.detail),
        instance=request.url.path,
        headers=dict(exc.headers or {}),
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
