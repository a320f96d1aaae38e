"""A worker process killed with -9 mid-delegation: the task's next worker follows
the remote task the first one started, and the remote agent (on the official A2A
SDK's server, which does not recognise a resent message) gets the message once."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.tasks import TaskStore
from tests.acceptance.conftest import cli_env
from tests.acceptance.test_workers import fetch, start_worker, wait_until
from tests.fakes.a2a_sdk_agent import sdk_agent
from tests.integration.helpers import SPEC, new_task

pytestmark = pytest.mark.slow


async def test_a_worker_killed_mid_delegation_is_followed_by_one_that_sends_nothing(
    database_url: str, db: AsyncEngine, store: TaskStore, tmp_path: Path
) -> None:
    async with sdk_agent(delay=4.0) as remote:
        agents = tmp_path / "agents.toml"
        agents.write_text(f'[agents.helper]\nkind = "a2a"\ncard_url = "{remote.url}"\n')
        env = cli_env(
            TASKSERVICE_DATABASE_URL=database_url,
            TASKSERVICE_AGENTS_FILE=str(agents),
            TASKSERVICE_WEBHOOK_ALLOW_HTTP="true",
            TASKSERVICE_WEBHOOK_ALLOW_TARGETS="127.0.0.1/32",
            TASKSERVICE_LEASE_SECONDS="1.5",
            TASKSERVICE_REAP_INTERVAL="0.3",
            TASKSERVICE_POLL_INTERVAL="0.5",
        )
        task = await new_task(store, input="echo this", agent=replace(SPEC, profile="helper"))
        victim = await start_worker(env, tmp_path)
        try:

            async def delegated() -> bool:
                rows = await fetch(database_url, "SELECT remote FROM tasks WHERE id = $1", task.id)
                return bool(rows[0]["remote"]) and "task_id" in rows[0]["remote"]

            await wait_until(delegated, 20, "the victim to delegate")
            os.kill(victim.process.pid, signal.SIGKILL)
            victim.process.wait(timeout=10)
            rescuer = await start_worker(env, tmp_path)
            try:

                async def completed() -> bool:
                    rows = await fetch(
                        database_url, "SELECT state FROM tasks WHERE id = $1", task.id
                    )
                    return bool(rows[0]["state"] == "completed")

                await wait_until(completed, 30, "the rescuer to complete it")
            finally:
                rescuer.process.kill()
                rescuer.process.wait(timeout=10)
        finally:
            if victim.process.poll() is None:
                victim.process.kill()
                victim.process.wait(timeout=10)
        [row] = await fetch(
            database_url, "SELECT attempt, result FROM tasks WHERE id = $1", task.id
        )
        received = list(remote.echo.received)
    assert received == [f"{task.id}:1"]  # the message went once, from the first attempt
    assert row["attempt"] == 2
    assert json.loads(row["result"]) == "echo: echo this"
    lines = await fetch(
        database_url,
        "SELECT data ->> 'message' AS line FROM task_events WHERE task_id = $1 AND type = 'log' "
        "ORDER BY seq",
        task.id,
    )
    assert sum(r["line"].startswith("delegat") for r in lines) == 2  # both by the victim
