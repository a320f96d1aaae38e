"""Checks every request before anything parses it: NUL in the query string, then for
bodies size, media type, and the JSON itself (`domain/jsonvalues.check_body`).

A refusal here is final and changes nothing. On the REST API it is
`application/problem+json`; on a JSON-RPC endpoint (`/a2a`) it is a JSON-RPC error
with a null id, since the request was not read; on A2A's HTTP+JSON binding
(`/a2a/rest`) a `google.rpc.Status`, as its clients read errors.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from taskservice.a2a.errors import A2AError, Kind
from taskservice.a2a.rest import media_type as a2a_media_type
from taskservice.api.errors import PROBLEM_JSON
from taskservice.domain.jsonvalues import JsonRefused, NotJson, check_body

# An oversized body is read and dropped up to this much, so that a client that
# writes its whole body before reading the answer (urllib, most HTTP/1.1 clients)
# gets the 413 instead of a reset connection. Beyond it, or after the time, the
# connection is closed on it.
DRAIN_BYTES = 16 * 1_048_576
DRAIN_SECONDS = 10.0

# JSON-RPC 2.0 error codes for a refused body.
RPC_PARSE_ERROR = -32700
RPC_INVALID_REQUEST = -32600
# The A2A error each refusal is on the HTTP+JSON binding (where a 422 is a 400).
A2A_KIND_OF = {
    400: Kind.PARSE_ERROR,
    413: Kind.INVALID_REQUEST,
    415: Kind.CONTENT_TYPE_NOT_SUPPORTED,
    422: Kind.INVALID_REQUEST,
}


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )


def _nul_parameter(query_string: bytes) -> str | None:
    """The name of a query parameter whose name or value holds NUL (`%00`): PostgreSQL
    cannot compare with such text."""
    if b"%00" not in query_string:
        return None
    for name, value in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
        if "\x00" in name or "\x00" in value:
            return name.replace("\x00", "\\u0000")
    return None


class RequestGuard:
    """413 for bodies over `max_bytes` (declared or streamed); 415 for a body that
    is not declared as JSON; 400 for bytes that are not a JSON text the service reads
    and 422 for JSON it will not take (too deep, non-finite numbers, NUL or lone
    surrogates); 422 for NUL in the query string."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        max_json_depth: int,
        jsonrpc_paths: Collection[str] = (),
        status_prefixes: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_json_depth = max_json_depth
        self.jsonrpc_paths = frozenset(jsonrpc_paths)
        self.status_prefixes = status_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bad_parameter = _nul_parameter(scope.get("query_string", b""))
        if bad_parameter is not None:
            await self._refuse(
                scope,
                send,
                JsonRefused(
                    "NUL (\\u0000) characters cannot be stored or compared",
                    ("query", bad_parameter),
                    kind="character",
                ),
            )
            return
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            if int(declared) <= DRAIN_BYTES:
                await self._drain(receive, 0)
            await self._too_large(scope, send)
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
                if message.get("more_body", False):
                    await self._drain(receive, size)
                await self._too_large(scope, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body and not _is_json(headers.get(b"content-type", b"")):
            await self._reject(
                scope,
                send,
                415,
                "unsupported-media-type",
                "Unsupported media type",
                "send the body as JSON with `Content-Type: application/json`",
            )
            return
        if body:
            try:
                refused = check_body(body, max_depth=self.max_json_depth)
            except NotJson as exc:
                await self._malformed(scope, send, str(exc))
                return
            if refused is not None:
                await self._refuse(scope, send, refused, in_body=True)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _drain(self, receive: Receive, size: int) -> None:
        """Read and drop the rest of the body, within `DRAIN_BYTES` and `DRAIN_SECONDS`."""
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                while size <= DRAIN_BYTES:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    size += len(message.get("body", b""))
                    if not message.get("more_body", False):
                        return
        except TimeoutError:
            return

    async def _too_large(self, scope: Scope, send: Send) -> None:
        await self._reject(
            scope,
            send,
            413,
            "payload-too-large",
            "Payload too large",
            f"request bodies are limited to {self.max_bytes} bytes",
        )

    async def _malformed(self, scope: Scope, send: Send, detail: str) -> None:
        if scope["path"] in self.jsonrpc_paths:
            await self._rpc_error(send, RPC_PARSE_ERROR, "Parse error", {"detail": detail})
            return
        await self._reject(scope, send, 400, "malformed-json", "Malformed JSON", detail)

    async def _refuse(
        self, scope: Scope, send: Send, refused: JsonRefused, *, in_body: bool = False
    ) -> None:
        loc = ["body", *refused.path] if in_body else list(refused.path)
        if scope["path"] in self.jsonrpc_paths:
            # Too deep is a body the parser refuses; the rest is JSON, but no request.
            code, message = (
                (RPC_PARSE_ERROR, "Parse error")
                if refused.kind == "depth"
                else (RPC_INVALID_REQUEST, "Invalid Request")
            )
            data = {"detail": refused.detail, "loc": loc, **refused.extensions}
            await self._rpc_error(send, code, message, data)
            return
        if not in_body:
            detail = refused.detail  # names its parameter: "query.name: reason"
        elif refused.path:
            detail = f"body.{refused.detail}"
        else:
            detail = f"body: {refused.reason}"
        await self._reject(
            scope,
            send,
            422,
            "invalid-request",
            "Invalid request",
            detail,
            errors=[{"loc": loc, "msg": refused.reason, "type": f"json_{refused.kind}"}],
            **refused.extensions,
        )

    async def _rpc_error(self, send: Send, code: int, message: str, data: Any) -> None:
        error = {"code": code, "message": message, "data": data}
        payload = {"jsonrpc": "2.0", "id": None, "error": error}
        await self._send(send, 200, "application/json", payload, close=False)

    async def _reject(
        self,
        scope: Scope,
        send: Send,
        status: int,
        kind: str,
        title: str,
        detail: str,
        **extensions: Any,
    ) -> None:
        if self.status_prefixes and scope["path"].startswith(self.status_prefixes):
            refused = A2AError(
                A2A_KIND_OF[status], detail, http_status=400 if status == 422 else status
            )
            headers = dict(scope["headers"])
            media_type = a2a_media_type(
                headers.get(b"content-type", b"").decode("latin-1"),
                headers.get(b"accept", b"").decode("latin-1"),
            )
            await self._send(
                send, refused.http_status, media_type, refused.status(), close=status == 413
            )
            return
        payload = {
            "type": f"https://taskservice.dev/problems/{kind}",
            "title": title,
            "status": status,
            "detail": detail,
            "instance": scope.get("path"),
            **extensions,
        }
        await self._send(send, status, PROBLEM_JSON, payload, close=status == 413)

    @staticmethod
    async def _send(
        send: Send, status: int, content_type: str, payload: dict[str, Any], *, close: bool
    ) -> None:
        body = json.dumps(payload, separators=(",", ":")).encode()
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        if close:  # the body may not all have been read: this connection is done
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
