"""`TASKSERVICE_LOG_FORMAT=json`: every line `serve` writes is a JSON object, and the
lines about a task say which (task, tenant, worker, attempt)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.conftest import cli_env, free_port, serve

pytestmark = pytest.mark.slow


def lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_json_lines_carry_the_task_tenant_worker_and_attempt(
    tmp_path: Path, database_url: str, db: object
) -> None:
    env = cli_env(TASKSERVICE_DATABASE_URL=database_url, TASKSERVICE_LOG_FORMAT="json")
    with serve(env, tmp_path / "serve.log", "--access-log") as server:
        made = httpx.post(
            f"{server.url}/v1/tasks", json={"agent": "demo", "input": "take 30s"}
        ).json()
        task_url = f"{server.url}/v1/tasks/{made['id']}"
        deadline = time.monotonic() + 20
        while httpx.get(task_url).json()["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert httpx.post(f"{task_url}/cancel", json={}).status_code == 200
        deadline = time.monotonic() + 20
        while "run stopped" not in server.output():
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.05)
    logged = lines(server.output())  # every line parses
    assert {"time", "level", "logger", "message"} <= set(logged[0])
    stopped = next(line for line in logged if "run stopped" in line["message"])
    assert stopped["task_id"] == made["id"]
    assert stopped["tenant"] == "default"
    assert stopped["attempt"] == "1"
    assert stopped["worker"]
    access = [
        line
        for line in logged
        if line["logger"] == "uvicorn.access" and f"/v1/tasks/{made['id']}" in line["message"]
    ]
    assert access, logged
    assert all(line["task_id"] == made["id"] for line in access)
    assert all(line["tenant"] == "default" for line in access)


def test_a_failed_webhook_attempt_is_one_line_about_its_task(
    tmp_path: Path, database_url: str, db: object
) -> None:
    env = cli_env(
        TASKSERVICE_DATABASE_URL=database_url,
        TASKSERVICE_LOG_FORMAT="json",
        TASKSERVICE_WEBHOOK_ALLOW_HTTP="true",
        TASKSERVICE_WEBHOOK_ALLOW_TARGETS="127.0.0.1/32",
    )
    nobody = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens: refused
    with serve(env, tmp_path / "serve.log") as server:
        made = httpx.post(
            f"{server.url}/v1/tasks",
            json={"input": "hello", "webhooks": [{"url": nobody, "states": ["pending"]}]},
        ).json()
        deadline = time.monotonic() + 20
        while "attempt 1 failed" not in server.output():
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.05)
    [failed] = [line for line in lines(server.output()) if "attempt 1 failed" in line["message"]]
    assert failed["logger"] == "taskservice.worker.webhook_dispatcher"
    assert failed["level"] == "INFO"
    assert failed["task_id"] == made["id"]
    assert failed["tenant"] == "default"
    assert failed["worker"]  # the dispatcher's id
    assert "next in" in failed["message"]
