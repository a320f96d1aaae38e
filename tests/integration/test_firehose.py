"""The firehose: a tenant's events in commit-safe global order, filtered, resumable."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.engine import asyncpg_dsn
from taskservice.db.eventlog import EventLog
from taskservice.db.keys import ApiKeyStore
from taskservice.db.tasks import TaskStore
from taskservice.following.hub import EventHub, Watermark
from tests.conftest import LiveFactory, wait_for
from tests.integration.helpers import new_task
from tests.sse import Event, read_events

STREAM = {"Accept": "text/event-stream"}


async def take(
    client: httpx.AsyncClient, count: int, *, headers: dict[str, str] | None = None, **params: Any
) -> list[Event]:
    events: list[Event] = []
    async with client.stream(
        "GET", "/v1/events", params=params, headers={**STREAM, **(headers or {})}
    ) as response:
        assert response.status_code == 200, await response.aread()
        async for event in read_events(response):
            if event.id is not None:
                events.append(event)
            if len(events) >= count:
                break
    return events


async def test_the_firehose_replays_in_global_order_and_resumes_exactly(
    make_live: LiveFactory,
) -> None:
    async with make_live() as live, httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        ids = [
            (await client.post("/v1/tasks", json={"input": f"t{i}"})).json()["id"] for i in range(3)
        ]
        for task_id in ids:
            await client.post(f"/v1/tasks/{task_id}/cancel")
        first = await take(client, 3, after=0)
        rest = await take(client, 3, headers={"Last-Event-ID": first[-1].id or ""})
    events = first + rest
    global_ids = [int(e.id or 0) for e in events]
    assert global_ids == sorted(global_ids)
    assert len(set(global_ids)) == 6
    assert [e.json()["task_id"] for e in events[:3]] == ids  # three submits, in order
    assert {e.json()["data"]["to"] for e in events[3:]} == {"cancelled"}


async def test_filters_by_type_state_context_and_agent(make_live: LiveFactory) -> None:
    async with make_live() as live, httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        plain = (await client.post("/v1/tasks", json={"input": "a"})).json()["id"]
        ctx = (await client.post("/v1/tasks", json={"input": "b", "context_id": "c1"})).json()["id"]
        for task_id in (plain, ctx):
            await client.post(f"/v1/tasks/{task_id}/cancel")
        cancelled = await take(client, 2, after=0, state="cancelled")
        in_context = await take(client, 2, after=0, context_id="c1")
        by_agent = await take(client, 4, after=0, agent="default", type="state_change")
    assert {e.json()["task_id"] for e in cancelled} == {plain, ctx}
    assert all(e.json()["data"]["to"] == "cancelled" for e in cancelled)
    assert {e.json()["task_id"] for e in in_context} == {ctx}
    assert len(by_agent) == 4


async def test_an_event_committed_late_is_not_skipped(
    make_live: LiveFactory, database_url: str, db: AsyncEngine
) -> None:
    """A transaction that takes a lower event id but commits after a higher one: the
    firehose holds the higher one back until the lower has committed."""
    import asyncpg

    async with make_live() as live, httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        slow_task = (await client.post("/v1/tasks", json={"input": "slow"})).json()["id"]
        fast_task = (await client.post("/v1/tasks", json={"input": "fast"})).json()["id"]
        start = (await take(client, 2, after=0))[-1].id
        dsn, kwargs = asyncpg_dsn(database_url)
        conn = await asyncpg.connect(dsn, **kwargs)
        transaction = conn.transaction()
        await transaction.start()
        await conn.execute(  # takes the next event id, but does not commit yet
            "WITH t AS (UPDATE tasks SET event_seq = event_seq + 1 WHERE id = $1 "
            "RETURNING id, tenant, event_seq) INSERT INTO task_events (task_id, tenant, seq, type) "
            "SELECT id, tenant, event_seq, 'log' FROM t",
            slow_task,
        )
        await client.post(f"/v1/tasks/{fast_task}/cancel")  # commits a higher id first

        received: list[Event] = []

        async def read() -> None:
            received.extend(await take(client, 2, headers={"Last-Event-ID": start or "0"}))

        reading = asyncio.create_task(read())
        await asyncio.sleep(1.0)
        assert received == []  # the higher id waits for the lower one
        await transaction.commit()
        await conn.close()
        await asyncio.wait_for(reading, 10)
    assert [e.event for e in received] == ["log", "state_change"]
    assert int(received[0].id or 0) < int(received[1].id or 0)


async def test_other_tenants_events_never_appear(make_live: LiveFactory, db: AsyncEngine) -> None:
    keys = ApiKeyStore(db)
    alice, _ = await keys.create(tenant="alice")
    bob, _ = await keys.create(tenant="bob")
    async with make_live() as live, httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        for key in (alice, bob, alice):
            await client.post(
                "/v1/tasks", json={"input": "x"}, headers={"Authorization": f"Bearer {key}"}
            )
        seen = await take(client, 2, after=0, headers={"Authorization": f"Bearer {alice}"})
        token = (
            await client.post(
                "/v1/stream-tokens", json={}, headers={"Authorization": f"Bearer {bob}"}
            )
        ).json()["token"]
        bobs = await take(client, 1, after=0, token=token)
    assert len({e.json()["task_id"] for e in seen}) == 2
    assert len(bobs) == 1
    assert bobs[0].json()["task_id"] not in {e.json()["task_id"] for e in seen}


async def test_the_watermark_follows_every_commit_only_while_a_firehose_reads(
    database_url: str, store: TaskStore
) -> None:
    """Without a reader the mark moves at the poll interval (no read of the event
    table per commit); with one, it follows each commit at once."""
    reads = 0
    log = EventLog(store.db)

    async def counted(after: int, limit: int) -> list[int]:
        nonlocal reads
        reads += 1
        return await log.ids_after(after, limit)

    hub = EventHub(database_url)
    watermark = Watermark(hub, counted, gap_timeout=5, poll_interval=30)
    await hub.start()
    await watermark.start(0)
    try:
        reads = 0
        for i in range(20):
            await new_task(store, input=f"unwatched {i}")
        await asyncio.sleep(0.5)
        assert reads == 0  # twenty commits, no reader: nothing read
        with watermark.reading():
            await asyncio.sleep(0.3)
            assert watermark.value == await log.latest_id()  # caught up at once
            await new_task(store, input="watched")
            latest = await log.latest_id()
            await wait_for(lambda: watermark.value == latest, timeout=2)
        assert reads >= 2
    finally:
        await watermark.stop()
        await hub.stop()
