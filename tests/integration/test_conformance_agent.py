"""The opt-in agent for the A2A conformance kits (`taskservice.agents.conformance`): the
message id that starts a task says what the task does."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from taskservice.agents.conformance import MODELS, QUESTION
from tests.conftest import ClientFactory
from tests.integration.test_a2a_v10 import message, rpc

CONFORMANCE: dict[str, Any] = {
    "models": MODELS,
    "default_model": "conformance",
    "default_tools": ["ask_user"],
    "workers_enabled": True,
}


@pytest.mark.parametrize(
    ("prefix", "state", "text"),
    [
        ("tck-complete-task", "TASK_STATE_COMPLETED", "Hello from TCK"),
        ("tck-artifact-text", "TASK_STATE_COMPLETED", "Generated text content"),
        ("tck-stream-001", "TASK_STATE_COMPLETED", "Stream hello from TCK"),
        ("tck-input-required", "TASK_STATE_INPUT_REQUIRED", QUESTION),
        ("tck-reject-task", "TASK_STATE_FAILED", "rejected"),
    ],
)
async def test_the_message_id_picks_the_scenario(
    make_client: ClientFactory, prefix: str, state: str, text: str
) -> None:
    async with make_client(**CONFORMANCE) as client:
        sent = {"message": message("hi", messageId=f"{prefix}-1234abcd")}
        task = (await rpc(client, "SendMessage", sent))["result"]["task"]
    assert task["status"]["state"] == state
    if state == "TASK_STATE_COMPLETED":
        assert task["artifacts"][0]["parts"][0]["text"] == text
    else:
        assert text in task["status"]["message"]["parts"][0]["text"]


async def test_any_other_message_keeps_its_task_working_a_while(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKSERVICE_CONFORMANCE_SECONDS", "1")
    async with make_client(**CONFORMANCE) as client:
        sent = {"message": message("ping"), "configuration": {"returnImmediately": True}}
        task = (await rpc(client, "SendMessage", sent))["result"]["task"]
        got = (await rpc(client, "GetTask", {"id": task["id"]}))["result"]
        assert got["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
        done = (await client.get(f"/v1/tasks/{task['id']}", params={"wait": 10})).json()
    assert done["result"] == "Done: ping"
    ran = datetime.fromisoformat(done["finished_at"]) - datetime.fromisoformat(done["started_at"])
    assert ran.total_seconds() >= 1  # it was working all that while
