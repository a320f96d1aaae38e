"""Counts on list routes (`?count=exact|estimate`), only when asked, bounded in time;
and the active-task filter's page reads the `(tenant, state, id)` index however rare
the asked states are."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.task_pages import list_statement
from taskservice.db.tasks import TaskStore
from tests.conftest import ClientFactory

# Tasks of tenant 'default' (open mode), written straight into the table: `rare`
# in each of the three active states, the rest completed; ids in time order.
_BULK = """
INSERT INTO tasks (id, tenant, state, input, agent, max_attempts, event_seq)
SELECT (lpad(to_hex(g), 8, '0') || '-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid,
       'default',
       CASE WHEN g % :every = 0 THEN 'pending' WHEN g % :every = 1 THEN 'running'
            WHEN g % :every = 2 THEN 'input_required' ELSE 'completed' END,
       '"x"', '{"profile": "default", "model": "offline", "system_prompt": "p"}', 3, 1
FROM generate_series(1, :rows) g
"""


async def bulk(db: AsyncEngine, rows: int, every: int) -> None:
    async with db.begin() as conn:
        await conn.execute(text(_BULK), {"rows": rows, "every": every})
        await conn.execute(text("ANALYZE tasks"))


async def test_exact_counts_match_the_rows_on_every_page_and_only_when_asked(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    await bulk(db, rows=250, every=10)  # 25 each of pending, running, input_required
    async with make_client() as client:
        plain = (await client.get("/v1/tasks", params={"limit": 5})).json()
        active = {"state": ["pending", "running", "input_required"], "limit": 40}
        first = (await client.get("/v1/tasks", params={**active, "count": "exact"})).json()
        second = (
            await client.get(
                "/v1/tasks", params={**active, "count": "exact", "cursor": first["next_cursor"]}
            )
        ).json()
        pending = (
            await client.get("/v1/tasks", params={"state": "pending", "count": "exact"})
        ).json()
        estimate = (await client.get("/v1/tasks", params={"count": "estimate"})).json()
        refused = await client.get("/v1/tasks", params={"count": "roughly"})
    assert (plain["total"], plain["total_note"]) == (None, None)  # no count unless asked
    assert (first["total"], second["total"], pending["total"]) == (75, 75, 25)
    assert first["total_note"] is None
    assert len(first["tasks"]) + len(second["tasks"]) == 75  # what the total promised
    assert {t["state"] for t in first["tasks"] + second["tasks"]} == {
        "pending",
        "running",
        "input_required",
    }
    ids = [t["id"] for t in first["tasks"] + second["tasks"]]
    assert ids == sorted(ids, reverse=True)  # newest first across the merged states
    assert estimate["total_note"] == "estimate"
    assert isinstance(estimate["total"], int)
    assert 200 <= estimate["total"] <= 300
    assert refused.status_code == 422


async def test_an_exact_count_past_its_time_limit_answers_null_with_the_reason(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    await bulk(db, rows=200_000, every=1000)
    async with make_client(count_timeout_ms=1) as client:
        page = await client.get("/v1/tasks", params={"count": "exact", "limit": 3})
        again = await client.get("/v1/tasks", params={"limit": 3})  # the connection is fine
    assert page.status_code == 200, page.text
    body = page.json()
    assert body["total"] is None
    assert "longer than 1 ms" in body["total_note"]
    assert len(body["tasks"]) == 3
    assert again.status_code == 200


async def test_message_and_call_lists_count_too(make_client: ClientFactory) -> None:
    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < 2:  # two tool calls, then the answer
            call = ToolCallPart("report_progress", {"percent": 50 * (turn + 1)}, f"p{turn}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("done")])

    async with make_client(
        models={"stepper": FunctionModel(play)},
        default_tools=["report_progress"],
        workers_enabled=True,
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "hello", "model": "stepper"})).json()
        for _ in range(200):
            current = (await client.get(f"/v1/tasks/{task['id']}", params={"wait": 5})).json()
            if current["state"] == "completed":
                break
        messages = (
            await client.get(f"/v1/tasks/{task['id']}/messages", params={"count": "exact"})
        ).json()
        calls = (
            await client.get(f"/v1/tasks/{task['id']}/calls", params={"count": "exact"})
        ).json()
    assert current["state"] == "completed"
    assert messages["total"] == len(messages["messages"]) == 6  # 3 requests, 3 responses
    assert calls["total"] == len(calls["calls"]) == 2


def _nodes(plan: dict[str, Any]) -> list[tuple[str, int]]:
    """Every node of an analysed plan: (node type, rows it read)."""
    read = plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
    found = [(plan["Node Type"], read)]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


@pytest.mark.parametrize(
    "states",
    [("input_required", "pending", "running"), ("pending",), ("completed", "running")],
)
async def test_the_state_filter_pages_through_the_tenant_state_index_even_on_a_generic_plan(
    store: TaskStore, db: AsyncEngine, states: tuple[str, ...]
) -> None:
    """Prepared statements end up on generic plans, which do not know the parameters:
    `state = ANY($2)` then scanned the primary key backwards through every completed
    task (450 ms on a million tasks). The states are inlined, one ordered scan each."""
    await bulk(db, rows=300_000, every=20_000)
    statement = list_statement(
        states, False, False, False, False, agent=False, paused=None, cursor=False
    )
    async with store.db.connection() as conn, conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        plan = await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {statement.sql}",
            *statement.args({"tenant": "default", "limit": 51}),
        )
        rows = await conn.fetch(statement.sql, *statement.args({"tenant": "default", "limit": 51}))
    plan = json.loads(plan) if isinstance(plan, str) else plan
    nodes = _nodes(plan[0]["Plan"])
    scans = [node for node in nodes if "Scan" in node[0]]
    # One ordered index scan per state, merged: nothing sorts, and no scan reads
    # more than a page (the old plan read 280,000 finished tasks to find 45).
    assert len(scans) == len(states), nodes
    assert all(kind == "Index Scan" for kind, _ in scans), nodes
    assert not any(kind == "Sort" for kind, _ in nodes), nodes
    assert all(read <= 51 + 1 for _, read in scans), nodes
    # 15 tasks in each rare state; completed ones fill a page.
    assert len(rows) == (51 if "completed" in states else 15 * len(states))
    assert {row["state"] for row in rows} <= set(states)
