"""The plans of a worker's statements on a table of a few thousand tasks (a small
deployment, or one kept small by retention).

A claim updates the rows it picked by their key, never found by reading every task,
which the planner chose there before (a claim then cost a read of the whole table,
each time). The plan the service runs is the generic one, kept for the session:
planning it anew for each claim cost more than running it. A run's fenced writes
find their task by its key, not by reading every running task."""

from __future__ import annotations

import datetime
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.claims import CLAIM as _CLAIM
from taskservice.db.leases import LeaseStore
from taskservice.db.sql import GENERIC_PLANS
from taskservice.db.steps import _finish_statement
from taskservice.db.tasks import TaskStore
from taskservice.domain.states import TaskState
from tests.integration.helpers import new_task


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


_FILL = """
INSERT INTO tasks (id, tenant, input, agent, metadata, state, max_attempts,
                   created_at, updated_at, status_at, run_at)
SELECT gen_random_uuid(), 'default', '"hi"', '{"profile": "default"}', '{}',
       CASE WHEN n <= 5 THEN 'pending' ELSE 'completed' END, 3,
       now(), now(), now(), now()
FROM generate_series(1, 4000) AS n
"""
_FILL_PAUSED = """
INSERT INTO tasks (id, tenant, input, agent, metadata, state, max_attempts,
                   created_at, updated_at, status_at, run_at, paused)
SELECT gen_random_uuid(), 'default', '"hi"', '{"profile": "default"}', '{}',
       CASE WHEN n <= 2005 THEN 'pending' ELSE 'completed' END, 3,
       now(), now(), now(), now() - make_interval(secs => n),
       CASE WHEN n > 5 AND n <= 2005 THEN '{"by": "test", "scope": "task"}'::jsonb END
FROM generate_series(1, 4000) AS n
"""
_CLAIM_ARGS = "NULL, 100, 'plan-test', interval '30 seconds'"  # no cap, limit, owner, lease


async def _explained_custom(raw: Any, fill: str = _FILL) -> Any:
    """The claim planned for its parameters, on the filled and analysed table."""
    await raw.execute(fill)
    await raw.execute("ANALYZE tasks")
    params = {
        "p_cap": None,
        "p_limit": 100,
        "p_owner": "plan-test",
        "p_lease": datetime.timedelta(seconds=30),
    }
    return await raw.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + _CLAIM.sql, *_CLAIM.args(params))


async def _explained_generic(raw: Any) -> Any:
    """The claim as the service runs it: one plan for the session (its settings),
    made on an empty table, kept while the table fills (no ANALYZE in between)."""
    await raw.execute("ANALYZE tasks")
    await raw.execute(f"PREPARE claim AS {_CLAIM.sql}")
    try:
        for name, value in GENERIC_PLANS.items():
            await raw.execute(f"SET {name} = {value}")
        await raw.execute(f"EXECUTE claim({_CLAIM_ARGS})")  # plans it, claiming nothing
        await raw.execute(_FILL)
        return await raw.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim({_CLAIM_ARGS})")
    finally:  # the engine's connection goes back to its pool as it came
        await raw.execute("DEALLOCATE claim")
        await raw.execute("RESET ALL")


@pytest.mark.parametrize("planned", [_explained_custom, _explained_generic])
async def test_a_claim_updates_the_tasks_it_picked_by_their_key(
    db: AsyncEngine, planned: Callable[[Any], Awaitable[Any]]
) -> None:
    async with db.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        assert raw is not None
        explained = await planned(raw)
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
    # Nor does any other part of the claim read the whole table.
    assert all(n["Node Type"] != "Seq Scan" for n in _nodes(plan))


async def test_claims_keep_one_plan_for_the_session(store: TaskStore) -> None:
    """A claim runs on a session that keeps its generic plan: past the five custom
    plans PostgreSQL would otherwise make, none is made at all."""
    leases = LeaseStore(store.db)
    for _ in range(8):
        made = await new_task(store)
        [claimed] = await leases.claim(owner="w", limit=10, lease_seconds=30)
        assert claimed.id == made.id
    async with (
        store.db.connection(generic_plans=True) as one,
        store.db.connection(generic_plans=True) as other,
    ):
        plans = [
            await conn.fetchrow(
                "SELECT coalesce(sum(generic_plans), 0) AS generic,"
                " coalesce(sum(custom_plans), 0) AS custom"
                " FROM pg_prepared_statements WHERE statement = $1",
                _CLAIM.sql,
            )
            for conn in (one, other)
        ]
    assert sum(p["generic"] for p in plans) == 8
    assert sum(p["custom"] for p in plans) == 0


async def test_a_fenced_write_finds_its_task_by_key_however_many_run(db: AsyncEngine) -> None:
    """A run's writes (here its outcome) find the task by its key, not through an
    index over the running tasks, even planned while few ran: 2,000 run by the time
    it executes."""
    async with db.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        assert raw is not None
        await raw.execute("ANALYZE tasks")  # the statistics of an empty table
        await raw.execute(_FILL.replace("'pending'", "'running'").replace("n <= 5", "true"))
        await raw.execute("UPDATE tasks SET lease_owner = 'w', attempt = 1")
        task_id = await raw.fetchval("SELECT id FROM tasks LIMIT 1")
        statement = _finish_statement(TaskState.COMPLETED, ("result",))
        params = {
            "p_id": task_id,
            "p_owner": "w",
            "p_attempt": 1,
            "p_events": [{"type": "state_change", "data": {"from": "running", "to": "completed"}}],
            "p_log_cap": 100,
            "p_messages": [],
            "p_calls": [],
            "p_read": 0,
            "v_result": "done",
        }
        explained = await raw.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + statement.sql, *statement.args(params)
        )
        await raw.execute("TRUNCATE tasks CASCADE")
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    [finish] = [n for n in _nodes(plan) if n.get("Operation") == "Update"]
    assert finish["Actual Rows"] == 1
    scans = [n for n in _nodes(finish)[1:] if n.get("Relation Name") == "tasks"]
    assert [(n["Node Type"], n.get("Index Name")) for n in scans] == [("Index Scan", "pk_tasks")]


async def test_a_claim_reads_no_paused_task(db: AsyncEngine) -> None:
    """Paused tasks are out of the claim index: 2,000 paused pending tasks, older than
    the 5 that are not (first in claim order, were they claimable), cost a claim
    nothing: every read of tasks it makes is of the 5 it takes."""
    async with db.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        assert raw is not None
        explained = await _explained_custom(raw, _FILL_PAUSED)
        await raw.execute("TRUNCATE tasks CASCADE")
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    [claim] = [n for n in _nodes(plan) if n.get("Operation") == "Update"]
    assert claim["Actual Rows"] == 5
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "tasks"]
    assert "ix_tasks_claimable" in {n.get("Index Name") for n in scans}
    assert all(n["Node Type"] != "Seq Scan" for n in _nodes(plan))
    # No scan reads a paused task (the loose scan of tenants reads a row a step).
    assert all(n["Actual Rows"] <= 5 for n in scans), scans
