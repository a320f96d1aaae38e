"""The A2A binding over HTTP: the agent card and `POST /a2a` (JSON-RPC 2.0).

Authenticates as `/v1` does (a missing or bad key is a 401), then hands the body to
the JSON-RPC adapter (`a2a.jsonrpc`); streaming methods answer with SSE, each
event's data one JSON-RPC response. The protocol itself lives in `taskservice.a2a`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from sse_starlette import ServerSentEvent

from taskservice import __version__
from taskservice.a2a import jsonrpc
from taskservice.a2a.handler import A2AHandler
from taskservice.a2a.protocol import agent_card as card
from taskservice.agents import AgentCatalog
from taskservice.api.deps import get_caller, get_runtime
from taskservice.api.errors import problem_responses
from taskservice.api.sse import SSE_CONTENT
from taskservice.api.streams import event_stream
from taskservice.runtime import Runtime

router = APIRouter(tags=["a2a"])
PATH = "/a2a"  # the JSON-RPC endpoint

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
                        "method": {"enum": jsonrpc.NAMES},
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
    summary="A2A JSON-RPC 2.0: message/send, message/stream, tasks/get, tasks/cancel, "
    "tasks/resubscribe",
    response_description="A JSON-RPC response: `result`, or `error` with an A2A code; "
    "for message/stream and tasks/resubscribe, an SSE stream of them",
    responses={
        200: {
            "description": "A JSON-RPC response; for message/stream and tasks/resubscribe "
            "an SSE stream whose events are JSON-RPC responses",
            "content": SSE_CONTENT,
        },
        **problem_responses(401, 413, 415),
    },
    openapi_extra=_RPC_BODY,
)
async def a2a_rpc(request: Request) -> Response:
    caller = await get_caller(request)  # a missing or bad key is a 401, as on /v1
    handler = A2AHandler(caller.service, caller.tenant)
    answer = await jsonrpc.respond(handler, await request.body())
    if isinstance(answer, jsonrpc.Stream):
        return event_stream(_events(answer.responses), caller.settings)
    return Response(json.dumps(answer), media_type="application/json")


async def _catalog(runtime: Annotated[Runtime, Depends(get_runtime)]) -> AgentCatalog:
    return runtime.catalog


@router.get(
    "/.well-known/agent-card.json",
    operation_id="a2aAgentCard",
    summary="The A2A agent card: skills (agent profiles), endpoint, auth",
)
async def agent_card(
    request: Request, catalog: Annotated[AgentCatalog, Depends(_catalog)]
) -> dict[str, Any]:
    return card(
        base_url=str(request.base_url).rstrip("/"),
        endpoint=PATH,
        version=__version__,
        profiles=catalog.profiles.values(),
    )
