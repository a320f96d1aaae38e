"""Database URLs and the async engine."""

from __future__ import annotations

import select
from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from taskservice.domain import jsonvalues
from taskservice.domain.errors import DatabaseUnavailable


def async_url(url: str) -> str:
    """Any PostgreSQL URL (`postgres://`, `postgresql://`, `+psycopg`) → asyncpg."""
    parsed = make_url(url)
    if parsed.get_backend_name() not in ("postgresql", "postgres"):
        raise ValueError(f"taskservice needs PostgreSQL, not {parsed.get_backend_name()!r}")
    return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def hide_password(url: str) -> str:
    """The URL as it may be shown: its password masked."""
    return make_url(url).render_as_string(hide_password=True)


def asyncpg_dsn(url: str) -> tuple[str, dict[str, Any]]:
    """A DSN and keyword arguments for a bare `asyncpg.connect` (used by LISTEN)."""
    parsed = make_url(async_url(url))
    kwargs: dict[str, Any] = {}
    host = parsed.query.get("host")
    if host:
        kwargs["host"] = host
        parsed = parsed.difference_update_query(["host"])
    dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    return dsn, kwargs


def dumps_json(value: Any) -> str:
    """JSON as the service stores it: compact, UTF-8 kept as is; a value PostgreSQL
    could not store or the service could not read back is refused
    (`domain/jsonvalues.JsonRefused`, a 422) before anything is sent."""
    return jsonvalues.encode(value)


def stale(conn: asyncpg.Connection) -> bool:
    """Whether an idle pooled connection is dead or dying, without a round trip.

    An idle connection never has anything to read, so a readable socket means the
    server spoke first: almost always to say it is closing the session (a restart,
    `pg_terminate_backend`). Until the event loop has read the closed socket asyncpg
    still reports such a connection open, and the first query on it fails (`cannot
    switch to state …; another operation is in progress`)."""
    if conn.is_closed():
        return True
    transport = conn._transport  # asyncpg exposes no socket otherwise  # noqa: SLF001
    sock = transport.get_extra_info("socket") if transport is not None else None
    fd = sock.fileno() if sock is not None else -1
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _check_on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
    if stale(dbapi_conn.driver_connection):
        raise DisconnectionError("the connection was closed while idle")  # the pool reconnects


def _unavailable(ctx: ExceptionContext) -> None:
    """A database fault (connect refused, connection lost) leaves the engine as the
    domain's `DatabaseUnavailable`, as the compiled statements' pools do: every
    transport then answers it in its own shape (an A2A status, a JSON-RPC error)."""
    from taskservice.db import is_unavailable  # the package imports this module's users

    if ctx.is_disconnect or is_unavailable(ctx.original_exception):
        raise DatabaseUnavailable(
            f"database fault: {ctx.original_exception}", unsent=ctx.connection is None
        ) from ctx.sqlalchemy_exception or ctx.original_exception


Engine = AsyncEngine  # what the composition root holds, without importing SQLAlchemy


def create_engine(url: str, *, pool_size: int = 20, **kwargs: Any) -> AsyncEngine:
    """A fixed-size pool: overflow connections would be opened and closed per request
    under load. Each checkout checks the connection without a round trip (`stale`;
    SQLAlchemy's pre-ping would cost BEGIN + ROLLBACK on asyncpg), so a connection
    that died idle is replaced, never used."""
    if "poolclass" not in kwargs:
        kwargs |= {"pool_size": pool_size, "max_overflow": 0, "pool_timeout": 10}
    engine = create_async_engine(
        async_url(url), json_serializer=dumps_json, json_deserializer=jsonvalues.decode, **kwargs
    )
    event.listen(engine.sync_engine, "checkout", _check_on_checkout)
    event.listen(engine.sync_engine, "handle_error", _unavailable)
    return engine
