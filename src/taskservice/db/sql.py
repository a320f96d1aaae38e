"""Run SQLAlchemy Core statements compiled once, on the pooled asyncpg connection.

SQLAlchemy builds the statements (schema-aware, typed) and owns the pool; executing
through its full statement pipeline costs several times the CPU of the query itself,
so hot paths compile each statement once and hand the SQL to asyncpg directly.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from sqlalchemy import JSON
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from taskservice.errors import DatabaseUnavailable

_DIALECT = asyncpg_dialect()  # type: ignore[no-untyped-call]
_DISCONNECTS = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    # A connection left mid-operation (e.g. a cancelled query whose cancellation had
    # not settled): its protocol state is unknown, so it counts as lost.
    asyncpg.InternalClientError,
    ConnectionError,
    OSError,
)

Row = Mapping[str, Any]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Statement:
    """One statement, compiled to asyncpg's `$n` form; `args` orders the parameters."""

    def __init__(self, statement: ClauseElement) -> None:
        compiled = statement.compile(dialect=_DIALECT)
        assert isinstance(compiled, SQLCompiler)
        self.sql = str(compiled)
        self._names: tuple[str, ...] = tuple(compiled.positiontup or ())
        binds = compiled.binds
        # Values the statement carries itself (literals, constants in SET clauses).
        self._constants = {name: bind.value for name, bind in binds.items() if not bind.required}
        self._json = frozenset(name for name, bind in binds.items() if isinstance(bind.type, JSON))

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        values = []
        for name in self._names:
            value = params[name] if name in params else self._constants[name]
            if name in self._json and value is not None:
                value = _dumps(value)
            values.append(value)
        return values


class Database:
    """Connections from the engine's pool, driven through asyncpg.

    A connection that fails mid-use is invalidated (never returned to the pool) and
    the failure surfaces as `DatabaseUnavailable`: nothing was committed, retry.
    """

    def __init__(self, engine: AsyncEngine, *, pool_size: int = 20) -> None:
        self.engine = engine
        self._checkout_tries = pool_size + 1  # every pooled connection may be dead

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        pooled = await self._checkout()
        try:
            yield pooled.driver_connection
        except _DISCONNECTS as exc:
            pooled.invalidate(exc)
            raise DatabaseUnavailable(f"lost the database connection: {exc}") from exc
        except BaseException as exc:
            # Cancelled (client gone, lease lost, timeout) or failed mid-operation: the
            # connection may still be busy, and the next user would get "another
            # operation is in progress". Never hand it out again.
            if not isinstance(exc, asyncpg.PostgresError):
                pooled.invalidate(exc if isinstance(exc, Exception) else None)
            raise
        finally:
            pooled.close()

    async def _checkout(self) -> Any:
        # A pooled connection whose server went away (restart, pg_terminate_backend)
        # has seen its socket close while idle: asyncpg knows without a round trip.
        # Drop such connections instead of failing a request on each of them.
        for _ in range(self._checkout_tries):
            try:
                pooled = await self.engine.raw_connection()
            except _DISCONNECTS as exc:
                raise DatabaseUnavailable(f"cannot connect to the database: {exc}") from exc
            driver = pooled.driver_connection
            if driver is not None and not driver.is_closed():
                return pooled
            pooled.invalidate()
        raise DatabaseUnavailable("no live database connection")

    async def fetch(self, statement: Statement, params: Mapping[str, Any]) -> list[Row]:
        async with self.connection() as conn:
            rows: list[Row] = await conn.fetch(statement.sql, *statement.args(params))
            return rows

    async def fetchrow(self, statement: Statement, params: Mapping[str, Any]) -> Row | None:
        async with self.connection() as conn:
            row: Row | None = await conn.fetchrow(statement.sql, *statement.args(params))
            return row
