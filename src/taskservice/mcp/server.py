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

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.requests import Request

from taskservice import __version__
from taskservice.errors import DatabaseUnavailable, ServiceError
from taskservice.mcp.handler import MCPHandler
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


def build_server(handler_for: HandlerFor) -> Server[Any]:
    """The lowlevel server: tools/list and tools/call, for the caller of each request."""

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

    return Server(
        "taskservice",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


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
