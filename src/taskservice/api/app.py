"""The app factory: routes, error handling, and a lifespan that runs the runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.telemetry import TelemetryConfig
from pydantic_ai.models import Model
from starlette.types import Receive, Scope, Send

from taskservice import __version__
from taskservice.a2a import push
from taskservice.agents.tools import ToolFunction
from taskservice.api import errors
from taskservice.api.deps import declare_bearer_auth
from taskservice.api.limits import RequestGuard
from taskservice.api.routes import (
    a2a,
    a2a_rest,
    agents,
    docs,
    firehose,
    health,
    keys,
    mcp,
    messages,
    metrics,
    overview,
    schedules,
    tasks,
    tokens,
    ui,
    usage,
    webhooks,
)
from taskservice.api.sse import StreamGate, run_streams_after_routing
from taskservice.api.streams import DeltaOut
from taskservice.common.metrics import http_metrics
from taskservice.mcp import server as mcp_server
from taskservice.runtime import Runtime
from taskservice.settings import Settings, get_settings

DESCRIPTION = """\
Run LLM sub-agents as durable tasks. Submit a task, then poll it, read its event log,
or cancel it. Every error is an `application/problem+json` document.

Authenticate with `Authorization: Bearer <API key>` (see `taskservice keys create`).
"""


class TaskServiceApp(FastAPI):
    """FastAPI, with SSE streams run after the app has returned, and set up a few at a
    time (`api.sse`)."""

    stream_gate: StreamGate | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._timed = http_metrics(self._guarded)  # every answer timed, errors included

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._timed(scope, receive, send)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        await errors.guarded(self._route, scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        await run_streams_after_routing(super().__call__, scope, receive, send, self.stream_gate)


_NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


def _document(app: FastAPI) -> None:
    """The OpenAPI document, with what FastAPI cannot see: the bearer scheme, and the
    problems the request guard answers before a route runs."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()  # generate() caches what it returns
            declare_bearer_auth(schema)
            # What a stream's `delta` events hold (SSE data has no response model).
            schema.setdefault("components", {}).setdefault("schemas", {})["DeltaOut"] = (
                DeltaOut.model_json_schema(ref_template="#/components/schemas/{model}")
            )
            errors.document_problems(
                schema, jsonrpc_paths=(a2a.PATH,), own_errors=a2a_rest.BASE + "/"
            )
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(
    settings: Settings | None = None,
    *,
    models: Mapping[str, Model] | None = None,
    tools: Mapping[str, ToolFunction] | None = None,
    migrate_schema: bool = True,
) -> FastAPI:
    """`models` and `tools` register extra named models and tools (tests script agents
    this way); profiles enable tools by name. `migrate_schema=False`: the database is
    migrated already (by `serve`'s supervisor)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with Runtime.open(
            settings,
            api=True,
            workers=settings.workers_enabled,
            models=models,
            tools=tools,
            migrate_schema=migrate_schema,
            push_formats=push.FORMATS,
        ) as runtime:
            app.state.runtime = runtime
            app.state.mcp = mcp_server.session_manager(mcp.handler_for, settings)
            async with app.state.mcp.run():  # the MCP transport's task group
                yield

    app = TaskServiceApp(
        title="taskservice",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        telemetry=None if settings.otel else _NO_TELEMETRY,
        # /docs and /redoc are routes.docs' (FastAPI's own load their files from CDNs).
        docs_url=None,
        redoc_url=None,
    )
    # As many streams set up at once as there are database connections to do it.
    app.stream_gate = StreamGate(settings.db_pool_size)
    _document(app)
    errors.install(app)
    # A request is matched against the routes in this order, each a regular
    # expression: the busiest first (REST tasks, A2A JSON-RPC). `/a2a` last of 43
    # took 56 µs to route.
    app.include_router(tasks.router)
    app.include_router(a2a.router)
    app.include_router(agents.router)
    app.include_router(overview.router)
    app.include_router(usage.router)
    app.include_router(messages.router)
    app.include_router(tokens.router)
    app.include_router(firehose.router)
    app.include_router(webhooks.router)
    app.include_router(schedules.router)
    app.include_router(keys.router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(ui.router)
    app.include_router(docs.router)
    app.include_router(a2a_rest.router)
    app.router.routes.append(mcp.ROUTE)
    app.add_middleware(
        RequestGuard,
        max_bytes=settings.max_body_bytes,
        max_json_depth=settings.max_json_depth,
        jsonrpc_paths=(*a2a.PATHS, mcp.PATH),
        status_prefixes=a2a_rest.PREFIXES,
    )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
            expose_headers=["Location", "Idempotent-Replayed"],
        )
    return app
