"""A provider's rate limit shared by two worker processes: with the budget in
PostgreSQL, a burst of tasks queues instead of meeting the provider's 429s, and the
two processes together keep within it."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.tasks import TaskStore
from tests.acceptance.test_workers import fetch, states, wait_until, workers
from tests.fakes.openai_server import FakeOpenAI
from tests.integration.helpers import SPEC, new_task
from tests.integration.test_rate_limits import conforms

pytestmark = pytest.mark.slow

MODEL = "openai-chat:fake-gpt"
TASKS = 24
RATE = 6.0  # requests per second: the budget, and the provider's limit


async def test_two_worker_processes_keep_within_one_shared_budget(
    database_url: str, db: AsyncEngine, store: TaskStore, tmp_path: Path
) -> None:
    # The provider enforces the same limit as a token bucket, with one request of
    # slack for the network's jitter between the budget's slot and the arrival.
    with FakeOpenAI(limit=(RATE + 1, (RATE + 1) / RATE)) as provider:
        async with workers(
            database_url,
            tmp_path,
            2,
            worker_concurrency=4,  # each process holds few: both take part
            openai_base_url=provider.base_url,
            openai_api_key="sk-test",
            rate_limits=f"openai-chat={RATE:g}rps",
        ) as procs:
            for i in range(TASKS):
                await new_task(store, input=f"task {i}", agent=replace(SPEC, model=MODEL))

            async def all_done() -> bool:
                return (await states(database_url))["completed"] == TASKS

            await wait_until(all_done, 60, f"{TASKS} completed tasks")
    assert provider.refused == 0  # no 429: the burst queued on the budget instead
    assert len(provider.requests) == TASKS
    arrivals = [t - provider.arrivals[0] for t in provider.arrivals]
    assert conforms(arrivals, amount=RATE + 1, period=(RATE + 1) / RATE)
    # It did queue: six at once, then six a second.
    assert arrivals[-1] >= (TASKS - RATE) / RATE - 0.1
    throttled = await fetch(
        database_url,
        "SELECT task_id, data->>'worker' AS worker, data->>'reason' AS reason "
        "FROM task_events WHERE type = 'throttled'",
    )
    assert len({row["task_id"] for row in throttled}) >= TASKS - RATE - 2
    assert {row["reason"] for row in throttled} == {"budget"}
    by_worker = Counter(row["worker"] for row in throttled)
    assert set(by_worker) == {p.worker_id for p in procs}, by_worker  # both processes
    attempts = await fetch(database_url, "SELECT max(lost_attempts) AS lost FROM tasks")
    assert attempts[0]["lost"] == 0
