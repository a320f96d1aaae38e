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

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.extension import MethodBinding, compose_tool_call_handler
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, ValidationError

from taskservice import __version__
from taskservice.mcp.handler import MCPHandler
from taskservice.mcp.profile_tools import INPUT_SCHEMA
from taskservice.mcp.task_methods import HandlerFor, Tasks, Tasks2025, handler_of, refusals
from taskservice.settings import Settings

INSTRUCTIONS = (
    "Each tool runs an agent (a profile of this service) on the `input` you give it, as "
    "a durable task; its answer is the tool's result. Tasks with the same `context_id` "
    "belong together."
)


class _AnyParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")


def _versioned(server: Server[Any], bindings: Sequence[MethodBinding]) -> None:
    """Serve each method by the binding for the request's revision: `tasks/get` is
    one method in 2025-11-25 and another in 2026-07-28. (The lowlevel server has no
    such gate of its own; `MCPServer` has, but its tools are a static registry.)"""
    by_method: dict[str, list[MethodBinding]] = {}
    for binding in bindings:
        by_method.setdefault(binding.method, []).append(binding)
    for method, candidates in by_method.items():

        async def serve(
            ctx: ServerRequestContext[Any],
            raw: _AnyParams,
            method: str = method,
            candidates: list[MethodBinding] = candidates,
        ) -> Any:
            for binding in candidates:
                versions = binding.protocol_versions
                if versions is None or ctx.protocol_version in versions:
                    try:
                        params = binding.params_type.model_validate(ctx.params or {})
                    except ValidationError as exc:
                        raise MCPError(types.INVALID_PARAMS, str(exc)) from None
                    return await binding.handler(ctx, params)
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", method)

        server.add_request_handler(method, _AnyParams, serve)


class _Server(Server[Any]):
    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        """The `tasks` capability on the handshake revisions (`initialize` asks with
        no version); 2026-07-28 advertises the extension instead."""
        capabilities = super().get_capabilities(
            notification_options,
            experimental_capabilities,
            extensions,
            protocol_version=protocol_version,
        )
        if protocol_version not in MODERN_PROTOCOL_VERSIONS:
            capabilities.tasks = types.ServerTasksCapability(
                list=types.TasksListCapability(),
                cancel=types.TasksCancelCapability(),
                requests=types.ServerTasksRequestsCapability(
                    tools=types.TasksToolsCapability(call=types.TasksCallCapability())
                ),
            )
        return capabilities


def build_server(handler_for: HandlerFor) -> Server[Any]:
    """The lowlevel server: tools/list and tools/call, for the caller of each request,
    and the task methods of both revisions."""

    def handler(ctx: ServerRequestContext[Any]) -> MCPHandler:
        return handler_of(handler_for, ctx)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        async with refusals():
            page, cursor = handler(ctx).list_tools(params.cursor if params else None)
        return types.ListToolsResult(
            tools=[types.Tool.model_validate(t) for t in page], next_cursor=cursor
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        async def progress(percent: float, note: str | None) -> None:
            # `notifications/progress`, if the request asked for them (a progress token)
            await ctx.session.report_progress(percent, 100, note)

        async with refusals():
            result = await handler(ctx).call(params.name, params.arguments, progress)
        return types.CallToolResult.model_validate(result)

    server: Server[Any] = _Server(
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
    legacy = Tasks2025(handler_for)
    server.middleware.append(legacy.augmented_call)
    _versioned(server, [*tasks.methods(), *legacy.methods()])
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
