"""The dispatcher's HTTP client: pinned to checked addresses, no redirects.

Each attempt resolves and checks the target (`targets.resolve`) and *pins* its host to
the addresses that passed; the connection pool's network backend connects only to a
pinned address, never resolving again, so DNS cannot be re-bound between check and
connect. The URL keeps the real host name, so the `Host` header, TLS SNI and
certificate verification are for the name the subscriber registered, and pooled
connections are never shared between host names. httpcore does not follow redirects;
a 3xx is a failed attempt like any other non-2xx answer.

`CheckedTransport` gives other outbound calls (delegation to remote agents, made by
the A2A SDK's httpx client) the same guarantee: each request's URL checked, its
host pinned to the addresses that passed, the connection made only to one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import certifi
import httpcore
import httpx

from taskservice.webhooks.targets import (
    AllowList,
    IPAddress,
    Resolver,
    Target,
    resolve,
    system_resolver,
)

USER_AGENT = "taskservice-webhooks/1"
_MAX_RESPONSE_BYTES = 65_536  # read (and discard) at most this much of an answer
_TIMEOUTS = ("connect", "read", "write", "pool")


def _normal(host: str) -> str:
    return host.strip("[]").lower()


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects a host name only to the addresses last pinned for it."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._pins: dict[tuple[str, int], tuple[IPAddress, ...]] = {}

    def pin(self, host: str, port: int, addresses: Iterable[IPAddress]) -> None:
        self._pins[(_normal(host), port)] = tuple(addresses)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = self._pins.get((_normal(host), port))
        if not addresses:
            raise httpcore.ConnectError(f"{host}:{port} was not checked before connecting")
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks are never sent over unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class CheckedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that checks each request's URL as a webhook target's
    (`targets.resolve`: `UnsafeTarget` if it may not be called) and connects only to
    the addresses that passed (`PinnedBackend`), keeping the host name for `Host`,
    SNI and certificate verification. Redirects are the client's (httpx follows
    none unless asked), each one a request checked here."""

    def __init__(
        self,
        *,
        allow: AllowList,
        allow_http: bool,
        resolver: Resolver = system_resolver,
        ssl_context: ssl.SSLContext | None = None,  # default: the system's CAs via certifi
    ) -> None:
        self.allow = allow
        self.allow_http = allow_http
        self.resolver = resolver
        self._backend = PinnedBackend()
        self._inner = httpx.AsyncHTTPTransport()
        # httpx takes no network backend of its own: its pool (which the rest of the
        # transport, mapping requests, responses and errors, uses) is made with ours.
        self._inner._pool = httpcore.AsyncConnectionPool(  # noqa: SLF001
            ssl_context=ssl_context or ssl.create_default_context(cafile=certifi.where()),
            max_connections=100,  # httpx's defaults
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=self._backend,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = await resolve(
            str(request.url), allow=self.allow, allow_http=self.allow_http, resolver=self.resolver
        )
        self._backend.pin(target.host, target.port, target.addresses)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(frozen=True, slots=True)
class Answer:
    status_code: int
    retry_after: float | None  # seconds, from a Retry-After header
    location: str | None  # of a redirect, for the delivery log


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds from `Retry-After`: delta-seconds or an HTTP date. None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class Sender:
    """Keep-alive connections per origin, each used by one request at a time.

    httpcore's own pool rescans every connection on each request and release, which
    costs more than the request itself at a few dozen connections; here a request
    takes an idle connection of its origin (or opens one) and gives it back.
    """

    def __init__(
        self,
        *,
        timeout: float,
        max_idle_per_origin: int = 32,
        ssl_context: ssl.SSLContext | None = None,  # default: the system's CAs via certifi
    ) -> None:
        self.timeout = timeout
        self._backend = PinnedBackend()
        self._ssl = ssl_context or ssl.create_default_context(cafile=certifi.where())
        self._max_idle = max_idle_per_origin
        self._idle: dict[tuple[str, str, int], list[httpcore.AsyncHTTPConnection]] = {}

    def _checkout(self, key: tuple[str, str, int]) -> httpcore.AsyncHTTPConnection:
        idle = self._idle.get(key, [])
        while idle:
            conn = idle.pop()
            if conn.is_idle() and not conn.has_expired():
                return conn
        scheme, host, port = key
        return httpcore.AsyncHTTPConnection(
            httpcore.Origin(scheme.encode(), host.encode(), port),
            ssl_context=self._ssl,
            keepalive_expiry=30.0,
            network_backend=self._backend,
        )

    async def _checkin(self, key: tuple[str, str, int], conn: httpcore.AsyncHTTPConnection) -> None:
        idle = self._idle.setdefault(key, [])
        if conn.is_idle() and len(idle) < self._max_idle:
            idle.append(conn)
        else:
            await conn.aclose()

    async def post(
        self,
        target: Target,
        body: bytes,
        headers: Mapping[str, str],
        *,
        content_type: str = "application/json",
    ) -> Answer:
        """One POST within `timeout` (the whole exchange). Raises on transport errors
        and `TimeoutError`."""
        self._backend.pin(target.host, target.port, target.addresses)
        key = (target.scheme, _normal(target.host), target.port)
        request = httpcore.Request(
            "POST",
            target.url,
            headers=[
                ("Host", urlsplit(target.url).netloc),  # the registered name, never the IP
                ("User-Agent", USER_AGENT),
                ("Content-Type", content_type),
                ("Content-Length", str(len(body))),
                *headers.items(),
            ],
            content=body,
            extensions={
                "timeout": dict.fromkeys(("connect", "read", "write", "pool"), self.timeout)
            },
        )
        conn = self._checkout(key)
        try:
            async with asyncio.timeout(self.timeout):
                response = await conn.handle_async_request(request)
                try:
                    read = 0
                    async for chunk in response.aiter_stream():
                        read += len(chunk)
                        if read > _MAX_RESPONSE_BYTES:
                            break
                finally:
                    await response.aclose()
        except BaseException:
            await conn.aclose()
            raise
        await self._checkin(key, conn)
        found = {k.decode().lower(): v.decode("latin-1") for k, v in response.headers}
        return Answer(
            status_code=response.status,
            retry_after=parse_retry_after(found.get("retry-after")),
            location=found.get("location"),
        )

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                with contextlib.suppress(Exception):
                    await conn.aclose()
