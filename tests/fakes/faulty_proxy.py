"""A reverse proxy on loopback in front of an A2A agent, that answers chosen requests
with a fault of its own instead of passing them on: a remote agent that is
unavailable for a while (5xx, 503 with `Retry-After`), or whose one method fails.

The agent's card is passed on with the agent's address replaced by the proxy's, so
that a client reading the card through the proxy calls the agent through it too.
`fault(method, path)` decides each request: None passes it on, a status code (with
`retry_after`, when set) answers it. `method` is the JSON-RPC method of a JSON-RPC
call (A2A 1.0 names: `ListTasks`, `SendMessage`, ...), else the HTTP verb. Every
decision is kept in `seen` as (method, path, status or 0 when passed on)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.loopback import free_port, served

Fault = Callable[[str, str], int | None]


@dataclass
class FaultyProxy:
    url: str
    fault: Fault
    retry_after: int | None = None
    seen: list[tuple[str, str, int]] = field(default_factory=list)

    def statuses(self, method: str) -> list[int]:
        return [status for m, _, status in self.seen if m == method]


def _method(body: bytes, verb: str) -> str:
    try:
        call = json.loads(body)
    except ValueError:
        return verb
    return str(call.get("method", verb)) if isinstance(call, dict) else verb


@asynccontextmanager
async def faulty_proxy(upstream: str, fault: Fault) -> AsyncIterator[FaultyProxy]:
    port = free_port()
    proxy = FaultyProxy(url=f"http://127.0.0.1:{port}", fault=fault)

    async with httpx.AsyncClient(base_url=upstream, timeout=30) as client:

        async def forward(request: Request) -> Response:
            body = await request.body()
            method = _method(body, request.method)
            path = request.url.path
            status = proxy.fault(method, path)
            proxy.seen.append((method, path, status or 0))
            if status is not None:
                headers = {}
                if proxy.retry_after is not None:
                    headers["Retry-After"] = str(proxy.retry_after)
                return JSONResponse({"error": "injected"}, status_code=status, headers=headers)
            passed = {
                k: v for k, v in request.headers.items() if k not in ("host", "content-length")
            }
            answer = await client.request(
                request.method,
                path,
                params=request.query_params,
                content=body,
                headers=passed,
            )
            content = answer.content
            if path.endswith("agent-card.json"):
                content = content.replace(upstream.encode(), proxy.url.encode())
            kept = {
                k: v
                for k, v in answer.headers.items()
                if k not in ("content-length", "content-encoding", "transfer-encoding")
            }
            return Response(content, status_code=answer.status_code, headers=kept)

        verbs = ["GET", "POST", "DELETE", "PUT", "PATCH"]
        app = Starlette(routes=[Route("/{path:path}", forward, methods=verbs)])
        async with served(app, port):
            yield proxy
