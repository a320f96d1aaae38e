"""A pause survives a crash: real `taskservice serve` processes, kill -9 and a
restart; a paused task is never claimed across it, and resumed it completes."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.acceptance.conftest import cli_env, serve, until

pytestmark = pytest.mark.slow


def test_a_paused_pending_task_is_never_claimed_across_a_crash_and_a_restart(
    tmp_path: Path, database_url: str, db: AsyncEngine
) -> None:
    env = cli_env(TASKSERVICE_DATABASE_URL=database_url, TASKSERVICE_POLL_INTERVAL="0.2")
    with (
        serve(env, tmp_path / "first.log") as server,
        httpx.Client(base_url=server.url, timeout=20) as http,
    ):
        soon = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
        # Due in a second, paused before: it must not start when its time comes.
        held = http.post(
            "/v1/tasks", json={"agent": "demo", "input": "take 1s", "run_at": soon}
        ).json()
        paused = http.post(f"/v1/tasks/{held['id']}/pause", json={"reason": "hold it"})
        assert paused.status_code == 200, paused.text
        other = http.post("/v1/tasks", json={"agent": "demo", "input": "take 1s"}).json()
        done = http.get(f"/v1/tasks/{other['id']}", params={"wait": 20}).json()
        assert done["state"] == "completed"  # the workers run, and past `soon`
        server.crash()  # kill -9: no graceful anything

    with (
        serve(env, tmp_path / "second.log") as server,
        httpx.Client(base_url=server.url, timeout=20) as http,
    ):
        time.sleep(1.5)  # several claim polls and reaper passes
        now = http.get(f"/v1/tasks/{held['id']}").json()
        assert (now["state"], now["attempt"], now["started_at"]) == ("pending", 0, None)
        assert now["paused"]["reason"] == "hold it"
        listed = http.get("/v1/tasks", params={"paused": "true"}).json()["tasks"]
        assert [t["id"] for t in listed] == [held["id"]]

        assert http.post(f"/v1/tasks/{held['id']}/resume").json()["paused"] is None
        finished = until(
            lambda: (
                (t := http.get(f"/v1/tasks/{held['id']}", params={"wait": 5}).json())["state"]
                == "completed"
                and t
            ),
            30,
            "the resumed task to complete",
        )
        assert finished["attempt"] == 1
        types = [e["type"] for e in http.get(f"/v1/tasks/{held['id']}/events").json()["events"]]
        assert types.index("paused") < types.index("resumed") < types.index("state_change", 1)
