"""Scheduling: priority orders a tenant's claims, `run_at` holds a task back until
its time, and the scheduler makes it claimable within a tick of that time."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.leases import LeaseStore
from taskservice.db.schedules import ScheduleStore
from taskservice.db.tables import tasks
from taskservice.db.tasks import TaskStore
from taskservice.worker.scheduler import Scheduler
from tests.conftest import ClientFactory, wait_for
from tests.integration.helpers import new_task
from tests.integration.test_a2a_v10 import message, rpc


async def test_higher_priority_first_then_fifo_within_a_priority(store: TaskStore) -> None:
    leases = LeaseStore(store.db)
    made = [await new_task(store, priority=p) for p in (0, 5, 0, -1, 5)]
    order = []
    for _ in made:
        [claimed] = await leases.claim(owner="w", limit=1, lease_seconds=30)
        order.append(claimed.id)
    expected = [made[1], made[4], made[0], made[2], made[3]]
    assert order == [t.id for t in expected]


async def test_priority_does_not_beat_fairness_across_tenants(store: TaskStore) -> None:
    leases = LeaseStore(store.db)
    for _ in range(10):
        await new_task(store, tenant="urgent", priority=1000)
    small = [await new_task(store, tenant="calm") for _ in range(2)]
    claimed = await leases.claim(owner="w", limit=4, lease_seconds=30)
    assert {t.id for t in small} <= {t.id for t in claimed}


async def test_a_task_for_later_is_not_claimed_before_its_time(
    store: TaskStore, db: AsyncEngine
) -> None:
    leases, schedules = LeaseStore(store.db), ScheduleStore(store.db)
    soon = datetime.now(UTC) + timedelta(seconds=1)
    later = await new_task(store, run_at=soon)
    past = await new_task(store, run_at=datetime.now(UTC) - timedelta(hours=1))
    assert later.delayed
    assert not past.delayed
    assert [t.id for t in await leases.claim(owner="w", limit=5, lease_seconds=30)] == [past.id]
    promoted = await schedules.tick()
    assert promoted.promoted == 0
    assert promoted.task_in is not None
    assert 0 < promoted.task_in <= 1
    assert await leases.claim(owner="w", limit=5, lease_seconds=30) == []
    await wait_for(lambda: datetime.now(UTC) > soon + timedelta(milliseconds=50))
    assert (await schedules.tick()).promoted == 1
    [claimed] = await leases.claim(owner="w", limit=5, lease_seconds=30)
    assert claimed.id == later.id
    assert claimed.run_at == soon


async def test_the_scheduler_wakes_the_workers_when_another_process_promoted(
    store: TaskStore,
) -> None:
    """A process that knew a task was due wakes its workers even when another one
    made it claimable first: else an API-only replica's promotion would wait for a
    worker's poll."""
    woken: list[int] = []
    scheduler = Scheduler(ScheduleStore(store.db), tick=0.5)
    scheduler.on_due(lambda: woken.append(1))
    await new_task(store, run_at=datetime.now(UTC) + timedelta(seconds=0.2))
    sleep = await scheduler.tick_once()
    assert 0 < sleep < 0.5
    assert woken == []
    await asyncio.sleep(sleep + 0.05)
    assert (await ScheduleStore(store.db).tick()).promoted == 1  # the other process
    await scheduler.tick_once()  # nothing left to promote, but it knew one was due
    assert woken == [1]


async def test_rest_run_at_is_claimed_within_a_second_of_it(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    async with make_client(workers_enabled=True) as client:
        run_at = datetime.now(UTC) + timedelta(seconds=1.5)
        created = await client.post(
            "/v1/tasks", json={"input": "later", "run_at": run_at.isoformat(), "priority": 7}
        )
        assert created.status_code == 201, created.text
        task = created.json()
        assert task["priority"] == 7
        assert datetime.fromisoformat(task["run_at"]) == run_at
        await wait_for(lambda: datetime.now(UTC) > run_at - timedelta(seconds=0.3))
        assert (await client.get(f"/v1/tasks/{task['id']}")).json()["state"] == "pending"
        done = (await client.get(f"/v1/tasks/{task['id']}?wait=5")).json()
        assert done["state"] == "completed", done
        started = datetime.fromisoformat(done["started_at"])
        assert run_at <= started < run_at + timedelta(seconds=5)  # never early
        listed = (await client.get("/v1/tasks")).json()["tasks"]
        assert listed[0]["priority"] == 7


async def test_bad_scheduling_input_is_refused_and_changes_nothing(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    async with make_client() as client:
        for body in (
            {"input": "x", "run_at": "2026-12-01T09:00:00"},  # no offset
            {"input": "x", "run_at": "tomorrow"},
            {"input": "x", "priority": 1001},
            {"input": "x", "priority": "high"},
        ):
            answer = await client.post("/v1/tasks", json=body)
            assert answer.status_code == 422, body
            assert answer.headers["content-type"] == "application/problem+json"
        for metadata, field in (
            ({"priority": "high"}, "metadata.priority"),
            ({"priority": True}, "metadata.priority"),
            ({"run_at": "2026-12-01T09:00:00"}, "metadata.run_at"),
            ({"run_at": 5}, "metadata.run_at"),
        ):
            refused = await rpc(
                client, "SendMessage", {"message": message("x"), "metadata": metadata}
            )
            assert refused["error"]["code"] == -32602, refused
            assert field in str(refused["error"]), refused
        async with db.connect() as conn:
            assert (await conn.execute(select(tasks.c.id))).all() == []
        run_at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        sent = await rpc(
            client,
            "SendMessage",
            {
                "message": message("x"),
                "metadata": {"priority": 3, "run_at": run_at},
                "configuration": {"returnImmediately": True},  # it runs in an hour
            },
        )
        task_id = uuid.UUID(sent["result"]["task"]["id"])
        task = (await client.get(f"/v1/tasks/{task_id}")).json()
        assert task["priority"] == 3
        assert task["state"] == "pending"
        assert datetime.fromisoformat(task["run_at"]) == datetime.fromisoformat(run_at)
