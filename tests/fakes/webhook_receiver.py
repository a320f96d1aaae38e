"""A real HTTP webhook receiver on 127.0.0.1 that tests can script.

Each path has a queue of replies (status, headers, delay before answering); when a
queue runs dry the default reply is 200. Every request is recorded with its
headers, raw body and arrival time. `stop()` and `start()` again on the same port
simulate a receiver that is down for a while.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import uvicorn


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (a "hang" is a delay past the timeout)


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic()

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]


class Receiver:
    def __init__(self, *, certfile: str | None = None) -> None:
        self.certfile = certfile  # PEM with key and certificate chain: serve https
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port: int = sock.getsockname()[1]
        self.received: list[Received] = []
        self._plans: dict[str, deque[Reply]] = defaultdict(deque)
        self._server: uvicorn.Server | None = None
        self._serving: asyncio.Task[None] | None = None

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        scheme = "https" if self.certfile else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    def script(self, path: str, *replies: Reply) -> None:
        self._plans[path].extend(replies)

    def clear(self, path: str) -> None:
        """Forget the replies still scripted for `path`: 200 from now on."""
        self._plans[path].clear()

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        path = scope["path"]
        self.received.append(Received(path, headers, body, time.monotonic()))
        plan = self._plans[path]
        reply = plan.popleft() if plan else Reply()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        await send(
            {
                "type": "http.response.start",
                "status": reply.status,
                "headers": [(k.encode(), v.encode()) for k, v in reply.headers.items()],
            }
        )
        await send({"type": "http.response.body", "body": b"ok"})

    async def start(self) -> None:
        config = uvicorn.Config(
            self,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
            ssl_certfile=self.certfile,
        )
        server = uvicorn.Server(config)
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        self._server = server
        self._serving = asyncio.create_task(server.serve())
        deadline = time.monotonic() + 10
        while not server.started:
            if self._serving.done():
                self._serving.result()
            if time.monotonic() > deadline:
                raise TimeoutError("the receiver did not start")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            self._server.force_exit = True  # do not wait for hanging requests
            await asyncio.wait_for(self._serving, timeout=15)
        self._server = self._serving = None

    async def __aenter__(self) -> Receiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
