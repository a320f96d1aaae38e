"""An approval survives a crash: the decision is in PostgreSQL before its 2xx, so a
service killed with -9 between the approval and the call (nothing ran the call yet)
is followed by one that makes the call exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.acceptance.conftest import cli_env, serve, until

pytestmark = pytest.mark.slow


def _state(http: httpx.Client, task_id: str, *states: str) -> Any:
    def check() -> dict[str, Any] | None:
        task: dict[str, Any] = http.get(f"/v1/tasks/{task_id}").json()
        return task if task["state"] in states else None

    return check


def test_an_approval_outlives_a_kill_and_the_call_is_made_once(
    tmp_path: Path, database_url: str, db: AsyncEngine
) -> None:
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    profiles = tmp_path / "agents.toml"
    profiles.write_text(
        '[agents.billing]\nmodel = "refunder"\ntools = ["refund"]\napprove = ["refund"]\n'
    )
    env = cli_env(
        TASKSERVICE_DATABASE_URL=database_url,
        TASKSERVICE_PLUGINS="tests.fakes.plugin",
        TASKSERVICE_TEST_PLUGIN_DIR=str(plugin),
        TASKSERVICE_AGENTS_FILE=str(profiles),
        TASKSERVICE_ALLOWED_MODELS="offline,refunder",
        TASKSERVICE_POLL_INTERVAL="0.2",
    )
    with serve(env, tmp_path / "first.log") as first, httpx.Client(base_url=first.url) as http:
        task = http.post("/v1/tasks", json={"input": "refund A-1", "agent": "billing"}).json()
        waiting = until(_state(http, task["id"], "input_required"), 30, "waiting for approval")
        [call] = waiting["input_request"]["approvals"]
        assert not (plugin / "refunds.log").exists()
        first.crash()  # its worker is gone: nothing can make the call now

    # The approval, taken by an API-only process, then that process killed too.
    with (
        serve(env, tmp_path / "api.log", "--no-workers") as api,
        httpx.Client(base_url=api.url) as http,
    ):
        decision = {"approvals": {call["id"]: {"approve": True}}}
        approved = http.post(f"/v1/tasks/{task['id']}/input", json=decision)
        assert approved.status_code == 200, approved.text
        assert approved.json()["state"] == "running"  # committed: ownerless, claimable
        api.crash()
    assert not (plugin / "refunds.log").exists()

    with serve(env, tmp_path / "second.log") as second, httpx.Client(base_url=second.url) as http:
        done = until(_state(http, task["id"], "completed", "failed"), 30, "the task's end")
        [made] = http.get(f"/v1/tasks/{task['id']}/calls").json()["calls"]
    assert done["state"] == "completed", done
    assert done["result"] == "refunded 5 on A-1"
    refunds = (plugin / "refunds.log").read_text().splitlines()
    assert len(refunds) == 1, refunds  # exactly once
    assert made["status"] == "completed"
    approval = made["approval"]
    assert (approval["approved"], approval["by"], approval["via"]) == (True, "open", "rest")
