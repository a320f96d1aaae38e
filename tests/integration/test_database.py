"""The Database adapter keeps connections that only reported a SQL error."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy import text

from taskservice.db.engine import create_engine
from taskservice.db.sql import Database, Statement


async def test_a_sql_error_keeps_the_connection(database_url: str) -> None:
    engine = create_engine(database_url, pool_size=1)
    db = Database(engine, pool_size=1)
    bad = Statement(text("SELECT 1 / 0 AS n"))
    try:
        async with db.connection() as conn:
            first = conn
        with pytest.raises(asyncpg.DivisionByZeroError):
            await db.fetch(bad, {})
        async with db.connection() as conn:
            assert conn is first  # still the pooled one: nothing was wrong with it
    finally:
        await engine.dispose()
