"""`taskservice` as a user runs it: embedded PostgreSQL, restarts, keys, refusal."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.embedded import embedded_pid_of
from taskservice.db.tasks import TaskStore
from taskservice.domain.states import TaskState
from tests.acceptance.conftest import READY_SAID, cli_env, free_port, run_cli, serve
from tests.integration.helpers import force_state, new_task

pytestmark = pytest.mark.slow


def wait_state(url: str, headers: dict[str, str] | None = None, *states: str) -> dict:
    deadline = time.monotonic() + 20
    while True:
        task = httpx.get(url, headers=headers).json()
        if task["state"] in states:
            return task  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, task
        time.sleep(0.05)


def test_embedded_postgres_serves_shares_and_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = cli_env(TASKSERVICE_DATA_DIR=str(data), TASKSERVICE_AUTH_CACHE_SECONDS="0.5")

    with serve(env, tmp_path / "first.log") as server:
        postmaster = embedded_pid_of(data)
        assert postmaster is not None
        assert "OPEN development mode" in server.output()
        assert "OFFLINE model" in server.output()
        # A quiet start: initdb's and pg_ctl's output, platformdirs' warning and
        # alembic's dialect lines are debug matters.
        for noise in ("initdb", "pg_ctl", "XDG_RUNTIME_DIR", "Context impl"):
            assert noise not in server.output(), noise
        created = httpx.post(f"{server.url}/v1/tasks", json={"input": "remember me"})
        assert created.status_code == 201
        task_url = server.url + created.headers["location"]
        done = wait_state(task_url, None, "completed", "failed")
        assert done["state"] == "completed"

        # An admin command on the same folder joins the running server.
        made = run_cli("keys", "create", "--tenant", "acme", env=env)
        assert made.returncode == 0, made.stderr
        key = made.stdout.strip()
        assert key.startswith("tsk_")
        assert embedded_pid_of(data) == postmaster  # same server, still running
        assert made.stderr.count("\n") <= 3, made.stderr
        # The new key is live on the running service, and anonymous access has ended.
        time.sleep(0.6)  # the open-mode check is cached for auth_cache_seconds
        assert httpx.get(f"{server.url}/v1/tasks").status_code == 401
        assert (
            httpx.get(
                f"{server.url}/v1/tasks", headers={"Authorization": f"Bearer {key}"}
            ).status_code
            == 200
        )

    assert server.process.returncode == 0
    # The last process using the embedded server stopped it.
    deadline = time.monotonic() + 10
    while embedded_pid_of(data) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert embedded_pid_of(data) is None

    with serve(env, tmp_path / "second.log") as server:
        # The task from before the restart is still there, still completed; it now
        # belongs to tenant "default", which the acme key cannot see.
        listed = run_cli("keys", "list", env=env)
        assert "acme" in listed.stdout
        anonymous = httpx.get(server.url + created.headers["location"])
        assert anonymous.status_code == 401

    assert done["result"]


def ready_block(server_output: str) -> list[str]:
    """The lines of `serve`'s start-up block, once it has been said."""
    lines = server_output.splitlines()
    first = next(i for i, line in enumerate(lines) if READY_SAID in line)
    return lines[first : first + 7]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_first_start_says_where_to_browse_in_one_short_block(
    tmp_path: Path, processes: str
) -> None:
    env = cli_env(
        TASKSERVICE_DATA_DIR=str(tmp_path / "data"), TASKSERVICE_RATE_LIMITS="offline=600rpm"
    )
    with serve(env, tmp_path / "first.log", "--processes", processes) as server:
        time.sleep(0.5)  # anything a process would say after the block
        said = server.output()
    lines = said.splitlines()
    # A new database (initdb, 21 migrations) and every process: at most 15 lines,
    # and no line said by each process in turn.
    assert len(lines) <= 15, said
    block = ready_block(said)
    assert "ready in " in block[0], block
    assert server.url in block[0], block
    assert f"{server.url}/ui/" in block[1], block
    assert f"{server.url}/docs" in block[2], block
    database = block[3]
    assert "embedded PostgreSQL in" in database, block
    assert "started; stops with the service" in database, block
    assert "migrations applied just now" in database, block
    assert "OFFLINE model" in block[4], block
    assert "OPEN development mode" in block[5], block
    assert block[6].split()[1] == processes, block
    limit = said.splitlines()[said.splitlines().index(block[6]) + 1]
    assert limit.split()[0] == "limit", said
    assert "offline" in limit, said
    for noise in ("Running upgrade", "Started server process", "Application startup", "started:"):
        assert noise not in said, noise
    if processes == "2":
        assert "[" not in said.split("taskservice.serve:")[0], "a process spoke before the block"


def test_serve_killed_with_minus_9_leaves_no_database_server_behind(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = cli_env(TASKSERVICE_DATA_DIR=str(data))
    with serve(env, tmp_path / "serve.log") as server:
        postmaster = embedded_pid_of(data)
        assert postmaster is not None
        os.kill(server.process.pid, signal.SIGKILL)  # no exit handler runs
        server.process.wait(timeout=10)
        # The watchdog saw it end and stopped the server it alone was using.
        deadline = time.monotonic() + 30
        while embedded_pid_of(data) is not None:
            assert time.monotonic() < deadline, "the embedded PostgreSQL is still running"
            time.sleep(0.1)
    # And the next start starts it again, and says so.
    with serve(env, tmp_path / "again.log") as server:
        assert embedded_pid_of(data) not in (None, postmaster)
        assert httpx.get(f"{server.url}/v1/tasks").status_code == 200


def test_data_written_before_a_restart_is_read_after_it(tmp_path: Path) -> None:
    env = cli_env(TASKSERVICE_DATA_DIR=str(tmp_path / "data"))
    with serve(env, tmp_path / "a.log") as server:
        created = httpx.post(
            f"{server.url}/v1/tasks", json={"input": "durable", "metadata": {"n": 7}}
        )
        location = created.headers["location"]
        before = wait_state(server.url + location, None, "completed")
    with serve(env, tmp_path / "b.log") as server:
        after = httpx.get(server.url + location).json()
    assert after == before


def test_a_second_serve_on_the_same_folder_shares_the_embedded_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = cli_env(TASKSERVICE_DATA_DIR=str(data))
    with serve(env, tmp_path / "one.log") as one:
        postmaster = embedded_pid_of(data)
        with serve(env, tmp_path / "two.log") as two:
            assert embedded_pid_of(data) == postmaster
            created = httpx.post(f"{one.url}/v1/tasks", json={"input": "seen by both"})
            seen = httpx.get(two.url + created.headers["location"])
            assert seen.status_code == 200
            assert seen.json()["input"] == "seen by both"
        # The second one leaving does not stop the server under the first.
        assert embedded_pid_of(data) == postmaster
        assert httpx.get(f"{one.url}/readyz").status_code == 200


def test_binding_beyond_loopback_without_keys_refuses_to_start(
    tmp_path: Path, database_url: str
) -> None:
    env = cli_env(TASKSERVICE_DATABASE_URL=database_url)
    result = run_cli("serve", "--host", "0.0.0.0", "--port", str(free_port()), env=env, timeout=60)
    assert result.returncode != 0
    assert "no API key exists" in result.stderr


def test_keys_create_list_revoke(database_url: str, db: object) -> None:
    env = cli_env(TASKSERVICE_DATABASE_URL=database_url)
    created = run_cli("keys", "create", "--tenant", "acme", "--name", "ci", env=env)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    listed = run_cli("keys", "list", env=env)
    assert '"tenant": "acme"' in listed.stdout
    assert key not in listed.stdout  # never the key itself
    key_id = listed.stdout.split('"id": "')[1].split('"')[0]
    revoked = run_cli("keys", "revoke", key_id, env=env)
    assert revoked.returncode == 0
    assert '"revoked_at": null' not in run_cli("keys", "list", env=env).stdout
    assert run_cli("keys", "create", "--tenant", "bad tenant!", env=env).returncode == 2
    assert run_cli("keys", "revoke", "not-a-uuid", env=env).returncode == 2


async def test_prune_by_hand_counts_then_deletes(
    database_url: str, store: TaskStore, db: AsyncEngine
) -> None:
    env = cli_env(TASKSERVICE_DATABASE_URL=database_url)
    refused = await asyncio.to_thread(run_cli, "prune", env=env)
    assert refused.returncode == 2
    assert "--older-than" in refused.stderr
    assert (
        await asyncio.to_thread(run_cli, "prune", "--older-than", "soon", env=env)
    ).returncode == 2
    old = await new_task(store)
    await force_state(db, old.id, TaskState.COMPLETED)
    async with db.begin() as conn:
        await conn.execute(
            text("UPDATE tasks SET finished_at = now() - interval '40 days' WHERE id = :id"),
            {"id": old.id},
        )
    dry = await asyncio.to_thread(run_cli, "prune", "--older-than", "30d", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report == {"dry_run": True, "tasks": 1, "events": 1, "messages": 0, "deliveries": 0}
    assert await store.get(old.id, tenant="default") is not None
    done = await asyncio.to_thread(
        run_cli, "prune", env={**env, "TASKSERVICE_RETENTION_DAYS": "30"}
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tasks"] == 1
    assert await store.get(old.id, tenant="default") is None
