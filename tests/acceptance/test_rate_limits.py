"""A provider's rate limit shared by two worker processes: with the budget in
PostgreSQL, a burst of tasks queues instead of meeting the provider's 429s, and the
two processes together keep within it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

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
    # It did queue: six at once, then six a second. (Measured from the first arrival,
    # which a loaded machine may delay more than the last: a few tenths of slack.)
    assert arrivals[-1] >= (TASKS - RATE) / RATE - 0.3
    throttled = await fetch(
        database_url,
        "SELECT task_id, data->>'worker' AS worker, data->>'reason' AS reason, "
        "extract(epoch FROM created_at)::float8 AS at FROM task_events WHERE type = 'throttled'",
    )
    assert {row["reason"] for row in throttled} == {"budget"}
    # Throttled: at least every task that asked when the budget had no slot left. How
    # many did depends on the machine's pace (a slow one asks less at once), so count
    # them from when each asked: a throttled task when it was throttled first, the
    # others when the provider got their request (later than they asked, which only
    # lowers the count), against the bucket with a request of slack, its slots taken
    # by the tasks let through only.
    rows = await fetch(database_url, "SELECT id, input #>> '{}' AS input FROM tasks")
    inputs = {row["id"]: row["input"] for row in rows}
    first = sorted(throttled, key=lambda row: -row["at"])  # the earliest written last
    asked = {inputs[row["task_id"]]: row["at"] for row in first}
    for body, at in zip(provider.requests, provider.arrived_at, strict=True):
        asked.setdefault(_prompt(body), at)
    held_back = len({row["task_id"] for row in throttled})
    needed = beyond(sorted(asked.values()), amount=RATE + 1, period=(RATE + 1) / RATE)
    print(f"\n{held_back} of {TASKS} tasks throttled; at least {needed} had to be")
    assert held_back >= needed
    workers_seen = await fetch(
        database_url,
        "SELECT DISTINCT data->>'worker' AS worker FROM task_events "
        "WHERE type IN ('state_change', 'claimed') AND data->>'to' = 'running'",
    )
    ours = {p.worker_id for p in procs}
    assert {row["worker"] for row in workers_seen} == ours  # both processes ran tasks
    assert {row["worker"] for row in throttled} <= ours
    attempts = await fetch(database_url, "SELECT max(lost_attempts) AS lost FROM tasks")
    assert attempts[0]["lost"] == 0


def _prompt(body: dict[str, Any]) -> str:
    """The user's text in an OpenAI chat request."""
    content = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def beyond(asked: list[float], *, amount: float, period: float) -> int:
    """How many of the requests asked at `asked` (sorted seconds) found a token bucket
    of `amount` per `period`, starting full, empty: those a budget must hold back
    (were it to let the others through at once)."""
    level, at, refused = amount, asked[0] if asked else 0.0, 0
    for moment in asked:
        level = min(amount, level + (moment - at) * amount / period)
        at = moment
        if level >= 1:
            level -= 1
        else:
            refused += 1
    return refused
