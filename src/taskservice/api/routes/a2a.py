"""The A2A binding over HTTP: the agent card and `POST /a2a` (JSON-RPC 2.0, A2A 1.0
and 0.3; HTTP+JSON is `a2a_rest`).

Authenticates as `/v1` does (a missing or bad key is a 401), then hands the body and
the `A2A-Version` header to the JSON-RPC adapter (`a2a.jsonrpc`); streaming methods
answer with SSE, each event's data one JSON-RPC response. The protocol itself lives
in `taskservice.a2a`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from email.utils import formatdate
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from sse_starlette import ServerSentEvent

from taskservice import __version__
from taskservice.a2a import jsonrpc, methods
from taskservice.a2a.card import HTTP_JSON, JSONRPC, Interface, agent_card, etag
from taskservice.a2a.errors import A2AError, Kind
from taskservice.a2a.handler import A2AHandler
from taskservice.api.deps import CallerContext, get_caller, get_runtime
from taskservice.api.errors import problem_responses
from taskservice.api.sse import SSE_CONTENT
from taskservice.api.streams import event_stream
from taskservice.runtime import Runtime
from taskservice.settings import Settings

router = APIRouter(tags=["a2a"])
PATH = "/a2a"  # the JSON-RPC endpoint, both versions
PATHS = (PATH, PATH + "/")  # a client that joins paths with a slash finds it too
REST_PATH = "/a2a/rest"  # the HTTP+JSON binding's base (`a2a_rest`)
INTERFACES = (
    Interface(PATH, JSONRPC, "1.0"),
    Interface(REST_PATH, HTTP_JSON, "1.0"),
    Interface(PATH, JSONRPC, "0.3"),
)
VERSION_HEADER = "A2A-Version"
CARD_MAX_AGE = 300  # seconds

_RPC_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["jsonrpc", "id", "method"],
                    "properties": {
                        "jsonrpc": {"const": "2.0"},
                        "id": {"type": ["string", "integer"]},
                        "method": {"enum": methods.NAMES},
                        "params": {"type": "object"},
                    },
                }
            }
        },
    }
}


async def _events(responses: AsyncIterator[jsonrpc.Response]) -> AsyncIterator[ServerSentEvent]:
    async for response in responses:
        yield ServerSentEvent(data=json.dumps(response))


@router.post(
    PATH,
    operation_id="a2aJsonRpc",
    summary="A2A JSON-RPC 2.0 (1.0: SendMessage, SendStreamingMessage, GetTask, ListTasks, "
    "CancelTask, SubscribeToTask, GetExtendedAgentCard; 0.3: message/send, message/stream, "
    "tasks/get, tasks/cancel, tasks/resubscribe)",
    response_description="A JSON-RPC response: `result`, or `error` with an A2A code; "
    "for the streaming methods, an SSE stream of them",
    responses={
        200: {
            "description": "A JSON-RPC response; for the streaming methods an SSE stream "
            "whose events are JSON-RPC responses (a refusal is a plain response)",
            "content": SSE_CONTENT,
        },
        **problem_responses(401, 413, 415),
    },
    openapi_extra=_RPC_BODY,
)
@router.post(PATH + "/", include_in_schema=False)
async def a2a_rpc(request: Request) -> Response:
    caller = await get_caller(request)  # a missing or bad key is a 401, as on /v1
    call = methods.Call(a2a_handler(caller), lambda: extended_card_for(request, caller))
    version = request.headers.get(VERSION_HEADER, request.query_params.get(VERSION_HEADER))
    answer = await jsonrpc.respond(call, await request.body(), version)
    if isinstance(answer, jsonrpc.Stream):
        return event_stream(_events(answer.responses), caller.settings)
    return Response(json.dumps(answer), media_type="application/json")


def public_base_url(request: Request, settings: Settings) -> str:
    """Where clients reach this service: the configured public URL, else what the
    request says (its forwarded scheme and host, behind a proxy)."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    scheme = request.headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip()
    host = request.headers.get("x-forwarded-host", request.headers.get("host", ""))
    host = host.split(",")[0].strip() or request.url.netloc
    prefix = request.headers.get("x-forwarded-prefix", "").rstrip("/")
    return f"{scheme}://{host}{prefix}"


async def card_for(request: Request, runtime: Runtime, *, extended: bool) -> dict[str, Any]:
    """The card (or with `extended` the authenticated caller's) as seen from `request`,
    declaring the API key only when one is required: not in open mode."""
    return agent_card(
        base_url=public_base_url(request, runtime.settings),
        interfaces=INTERFACES,
        version=__version__,
        profiles=runtime.catalog.profiles.values(),
        push_notifications=True,  # registered anywhere; sent by any replica's dispatcher
        extended=extended,
        v03_fields=runtime.settings.a2a_card_v03_fields,
        secured=not await runtime.auth.is_open(),
    )


def a2a_handler(caller: CallerContext) -> A2AHandler:
    """The caller's A2A requests, through the use cases they act on."""
    return A2AHandler(
        caller.tenant,
        service=caller.service,
        inbox=caller.inbox,
        webhooks=caller.webhooks,
        settings=caller.settings,
        who=caller.who,
    )


async def extended_card_for(request: Request, caller: CallerContext) -> dict[str, Any]:
    """The extended card, for a caller who authenticated with an API key. In open
    development mode a caller without one is served as the default tenant, but has
    not authenticated: the extended card is not theirs (-32007; 400 on HTTP+JSON)."""
    if caller.key_id is None:
        raise A2AError(
            Kind.EXTENDED_AGENT_CARD_NOT_CONFIGURED,
            "the extended agent card is for callers with an API key "
            "(`Authorization: Bearer <key>`)",
        )
    return await card_for(request, caller.runtime, extended=True)


@router.get(
    # Also below the JSON-RPC endpoint, where a client that takes it for the agent's
    # base URL looks (undocumented there).
    PATH + "/.well-known/agent-card.json",
    include_in_schema=False,
)
@router.get(
    "/.well-known/agent-card.json",
    operation_id="a2aAgentCard",
    summary="The A2A agent card (1.0, with the 0.3 fields): interfaces, skills (agent "
    "profiles), auth",
    response_description="The card; `ETag` and `Cache-Control` let clients cache it, and "
    "`If-None-Match` answers 304 when it has not changed",
    responses={304: {"description": "The card has not changed"}},
)
async def agent_card_route(
    request: Request, runtime: Annotated[Runtime, Depends(get_runtime)]
) -> Response:
    card = await card_for(request, runtime, extended=False)
    tag = etag(card)
    # What the card shows is fixed when the service starts (its profiles, its
    # settings), but for the URLs that follow the request, and in open mode its
    # security, which the first key ends: then a client asks again each time (with
    # the ETag: a 304 while it holds).
    secured = "securitySchemes" in card
    headers = {
        "ETag": tag,
        "Last-Modified": formatdate(runtime.started_at, usegmt=True),
        "Cache-Control": f"public, max-age={CARD_MAX_AGE}" if secured else "no-cache",
        "Vary": "Host, X-Forwarded-Host, X-Forwarded-Proto, X-Forwarded-Prefix",
    }
    if tag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(json.dumps(card), media_type="application/json", headers=headers)
