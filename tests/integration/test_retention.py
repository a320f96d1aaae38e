"""Retention on the real database: old finished task trees go with everything they
hold, once notified; the rest stays; one pruner at a time; a firehose resumed from
before what was pruned is told so."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.retention import Policy, RetentionStore, prune
from taskservice.db.tasks import TaskStore
from taskservice.domain.states import TaskState
from tests.conftest import ClientFactory, LiveFactory, wait_for
from tests.integration.helpers import force_state, new_task
from tests.sse import read_events

WEEK = Policy(days=7, by_tenant={})


async def age(
    engine: AsyncEngine, task_id: uuid.UUID, days: float, state: str = "completed"
) -> None:
    """Finished `days` ago."""
    await force_state(engine, task_id, TaskState(state))
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE tasks SET finished_at = now() - make_interval(days => :d),"
                " created_at = now() - make_interval(days => :d + 1) WHERE id = :id"
            ),
            {"d": days, "id": task_id},
        )


async def exists(engine: AsyncEngine, task_id: uuid.UUID) -> bool:
    async with engine.connect() as conn:
        found = await conn.execute(text("SELECT 1 FROM tasks WHERE id = :id"), {"id": task_id})
        return found.first() is not None


async def rows(engine: AsyncEngine, table: str, task_id: uuid.UUID) -> int:
    async with engine.connect() as conn:
        counted = await conn.execute(
            text(f"SELECT count(*) FROM {table} WHERE task_id = :id"),
            {"id": task_id},
        )
        return int(counted.scalar_one())


async def test_old_finished_trees_go_whole_and_everything_else_stays(
    store: TaskStore, db: AsyncEngine
) -> None:
    old = await new_task(store)
    old_child = await new_task(store, parent_id=old.id)
    recent = await new_task(store)
    live = await new_task(store)
    with_live_child = await new_task(store)
    live_child = await new_task(store, parent_id=with_live_child.id)
    mcp_kept = await new_task(store, metadata={"mcp": {"tool": "x", "ttl_ms": 30 * 86_400_000}})
    mcp_expired = await new_task(store, metadata={"mcp": {"tool": "x", "ttl_ms": 1000}})
    for task in (old, old_child, with_live_child, mcp_kept, mcp_expired):
        await age(db, task.id, days=10)
    await age(db, recent.id, days=1)
    assert await rows(db, "task_events", old.id) >= 1
    pruned = await prune(RetentionStore(store.db), WEEK)
    assert pruned is not None
    assert pruned.tasks == 3  # old, its child, the expired MCP task
    for gone in (old, old_child, mcp_expired):
        assert not await exists(db, gone.id)
        assert await rows(db, "task_events", gone.id) == 0
    for kept in (recent, live, with_live_child, live_child, mcp_kept):
        assert await exists(db, kept.id)


async def test_a_finished_task_without_a_finish_time_is_kept(
    store: TaskStore, db: AsyncEngine
) -> None:
    """Whatever is not known to be expired is kept (SQL's NULL is not "expired")."""
    task = await new_task(store)
    await force_state(db, task.id, TaskState.COMPLETED)  # finished_at stays NULL
    assert (await prune(RetentionStore(store.db), WEEK)) is not None
    assert await exists(db, task.id)


async def test_a_task_with_a_delivery_pending_stays_until_it_is_settled(
    make_client: ClientFactory, store: TaskStore, db: AsyncEngine
) -> None:
    loopback = {"webhook_allow_http": True, "webhook_allow_targets": ["127.0.0.1/32"]}
    async with make_client(webhooks_enabled=False, **loopback) as client:  # none delivers
        hook = {"url": "http://127.0.0.1:9/x", "states": ["pending"]}
        made = await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})
    task_id = uuid.UUID(made.json()["id"])
    await age(db, task_id, days=30)
    assert await rows(db, "webhook_deliveries", task_id) == 1
    retention = RetentionStore(store.db)
    assert (await prune(retention, WEEK)) is not None
    assert await exists(db, task_id)  # not notified yet: kept
    async with db.begin() as conn:
        await conn.execute(
            text("UPDATE webhook_deliveries SET status = 'failed' WHERE task_id = :id"),
            {"id": task_id},
        )
    pruned = await prune(retention, WEEK)
    assert pruned is not None
    assert (pruned.tasks, pruned.deliveries) == (1, 1)
    assert not await exists(db, task_id)
    assert await rows(db, "webhook_deliveries", task_id) == 0


async def test_per_tenant_retention_and_a_dry_run(store: TaskStore, db: AsyncEngine) -> None:
    short = await new_task(store, tenant="short")
    long = await new_task(store, tenant="long")
    forever = await new_task(store, tenant="forever")
    for task in (short, long, forever):
        await age(db, task.id, days=10)
    policy = Policy(days=None, by_tenant={"short": 1, "long": 100})
    retention = RetentionStore(store.db)
    dry = await prune(retention, policy, dry_run=True)
    assert dry is not None
    assert dry.tasks == 1
    assert await exists(db, short.id)  # a dry run deletes nothing
    done = await prune(retention, policy, size=1)  # a batch per root: the cursor walks
    assert done is not None
    assert done.tasks == 1
    assert [await exists(db, t.id) for t in (short, long, forever)] == [False, True, True]


async def test_one_pruner_at_a_time(store: TaskStore, db: AsyncEngine) -> None:
    old = await new_task(store)
    await age(db, old.id, days=10)
    async with store.db.connection() as holder, holder.transaction():
        await holder.execute("SELECT pg_advisory_xact_lock($1)", 0x7461736B_70726E65)
        assert await prune(RetentionStore(store.db), WEEK) is None
    assert await exists(db, old.id)


async def test_a_firehose_resumed_from_before_what_was_pruned_is_told(
    make_live: LiveFactory, store: TaskStore, db: AsyncEngine
) -> None:
    old = await new_task(store)
    await new_task(store)  # kept: its events come after the mark
    await age(db, old.id, days=10)
    async with db.connect() as conn:
        first = (await conn.execute(text("SELECT min(id) FROM task_events"))).scalar_one()
    await prune(RetentionStore(store.db), WEEK)
    mark = await RetentionStore(store.db).events_pruned_before()
    assert mark > first
    async with (
        make_live() as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as client,
    ):
        told = await first_events(client, after=first - 1)
        assert told[0].event == "pruned"
        assert told[0].json() == {"before": mark}
        later = await first_events(client, after=mark - 1)  # nothing deleted after it
        assert all(event.event != "pruned" for event in later)


async def first_events(client: httpx.AsyncClient, *, after: int) -> list[Any]:
    return await asyncio.wait_for(_first_events(client, after=after), 10)


async def _first_events(client: httpx.AsyncClient, *, after: int) -> list[Any]:
    events = []
    async with client.stream(
        "GET", "/v1/events", params={"after": after}, headers={"Accept": "text/event-stream"}
    ) as response:
        assert response.status_code == 200
        async for event in read_events(response):
            if event.event is None:  # the opening comment
                continue
            events.append(event)
            break
    return events


async def test_every_process_prunes_when_retention_is_set(
    make_client: ClientFactory, store: TaskStore, db: AsyncEngine
) -> None:
    old = await new_task(store)
    await age(db, old.id, days=10)
    async with make_client(retention_days=7, retention_interval_seconds=0.1):
        await wait_for(lambda: _gone(db, old.id))


async def _gone(engine: AsyncEngine, task_id: uuid.UUID) -> bool:
    return not await exists(engine, task_id)
