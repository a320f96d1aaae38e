"""`/mcp`: the MCP endpoint (streamable HTTP, stateless; `taskservice.mcp`).

Authenticates as `/v1` does (a missing or bad key is a 401 problem, with
`WWW-Authenticate: Bearer`; open development mode as on REST), then hands the
request to the SDK's transport with the caller's `MCPHandler` in the request state.
Only POST: a stateless server keeps no stream to GET and no session to DELETE.
"""

from __future__ import annotations

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from taskservice.api.deps import get_caller
from taskservice.api.errors import problem, service_problem
from taskservice.errors import ServiceError
from taskservice.mcp.handler import MCPHandler

PATH = "/mcp"


def handler_for(request: Request) -> MCPHandler:
    """The handler `endpoint` put in the request's state for the SDK's handlers."""
    handler = request.state.mcp_handler
    assert isinstance(handler, MCPHandler)
    return handler


class Endpoint:
    """An ASGI app (Starlette routes to it as it is): the transport needs the raw
    request, to answer with JSON or with an SSE stream."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A field's value excludes the whitespace around it (RFC 9110 5.5); the SDK
        # compares Mcp-Name and the other routing headers as they come.
        scope["headers"] = [(name, value.strip(b" \t")) for name, value in scope["headers"]]
        request = Request(scope, receive)
        if request.method != "POST":
            detail = "this MCP server is stateless: send each message with POST"
            refused = problem(405, "Method not allowed", detail, headers={"Allow": "POST"})
            await refused(scope, receive, send)
            return
        try:
            caller = await get_caller(request)
        except ServiceError as exc:
            await (await service_problem(request, exc))(scope, receive, send)
            return
        request.state.mcp_handler = MCPHandler(caller.service, caller.tenant)
        transport: StreamableHTTPSessionManager = request.app.state.mcp
        await transport.handle_request(scope, receive, send)


ROUTE = Route(PATH, endpoint=Endpoint(), methods=["GET", "POST", "DELETE"])
