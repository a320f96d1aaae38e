"""Database URLs and the async engine."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from taskservice import jsonvalues


def async_url(url: str) -> str:
    """Any PostgreSQL URL (`postgres://`, `postgresql://`, `+psycopg`) → asyncpg."""
    parsed = make_url(url)
    if parsed.get_backend_name() not in ("postgresql", "postgres"):
        raise ValueError(f"taskservice needs PostgreSQL, not {parsed.get_backend_name()!r}")
    return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


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
    (`jsonvalues.JsonRefused`, a 422) before anything is sent."""
    return jsonvalues.encode(value)


def create_engine(url: str, *, pool_size: int = 20, **kwargs: Any) -> AsyncEngine:
    """A fixed-size pool: overflow connections would be opened and closed per request
    under load. No pre-ping either (on asyncpg it costs BEGIN + ROLLBACK per checkout):
    a connection found dead invalidates the pool, and the request gets a 503 to retry
    (see `is_unavailable`)."""
    if "poolclass" not in kwargs:
        kwargs |= {"pool_size": pool_size, "max_overflow": 0, "pool_timeout": 10}
    return create_async_engine(
        async_url(url), json_serializer=dumps_json, json_deserializer=jsonvalues.decode, **kwargs
    )
