"""Run SQLAlchemy Core statements compiled once, on pooled asyncpg connections.

SQLAlchemy builds the statements (schema-aware, typed); executing through its full
statement pipeline costs several times the CPU of the query itself, and so does its
pool's checkout (a greenlet hop and the connection fairy's bookkeeping). Hot paths
therefore compile each statement once and run it on a connection from an asyncpg
pool of their own. The SQLAlchemy engine stays for migrations and admin paths.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from sqlalchemy import JSON, bindparam, text
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from taskservice.db import CLAIM_POOL_SIZE  # such statements are few and short: claims
from taskservice.db.engine import asyncpg_dsn, dumps_json, stale
from taskservice.db.outage import REFUSED
from taskservice.domain import jsonvalues
from taskservice.domain.errors import DatabaseUnavailable

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
    # The server refusing a new connection (too many clients, starting, stopping).
    *REFUSED,
)

Row = Mapping[str, Any]


class Statement:
    """One statement, compiled to asyncpg's `$n` form; `args` orders the parameters.

    `generic_plan`: run on connections that plan it once and keep that plan
    (`Database`), for a statement whose plan does not depend on its parameters but
    that PostgreSQL would otherwise plan afresh on every call."""

    def __init__(self, statement: ClauseElement, *, generic_plan: bool = False) -> None:
        self.generic_plan = generic_plan
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
                value = dumps_json(value)
            values.append(value)
        return values


def text_statement(sql: str, **types: Any) -> Statement:
    """A statement written as SQL text, its `:name` parameters typed by keyword."""
    return Statement(text(sql).bindparams(*(bindparam(k, type_=t) for k, t in types.items())))


def _jsonb_encode(text: str) -> bytes:
    return b"\x01" + text.encode()  # jsonb's binary format: a version byte, then text


_decode_json = jsonvalues.decode  # from str: json.loads(bytes) sniffs the encoding


def _jsonb_decode(data: bytes) -> Any:
    return _decode_json(data[1:].decode())


async def _init_connection(conn: asyncpg.Connection) -> None:
    """json and jsonb columns come back decoded; parameters arrive encoded already
    (`Statement.args`)."""
    await conn.set_type_codec(
        "jsonb", encoder=_jsonb_encode, decoder=_jsonb_decode, schema="pg_catalog", format="binary"
    )
    await conn.set_type_codec(
        "json",
        encoder=str.encode,
        decoder=lambda data: _decode_json(data.decode()),
        schema="pg_catalog",
        format="binary",
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Replaces asyncpg's reset on release (`RESET ALL`, `UNLISTEN *`, … : a round trip
    per checkout). Pooled connections never change session state: no SET, no LISTEN
    (the hub has its own connection), only transaction-scoped advisory locks; and an
    open transaction is still rolled back by the pool before this runs."""


def _discard(conn: asyncpg.Connection) -> None:
    # Closed already, the pool may have taken it back (asyncpg does on close): then
    # the proxy refuses every call, terminate() included.
    with contextlib.suppress(asyncpg.InterfaceError):
        conn.terminate()


# Sessions that keep one plan per prepared statement (`Statement.generic_plan`).
# PostgreSQL plans a prepared statement for its parameters on each of its first five
# runs, then keeps a generic plan only if that one is estimated no costlier; for the
# claim it never is, and its planning (CTEs over four scans of `tasks` and the
# partial indexes' predicates) cost more than its execution: 560 µs against 300,
# on every claim. Its generic plan is the same plan, its parameters only sizes.
# A plan kept is made once, from the statistics of that moment: made while a table
# was small (a new deployment; before autovacuum's first ANALYZE) it would read the
# whole table until the next ANALYZE replaced it, and that table could have grown by
# thousands of rows. These statements find their rows by index whatever the size,
# so the sessions plan no sequential scan where an index serves.
GENERIC_PLANS = {"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"}


class Database:
    """A pool of asyncpg connections for the compiled statements, and a small one
    whose sessions keep generic plans (`Statement.generic_plan`).

    A connection that fails mid-use is dropped (never returned to the pool) and the
    failure surfaces as `DatabaseUnavailable`: retry. Dead idle connections (server
    restart, `pg_terminate_backend`) are replaced at checkout without a round trip
    (`engine.stale`), never handed out.
    """

    def __init__(self, url: str, *, pool_size: int = 20, acquire_timeout: float = 10) -> None:
        self._dsn, self._connect_kwargs = asyncpg_dsn(url)
        self.pool_size = pool_size
        self._acquire_timeout = acquire_timeout
        self._pool: asyncpg.Pool | None = None
        self._generic_pool: asyncpg.Pool | None = None
        self._opening = asyncio.Lock()

    async def open(self) -> Database:
        async with self._opening:
            if self._pool is None:
                self._pool = await self._create_pool(self.pool_size)
        return self

    async def _create_pool(
        self, size: int, server_settings: dict[str, str] | None = None
    ) -> asyncpg.Pool:
        try:
            return await asyncpg.create_pool(
                self._dsn,
                min_size=0,
                max_size=size,
                init=_init_connection,
                reset=_keep_session,
                server_settings=server_settings,
                **self._connect_kwargs,
            )
        except _DISCONNECTS as exc:
            raise DatabaseUnavailable(
                f"cannot connect to the database: {exc}", unsent=True
            ) from exc

    async def _generic(self) -> asyncpg.Pool:
        async with self._opening:
            if self._generic_pool is None:
                self._generic_pool = await self._create_pool(CLAIM_POOL_SIZE, GENERIC_PLANS)
            return self._generic_pool

    async def close(self) -> None:
        pools = (self._pool, self._generic_pool)
        self._pool = self._generic_pool = None
        for pool in pools:
            if pool is not None:
                try:
                    async with asyncio.timeout(10):
                        await pool.close()  # waits for connections in use to come back
                except TimeoutError:
                    pool.terminate()

    async def __aenter__(self) -> Database:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @asynccontextmanager
    async def connection(self, *, generic_plans: bool = False) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection; `generic_plans`: one whose session keeps a generic plan
        for each statement it prepares (`Statement.generic_plan`)."""
        if generic_plans:
            pool: asyncpg.Pool | None = self._generic_pool or await self._generic()
        else:
            pool = self._pool or (await self.open())._pool  # noqa: SLF001
        assert pool is not None
        conn = await self._checkout(pool)
        try:
            yield conn
        except _DISCONNECTS as exc:
            _discard(conn)
            raise DatabaseUnavailable(f"lost the database connection: {exc}") from exc
        except asyncio.CancelledError:
            # Cancelled (a stream's client gone, a lease lost, a timeout), maybe
            # mid-query: asyncpg cancels the query on the server, and the pool's
            # release waits for that to settle (terminating the connection if it does
            # not), so the connection goes back usable. Discarding it instead cost a
            # reconnect per closed event stream (the scale benchmark's stream resume).
            raise
        except BaseException as exc:
            # Failed mid-operation on our side: the protocol's state is unknown, and
            # the next user could get "another operation is in progress".
            if not isinstance(exc, asyncpg.PostgresError):
                _discard(conn)
            raise
        finally:
            await pool.release(conn)

    async def _checkout(self, pool: asyncpg.Pool) -> asyncpg.Connection:
        """A pooled connection that is not stale: dead ones are closed and replaced
        (at most a pool's worth: after a restart every idle one is dead)."""
        try:
            for _ in range(self.pool_size):
                conn = await pool.acquire(timeout=self._acquire_timeout)
                if not stale(conn._con):  # the proxy's connection  # noqa: SLF001
                    return conn
                _discard(conn)
                await pool.release(conn)
            return await pool.acquire(timeout=self._acquire_timeout)  # a new one, surely
        except TimeoutError as exc:
            raise DatabaseUnavailable("every database connection is busy", unsent=True) from exc
        except _DISCONNECTS as exc:
            raise DatabaseUnavailable(
                f"cannot connect to the database: {exc}", unsent=True
            ) from exc

    async def fetch(self, statement: Statement, params: Mapping[str, Any]) -> list[Row]:
        async with self.connection(generic_plans=statement.generic_plan) as conn:
            rows: list[Row] = await conn.fetch(statement.sql, *statement.args(params))
            return rows

    async def fetchrow(self, statement: Statement, params: Mapping[str, Any]) -> Row | None:
        async with self.connection(generic_plans=statement.generic_plan) as conn:
            row: Row | None = await conn.fetchrow(statement.sql, *statement.args(params))
            return row
