"""An sse-starlette response that costs one helper task per stream instead of four.

`EventSourceResponse` runs, per open stream, an anyio task group with four tasks
(the stream, the pinger, a shutdown listener, a disconnect listener), each with its
own cancel scopes and events: most of the memory an idle stream costs. Here the
stream runs in the request's own task, and one plain asyncio task both waits for the
client to disconnect and sends the keep-alive comment every `ping` seconds. Server
shutdown is heard through sse-starlette's own watcher, by registering an object it
calls `.set()` on, so it needs no task either.

Behaviour is sse-starlette's: the same encoding, send lock and per-send timeout
(`SendTimeoutError` for a stalled reader, on data and on pings alike), the body
iterator is closed when the client goes away, the server shuts down, or a send times
out. On shutdown the body is also ended properly, so a client reconnects at once
(with `Last-Event-ID`, to a replica still up) instead of seeing a broken response.
What this class does not do (cooperative shutdown with a grace period,
`data_sender_callable`, HEAD, websocket scopes) is left to sse-starlette, and so is
everything when a future sse-starlette no longer has the watcher hooks used here.

`run_streams_after_routing` then runs the stream after the app's layers have
returned, so an idle stream does not keep their frames and per-request state alive.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette import sse as _upstream
from sse_starlette.event import ensure_bytes
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Where `run_streams_after_routing` collects a stream the route returned.
# How the OpenAPI document describes a stream: a sequence of events (each one as a
# reader of `text/event-stream` sees it).
SSE_CONTENT: dict[str, Any] = {
    "text/event-stream": {
        "schema": {
            "type": "object",
            "description": "One server-sent event; `data` is JSON",
            "properties": {
                "event": {"type": "string"},
                "data": {"type": "string"},
                "id": {"type": "string"},
                "retry": {"type": "integer"},
            },
        }
    }
}

_DEFERRED = "taskservice.deferred_stream"

# sse-starlette's per-loop shutdown watcher: it calls `.set()` on every registered
# object when the server begins to shut down.
_start_watcher = getattr(_upstream, "_ensure_watcher_started_on_this_loop", None)
_shutdown_state = getattr(_upstream, "_get_shutdown_state", None)
# The parts of EventSourceResponse this class builds on (sse-starlette 3.x); without
# any of them, every stream is left to sse-starlette as it is.
_UPSTREAM_PARTS = all(
    hasattr(EventSourceResponse, name)
    for name in ("_stream_response", "_send_with_timeout", "ping_interval")
) and hasattr(_upstream, "AppStatus")


def keep_alive(sep: str | None = None) -> ServerSentEvent:
    """The keep-alive comment, as sse-starlette words it."""
    return ServerSentEvent(comment=f"ping - {datetime.now(UTC)}", sep=sep)


class _StopOnShutdown:
    __slots__ = ("response",)

    def __init__(self, response: LeanEventSourceResponse) -> None:
        self.response = response

    def set(self) -> None:
        self.response._stop(None, finish=True)  # noqa: SLF001


# Header lines every stream sends alike, built once: a stream keeps its headers for
# as long as it is open (`raw_headers`), and each pair costs three objects.
_SHARED_HEADERS: dict[tuple[bytes, bytes], tuple[bytes, bytes]] = {}
_SHARED_HEADERS_MAX = 64


def _shared(header: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    shared = _SHARED_HEADERS.get(header)
    if shared is not None:
        return shared
    if len(_SHARED_HEADERS) < _SHARED_HEADERS_MAX:
        _SHARED_HEADERS[header] = header
    return header


class LeanEventSourceResponse(EventSourceResponse):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.raw_headers = [_shared(header) for header in self.raw_headers]
        # asyncio's lock makes its waiter queue only when someone waits; anyio's
        # allocates one per response.
        self._send_lock = asyncio.Lock()  # type: ignore[assignment]
        self._streaming: asyncio.Task[Any] | None = None
        self._stopped = False
        self._finish = False  # end the body properly after stopping (client still there)
        self._failure: BaseException | None = None

    def _lean(self, scope: Scope) -> bool:
        return (
            scope["type"] == "http"
            and scope["method"].upper() != "HEAD"
            and self.data_sender_callable is None
            and self._shutdown_event is None
            and _start_watcher is not None
            and _shutdown_state is not None
            and _UPSTREAM_PARTS
        )

    def _stop(self, failure: BaseException | None, *, finish: bool = False) -> None:
        """End the stream from the helper task: cancel the request task, which closes
        the body iterator where it waits."""
        if not self._stopped and self._streaming is not None:
            self._stopped = True
            self._finish = finish
            self._failure = failure
            self.active = False
            self._streaming.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        deferred = scope.get(_DEFERRED)
        if deferred is not None:
            # `run_streams_after_routing` runs it once the app has returned; the
            # response start goes out through the `send` it got here (CORS).
            deferred.append((self, send))
            return
        if not self._lean(scope):
            await super().__call__(scope, receive, send)
            return
        assert _start_watcher is not None
        assert _shutdown_state is not None
        if _upstream.AppStatus.should_exit:
            return
        _start_watcher()
        listeners = _shutdown_state().events
        on_shutdown = _StopOnShutdown(self)
        streaming = asyncio.current_task()
        assert streaming is not None
        self._streaming = streaming
        listeners.add(on_shutdown)
        helper = asyncio.create_task(self._watch_client(receive, send))
        try:
            await self._stream_response(send)
        except asyncio.CancelledError:
            # Ours (disconnect, shutdown, stalled ping) ends the stream quietly, or
            # with the send timeout; anyone else's cancellation goes on.
            if not self._stopped or streaming.uncancel() > 0:
                raise
            if self._failure is not None:
                raise self._failure from None
            if self._finish:  # shutting down: a clean end, so the client reconnects
                with contextlib.suppress(Exception):
                    end = {"type": "http.response.body", "body": b"", "more_body": False}
                    await self._send_with_timeout(send, end)
        finally:
            listeners.discard(on_shutdown)
            helper.cancel()
            self._streaming = None
        if self.background is not None:
            await self.background()

    async def _watch_client(self, receive: Receive, send: Send) -> None:
        """Wait for the client to go away; every `ping` seconds meanwhile, send the
        keep-alive comment."""
        interval = self.ping_interval
        try:
            while self.active:
                message = None
                if interval > 0:
                    try:
                        async with asyncio.timeout(interval):
                            message = await receive()
                    except TimeoutError:
                        await self._send_ping(send)
                        continue
                else:
                    message = await receive()
                if message["type"] == "http.disconnect":
                    self.active = False
                    if self.client_close_handler_callable is not None:
                        await self.client_close_handler_callable(message)
                    self._stop(None)
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. SendTimeoutError: ends the stream
            self._stop(exc)

    async def _send_ping(self, send: Send) -> None:
        event = (
            self.ping_message_factory()
            if self.ping_message_factory is not None
            else keep_alive(self.sep)
        )
        async with self._send_lock:
            if self.active:
                body = ensure_bytes(event, self.sep)
                message = {"type": "http.response.body", "body": body, "more_body": True}
                await self._send_with_timeout(send, message)


Parked = tuple[LeanEventSourceResponse, Send]


class StreamGate:
    """At most `limit` streams are being set up at once (routing, authentication, the
    snapshot and the first page of replay); the others wait their turn.

    A crowd of clients connecting together (every browser after a replica restarts)
    would otherwise be set up all at once: a thousand requests' worth of frames,
    rows and JSON alive together, waiting for the database pool, and freed in an
    order that leaves the heap fragmented under the streams that stay. Admitted a
    few at a time, they reuse the same memory: opening 1,000 streams at once then
    costs about what opening them one by one does. A request that waits longer than
    `wait` seconds goes ahead anyway, so a stuck setup delays others by that at most.
    """

    def __init__(self, limit: int, *, wait: float = 5.0) -> None:
        self._slots = asyncio.Semaphore(limit)
        self._wait = wait
        self.in_setup = 0  # slots taken
        self.waited_out = 0  # requests that went ahead without a slot

    async def enter(self) -> bool:
        """True: a slot was taken, to give back with `leave`."""
        if self._slots.locked():
            try:
                async with asyncio.timeout(self._wait):
                    await self._slots.acquire()
            except TimeoutError:
                self.waited_out += 1
                return False
        else:
            await self._slots.acquire()
        self.in_setup += 1
        return True

    def leave(self) -> None:
        self.in_setup -= 1
        self._slots.release()


def _is_stream_request(scope: Scope) -> bool:
    path: str = scope["path"]
    return path.endswith("/events")  # /v1/events, /v1/tasks/{id}/events


class _StartThenServer:
    """The `send` of a stream run after routing: the response start goes through the
    app's middleware (CORS adds its headers there), the body straight to the server.
    Once the first body message is out (the stream is set up), the stream's gate
    slot is given back.

    Once the app has returned, the middleware's send wrappers only forward body
    messages (their bookkeeping, "has the response started", is never read again),
    so the stream need not keep their closures alive. This holds for the middleware
    `create_app` installs; one that rewrites bodies (compression) must not wrap
    streams."""

    __slots__ = ("_gate", "_server", "_start")

    def __init__(self, start: Send, server: Send, gate: StreamGate | None) -> None:
        self._start: Send | None = start
        self._server = server
        self._gate = gate

    async def __call__(self, message: Message) -> None:
        start = self._start
        if start is not None:
            self._start = None
            await start(message)
            return
        await self._server(message)
        self.opened()

    def opened(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.leave()


async def run_streams_after_routing(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, gate: StreamGate | None = None
) -> None:
    """Call `app`; if it answered with a stream, run the stream once `app` has
    returned: for the hours a stream may stay open, it then keeps none of the
    middleware, routing and endpoint frames, the request's exit stacks, its
    `Request` or the middleware's send wrappers alive. The response start still
    passes through the middleware (`_StartThenServer`); the stream reads the
    server's `receive` (a GET stream has no body, only the disconnect to hear).
    With a `gate`, stream requests are set up a few at a time (`StreamGate`).

    The route's dependencies have been closed by then; a stream must not need them
    (the task streams hold only the runtime's long-lived objects). An error raised
    mid-stream goes to the server, which logs it; nothing could answer it with a
    status then anyway.
    """
    if scope["type"] != "http" or scope["method"] != "GET":
        await app(scope, receive, send)
        return
    if gate is None or not _is_stream_request(scope) or not await gate.enter():
        gate = None
    deferred: list[Parked] = []
    scope[_DEFERRED] = deferred
    try:
        await app(scope, receive, send)
    finally:
        del scope[_DEFERRED]
        if not deferred and gate is not None:
            gate.leave()  # no stream: the answer is out
    if deferred:
        stream, start = deferred.pop()
        del deferred
        # Drop the request's exit stacks (closed, and heavy), and rebuild the scope
        # (the server keeps it for the stream's life) without the room routing grew.
        kept = {key: value for key, value in scope.items() if not key.startswith("fastapi_")}
        scope.clear()
        scope.update(kept)
        del kept
        sender = _StartThenServer(start, send, gate)
        del start, gate
        try:
            await stream(scope, receive, sender)
        finally:
            sender.opened()  # ended before its first event: the slot goes back all the same
