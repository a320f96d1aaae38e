"""A dispatcher killed mid-attempt while its receiver is down: one body per webhook-id.

Real processes on 127.0.0.1: one `serve --no-webhooks` (API and workers), dispatcher
processes `serve --no-workers`, and a real HTTP receiver that first hangs (the first
attempts are in flight when the dispatcher is killed with SIGKILL), then answers 503
for a while, then recovers. Tasks finish while no dispatcher runs. Every `webhook-id`
must reach the receiver with identical bytes, and a `task.running` body must show the
task running, whenever it is sent.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from standardwebhooks.webhooks import Webhook

from tests.acceptance.conftest import cli_env, serve
from tests.acceptance.test_workers import fetch, wait_until
from tests.fakes.webhook_receiver import Receiver, Reply

pytestmark = pytest.mark.slow

TASKS = 4  # per batch
HANG = 25.0  # seconds the receiver holds each first attempt (past the kill)
FAILURES = 3  # 503s after the restart, before the receiver recovers


async def test_a_dispatcher_killed_mid_attempt_leaves_one_body_per_webhook_id(
    database_url: str, db: AsyncEngine, tmp_path: Path
) -> None:
    env = cli_env(
        TASKSERVICE_DATABASE_URL=database_url,
        TASKSERVICE_ALLOWED_MODELS="offline:1.5",
        TASKSERVICE_POLL_INTERVAL="0.2",
        TASKSERVICE_WEBHOOK_ALLOW_HTTP="true",
        TASKSERVICE_WEBHOOK_ALLOW_TARGETS="127.0.0.1/32",
        TASKSERVICE_WEBHOOK_TIMEOUT_SECONDS="30",  # the hanging attempts stay in flight
        TASKSERVICE_WEBHOOK_RETRY_SCHEDULE=",".join(["0"] + ["0.3"] * 9),
        TASKSERVICE_WEBHOOK_JITTER="0",
    )
    receiver = Receiver()
    receiver.script("/hook", *[Reply(503, delay=HANG)] * TASKS, *[Reply(503)] * FAILURES)
    async with receiver:
        with serve(env, tmp_path / "api.log", "--no-webhooks") as api:
            async with httpx.AsyncClient(base_url=api.url, timeout=10) as client:
                hook = {"url": receiver.url(), "states": ["running", "completed"]}
                made = await client.post("/v1/webhooks", json=hook)
                assert made.status_code == 201, made.text
                secret = made.json()["secret"]

                async def submit(batch: str) -> list[str]:
                    ids = []
                    for i in range(TASKS):
                        body = {"input": f"{batch} {i}", "model": "offline:1.5"}
                        created = await client.post("/v1/tasks", json=body)
                        assert created.status_code == 201, created.text
                        ids.append(created.json()["id"])
                    return ids

                with serve(env, tmp_path / "dispatcher-1.log", "--no-workers") as first:
                    first_batch = await submit("first")

                    async def all_in_flight() -> bool:
                        return len(receiver.received) >= TASKS

                    # The `task.running` deliveries' first attempts hang at the receiver.
                    await wait_until(all_in_flight, 30, "the first attempts")
                    first.crash()  # SIGKILL, by PID, mid-attempt
                    first.process.wait(timeout=10)
                    assert first.process.returncode == -9
                # No dispatcher runs while these start and finish.
                second_batch = await submit("second")

                async def all_completed() -> bool:
                    rows = await fetch(
                        database_url, "SELECT count(*) AS n FROM tasks WHERE state = 'completed'"
                    )
                    return bool(rows[0]["n"] == 2 * TASKS)

                await wait_until(all_completed, 60, "every task completed")
                # The killed dispatcher's leases last timeout + 30 s: run them out now
                # instead of waiting (what the next dispatcher does then is the test).
                expired = await fetch(
                    database_url,
                    "UPDATE webhook_deliveries SET next_attempt_at = now() "
                    "WHERE status = 'pending' AND locked_by IS NOT NULL RETURNING id",
                )
                assert len(expired) == TASKS

                with serve(env, tmp_path / "dispatcher-2.log", "--no-workers"):

                    async def all_delivered() -> bool:
                        rows = await fetch(
                            database_url,
                            "SELECT count(*) AS n FROM webhook_deliveries "
                            "WHERE status = 'succeeded'",
                        )
                        return bool(rows[0]["n"] == 4 * TASKS)

                    await wait_until(all_delivered, 60, "every delivery")

    bodies: dict[str, set[bytes]] = defaultdict(set)
    parsed: dict[str, dict[str, Any]] = {}
    for got in receiver.at("/hook"):
        bodies[got.webhook_id].add(got.body)
        parsed[got.webhook_id] = Webhook(secret).verify(got.body, got.headers)
    assert len(bodies) == 4 * TASKS
    assert {hook_id: len(sent) for hook_id, sent in bodies.items()} == dict.fromkeys(bodies, 1)
    for body in parsed.values():
        assert body["type"] == f"task.{body['data']['state']}"
        assert body["data"]["task"]["state"] == body["data"]["state"]
        if body["data"]["state"] == "running":
            assert body["data"]["task"]["result"] is None
    states = {(b["data"]["task"]["id"], b["data"]["state"]) for b in parsed.values()}
    assert states == {(t, s) for t in first_batch + second_batch for s in ("running", "completed")}
    # The first batch's `running` deliveries really were attempted across the kill.
    attempts = await fetch(
        database_url,
        "SELECT d.task_id::text AS task_id, d.attempts FROM webhook_deliveries d "
        "WHERE d.state = 'running'",
    )
    by_task = {row["task_id"]: row["attempts"] for row in attempts}
    assert all(by_task[t] >= 2 for t in first_batch), by_task
