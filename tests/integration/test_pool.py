"""The worker pool in a real app: timeouts, a blocking agent, shutdown, reconnects."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.leases import LeaseStore
from taskservice.db.sql import Database
from tests.conftest import ClientFactory, wait_for
from tests.integration.helpers import event_types, until_state


def sleeping(seconds: float) -> FunctionModel:
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(seconds)
        return ModelResponse(parts=[TextPart("slept")])

    return FunctionModel(answer)


async def test_a_run_over_its_timeout_fails_saying_so(make_client: ClientFactory) -> None:
    async with make_client(models={"slow": sleeping(30)}, workers_enabled=True) as client:
        task = (
            await client.post(
                "/v1/tasks", json={"input": "x", "model": "slow", "timeout_seconds": 0.3}
            )
        ).json()
        assert task["timeout_seconds"] == 0.3
        done = await until_state(client, task["id"], "failed", "completed")
        assert done["state"] == "failed"
        assert done["error"]["type"] == "timeout"
        assert "0.3 s" in done["error"]["message"]


async def test_an_agent_blocking_the_event_loop_keeps_its_lease(
    make_client: ClientFactory, database_url: str
) -> None:
    """The heartbeat runs in its own thread: while the agent blocks the loop for
    three lease lengths, another process's reaper finds nothing to recover."""
    lease = 0.6
    started = threading.Event()

    def blocking(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        started.set()
        time.sleep(lease * 3)  # a sync call in an async agent: the loop is stuck
        return ModelResponse(parts=[TextPart("done")])

    async def blocking_async(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return blocking(messages, info)

    reaped: list[tuple[int, int]] = []

    def other_process_reaper() -> None:
        async def probe() -> None:
            async with Database(database_url, pool_size=1) as db:
                leases = LeaseStore(db)
                deadline = time.monotonic() + lease * 4
                while time.monotonic() < deadline:
                    recovered, failed = await leases.reap(log_cap=10)
                    reaped.append((recovered, len(failed)))
                    await asyncio.sleep(lease / 4)

        started.wait(10)
        asyncio.run(probe())

    async with make_client(
        models={"blocking": FunctionModel(blocking_async)},
        workers_enabled=True,
        lease_seconds=lease,
        reap_interval=60,
    ) as client:
        prober = threading.Thread(target=other_process_reaper)
        prober.start()
        task = (await client.post("/v1/tasks", json={"input": "x", "model": "blocking"})).json()
        done = await until_state(client, task["id"], "completed", "failed")
        await asyncio.to_thread(prober.join, 10)
    assert done["state"] == "completed"
    assert done["attempt"] == 1
    assert len(reaped) >= 8
    assert set(reaped) == {(0, 0)}


async def test_shutdown_releases_unfinished_runs_for_others_to_resume(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    async with make_client(
        models={"slow": sleeping(60)}, workers_enabled=True, shutdown_grace_seconds=0.3
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "model": "slow"})).json()
        await until_state(client, task["id"], "running")
        pool = client.app.state.runtime.pool  # type: ignore[attr-defined]
        await wait_for(lambda: pool.running == 1)
    async with db.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT state, lease_owner FROM tasks WHERE id = :id"), {"id": task["id"]}
            )
        ).one()
    assert (row.state, row.lease_owner) == ("running", None)
    kinds = [kind for _, kind, _ in await event_types(db, uuid.UUID(task["id"]))]
    assert kinds[-1] == "released"


async def test_the_listener_reconnects_and_wakes_workers_after_its_backend_is_killed(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    # With a one-minute poll, only a notification can start a task promptly.
    async with make_client(workers_enabled=True, poll_interval=60) as client:
        hub = client.app.state.runtime.hub  # type: ignore[attr-defined]
        old_pid = hub.backend_pid
        assert old_pid is not None
        async with db.connect() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": old_pid})
        await wait_for(lambda: hub.reconnects >= 1 and hub.listening.is_set())
        assert hub.backend_pid not in (None, old_pid)
        started = time.monotonic()
        task = (await client.post("/v1/tasks", json={"input": "after the drop"})).json()
        done = await until_state(client, task["id"], "completed")
        assert done["attempt"] == 1
        assert time.monotonic() - started < 20  # a notification, not the 60 s poll


async def test_a_lost_lease_report_after_the_outcome_commits_does_not_stop_the_run(
    make_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A finished task holds no lease, so a heartbeat that looks just after the
    outcome commits reports it lost (and a cancel may race it likewise). What the
    run does after its fenced write (resuming a parked parent) must still happen."""
    async with make_client(workers_enabled=True) as client:
        pool = client.app.state.runtime.pool  # type: ignore[attr-defined]
        finish = pool.ledger.finish
        after_commit: list[str] = []

        async def finish_then_lose_lease(task_id: uuid.UUID, **kwargs: Any) -> Any:
            written = await finish(task_id, **kwargs)
            pool._on_leases_lost({task_id})  # the heartbeat's report, as it arrives
            await asyncio.sleep(0)  # where a cancellation would land
            after_commit.append("written" if written else "not written")
            return written

        pool.ledger.finish = finish_then_lose_lease
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        await until_state(client, task["id"], "completed")
        await wait_for(lambda: pool.running == 0)
    assert after_commit == ["written"]
    assert "lease lost" not in caplog.text
    assert "run stopped" not in caplog.text
