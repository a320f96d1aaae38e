"""The claim's plan on a table of a few thousand tasks (a small deployment, or one
kept small by retention): the claimed rows are updated by their key, never found by
reading every task, which the planner chose there before (a claim then cost a read
of the whole table, each time)."""

from __future__ import annotations

import datetime
import json
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.leases import _CLAIM


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


async def test_a_claim_updates_the_tasks_it_picked_by_their_key(db: AsyncEngine) -> None:
    async with db.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        assert raw is not None
        await raw.execute(
            """
            INSERT INTO tasks (id, tenant, input, agent, metadata, state, max_attempts,
                               created_at, updated_at, status_at, run_at)
            SELECT gen_random_uuid(), 'default', '"hi"', '{"profile": "default"}', '{}',
                   CASE WHEN n <= 5 THEN 'pending' ELSE 'completed' END, 3,
                   now(), now(), now(), now()
            FROM generate_series(1, 4000) AS n
            """
        )
        await raw.execute("ANALYZE tasks")
        params = {
            "p_cap": None,
            "p_limit": 100,
            "p_owner": "plan-test",
            "p_lease": datetime.timedelta(seconds=30),
        }
        explained = await raw.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + _CLAIM.sql, *_CLAIM.args(params)
        )
        await raw.execute("TRUNCATE tasks CASCADE")
    # The connection decodes json itself (the service's codecs).
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    [claim] = [n for n in _nodes(plan) if n.get("Operation") == "Update"]
    assert claim["Actual Rows"] == 5
    scans = [n for n in _nodes(claim) if n.get("Relation Name") == "tasks"]
    assert scans, claim
    # Each read of tasks under the update reads the 5 picked rows, not the 4,000.
    assert [(n["Node Type"], n["Actual Rows"]) for n in scans] == [
        (n["Node Type"], 5) for n in scans
    ]
    assert all(n["Node Type"] != "Seq Scan" for n in scans)
