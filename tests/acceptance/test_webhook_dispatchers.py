"""Two dispatcher processes share one outbox: every delivery is sent once, in order."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.tasks import TaskStore
from taskservice.db.webhook_subscriptions import SubscriptionStore
from taskservice.webhooks import signing
from tests.acceptance.test_workers import fetch, wait_until, workers
from tests.fakes.webhook_receiver import Receiver
from tests.integration.helpers import SPEC, new_task

pytestmark = pytest.mark.slow

TASKS = 150


async def test_two_dispatcher_processes_never_send_one_attempt_twice(
    database_url: str, db: AsyncEngine, store: TaskStore, tmp_path: Path
) -> None:
    hooks = SubscriptionStore(store.db)
    settings = {
        "webhook_allow_http": "true",
        "webhook_allow_targets": "127.0.0.1/32",
        "poll_interval": 0.2,
        "worker_concurrency": 8,
    }
    async with Receiver() as receiver, workers(database_url, tmp_path, 2, **settings):
        await hooks.create_global(
            tenant="default",
            subscription_id=uuid.uuid4(),
            url=receiver.url(),
            secret=signing.new_secret(),
            states=["running", "completed"],
            filters={},
        )
        for i in range(TASKS):
            await new_task(store, input=f"task {i}", agent=replace(SPEC, model="offline:0.02"))

        async def all_delivered() -> bool:
            rows = await fetch(
                database_url,
                "SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'succeeded'",
            )
            return bool(rows[0]["n"] == 2 * TASKS)

        await wait_until(all_delivered, 90, f"{2 * TASKS} deliveries")

    sent = Counter(r.webhook_id for r in receiver.received)
    assert len(sent) == 2 * TASKS
    assert set(sent.values()) == {1}, [k for k, n in sent.items() if n > 1]
    # Per task, `running` reached the receiver before `completed`.
    order: dict[str, list[str]] = {}
    for r in receiver.received:
        body = r.json
        order.setdefault(body["data"]["task"]["id"], []).append(body["data"]["state"])
    assert len(order) == TASKS
    assert {tuple(states) for states in order.values()} == {("running", "completed")}
    attempts = await fetch(database_url, "SELECT attempt, dispatcher FROM webhook_attempts")
    assert len(attempts) == 2 * TASKS
    assert {a["attempt"] for a in attempts} == {1}
    by_dispatcher = Counter(a["dispatcher"] for a in attempts)
    assert len(by_dispatcher) == 2, by_dispatcher  # both processes really dispatched
