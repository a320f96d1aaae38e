"""Spend kept as it is written (issue 41 §1): the rollup the `tasks` trigger keeps
(migration 0025) is always the sum of every task's usage; `GET /v1/usage` answers
from it, grouped and filtered, and reads an index range of it however many tasks
and days there are; a task with subtasks shows its subtree's spend."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from pydantic_ai import RunContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.tasks import TaskStore
from taskservice.db.usage import _report_statement
from tests.conftest import ClientFactory
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.helpers import QUICK_RECOVERY, until_state, worker_dies
from tests.integration.test_cost import PRICED, UNKNOWN, _run, _settings, fake

__all__ = ["fake"]  # the fixture, used here

_AGENT = '{"profile": "%s", "model": "%s", "system_prompt": "p"}'
_TASK = """
INSERT INTO tasks (id, tenant, state, input, agent, max_attempts, event_seq, context_id, usage)
VALUES (:id, :tenant, 'completed', '"x"', CAST(:agent AS jsonb), 3, 1, :context,
        CAST(:usage AS jsonb))
"""
_SUM_TASKS = """
SELECT coalesce(sum(p.input_tokens), 0) AS input_tokens,
       coalesce(sum(p.output_tokens), 0) AS output_tokens,
       coalesce(sum(p.requests), 0) AS requests, coalesce(sum(p.cost), 0) AS cost,
       coalesce(sum(p.unpriced_requests), 0) AS unpriced_requests
FROM tasks t, taskservice_usage_parts(t.usage, t.agent->>'model') p
"""
_SUM_ROLLUP = """
SELECT coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens,
       coalesce(sum(requests), 0) AS requests, coalesce(sum(cost), 0) AS cost,
       coalesce(sum(unpriced_requests), 0) AS unpriced_requests
FROM {table}
"""


def _usage(i: int, o: int, r: int, cost: str | None, unpriced: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": i,
        "output_tokens": o,
        "requests": r,
        "cost": cost,
        "currency": "USD",
        "unpriced_requests": unpriced,
    }


async def _insert(
    db: AsyncEngine,
    usage: dict[str, Any],
    *,
    tenant: str = "default",
    profile: str = "default",
    model: str = "offline",
    context: str | None = None,
) -> str:
    task_id = f"{random.getrandbits(32):08x}-0000-7000-8000-{random.getrandbits(48):012x}"
    async with db.begin() as conn:
        await conn.execute(
            text(_TASK),
            {
                "id": task_id,
                "tenant": tenant,
                "agent": _AGENT % (profile, model),
                "context": context,
                "usage": json.dumps(usage),
            },
        )
    return task_id


async def _set_usage(db: AsyncEngine, task_id: str, usage: dict[str, Any]) -> None:
    async with db.begin() as conn:
        await conn.execute(
            text("UPDATE tasks SET usage = CAST(:usage AS jsonb) WHERE id = :id"),
            {"id": task_id, "usage": json.dumps(usage)},
        )


def _relations(plan: dict[str, Any]) -> list[tuple[str, str, int]]:
    """The plan's reads of tables: (node type, table, rows it read)."""
    found = []
    if "Relation Name" in plan:
        read = plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
        found.append((plan["Node Type"], plan["Relation Name"], read))
    for child in plan.get("Plans", []):
        found += _relations(child)
    return found


async def _sums(db: AsyncEngine, sql: str) -> dict[str, Any]:
    async with db.connect() as conn:
        row = (await conn.execute(text(sql))).mappings().one()
    return {k: Decimal(v) if k == "cost" else int(v) for k, v in row.items()}


async def test_the_rollup_adds_each_change_of_a_tasks_usage_once(db: AsyncEngine) -> None:
    first = await _insert(db, _usage(100, 10, 1, "0.001"), context="c1")
    await _set_usage(db, first, _usage(250, 30, 2, "0.0025"))
    await _set_usage(db, first, _usage(250, 30, 2, "0.0025"))  # unchanged: nothing added
    other = await _insert(db, _usage(5, 5, 1, None, 1), profile="helper", model="m2")
    # Written before costs were kept: its requests were none of them priced.
    await _insert(db, {"input_tokens": 7, "output_tokens": 3, "requests": 2})
    async with db.connect() as conn:
        rows = (
            (await conn.execute(text("SELECT * FROM usage_daily ORDER BY agent, model")))
            .mappings()
            .all()
        )
        contexts = (
            (await conn.execute(text("SELECT context_id, requests FROM usage_contexts")))
            .mappings()
            .all()
        )
    today = datetime.now(UTC).date()
    shown = [
        (
            r["agent"],
            r["model"],
            r["input_tokens"],
            r["requests"],
            r["cost"],
            r["unpriced_requests"],
        )
        for r in rows
    ]
    assert shown == [
        ("default", "offline", 257, 4, Decimal("0.0025"), 2),
        ("helper", "m2", 5, 1, Decimal(0), 1),
    ]
    assert {r["day"] for r in rows} == {today}
    assert sorted((r["context_id"], r["requests"]) for r in contexts) == [
        ("", 1),
        ("", 2),
        ("c1", 2),
    ]
    assert other


async def test_a_usage_naming_its_models_is_split_by_them(db: AsyncEngine) -> None:
    """A run that went on on a fallback model writes `usage.models`: each model's
    part goes to its own row, the earlier part (before the models were named) moved
    from the task's model to where it belongs."""
    task = await _insert(db, _usage(100, 10, 1, "0.01"), model="big")
    both = {
        **_usage(150, 20, 3, "0.0102"),
        "models": {
            "big": _usage(100, 10, 1, "0.01"),
            "small": _usage(50, 10, 2, "0.0002"),
        },
    }
    await _set_usage(db, task, both)
    async with db.connect() as conn:
        rows = (
            await conn.execute(text("SELECT model, requests, cost FROM usage_daily ORDER BY model"))
        ).all()
    assert [tuple(r) for r in rows] == [
        ("big", 1, Decimal("0.01")),
        ("small", 2, Decimal("0.0002")),
    ]


async def test_the_rollup_is_the_sum_over_tasks_after_a_random_mix_of_writes(
    db: AsyncEngine,
) -> None:
    rng = random.Random(41)
    tasks: dict[str, dict[str, Any]] = {}
    for _ in range(300):
        if not tasks or rng.random() < 0.3:
            usage = _usage(rng.randint(0, 500), rng.randint(0, 50), rng.randint(0, 3), None)
            if usage["requests"] and rng.random() < 0.7:
                usage["cost"] = str(Decimal(rng.randint(1, 10_000)) / 10_000_000)
            task = await _insert(
                db,
                usage,
                tenant=rng.choice(["default", "acme"]),
                profile=rng.choice(["default", "helper"]),
                model=rng.choice(["m1", "m2"]),
                context=rng.choice([None, "c1", "c2"]),
            )
            tasks[task] = usage
            continue
        task = rng.choice(list(tasks))
        usage = dict(tasks[task])
        more = rng.randint(1, 2)
        usage["requests"] += more
        usage["input_tokens"] += rng.randint(1, 300)
        usage["output_tokens"] += rng.randint(1, 30)
        if rng.random() < 0.5:
            usage["unpriced_requests"] += more
        else:
            added = Decimal(rng.randint(1, 10_000)) / 10_000_000
            usage["cost"] = str(Decimal(usage["cost"] or 0) + added)
        tasks[task] = usage
        await _set_usage(db, task, usage)
    expected = await _sums(db, _SUM_TASKS)
    assert expected["requests"] > 300
    assert await _sums(db, _SUM_ROLLUP.format(table="usage_daily")) == expected
    assert await _sums(db, _SUM_ROLLUP.format(table="usage_contexts")) == expected


async def test_usage_route_totals_groups_and_filters(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    await _insert(db, _usage(100, 10, 1, "0.5"), profile="writer", model="m1", context="c1")
    await _insert(db, _usage(200, 20, 2, "0.25"), profile="writer", model="m2", context="c2")
    await _insert(db, _usage(300, 30, 3, None, 3), profile="reader", model="m1", context="c1")
    await _insert(db, _usage(999, 99, 9, "9"), tenant="acme", profile="writer", model="m1")
    today = datetime.now(UTC).date()
    async with make_client() as client:
        total = (await client.get("/v1/usage")).json()
        by_agent = (await client.get("/v1/usage", params={"group_by": "agent"})).json()
        by_model_day = (
            await client.get("/v1/usage", params=[("group_by", "model"), ("group_by", "day")])
        ).json()
        by_context = (await client.get("/v1/usage", params={"group_by": "context"})).json()
        only_m1 = (await client.get("/v1/usage", params={"model": "m1"})).json()
        cut = (await client.get("/v1/usage", params={"group_by": "model", "limit": 1})).json()
        tomorrow = (today + timedelta(days=1)).isoformat()
        later = (await client.get("/v1/usage", params={"from": tomorrow, "to": tomorrow})).json()
        backwards = await client.get(
            "/v1/usage", params={"from": tomorrow, "to": today.isoformat()}
        )
        unknown = await client.get("/v1/usage", params={"group_by": "colour"})
        bad_day = await client.get("/v1/usage", params={"from": "2026-02-30"})
    assert total["total"] == {
        "input_tokens": 600,
        "output_tokens": 60,
        "requests": 6,
        "cost": "0.75",
        "unpriced_requests": 3,
    }  # not acme's
    assert (total["currency"], total["groups"], total["more"]) == ("USD", [], False)
    assert total["to"] == today.isoformat()
    assert total["from"] == (today - timedelta(days=29)).isoformat()
    # Largest cost first; the reader's requests were all unpriced: null, not 0, last.
    assert [(g["agent"], g["cost"], g["requests"]) for g in by_agent["groups"]] == [
        ("writer", "0.75", 3),
        ("reader", None, 3),
    ]
    assert set(by_agent["groups"][0]) == {
        "agent",
        "input_tokens",
        "output_tokens",
        "requests",
        "cost",
        "unpriced_requests",
    }
    assert by_model_day["group_by"] == ["day", "model"]
    assert [(g["day"], g["model"], g["cost"]) for g in by_model_day["groups"]] == [
        (today.isoformat(), "m1", "0.5"),
        (today.isoformat(), "m2", "0.25"),
    ]
    assert sorted((g["context"], g["requests"]) for g in by_context["groups"]) == [
        ("c1", 4),
        ("c2", 2),
    ]
    assert only_m1["total"]["requests"] == 4
    assert (len(cut["groups"]), cut["more"], cut["total"]["requests"]) == (1, True, 6)
    assert later["total"] == {
        "input_tokens": 0,
        "output_tokens": 0,
        "requests": 0,
        "cost": "0",
        "unpriced_requests": 0,
    }
    for refused in (backwards, unknown, bad_day):
        assert refused.status_code == 422, refused.text
        assert refused.headers["content-type"] == "application/problem+json"


async def test_a_task_with_subtasks_shows_what_its_subtree_spent(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    parent = await _insert(db, _usage(100, 10, 1, "0.1"))
    child = await _insert(db, _usage(50, 5, 1, None, 1))
    grandchild = await _insert(db, _usage(20, 2, 1, "0.02"))
    lone = await _insert(db, _usage(1, 1, 1, "0.5"))
    async with db.begin() as conn:
        await conn.execute(
            text("UPDATE tasks SET parent_id = :p WHERE id = :c"), {"p": parent, "c": child}
        )
        await conn.execute(
            text("UPDATE tasks SET parent_id = :p WHERE id = :c"), {"p": child, "c": grandchild}
        )
    async with make_client() as client:
        top = (await client.get(f"/v1/tasks/{parent}")).json()
        middle = (await client.get(f"/v1/tasks/{child}", params={"wait": 0.1})).json()
        alone = (await client.get(f"/v1/tasks/{lone}")).json()
        listed = (await client.get("/v1/tasks")).json()["tasks"]
    assert top["usage"]["subtree"] == {
        "input_tokens": 170,
        "output_tokens": 17,
        "requests": 3,
        "cost": "0.12",
        "currency": "USD",
        "unpriced_requests": 1,
        "tasks": 3,
    }
    assert top["usage"]["cost"] == "0.1"  # its own stays its own
    assert middle["usage"]["subtree"]["tasks"] == 2
    assert middle["usage"]["subtree"]["cost"] == "0.02"
    assert "subtree" not in alone["usage"]
    assert all("subtree" not in t["usage"] for t in listed)  # read by id only


async def test_a_usage_report_reads_an_index_range_of_the_rollup_not_the_tasks(
    store: TaskStore, db: AsyncEngine
) -> None:
    """A year of a busy tenant's days, 20 profiles and 5 models, among 50 tenants: the
    report of one tenant's month reads that month's rows of it, through the primary
    key, whatever the rest holds."""
    async with db.begin() as conn:
        await conn.execute(
            text(
                """
INSERT INTO usage_daily (tenant, day, agent, model, input_tokens, output_tokens, requests,
                         cost, unpriced_requests)
SELECT 't' || t, DATE '2026-01-01' + d, 'agent' || a, 'model' || m, 100, 10, 1, 0.001, 0
FROM generate_series(0, 49) t, generate_series(0, 364) d, generate_series(0, 19) a,
     generate_series(0, 4) m
"""
            )
        )
        await conn.execute(text("ANALYZE usage_daily"))
    params = {
        "tenant": "t7",
        "since": date(2026, 3, 1),
        "until": date(2026, 3, 31),
        "agent": None,
        "model": None,
        "limit": 101,
    }
    statement = _report_statement(("agent",), False, False)
    async with store.db.connection() as conn, conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        plan = await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {statement.sql}", *statement.args(params)
        )
        row = await conn.fetchrow(statement.sql, *statement.args(params))
    plan = json.loads(plan) if isinstance(plan, str) else plan
    nodes = _relations(plan[0]["Plan"])
    assert nodes, plan
    assert {relation for _, relation, _ in nodes} == {"usage_daily"}, nodes
    assert all("Seq" not in kind for kind, _, _ in nodes), nodes
    # One tenant's 31 days by 100 profile and model pairs: no other row is read.
    assert all(read <= 31 * 100 for _, _, read in nodes), nodes
    assert row["requests"] == 31 * 100
    assert len(row["groups"]) == 20


@pytest.mark.parametrize("group_by", [(), ("context",), ("day", "agent", "model", "context")])
def test_every_grouping_compiles(group_by: tuple[str, ...]) -> None:
    statement = _report_statement(group_by, True, True)
    assert ("usage_contexts" in statement.sql) == ("context" in group_by)


async def test_the_rollup_is_the_sum_over_tasks_after_runs_forks_subtasks_crashes_and_failures(
    make_client: ClientFactory, db: AsyncEngine, fake: FakeOpenAI
) -> None:
    """Real runs against the fake OpenAI server, each way usage is written: plain
    runs, a run resumed after input, a subtask, a fork, a run recovered after its
    worker died, a run whose model failed; then `/v1/usage` and the rollup equal the
    sum of the tasks' own usage."""
    hanging = asyncio.Event()

    async def hang(ctx: RunContext[Any]) -> str:
        """Never returns the first time."""
        if not hanging.is_set():
            hanging.set()
            await asyncio.sleep(3600)
        return "back"

    tools = ["spawn_subtask", "wait_for_subtasks", "hang", "ask_user"]
    settings = _settings(fake, default_tools=tools, **QUICK_RECOVERY)
    async with make_client(tools={"hang": hang}, **settings) as client:
        fake.queue(Reply(text="One.", prompt_tokens=120, completion_tokens=12))
        plain = await _run(client, PRICED)
        fake.queue(Reply(text="Two.", prompt_tokens=80, completion_tokens=9))
        await _run(client, UNKNOWN)  # unpriced
        await _run(client, "offline")
        fake.queue(
            Reply(tool_calls=[("q", "ask_user", {"question": "Which?"})], prompt_tokens=50),
            Reply(text="That one.", prompt_tokens=70, completion_tokens=5),
        )
        asked = (await client.post("/v1/tasks", json={"input": "pick", "model": PRICED})).json()
        await until_state(client, asked["id"], "input_required")
        await client.post(f"/v1/tasks/{asked['id']}/input", json={"answer": "that"})
        await until_state(client, asked["id"], "completed")
        fake.queue(
            Reply(
                tool_calls=[
                    ("s", "spawn_subtask", {"input": "part"}),
                    ("w", "wait_for_subtasks", {}),
                ],
                prompt_tokens=300,
            ),
            Reply(text="Part.", prompt_tokens=30, completion_tokens=3),
            Reply(text="Whole.", prompt_tokens=400, completion_tokens=20),
        )
        parent = await _run(client, PRICED)
        fake.queue(Reply(text="Again.", prompt_tokens=200, completion_tokens=30))
        forked = await client.post(f"/v1/tasks/{plain['id']}/fork", json={"at": 1})
        await until_state(client, forked.json()["id"], "completed")
        fake.queue(
            Reply(tool_calls=[("h", "hang", {})], prompt_tokens=90, completion_tokens=4),
            Reply(text="Recovered.", prompt_tokens=110, completion_tokens=6),
        )
        crashed = (await client.post("/v1/tasks", json={"input": "go", "model": PRICED})).json()
        await asyncio.wait_for(hanging.wait(), 10)
        worker_dies(client, crashed["id"])
        await until_state(client, crashed["id"], "completed")
        fake.queue(Reply(status=400, text="bad request"))
        broken = (await client.post("/v1/tasks", json={"input": "x", "model": PRICED})).json()
        await until_state(client, broken["id"], "failed")
        report = (await client.get("/v1/usage", params={"group_by": "model"})).json()
        tree = (await client.get(f"/v1/tasks/{parent['id']}")).json()

    expected = await _sums(db, _SUM_TASKS)
    assert expected["requests"] >= 11
    assert expected["unpriced_requests"] == 2  # the unknown model's and the offline one's
    assert await _sums(db, _SUM_ROLLUP.format(table="usage_daily")) == expected
    assert await _sums(db, _SUM_ROLLUP.format(table="usage_contexts")) == expected
    total = report["total"]
    assert Decimal(total["cost"]) == expected["cost"]
    assert (total["requests"], total["input_tokens"], total["unpriced_requests"]) == (
        expected["requests"],
        expected["input_tokens"],
        2,
    )
    assert {g["model"] for g in report["groups"]} == {PRICED, UNKNOWN, "offline"}
    assert tree["usage"]["subtree"]["tasks"] == 2
    assert tree["usage"]["subtree"]["requests"] == 3
