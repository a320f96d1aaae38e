"""Group commit for submits: concurrent submits share a transaction, yet each gets its
own answer, its own event and its own NOTIFY."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.tasks import TaskStore
from taskservice.domain.models import NewTask, Task
from taskservice.domain.states import TaskState
from tests.integration.helpers import SPEC

SUBMITS = 60


def request(**fields: Any) -> NewTask:
    return NewTask(
        tenant=fields.pop("tenant", "default"),
        input=fields.pop("input", "hello"),
        agent=SPEC,
        metadata=fields.pop("metadata", {}),
        max_attempts=3,
        **fields,
    )


async def rows(engine: AsyncEngine, sql: str) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql))).all())


async def test_concurrent_submits_share_commits_and_each_has_its_event(
    store: TaskStore, db: AsyncEngine, database_url: str
) -> None:
    listener = await asyncpg.connect(database_url)
    notified: list[str] = []
    await listener.add_listener("taskservice_events", lambda *args: notified.append(args[3]))
    try:
        results = await asyncio.gather(
            *(store.create(request(input=f"task {i}", metadata={"i": i})) for i in range(SUBMITS))
        )
        await asyncio.sleep(0.3)
    finally:
        await listener.close()
    tasks = [task for task, created in results if created]
    assert len(tasks) == SUBMITS
    assert all(task.state is TaskState.PENDING for task in tasks)
    stored = await rows(db, "SELECT id, input, metadata, xmin::text FROM tasks")
    assert {row.id: (row.input, row.metadata) for row in stored} == {
        task.id: (task.input, task.metadata) for task in tasks
    }
    # Rows written by one transaction share its xmin: submits were batched.
    assert len({row.xmin for row in stored}) < SUBMITS
    events = await rows(db, "SELECT task_id, seq, type, data FROM task_events")
    assert sorted((e.task_id, e.seq) for e in events) == sorted((t.id, 1) for t in tasks)
    assert all(e.data == {"from": None, "to": "pending"} for e in events)
    assert sum(str(task.id) in payload for task in tasks for payload in notified) == SUBMITS


async def test_one_bad_submit_in_a_batch_fails_alone(store: TaskStore, db: AsyncEngine) -> None:
    missing_parent = uuid.uuid4()  # the service checks parents; the store's FK still holds
    requests = [request(input=f"task {i}") for i in range(20)]
    requests[7] = request(input="orphan", parent_id=missing_parent)
    results = await asyncio.gather(*(store.create(new) for new in requests), return_exceptions=True)
    assert isinstance(results[7], asyncpg.ForeignKeyViolationError)
    good = [result for i, result in enumerate(results) if i != 7]
    assert all(isinstance(result, tuple) and result[1] for result in good)
    stored = await rows(db, "SELECT input FROM tasks ORDER BY input")
    assert [row.input for row in stored] == sorted(f"task {i}" for i in range(20) if i != 7)
    assert len(await rows(db, "SELECT 1 FROM task_events")) == 19


async def test_the_same_idempotency_key_in_one_batch_creates_one_task(
    store: TaskStore, db: AsyncEngine
) -> None:
    same = request(idempotency_key="k-1", request_hash="h")
    others = [request(input=f"task {i}") for i in range(10)]
    results = await asyncio.gather(*(store.create(new) for new in [same, *others, same, same]))
    keyed: list[tuple[Task, bool]] = [results[0], *results[-2:]]
    assert sorted(created for _, created in keyed) == [False, False, True]
    assert len({task.id for task, _ in keyed}) == 1
    assert len(await rows(db, "SELECT 1 FROM tasks WHERE idempotency_key = 'k-1'")) == 1
    assert len(await rows(db, "SELECT 1 FROM tasks")) == 11


async def test_a_caller_that_gives_up_does_not_disturb_the_batch(
    store: TaskStore, db: AsyncEngine
) -> None:
    creates = [asyncio.create_task(store.create(request(input=f"task {i}"))) for i in range(10)]
    creates[3].cancel()
    results = await asyncio.gather(*creates, return_exceptions=True)
    assert isinstance(results[3], asyncio.CancelledError)
    assert all(isinstance(r, tuple) and r[1] for i, r in enumerate(results) if i != 3)
    # The cancelled submit may or may not have been written (as with any request cut
    # off mid-flight); the others all were, each once.
    count = len(await rows(db, "SELECT 1 FROM tasks"))
    assert count in (9, 10)


@pytest.mark.parametrize("size", [1, 2])
async def test_small_batches_answer_like_large_ones(
    store: TaskStore, db: AsyncEngine, size: int
) -> None:
    results = await asyncio.gather(*(store.create(request()) for _ in range(size)))
    assert [created for _, created in results] == [True] * size
    assert len(await rows(db, "SELECT 1 FROM task_events")) == size
