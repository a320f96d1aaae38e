"""Checks request bodies before anything parses them: size, then media type."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from taskservice.api.errors import PROBLEM_JSON


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )


class RequestGuard:
    """413 for bodies over `max_bytes` (declared or streamed); 415 for a body that
    is not declared as JSON."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(scope, send, 413)
            return
        # Read the body up front (the route would read it all anyway), then replay it.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._reject(scope, send, 413)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body and not _is_json(headers.get(b"content-type", b"")):
            await self._reject(scope, send, 415)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _reject(self, scope: Scope, send: Send, status: int) -> None:
        if status == 413:
            kind, title = "payload-too-large", "Payload too large"
            detail = f"request bodies are limited to {self.max_bytes} bytes"
        else:
            kind, title = "unsupported-media-type", "Unsupported media type"
            detail = "send the body as JSON with `Content-Type: application/json`"
        payload = json.dumps(
            {
                "type": f"https://taskservice.dev/problems/{kind}",
                "title": title,
                "status": status,
                "detail": detail,
                "instance": scope.get("path"),
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", PROBLEM_JSON.encode()),
                    (b"content-length", str(len(payload)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
