"""Counting what a list matches, only when asked (`?count=exact|estimate`).

`exact` runs `count(*)` over the list's filters (not its cursor) under a statement
timeout, so that a tenant with millions of rows cannot hold a connection: past it
the total is unknown (None) and the note says why. `estimate` asks the planner
(`EXPLAIN`): no rows are read, and it is as good as the table's statistics.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import asyncpg
from sqlalchemy.types import TypeEngine

from taskservice.db.sql import Database, Statement, text_statement
from taskservice.domain.models import CountMode, Total

Binds = tuple[tuple[str, TypeEngine[Any]], ...]


@lru_cache(maxsize=128)
def _statement(mode: CountMode, from_where: str, binds: Binds) -> Statement:
    head = "SELECT count(*)" if mode == "exact" else "EXPLAIN (FORMAT JSON) SELECT 1"
    return text_statement(f"{head} {from_where}", **dict(binds))


async def count(
    db: Database,
    mode: CountMode,
    *,
    from_where: str,
    binds: Binds,
    params: Mapping[str, Any],
    timeout_ms: int,
) -> Total:
    """The rows `from_where` (SQL: `FROM … WHERE …`, with `binds`) matches."""
    statement = _statement(mode, from_where, binds)
    async with db.connection() as conn:
        if mode == "estimate":
            plan = await conn.fetchval(statement.sql, *statement.args(params))
            if isinstance(plan, str):
                plan = json.loads(plan)
            return Total(int(plan[0]["Plan"]["Plan Rows"]), "estimate")
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL statement_timeout = {int(timeout_ms)}")
                value = await conn.fetchval(statement.sql, *statement.args(params))
        except asyncpg.QueryCanceledError:
            return Total(
                None,
                f"counting took longer than {timeout_ms} ms "
                "(TASKSERVICE_COUNT_TIMEOUT_MS); ask count=estimate",
            )
        return Total(int(value))
