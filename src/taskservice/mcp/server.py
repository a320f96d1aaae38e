"""The adapter onto the official MCP SDK (`mcp` 2.x): its lowlevel server, whose
handlers hand each request to an `MCPHandler`, behind the SDK's streamable HTTP
transport in stateless mode.

Stateless: no session lives in a process's memory (the transport makes a fresh
connection per POST, `initialize` is answered inline, and revision 2026-07-28 has no
session at all), so any replica answers any request of a client. Both revisions the
SDK speaks are served: 2025-11-25 (after `initialize`) and 2026-07-28 (after
`server/discover`). Responses may be SSE, so that a call's progress reaches the
client before its result.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, compose_tool_call_handler
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request

from taskservice import __version__
from taskservice.errors import DatabaseUnavailable, ServiceError
from taskservice.mcp import tasks as mcp_tasks
from taskservice.mcp.handler import MCPHandler
from taskservice.mcp.tasks import EXTENSION
from taskservice.mcp.tools import INPUT_SCHEMA
from taskservice.settings import Settings

INSTRUCTIONS = (
    "Each tool runs an agent (a profile of this service) on the `input` you give it, as "
    "a durable task; its answer is the tool's result. Tasks with the same `context_id` "
    "belong together."
)
HandlerFor = Callable[[Request], MCPHandler]


def _refusal(exc: ServiceError) -> MCPError:
    if isinstance(exc, DatabaseUnavailable):
        return MCPError(types.INTERNAL_ERROR, exc.detail, {"retryable": True})
    return MCPError(types.INVALID_PARAMS, exc.detail, exc.extensions or None)


class TaskIdParams(types.RequestParams):
    task_id: str


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any] = {}


def _opted_in(ctx: ServerRequestContext[Any]) -> bool:
    """Whether this request declares the Tasks extension (2026-07-28: each request
    carries its client's capabilities)."""
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and EXTENSION in capabilities.extensions)


class Tasks(Extension):
    """The 2026-07-28 Tasks extension: a call from a client that declares it becomes
    a task (committed before the handle is answered), which `tasks/get` follows,
    `tasks/update` answers and `tasks/cancel` cancels. Agent runs take minutes and
    outlive connections: every such call is made a task."""

    identifier = EXTENSION

    def __init__(self, handler_for: HandlerFor) -> None:
        self.handler_for = handler_for

    def handler(self, ctx: ServerRequestContext[Any]) -> MCPHandler:
        assert isinstance(ctx.request, Request)  # the HTTP transport passes its request
        return self.handler_for(ctx.request)

    def methods(self) -> Sequence[MethodBinding]:
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=modern),
            MethodBinding("tasks/update", UpdateParams, self._update, protocol_versions=modern),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=modern),
        ]

    async def intercept_tool_call(
        self,
        params: types.CallToolRequestParams,
        ctx: ServerRequestContext[Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS or not _opted_in(ctx):
            return await call_next(ctx)
        async with _refusals():
            task = await self.handler(ctx).start(params.name, params.arguments)
        return mcp_tasks.handle(task)

    def _require(self, ctx: ServerRequestContext[Any]) -> None:
        if not _opted_in(ctx):
            raise MCPError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                "declare the tasks extension in this request's client capabilities",
                {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
            )

    async def _get(self, ctx: ServerRequestContext[Any], params: TaskIdParams) -> dict[str, Any]:
        self._require(ctx)
        async with _refusals():
            return mcp_tasks.detailed(await self.handler(ctx).task(params.task_id))

    async def _update(self, ctx: ServerRequestContext[Any], params: UpdateParams) -> dict[str, Any]:
        self._require(ctx)
        async with _refusals():
            await self.handler(ctx).update(params.task_id, params.input_responses)
        return {"resultType": "complete"}

    async def _cancel(self, ctx: ServerRequestContext[Any], params: TaskIdParams) -> dict[str, Any]:
        self._require(ctx)
        async with _refusals():
            await self.handler(ctx).cancel(params.task_id)
        return {"resultType": "complete"}


@asynccontextmanager
async def _refusals() -> AsyncIterator[None]:
    try:
        yield
    except ServiceError as exc:
        raise _refusal(exc) from None


def _versioned(server: Server[Any], bindings: Sequence[MethodBinding]) -> None:
    """Serve each method at the revisions its bindings name (the lowlevel server has
    no such gate of its own; `MCPServer` has, but its tools are a static registry)."""
    for binding in bindings:

        async def serve(
            ctx: ServerRequestContext[Any], params: Any, binding: MethodBinding = binding
        ) -> Any:
            versions = binding.protocol_versions
            if versions is not None and ctx.protocol_version not in versions:
                raise MCPError(types.METHOD_NOT_FOUND, "Method not found", binding.method)
            return await binding.handler(ctx, params)

        server.add_request_handler(binding.method, binding.params_type, serve)


def build_server(handler_for: HandlerFor) -> Server[Any]:
    """The lowlevel server: tools/list and tools/call, for the caller of each request,
    and the Tasks extension."""

    def handler(ctx: ServerRequestContext[Any]) -> MCPHandler:
        assert isinstance(ctx.request, Request)  # the HTTP transport passes its request
        return handler_for(ctx.request)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            page, cursor = handler(ctx).list_tools(params.cursor if params else None)
        except ServiceError as exc:
            raise _refusal(exc) from None
        return types.ListToolsResult(
            tools=[types.Tool.model_validate(t) for t in page], next_cursor=cursor
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            result = await handler(ctx).call(params.name, params.arguments)
        except ServiceError as exc:
            raise _refusal(exc) from None
        return types.CallToolResult.model_validate(result)

    server: Server[Any] = Server(
        "taskservice",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        # The input schema is one for every tool: the transport checks a call's
        # arguments against it without listing the tools again.
        get_tool_input_schema=lambda name: INPUT_SCHEMA,
    )
    tasks = Tasks(handler_for)
    server.extensions[tasks.identifier] = tasks.settings()  # advertised by server/discover
    server.add_request_handler(
        "tools/call", types.CallToolRequestParams, compose_tool_call_handler([tasks], call_tool)
    )
    _versioned(server, tasks.methods())
    return server


def _security(settings: Settings) -> TransportSecuritySettings:
    """DNS rebinding protection where a browser's page could reach the service as
    itself: on loopback (where open development mode serves callers without a key),
    for the loopback names and the public URL's host. Beyond loopback every request
    needs a key, and the Host a proxy forwards is not known here."""
    if not settings.binds_loopback:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts = ["127.0.0.1", "localhost", "[::1]"]
    if settings.public_url:
        hosts.append(urlsplit(settings.public_url).netloc)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{h}:*" for h in hosts] + hosts,
        allowed_origins=[
            f"{scheme}://{h}{port}"
            for h in hosts
            for scheme in ("http", "https")
            for port in ("", ":*")
        ],
    )


def session_manager(handler_for: HandlerFor, settings: Settings) -> StreamableHTTPSessionManager:
    """The transport, stateless; run it (`.run()`) for as long as the app serves."""
    return StreamableHTTPSessionManager(
        app=build_server(handler_for),
        stateless=True,
        security_settings=_security(settings),
        max_request_body_size=settings.max_body_bytes,
    )
