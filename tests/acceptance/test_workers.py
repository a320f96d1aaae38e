"""Worker processes under failure: exactly-once, kill -9, SIGTERM, killed connections.

Each test is bounded: waits poll with deadlines, processes are ours and are stopped
by PID at the end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.engine import asyncpg_dsn
from taskservice.db.tasks import TaskStore
from tests.acceptance.conftest import cli_env
from tests.integration.helpers import SPEC, new_task

pytestmark = pytest.mark.slow

READY_TIMEOUT = 30.0  # seconds


class Worker:
    def __init__(self, process: subprocess.Popen[str], log: Path) -> None:
        self.process = process
        self.log = log

    def output(self) -> str:
        return self.log.read_text()

    @property
    def worker_id(self) -> str:
        line = next(
            line for line in self.output().splitlines() if "worker " in line and " started" in line
        )
        return line.split("worker ", 1)[1].split(" started", 1)[0]


@asynccontextmanager
async def workers(
    database_url: str, tmp_path: Path, count: int, **settings: object
) -> AsyncIterator[list[Worker]]:
    env = cli_env(
        TASKSERVICE_DATABASE_URL=database_url,
        TASKSERVICE_ALLOWED_MODELS="offline:0.02,offline:0.5,offline:3,offline:4,scripted",
        **{f"TASKSERVICE_{k.upper()}": str(v) for k, v in settings.items()},
    )
    started: list[Worker] = []
    try:
        for _ in range(count):
            started.append(await start_worker(env, tmp_path))
        yield started
    finally:
        for worker in started:
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait(timeout=10)


async def start_worker(env: dict[str, str], tmp_path: Path) -> Worker:
    log = tmp_path / f"worker-{time.monotonic_ns()}.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "taskservice.cli", "worker"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    worker = Worker(process, log)
    deadline = time.monotonic() + READY_TIMEOUT
    while " started" not in worker.output():
        assert process.poll() is None, worker.output()
        assert time.monotonic() < deadline, worker.output()
        await asyncio.sleep(0.05)
    return worker


async def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():  # type: ignore[misc]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def fetch(database_url: str, sql: str, *args: object) -> list[asyncpg.Record]:
    """A fresh connection each time: these tests kill connections on purpose."""
    dsn, kwargs = asyncpg_dsn(database_url)
    conn = await asyncpg.connect(dsn, **kwargs)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def states(database_url: str) -> Counter[str]:
    rows = await fetch(database_url, "SELECT state, count(*) AS n FROM tasks GROUP BY state")
    return Counter({row["state"]: row["n"] for row in rows})


async def submit(store: TaskStore, count: int, model: str) -> None:
    for i in range(count):
        await new_task(store, input=f"task {i}", agent=replace(SPEC, model=model))


async def test_three_workers_run_300_tasks_each_exactly_once(
    database_url: str, db: AsyncEngine, store: TaskStore, tmp_path: Path
) -> None:
    async with workers(database_url, tmp_path, 3, worker_concurrency=8) as procs:
        await submit(store, 300, "offline:0.02")

        async def all_done() -> bool:
            return (await states(database_url))["completed"] == 300

        await wait_until(all_done, 60, "300 completed tasks")
    attempts = await fetch(
        database_url, "SELECT attempt, count(*) AS n FROM tasks GROUP BY attempt"
    )
    assert [(r["attempt"], r["n"]) for r in attempts] == [(1, 300)]
    runs = await fetch(
        database_url,
        "SELECT task_id, count(*) AS n, min(data->>'worker') AS worker FROM task_events "
        "WHERE data->>'to' = 'running' GROUP BY task_id",
    )
    assert len(runs) == 300
    assert {r["n"] for r in runs} == {1}
    by_worker = Counter(r["worker"] for r in runs)
    assert set(by_worker) <= {p.worker_id for p in procs}
    assert len(by_worker) >= 2, by_worker  # the work really was shared
    # The event loop `serve` runs on too (uvicorn[standard] installs uvloop).
    assert "worker running on uvloop" in procs[0].output()


async def test_a_killed_worker_s_tasks_complete_elsewhere_after_its_lease_expires(
    database_url: str, db: AsyncEngine, store: TaskStore, tmp_path: Path
) -> None:
    fast = {"lease_seconds": 1.5, "reap_interval": 0.3, "poll_interval": 0.5}
    async with workers(database_url, tmp_path, 1, **fast) as [victim]:
        await submit(store, 4, "offline:3")

        async def all_running() -> bool:
            return (await states(database_url))["running"] == 4

        await wait_until(all_running, 20, "the victim to run all four")
        victim_id = victim.worker_id
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait(timeout=10)

        async with workers(database_url, tmp_path, 1, **fast) as [rescuer]:

            async def all_done() -> bool:
                return (await states(database_url))["completed"] == 4

            await wait_until(all_done, 30, "the rescuer to complete all four")
            rescuer_id = rescuer.worker_id

    rows = await fetch(database_url, "SELECT id, attempt FROM tasks")
    assert {r["attempt"] for r in rows} == {2}
    for row in rows:
        events = await fetch(
            database_url,
            "SELECT type, data FROM task_events WHERE task_id = $1 "
            "AND type IN ('state_change', 'recovered', 'claimed') ORDER BY seq",
            row["id"],
        )
        kinds = [e["type"] for e in events]
        assert kinds == ["state_change", "state_change", "recovered", "claimed", "state_change"]
        assert victim_id in events[2]["data"]
        assert rescuer_id in events[3]["data"]


async def test_sigterm_lets_short_runs_finish_and_releases_the_rest(
    database_url: str, db: AsyncEngine, store: TaskStore, tmp_path: Path
) -> None:
    settings = {"shutdown_grace_seconds": 1.5, "poll_interval": 0.5}
    async with workers(database_url, tmp_path, 1, **settings) as [leaving]:
        await submit(store, 2, "offline:0.5")
        await submit(store, 2, "offline:4")

        async def all_claimed() -> bool:
            return (await states(database_url))["pending"] == 0

        await wait_until(all_claimed, 20, "all four claimed")
        started = time.monotonic()
        leaving.process.send_signal(signal.SIGTERM)
        assert leaving.process.wait(timeout=20) == 0
        assert time.monotonic() - started < 10
        after = await fetch(
            database_url, "SELECT state, lease_owner, agent->>'model' AS model FROM tasks"
        )
        assert sorted((r["model"], r["state"], r["lease_owner"]) for r in after) == [
            ("offline:0.5", "completed", None),
            ("offline:0.5", "completed", None),
            ("offline:4", "running", None),  # released: nobody owns it, anyone may claim it
            ("offline:4", "running", None),
        ]
        assert "released" in leaving.output()

        async with workers(database_url, tmp_path, 1, **settings):

            async def all_done() -> bool:
                return (await states(database_url))["completed"] == 4

            await wait_until(all_done, 20, "the released runs to complete elsewhere")


async def test_workers_and_listener_recover_when_database_connections_are_killed(
    database_url: str, db: AsyncEngine, store: TaskStore, tmp_path: Path
) -> None:
    await db.dispose()  # our own pooled connections are about to die too
    settings = {"lease_seconds": 3, "reap_interval": 0.5, "poll_interval": 1}
    async with workers(database_url, tmp_path, 2, **settings) as procs:
        await submit(store, 150, "offline:0.02")
        for _ in range(3):
            await asyncio.sleep(0.3)
            await fetch(
                database_url,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
        await submit(store, 50, "offline:0.02")  # submitted after the storm

        async def all_done() -> bool:
            return (await states(database_url))["completed"] == 200

        try:
            await wait_until(all_done, 60, "200 completed tasks")
        except AssertionError:
            errors = await fetch(
                database_url,
                "SELECT state, attempt, error FROM tasks WHERE state <> 'completed' LIMIT 5",
            )
            logs = "\n".join(p.output()[-3000:] for p in procs)
            raise AssertionError(f"{await states(database_url)} {errors}\n{logs}") from None
        assert all(p.process.poll() is None for p in procs)
        assert any("reconnected" in p.output() for p in procs)
    assert (await states(database_url)) == Counter({"completed": 200})


async def test_a_worker_killed_between_two_tool_calls_resumes_without_repeating_the_first(
    database_url: str, db: AsyncEngine, store: TaskStore, tmp_path: Path
) -> None:
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    env = {
        "lease_seconds": 1.5,
        "reap_interval": 0.3,
        "poll_interval": 0.5,
        "plugins": "tests.fakes.plugin",
        "default_tools": "count,hang",
        "test_plugin_dir": str(plugin_dir),
    }
    async with workers(database_url, tmp_path, 1, **env) as [victim]:
        await new_task(store, input="go", agent=replace(SPEC, model="scripted"))

        async def hanging() -> bool:
            return (plugin_dir / "hanging").exists()

        await wait_until(hanging, 20, "the second tool call to start")
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait(timeout=10)

        async with workers(database_url, tmp_path, 1, **env):

            async def done() -> bool:
                return (await states(database_url))["completed"] == 1

            await wait_until(done, 30, "the task to complete on the second worker")

    [task] = await fetch(database_url, "SELECT id, attempt, result FROM tasks")
    assert task["attempt"] == 2
    runs = (plugin_dir / "count.log").read_text().split()
    assert runs == [str(victim.process.pid)]  # executed once, by the killed worker
    assert '"c1=counted step 1' in task["result"]
    assert "interrupted" in task["result"]
    calls = await fetch(
        database_url, "SELECT tool_call_id, status, error FROM task_calls ORDER BY tool_call_id"
    )
    assert [(c["tool_call_id"], c["status"]) for c in calls] == [
        ("c1", "completed"),
        ("c2", "failed"),
    ]
    assert calls[1]["error"].startswith("interrupted")


async def test_crash_looping_workers_recover_expired_leases_within_lease_plus_interval(
    database_url: str, db: AsyncEngine, store: TaskStore, tmp_path: Path
) -> None:
    """Each worker lives less than a reap interval; every lease a killed worker held
    is still recovered about `lease_seconds` after the kill (figures printed)."""
    lease, interval = 3.0, 5.0
    env = cli_env(
        TASKSERVICE_DATABASE_URL=database_url,
        TASKSERVICE_ALLOWED_MODELS="offline:4",
        TASKSERVICE_LEASE_SECONDS=str(lease),
        TASKSERVICE_REAP_INTERVAL=str(interval),
        TASKSERVICE_POLL_INTERVAL="0.5",
    )
    for i in range(4):  # each runs longer than any worker lives
        await new_task(
            store, input=f"task {i}", agent=replace(SPEC, model="offline:4"), max_attempts=100
        )
    killed_at: dict[str, float] = {}
    last: Worker | None = None
    # Who held a lease (claimed a task), and whose leases were taken back.
    held = "SELECT DISTINCT data->>'worker' AS w FROM task_events WHERE data->>'to' = 'running'"
    reaped = (
        "SELECT data->>'worker' AS worker, extract(epoch FROM created_at)::float8 AS at "
        "FROM task_events WHERE type = 'recovered'"
    )
    try:
        for _ in range(8):
            last = await start_worker(env, tmp_path)
            await asyncio.sleep(1.5)
            killed_at[last.worker_id] = time.time()
            os.kill(last.process.pid, signal.SIGKILL)
            last.process.wait(timeout=10)
        # One that stays, so the last kills' leases have a reaper too.
        last = await start_worker(env, tmp_path)

        async def all_recovered() -> bool:
            holders = {r["w"] for r in await fetch(database_url, held)} & set(killed_at)
            return bool(holders) and holders <= {
                r["worker"] for r in await fetch(database_url, reaped)
            }

        await wait_until(all_recovered, lease + interval + 10, "every killed worker's leases")
    finally:
        if last is not None and last.process.poll() is None:
            last.process.kill()
            last.process.wait(timeout=10)
    delays = sorted(r["at"] - killed_at[r["worker"]] for r in await fetch(database_url, reaped))
    print(
        f"\n{len(delays)} leases recovered after their worker's kill -9: "
        f"median {delays[len(delays) // 2]:.2f}s, max {delays[-1]:.2f}s "
        f"(lease {lease}s, reap interval {interval}s)"
    )
    assert len(delays) >= 16  # four tasks, taken back from at least four killed workers
    assert delays[-1] <= lease + interval, delays
