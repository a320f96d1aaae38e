"""Every transition is one conditional UPDATE; losers write nothing; terminal is final."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.agents.catalog import AgentCatalog
from taskservice.db.eventlog import EventLog
from taskservice.db.leases import LeaseStore
from taskservice.db.steps import LedgerStore
from taskservice.db.tables import task_events, tasks
from taskservice.db.tasks import TaskStore
from taskservice.domain.errors import Conflict
from taskservice.domain.models import Lease
from taskservice.domain.states import TERMINAL, IllegalTransition, TaskState, can_transition
from taskservice.settings import Settings
from taskservice.usecases.tasks import TaskService
from tests.integration.helpers import event_types, force_state, new_task

PAIRS = list(itertools.product(TaskState, TaskState))


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{s}->{t}" for s, t in PAIRS])
async def test_each_transition_on_postgres_follows_the_table(
    db: AsyncEngine, store: TaskStore, source: TaskState, target: TaskState
) -> None:
    task = await new_task(store)
    await force_state(db, task.id, source)
    before = await event_types(db, task.id)

    if not can_transition(source, target):
        with pytest.raises(IllegalTransition):
            await store.transition(task.id, source=source, target=target)
        assert await event_types(db, task.id) == before
        assert (await store.get(task.id)).state is source  # type: ignore[union-attr]
        return

    moved = await store.transition(task.id, source=source, target=target)
    assert moved is not None
    assert moved.state is target
    events = await event_types(db, task.id)
    assert events[:-1] == before
    seq, kind, data = events[-1]
    assert (seq, kind) == (len(before) + 1, "state_change")
    assert (data["from"], data["to"]) == (source.value, target.value)
    if target in TERMINAL:
        assert moved.finished_at is not None
        assert moved.lease_owner is None


async def test_a_transition_from_a_stale_state_writes_nothing(
    db: AsyncEngine, store: TaskStore
) -> None:
    task = await new_task(store)
    await force_state(db, task.id, TaskState.CANCELLED)
    lost = await store.transition(task.id, source=TaskState.PENDING, target=TaskState.RUNNING)
    assert lost is None
    assert [kind for _, kind, _ in await event_types(db, task.id)] == ["state_change"]


async def test_a_fenced_write_with_someone_elses_lease_writes_nothing(
    db: AsyncEngine, store: TaskStore
) -> None:
    await new_task(store)
    [claimed] = await LeaseStore(store.db).claim(owner="w1", limit=1, lease_seconds=30)
    assert claimed.lease == Lease("w1", 1)
    for stale in (Lease("w2", 1), Lease("w1", 2)):
        written = await store.transition(
            claimed.id,
            source=TaskState.RUNNING,
            target=TaskState.COMPLETED,
            lease=stale,
            values={"result": "stale"},
        )
        assert written is None
    task = await store.get(claimed.id)
    assert task is not None
    assert task.state is TaskState.RUNNING
    assert task.result is None


async def test_fifty_cancel_versus_complete_races_each_end_in_exactly_one_terminal_state(
    db: AsyncEngine, store: TaskStore, settings: Settings
) -> None:
    service = TaskService(
        store=store,
        log=EventLog(store.db),
        ledger=LedgerStore(
            store.db, log_cap=settings.max_log_lines, log_chars=settings.max_log_chars
        ),
        catalog=AgentCatalog(settings),
        settings=settings,
    )
    for _ in range(50):
        await new_task(store)
    claimed = await LeaseStore(store.db).claim(owner="racer", limit=50, lease_seconds=30)
    assert len(claimed) == 50

    async def complete(task_id: object, lease: Lease) -> object:
        return await store.transition(
            task_id,  # type: ignore[arg-type]
            source=TaskState.RUNNING,
            target=TaskState.COMPLETED,
            lease=lease,
            values={"result": "done"},
        )

    async def cancel(task_id: object) -> object:
        try:
            return await service.cancel(tenant="default", task_id=str(task_id), reason="race")
        except Conflict as exc:  # the loser of the race gets a 409
            return exc

    results = await asyncio.gather(
        *(coro for t in claimed for coro in (complete(t.id, t.lease), cancel(t.id)))  # type: ignore[arg-type]
    )
    assert len(results) == 100

    async with db.connect() as conn:
        terminal_events = dict(
            (
                await conn.execute(
                    select(task_events.c.task_id, func.count())
                    .where(
                        task_events.c.type == "state_change",
                        task_events.c.data["to"].astext.in_([s.value for s in TERMINAL]),
                    )
                    .group_by(task_events.c.task_id)
                )
            ).all()
        )
    outcomes = {TaskState.COMPLETED: 0, TaskState.CANCELLED: 0}
    for task in claimed:
        final = await store.get(task.id)
        assert final is not None
        assert final.state in (TaskState.COMPLETED, TaskState.CANCELLED)
        assert terminal_events[task.id] == 1, f"{task.id} has {terminal_events[task.id]}"
        events = await event_types(db, task.id)
        assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
        outcomes[final.state] += 1
    assert sum(outcomes.values()) == 50


async def test_the_test_database_refuses_any_transition_the_table_does_not_allow(
    db: AsyncEngine, store: TaskStore
) -> None:
    """The guard every test runs under (`tests.conftest.TRANSITION_GUARD`): whatever
    statement changes a task's state, the change must be in `states.TRANSITIONS`."""
    task = await new_task(store)
    await force_state(db, task.id, TaskState.COMPLETED)
    with pytest.raises(DBAPIError, match="illegal transition completed -> running"):
        async with db.begin() as conn:
            await conn.execute(update(tasks).where(tasks.c.id == task.id).values(state="running"))
    assert (await store.get(task.id)).state is TaskState.COMPLETED  # type: ignore[union-attr]
