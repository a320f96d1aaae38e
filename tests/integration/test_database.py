"""The Database adapter: its own asyncpg pool, which keeps connections that only
reported a SQL error, drops the ones that failed or were cancelled mid-use, and
replaces the ones the server closed."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import text

from taskservice.db.sql import Database, Statement
from taskservice.domain.errors import DatabaseUnavailable
from tests.conftest import wait_for

BAD = Statement(text("SELECT 1 / 0 AS n"))
SLEEP = Statement(text("SELECT pg_sleep(5)"))
JSONB = Statement(text("SELECT CAST(:doc AS jsonb) AS doc, '[1, 2]'::json AS plain"))


async def test_a_sql_error_keeps_the_connection(database_url: str) -> None:
    async with Database(database_url, pool_size=1) as db:
        async with db.connection() as conn:
            pid = conn.get_server_pid()
        with pytest.raises(asyncpg.DivisionByZeroError):
            await db.fetch(BAD, {})
        async with db.connection() as conn:
            assert conn.get_server_pid() == pid  # nothing was wrong with it


async def test_a_cancelled_query_is_cancelled_and_its_connection_reused(
    database_url: str,
) -> None:
    async with Database(database_url, pool_size=1) as db:
        async with db.connection() as conn:
            pid = conn.get_server_pid()
        for wait in (0.2, 0.05, 0.05, 0.05):  # each time: mid-query
            query = asyncio.create_task(db.fetch(SLEEP, {}))
            await asyncio.sleep(wait)
            query.cancel()
            with pytest.raises(asyncio.CancelledError):
                await query
            # The only pooled connection was mid-query: the server cancelled the query
            # (well before its 5 s), and the same connection serves the next caller,
            # without "another operation is in progress" (an event stream's client
            # leaving no longer costs a reconnect).
            async with asyncio.timeout(2), db.connection() as conn:
                assert conn.get_server_pid() == pid
                assert await conn.fetchval("SELECT 1") == 1


async def test_a_connection_the_server_closed_is_replaced(database_url: str) -> None:
    async with Database(database_url, pool_size=1) as db:
        async with db.connection() as conn:
            pid = conn.get_server_pid()
        admin = await asyncpg.connect(database_url.replace("+asyncpg", ""))
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        await asyncio.sleep(0.2)  # the idle socket sees the close
        rows = await db.fetch(Statement(text("SELECT pg_backend_pid() AS pid")), {})
        assert rows[0]["pid"] != pid


async def test_json_comes_back_decoded(database_url: str) -> None:
    async with Database(database_url, pool_size=1) as db:
        row = await db.fetchrow(JSONB, {"doc": '{"a": [1, "é"], "b": null}'})
    assert row is not None
    assert row["doc"] == {"a": [1, "é"], "b": None}
    assert row["plain"] == [1, 2]


async def test_an_unreachable_server_is_unavailable() -> None:
    db = Database("postgresql://postgres@127.0.0.1:1/none", pool_size=1)
    with pytest.raises(DatabaseUnavailable):
        await db.fetch(BAD, {})
    await db.close()


async def test_a_connection_killed_mid_query_is_unavailable_then_replaced(
    database_url: str,
) -> None:
    async with Database(database_url, pool_size=1) as db:
        async with db.connection() as conn:
            pid = conn.get_server_pid()
        query = asyncio.create_task(db.fetch(SLEEP, {}))
        await asyncio.sleep(0.2)
        admin = await asyncpg.connect(database_url.replace("+asyncpg", ""))
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        # A retryable error, whatever order asyncpg learns of the close in: never an
        # InterfaceError from touching a connection the pool has already taken back.
        with pytest.raises(DatabaseUnavailable):
            await query
        rows = await db.fetch(Statement(text("SELECT pg_backend_pid() AS pid")), {})
        assert rows[0]["pid"] != pid


async def test_a_checkout_that_waits_too_long_is_unavailable(database_url: str) -> None:
    async with Database(database_url, pool_size=1, acquire_timeout=0.2) as db:

        async def connected() -> bool:
            """The pool's one connection, made (its connect is bounded by the same
            0.2 s, which a busy machine may need more than once to meet)."""
            try:
                async with db.connection():
                    return True
            except DatabaseUnavailable:
                return False

        await wait_for(connected, timeout=10)
        async with db.connection():  # the idle one: no connect
            started = asyncio.get_running_loop().time()
            with pytest.raises(DatabaseUnavailable, match="busy"):
                await db.fetch(BAD, {})
            assert asyncio.get_running_loop().time() - started < 5  # its timeout, no hang
        async with db.connection() as conn:  # free again: served at once
            assert await conn.fetchval("SELECT 1") == 1
