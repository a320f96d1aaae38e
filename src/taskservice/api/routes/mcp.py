"""`/mcp`: the MCP endpoint (streamable HTTP, stateless; `taskservice.mcp`).

Authenticates as `/v1` does (a missing or bad key is a 401 problem, with
`WWW-Authenticate: Bearer`; open development mode as on REST), then hands the
request to the SDK's transport with the caller's `MCPHandler` in the request state.
Only POST: a stateless server keeps no stream to GET and no session to DELETE.
"""

from __future__ import annotations

import json

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from taskservice.api.deps import get_caller
from taskservice.api.errors import problem, service_problem
from taskservice.domain.errors import ServiceError
from taskservice.mcp.handler import MCPHandler

PATH = "/mcp"
INVALID_REQUEST = -32600  # JSON-RPC 2.0


def bad_id(body: bytes) -> str | None:
    """Why the request in `body` (a message with a `method` and an `id`) cannot be
    answered: its id is not a string or an integer (MCP allows no null, nor JSON-RPC
    a fraction, an object, an array or a boolean). The SDK's transport reads such a
    message as a notification, and answers 202 with nothing."""
    try:
        message = json.loads(body)
    except ValueError:
        return None  # the transport's parse error
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return None
    given = message["id"]
    if isinstance(given, str) or (isinstance(given, int) and not isinstance(given, bool)):
        return None
    return f"a request's id is a string or an integer, not {json.dumps(given)[:100]}"


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
        body = await request.body()
        why = bad_id(body)
        if why is not None:  # as the transport answers a message it cannot read
            error = {"code": INVALID_REQUEST, "message": "Invalid Request", "data": why}
            answer = JSONResponse({"jsonrpc": "2.0", "id": None, "error": error}, status_code=400)
            await answer(scope, receive, send)
            return
        read = False

        async def replay() -> Message:  # the body read above, then the connection
            nonlocal read
            if not read:
                read = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        request.state.mcp_handler = MCPHandler(
            caller.service, caller.inbox, caller.settings, caller.tenant, caller.who
        )
        transport: StreamableHTTPSessionManager = request.app.state.mcp
        await transport.handle_request(scope, replay, send)


ROUTE = Route(PATH, endpoint=Endpoint(), methods=["GET", "POST", "DELETE"])
