"""`taskservice serve --processes N`: N processes on one port under one supervisor.
Both run tasks; /metrics adds all of them up whichever answers; a process that dies
is replaced; SIGTERM stops them all gracefully; a supervisor killed with -9 takes its
processes with it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import uuid
from pathlib import Path

import asyncpg
import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.engine import asyncpg_dsn
from tests.acceptance.conftest import Server, cli_env, free_port, run_cli, serve

pytestmark = pytest.mark.slow


def processes_of(server: Server) -> list[psutil.Process]:
    """The supervisor's serving processes: the children of its fork server."""
    found = []
    try:
        for helper in psutil.Process(server.process.pid).children():
            if "forkserver" not in " ".join(helper.cmdline()):
                continue  # multiprocessing's resource tracker
            for child in helper.children():
                if child.status() != psutil.STATUS_ZOMBIE:
                    found.append(child)
    except psutil.NoSuchProcess:
        pass  # ended meanwhile
    return found


def until(predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def run_tasks_of_a_second(url: str, count: int) -> list[str]:
    """Submit `count` tasks that each take a second; their ids once all completed."""
    ids = [
        httpx.post(f"{url}/v1/tasks", json={"input": f"t{n}", "model": "offline:1"}).json()["id"]
        for n in range(count)
    ]
    until(lambda: completed(url, ids), timeout=30)
    return ids


def completed(url: str, ids: list[str]) -> bool:
    return all(httpx.get(f"{url}/v1/tasks/{i}").json()["state"] == "completed" for i in ids)


def ran_in(url: str, ids: list[str]) -> set[int]:
    """The processes that claimed these tasks (worker ids are host:pid:nonce)."""
    return {
        int(event["data"]["worker"].split(":")[1])
        for i in ids
        for event in httpx.get(f"{url}/v1/tasks/{i}/events").json()["events"]
        if event["data"].get("to") == "running"
    }


def metric_total(body: str, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def test_both_processes_run_tasks_and_metrics_add_up_across_them(
    tmp_path: Path, database_url: str, db: AsyncEngine
) -> None:
    # Two runs at once per process: eight tasks of a second need both processes.
    metrics_port = free_port()  # shared by the two processes
    env = cli_env(
        TASKSERVICE_DATABASE_URL=database_url,
        TASKSERVICE_WORKER_CONCURRENCY="2",
        TASKSERVICE_METRICS_PORT=str(metrics_port),
    )
    with serve(env, tmp_path / "serve.log", "--processes", "2") as server:
        pids = {p.pid for p in processes_of(server)}
        assert len(pids) == 2
        ids = run_tasks_of_a_second(server.url, 8)
        assert ran_in(server.url, ids) == pids

        # Whichever process answers, /metrics shows the whole server's counts, on
        # the API's port and on the metrics port alike.
        for scraped in [f"{server.url}/metrics", f"http://127.0.0.1:{metrics_port}/metrics"] * 4:
            body = httpx.get(scraped).text
            assert metric_total(body, "taskservice_run_duration_seconds_count") == 8
            submits = metric_total(
                body,
                "taskservice_http_request_duration_seconds_count",
                method="POST",
                route="/v1/tasks",
            )
            assert submits == 8
    assert server.process.returncode == 0


def test_sigterm_stops_every_process_and_releases_what_they_ran(
    tmp_path: Path, database_url: str, db: AsyncEngine
) -> None:
    env = cli_env(TASKSERVICE_DATABASE_URL=database_url, TASKSERVICE_SHUTDOWN_GRACE_SECONDS="0.5")
    with serve(env, tmp_path / "serve.log", "--processes", "2") as server:
        children = processes_of(server)
        created = httpx.post(
            f"{server.url}/v1/tasks", json={"input": "long", "model": "offline:60"}
        ).json()
        task_url = f"{server.url}/v1/tasks/{created['id']}"
        until(lambda: httpx.get(task_url).json()["state"] == "running")
    assert server.process.returncode == 0  # stopped by SIGTERM, gracefully
    assert not [child for child in children if child.is_running()]
    # Handed back at once for another process to resume, not left to its lease.
    assert "released" in asyncio.run(event_types(database_url, created["id"]))


async def event_types(database_url: str, task_id: str) -> list[str]:
    dsn, kwargs = asyncpg_dsn(database_url)
    conn = await asyncpg.connect(dsn, **kwargs)
    try:
        rows = await conn.fetch(
            "SELECT type FROM task_events WHERE task_id = $1 ORDER BY seq", uuid.UUID(task_id)
        )
    finally:
        await conn.close()
    return [row["type"] for row in rows]


def test_a_dead_process_is_replaced_and_a_killed_supervisor_takes_the_rest_along(
    tmp_path: Path, database_url: str, db: AsyncEngine
) -> None:
    env = cli_env(TASKSERVICE_DATABASE_URL=database_url, TASKSERVICE_WORKER_CONCURRENCY="2")
    with serve(env, tmp_path / "serve.log", "--processes", "2") as server:
        first, second = processes_of(server)
        os.kill(first.pid, signal.SIGKILL)
        replacements: list[psutil.Process] = []

        def replaced() -> bool:
            # One read of the process table (two could see different moments: the
            # test once found the replacement in one and not in the next).
            current = processes_of(server)
            replacements[:] = [p for p in current if p.pid not in (first.pid, second.pid)]
            return len(replacements) == 1 and first.pid not in {p.pid for p in current}

        until(replaced)
        [replacement] = replacements
        until(lambda: started_workers(server, replacement.pid), timeout=60)
        # The service answers throughout; the replacement takes its share of the work.
        ids = run_tasks_of_a_second(server.url, 6)
        assert replacement.pid in ran_in(server.url, ids)

        os.kill(server.process.pid, signal.SIGKILL)  # no chance to stop anything
        until(lambda: not second.is_running() and not replacement.is_running())
    assert f"process {first.pid} exited (-9); starting another" in server.output()


def started_workers(server: Server, pid: int) -> bool:
    """Whether the supervisor said process `pid` is ready (its workers started)."""
    return f"process {pid} ready" in server.output()


def test_a_port_in_use_is_one_clear_error_and_exit_3(database_url: str, db: AsyncEngine) -> None:
    env = cli_env(TASKSERVICE_DATABASE_URL=database_url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("serve", "--port", str(port), "--processes", "2", env=env)
    assert result.returncode == 3, result.stderr
    assert f"could not listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
