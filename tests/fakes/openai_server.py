"""A scripted OpenAI-compatible chat completions server on 127.0.0.1.

Tests queue what it answers next, one entry per request:

- `Reply(text=...)` or `Reply(tool_calls=[(id, name, arguments), ...])`;
- `Reply(status=429, retry_after_ms=10)`, `Reply(status=500)`;
- `Reply(delay=2.0, ...)`: answer after a delay (a slow provider);
- `Reply(prompt_tokens=..., completion_tokens=..., cached_tokens=...)`: the usage it
  reports (cached: `prompt_tokens_details.cached_tokens`, as OpenAI reports them);
- `stream=True` requests are answered as server-sent chunks: the text a word at a
  time, each tool call's arguments in pieces of `piece` characters, with
  `chunk_delay` seconds before each chunk (a model writing at its pace).

It records every request it received (and when: `arrivals`, monotonic seconds), so
tests can check what the service sent. With `limit=(amount, period)` it enforces a
rate limit as providers do, a token bucket of `amount` requests refilled over
`period` seconds: a request beyond it is answered 429 with `retry-after-ms` (counted
in `refused`), whatever the script says.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Reply:
    text: str | None = None
    tool_calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    retry_after_ms: int | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    piece: int = 8
    prompt_tokens: int = 11
    completion_tokens: int = 7
    cached_tokens: int | None = None  # of the prompt's, read from the provider's cache


class FakeOpenAI:
    def __init__(self, limit: tuple[float, float] | None = None) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.arrivals: list[float] = []
        self.arrived_at: list[float] = []  # the same, as Unix times (a database's clock)
        self.refused = 0
        self._limit = limit
        self._level = limit[0] if limit else 0.0
        self._level_at = time.monotonic()
        app = Starlette(routes=[Route("/v1/chat/completions", self._complete, methods=["POST"])])
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "fake OpenAI server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def queue(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def _over_limit(self) -> float | None:
        """Seconds until the bucket has room, when this request finds it empty."""
        if self._limit is None:
            return None
        amount, period = self._limit
        now = time.monotonic()
        self._level = min(amount, self._level + (now - self._level_at) * amount / period)
        self._level_at = now
        if self._level >= 1:
            self._level -= 1
            return None
        return (1 - self._level) * period / amount

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        self.arrivals.append(time.monotonic())
        self.arrived_at.append(time.time())
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        wait = self._over_limit()
        if wait is not None:
            self.refused += 1
            error = {"error": {"message": "rate limit reached", "type": "requests"}}
            headers = {"retry-after-ms": str(max(1, round(wait * 1000)))}
            return JSONResponse(error, status_code=429, headers=headers)
        reply = self.script.popleft() if self.script else Reply(text="(script exhausted)")
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            headers = {}
            if reply.retry_after_ms is not None:
                headers["retry-after-ms"] = str(reply.retry_after_ms)
            error = {"error": {"message": f"scripted {reply.status}", "type": "scripted"}}
            return JSONResponse(error, status_code=reply.status, headers=headers)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for call_id, name, arguments in reply.tool_calls
            ]
        finish = "tool_calls" if reply.tool_calls else "stop"
        usage = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }
        if reply.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        if body.get("stream"):
            return StreamingResponse(
                self._chunks(body["model"], message, finish, usage, reply),
                media_type="text/event-stream",
            )
        return JSONResponse(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )

    async def _chunks(
        self,
        model: str,
        message: dict[str, Any],
        finish: str,
        usage: dict[str, Any],
        reply: Reply,
    ) -> Any:
        def chunk(delta: dict[str, Any], reason: str | None = None, **extra: Any) -> str:
            data = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
                **extra,
            }
            return f"data: {json.dumps(data)}\n\n"

        async def paced(data: str) -> str:
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            return data

        yield chunk({"role": "assistant"})
        for index, word in enumerate((message.get("content") or "").split(" ")):
            yield await paced(chunk({"content": word if index == 0 else " " + word}))
        for index, call in enumerate(message.get("tool_calls", [])):
            arguments = call["function"]["arguments"]
            head = {**call, "function": {"name": call["function"]["name"], "arguments": ""}}
            yield await paced(chunk({"tool_calls": [{"index": index, **head}]}))
            for start in range(0, len(arguments), reply.piece):
                piece = {"arguments": arguments[start : start + reply.piece]}
                yield await paced(chunk({"tool_calls": [{"index": index, "function": piece}]}))
        yield chunk({}, finish, usage=usage)
        yield "data: [DONE]\n\n"
