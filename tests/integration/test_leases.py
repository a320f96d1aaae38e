"""Claim fairness and caps, heartbeats, the reaper, release, cascading cancel."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.leases import LeaseStore
from taskservice.db.tables import tasks
from taskservice.db.tasks import TaskStore
from taskservice.domain.models import Lease
from taskservice.domain.states import TaskState
from tests.conftest import ClientFactory, allow_any_state, wait_for
from tests.integration.helpers import event_types, expire, new_task


@pytest.fixture
def leases(store: TaskStore) -> LeaseStore:
    return LeaseStore(store.db)


async def test_a_deep_backlog_does_not_starve_other_tenants(
    store: TaskStore, leases: LeaseStore
) -> None:
    for _ in range(50):
        await new_task(store, tenant="big")
    small = [await new_task(store, tenant="small") for _ in range(2)]
    claimed = await leases.claim(owner="w", limit=4, lease_seconds=30)
    assert [t.tenant for t in claimed].count("small") == 2
    assert {t.id for t in small} <= {t.id for t in claimed}


async def test_the_tenant_cap_bounds_running_tasks_across_claims(
    store: TaskStore, leases: LeaseStore
) -> None:
    for _ in range(6):
        await new_task(store, tenant="a")
    other = await new_task(store, tenant="b")
    first = await leases.claim(owner="w1", limit=10, lease_seconds=30, tenant_cap=2)
    assert sorted(t.tenant for t in first) == ["a", "a", "b"]
    assert await leases.claim(owner="w2", limit=10, lease_seconds=30, tenant_cap=2) == []
    done = next(t for t in first if t.tenant == "a")
    await store.transition(
        done.id, source=TaskState.RUNNING, target=TaskState.COMPLETED, lease=done.lease
    )
    again = await leases.claim(owner="w2", limit=10, lease_seconds=30, tenant_cap=2)
    assert [t.tenant for t in again] == ["a"]
    assert other.id in {t.id for t in first}


async def test_a_claim_says_whether_another_now_may_find_more(
    store: TaskStore, leases: LeaseStore
) -> None:
    async def claim(limit: int, cap: int | None = None) -> tuple[list[str], bool]:
        claimed, more = await leases.claim_timed(
            owner="w", limit=limit, lease_seconds=30, tenant_cap=cap
        )
        return sorted(task.tenant for task, _ in claimed), more

    for _ in range(3):
        await new_task(store, tenant="a")
    assert await claim(10) == (["a", "a", "a"], False)  # all there was
    await new_task(store, tenant="a")
    for _ in range(8):
        await new_task(store, tenant="b")
    # Shares of 2: "a" had one, "b" filled its share and has more.
    assert await claim(4) == (["a", "b", "b"], True)
    assert await claim(4) == (["b", "b", "b", "b"], True)  # the whole limit: maybe more
    assert await claim(4) == (["b", "b"], False)
    assert await claim(4) == ([], False)
    for _ in range(5):
        await new_task(store, tenant="c")
    # Bound by its cap of 2 running (it has none yet): more only once one finishes.
    assert await claim(10, cap=2) == (["c", "c"], False)


async def test_concurrent_claimers_never_exceed_the_tenant_cap(
    store: TaskStore, leases: LeaseStore
) -> None:
    for _ in range(30):
        await new_task(store, tenant="a")
    results = await asyncio.gather(
        *(leases.claim(owner=f"w{i}", limit=5, lease_seconds=30, tenant_cap=3) for i in range(8))
    )
    assert sum(len(r) for r in results) == 3


async def test_concurrent_claimers_never_claim_a_task_twice(
    store: TaskStore, leases: LeaseStore
) -> None:
    for i in range(60):
        await new_task(store, tenant=f"t{i % 3}")
    claimed = []
    for _ in range(10):  # rounds of 10 concurrent claimers, as busy workers would
        results = await asyncio.gather(
            *(leases.claim(owner=f"w{i}", limit=7, lease_seconds=30) for i in range(10))
        )
        claimed += [t for r in results for t in r]
        if len(claimed) >= 60:
            break
    ids = [t.id for t in claimed]
    assert len(ids) == len(set(ids)) == 60
    assert all(t.attempt == 1 for t in claimed)


async def test_heartbeat_renews_held_leases_and_reports_lost_ones(
    db: AsyncEngine, store: TaskStore, leases: LeaseStore
) -> None:
    await new_task(store)
    await new_task(store)
    kept, cancelled = await leases.claim(owner="w", limit=2, lease_seconds=1)
    await store.cancel(cancelled.id, source=TaskState.RUNNING, tenant="default", reason=None)
    held = await leases.heartbeat(
        owner="w",
        leases=[(kept.id, kept.attempt), (cancelled.id, cancelled.attempt)],
        lease_seconds=60,
    )
    assert held == {kept.id}
    renewed = await store.get(kept.id)
    assert renewed is not None
    assert renewed.lease_expires_at is not None
    assert kept.lease_expires_at is not None
    assert renewed.lease_expires_at > kept.lease_expires_at
    # Someone else's heartbeat for our task renews nothing.
    assert await leases.heartbeat(owner="x", leases=[(kept.id, 1)], lease_seconds=60) == set()


async def test_an_expired_lease_is_recovered_and_claimed_again_with_a_new_attempt(
    db: AsyncEngine, store: TaskStore, leases: LeaseStore
) -> None:
    await new_task(store)
    [task] = await leases.claim(owner="dead-worker", limit=1, lease_seconds=30)
    await expire(db, task.id)
    assert await leases.reap(log_cap=10) == (1, [])
    recovered = await store.get(task.id)
    assert recovered is not None
    assert (recovered.state, recovered.lease_owner) == (TaskState.RUNNING, None)
    [again] = await leases.claim(owner="w2", limit=1, lease_seconds=30)
    assert (again.id, again.attempt, again.lease_owner) == (task.id, 2, "w2")
    events = await event_types(db, task.id)
    assert [kind for _, kind, _ in events] == [
        "state_change",
        "state_change",
        "log",
        "recovered",
        "claimed",
    ]
    assert events[2][2] == {
        "level": "warning",
        "message": "worker dead-worker stopped renewing its lease on attempt 1 (it stopped, "
        "hung or lost the database); the task waits for another worker",
    }
    assert events[3][2] == {"worker": "dead-worker", "attempt": 1}
    assert events[4][2]["attempt"] == 2
    # The dead worker's late write is fenced out.
    late = await store.transition(
        task.id, source=TaskState.RUNNING, target=TaskState.COMPLETED, lease=task.lease
    )
    assert late is None


async def test_an_expired_lease_on_the_last_attempt_fails_the_task_saying_why(
    db: AsyncEngine, store: TaskStore, leases: LeaseStore
) -> None:
    await new_task(store, max_attempts=1)
    [task] = await leases.claim(owner="dead-worker", limit=1, lease_seconds=30)
    await expire(db, task.id)
    recovered, exhausted = await leases.reap(log_cap=10)
    assert (recovered, [row["id"] for row in exhausted]) == (0, [task.id])
    failed = await store.get(task.id)
    assert failed is not None
    assert failed.state is TaskState.FAILED
    assert failed.error is not None
    assert failed.error["type"] == "attempts_exhausted"
    assert "dead-worker" in failed.error["message"]
    assert "attempt 1 (1 of 1 attempts lost)" in failed.error["message"]
    assert failed.finished_at is not None


async def test_only_expired_leases_use_up_attempts(
    db: AsyncEngine, store: TaskStore, leases: LeaseStore
) -> None:
    """Claimed again after a release (or a throttle, or an answer), a task has lost
    nothing: its next lost lease is its first of two, and it is recovered."""
    await new_task(store, max_attempts=2)
    [task] = await leases.claim(owner="stopping-worker", limit=1, lease_seconds=30)
    assert task.lease is not None
    assert await leases.release(task.id, lease=task.lease, reason="shutdown")
    [task] = await leases.claim(owner="dead-worker", limit=1, lease_seconds=30)
    assert (task.attempt, task.lost_attempts) == (2, 0)
    await expire(db, task.id)
    assert await leases.reap(log_cap=10) == (1, [])
    [task] = await leases.claim(owner="dead-worker", limit=1, lease_seconds=30)
    assert (task.attempt, task.lost_attempts) == (3, 1)
    await expire(db, task.id)
    recovered, exhausted = await leases.reap(log_cap=10)
    assert (recovered, [row["id"] for row in exhausted]) == (0, [task.id])
    failed = await store.get(task.id)
    assert failed is not None
    assert failed.error is not None
    assert "attempt 3 (2 of 2 attempts lost)" in failed.error["message"]
    assert failed.lost_attempts == 2


async def test_the_reaper_never_touches_finished_or_renewed_tasks(
    db: AsyncEngine, store: TaskStore, leases: LeaseStore
) -> None:
    await new_task(store)
    await new_task(store)
    done, renewed = await leases.claim(owner="w", limit=2, lease_seconds=30)
    await expire(db, done.id)
    await expire(db, renewed.id)
    # The worker finishes one and renews the other a moment before the reaper runs.
    await store.transition(
        done.id, source=TaskState.RUNNING, target=TaskState.COMPLETED, lease=done.lease
    )
    await leases.heartbeat(owner="w", leases=[(renewed.id, 1)], lease_seconds=30)
    assert await leases.reap(log_cap=10) == (0, [])
    assert (await store.get(done.id)).state is TaskState.COMPLETED  # type: ignore[union-attr]
    assert (await store.get(renewed.id)).lease_owner == "w"  # type: ignore[union-attr]


async def test_a_quiet_running_task_gets_one_stalled_event_per_period(
    db: AsyncEngine, store: TaskStore, leases: LeaseStore
) -> None:
    await new_task(store)
    [task] = await leases.claim(owner="w", limit=1, lease_seconds=30)
    async with db.begin() as conn:
        await conn.execute(
            update(tasks)
            .where(tasks.c.id == task.id)
            .values(updated_at=text("now() - interval '10 minutes'"))
        )
    assert await leases.mark_stalled(stall_seconds=60) == 1
    assert await leases.mark_stalled(stall_seconds=60) == 0
    kinds = [kind for _, kind, _ in await event_types(db, task.id)]
    assert kinds[-1] == "stalled"


async def test_a_released_task_is_claimable_at_once(
    db: AsyncEngine, store: TaskStore, leases: LeaseStore
) -> None:
    await new_task(store)
    [task] = await leases.claim(owner="leaving", limit=1, lease_seconds=30)
    assert await leases.release(task.id, lease=task.lease, reason="shutdown")  # type: ignore[arg-type]
    assert not await leases.release(task.id, lease=task.lease, reason="shutdown")  # type: ignore[arg-type]
    [again] = await leases.claim(owner="staying", limit=1, lease_seconds=30)
    assert (again.id, again.attempt) == (task.id, 2)
    kinds = [(kind, data.get("worker")) for _, kind, data in await event_types(db, task.id)]
    assert kinds[-2:] == [("released", "leaving"), ("claimed", "staying")]


async def test_cancelling_a_parent_cancels_its_live_descendants(
    db: AsyncEngine, store: TaskStore, leases: LeaseStore
) -> None:
    parent = await new_task(store)
    child = await new_task(store, parent_id=parent.id)
    done_child = await new_task(store, parent_id=parent.id)
    grandchild = await new_task(store, parent_id=child.id)
    unrelated = await new_task(store)
    async with db.begin() as conn:
        await allow_any_state(conn)
        await conn.execute(
            update(tasks).where(tasks.c.id == done_child.id).values(state="completed")
        )
        await conn.execute(
            update(tasks)
            .where(tasks.c.id == grandchild.id)
            .values(state="running", lease_owner="w", attempt=1)
        )
    cancelled = await store.cancel(
        parent.id, source=TaskState.PENDING, tenant="default", reason="stop all"
    )
    assert cancelled is not None
    states = {
        t: (await store.get(t)).state
        for t in (child.id, done_child.id, grandchild.id, unrelated.id)
    }  # type: ignore[union-attr]
    assert states == {
        child.id: TaskState.CANCELLED,
        done_child.id: TaskState.COMPLETED,
        grandchild.id: TaskState.CANCELLED,
        unrelated.id: TaskState.PENDING,
    }
    _, kind, data = (await event_types(db, grandchild.id))[-1]
    assert (kind, data["from"], data["cause"]) == ("state_change", "running", "parent_cancelled")
    assert (await store.get(grandchild.id)).lease_owner is None  # type: ignore[union-attr]


async def test_cancelling_marks_open_tool_calls_of_the_task_and_its_children_failed(
    db: AsyncEngine, store: TaskStore
) -> None:
    parent = await new_task(store)
    child = await new_task(store, parent_id=parent.id)
    async with db.begin() as conn:
        for task_id, call, status in [
            (parent.id, "c1", "in_progress"),
            (parent.id, "c2", "completed"),
            (child.id, "c3", "pending"),
        ]:
            await conn.execute(
                text(
                    "INSERT INTO task_calls (task_id, tool_call_id, name, status, attempt) "
                    "VALUES (:t, :c, 'lookup', :s, 1)"
                ),
                {"t": task_id, "c": call, "s": status},
            )
    await store.cancel(parent.id, source=TaskState.PENDING, tenant="default", reason=None)
    async with db.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT tool_call_id, status, error FROM task_calls ORDER BY 1")
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("c1", "failed", "cancelled"),
        ("c2", "completed", None),
        ("c3", "failed", "cancelled"),
    ]


async def test_a_cancel_that_lost_its_race_cancels_no_descendants(
    db: AsyncEngine, store: TaskStore
) -> None:
    parent = await new_task(store)
    child = await new_task(store, parent_id=parent.id)
    lost = await store.cancel(parent.id, source=TaskState.RUNNING, tenant="default", reason=None)
    assert lost is None
    assert (await store.get(child.id)).state is TaskState.PENDING  # type: ignore[union-attr]


def test_lease_fencing_uses_owner_and_attempt() -> None:
    assert Lease("w", 1) != Lease("w", 2)


async def test_every_process_reaps_at_start_and_when_the_next_lease_expires(
    make_client: ClientFactory, db: AsyncEngine, store: TaskStore, leases: LeaseStore
) -> None:
    """A crash-looping worker lives less than a reap interval: its replacement reaps at
    once, and a live process wakes when the earliest lease lapses, not a whole
    (jittered) interval later. An API-only process (no workers here) reaps too."""
    for _ in range(2):
        await new_task(store)
    lapsed, lapsing = await leases.claim(owner="dead-worker", limit=2, lease_seconds=30)
    await expire(db, lapsed.id)
    async with db.begin() as conn:
        await conn.execute(
            update(tasks)
            .where(tasks.c.id == lapsing.id)
            .values(lease_expires_at=text("now() + interval '1.5 seconds'"))
        )
    # From when the lease was set to lapse (1.5 s on), not from the process's start,
    # which takes its own time before it reaps.
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with make_client(reap_interval=60):
        await wait_for(lambda: _released(store, lapsed.id), timeout=3)
        assert not await _released(store, lapsing.id)
        await wait_for(lambda: _released(store, lapsing.id), timeout=5)
        took = loop.time() - started
    assert 1.0 < took < 15, took  # when the lease lapsed, not at the 60 s interval
    assert [t for _, t, _ in await event_types(db, lapsing.id)][-1] == "recovered"


async def _released(store: TaskStore, task_id: uuid.UUID) -> bool:
    task = await store.get(task_id)
    assert task is not None
    assert task.state is TaskState.RUNNING
    return task.lease_owner is None
