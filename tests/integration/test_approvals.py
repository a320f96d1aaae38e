"""Tool calls that wait for a person's approval: an agent profile names them
(`approve`); the task waits in `input_required` holding no worker, and the decision
(approve, with edited arguments or not; deny, with a reason the model reads) makes
the call once, or not at all; a deadline denies, or fails the task."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.conftest import ClientFactory
from tests.integration.helpers import until_state

refunds: Counter[str] = Counter()  # executions of `refund`, by order


async def refund(ctx: RunContext[Any], order: str, amount: int) -> str:
    """Refund `amount` cents of `order`: a side effect that must happen once."""
    refunds[order] += amount
    return f"refunded {amount} on {order}"


async def lookup(ctx: RunContext[Any], order: str) -> str:
    """Look an order up (needs no approval)."""
    return f"{order}: 2 items"


def returns(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def refunder(*calls: tuple[str, int]) -> FunctionModel:
    """Looks the order up, asks for the refunds `calls` in one response, then says
    what it was told."""

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn == 0:
            return ModelResponse(parts=[ToolCallPart("lookup", {"order": "A-1"}, "look")])
        if turn == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("refund", {"order": order, "amount": amount}, f"r{i}")
                    for i, (order, amount) in enumerate(calls)
                ]
            )
        return ModelResponse(parts=[TextPart(" | ".join(returns(messages)[1:]))])

    return FunctionModel(play)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    refunds.clear()


def profiles(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(
        f"""
[agents.billing]
tools = ["lookup", "refund"]
approve = ["refund"]
approval_note = "Refunds need a person."
{extra}
"""
    )
    return path


def _client(make_client: ClientFactory, tmp_path: Path, model: FunctionModel, **extra: Any) -> Any:
    return make_client(
        models={"refunder": model},
        tools={"refund": refund, "lookup": lookup},
        agents_file=profiles(tmp_path, extra.pop("profile", "")),
        workers_enabled=True,
        **extra,
    )


async def _waiting(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    sent = {"input": "refund A-1", "agent": "billing", "model": "refunder", **body}
    task = (await client.post("/v1/tasks", json=sent)).json()
    waiting = await until_state(client, task["id"], "input_required", "failed", "completed")
    assert waiting["state"] == "input_required", waiting
    return waiting


async def _decide(client: httpx.AsyncClient, task_id: str, **approvals: Any) -> httpx.Response:
    return await client.post(f"/v1/tasks/{task_id}/input", json={"approvals": approvals})


async def test_an_approved_call_is_made_once_after_the_task_waited_holding_no_worker(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    async with _client(
        make_client, tmp_path, refunder(("A-1", 500)), worker_concurrency=1
    ) as client:
        waiting = await _waiting(client)
        request = waiting["input_request"]
        assert request["kind"] == "approvals"
        [asked] = request["approvals"]
        assert (asked["id"], asked["tool"], asked["arguments"]) == (
            "r0",
            "refund",
            {"order": "A-1", "amount": 500},
        )
        assert asked["note"] == "Refunds need a person."
        agents = {a["name"]: a for a in (await client.get("/v1/agents")).json()["agents"]}
        assert agents["billing"]["approvals"] == {
            "tools": ["refund"],
            "note": "Refunds need a person.",
            "timeout_seconds": None,
            "on_timeout": "deny",
        }
        assert agents["default"]["approvals"] is None
        assert agents["demo"]["approvals"]["tools"] == ["publish"]
        assert asked["schema"]["properties"]["amount"]["type"] == "integer"
        assert refunds == {}  # not made
        # It holds no worker: with one slot, another task runs meanwhile.
        other = (await client.post("/v1/tasks", json={"input": "hello"})).json()
        assert (await until_state(client, other["id"], "completed"))["state"] == "completed"

        decided = await _decide(client, waiting["id"], r0={"approve": True})
        assert decided.status_code == 200, decided.text
        done = await until_state(client, waiting["id"], "completed", "failed")
        assert done["state"] == "completed", done
        assert done["result"] == "refunded 500 on A-1"
        assert refunds == {"A-1": 500}
        calls = (await client.get(f"/v1/tasks/{waiting['id']}/calls")).json()["calls"]
        call = next(c for c in calls if c["tool_call_id"] == "r0")
        assert call["status"] == "completed"
        assert call["approval"]["approved"] is True
        assert call["approval"]["by"] == "open"
        assert call["approval"]["via"] == "rest"
        events = (await client.get(f"/v1/tasks/{waiting['id']}/events")).json()["events"]
        [approval] = [e for e in events if e["type"] == "approval"]
        assert approval["data"]["tool_call_id"] == "r0"
        assert approval["data"]["approved"] is True
        again = await _decide(client, waiting["id"], r0={"approve": True})
        assert again.status_code == 409
        assert refunds == {"A-1": 500}


async def test_edited_arguments_are_checked_and_used_and_a_denial_is_read_by_the_model(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    model = refunder(("A-1", 500), ("A-2", 900))
    async with _client(make_client, tmp_path, model) as client:
        waiting = await _waiting(client)
        assert [a["id"] for a in waiting["input_request"]["approvals"]] == ["r0", "r1"]
        bad = await _decide(client, waiting["id"], r0={"approve": True, "arguments": {"x": 1}})
        assert bad.status_code == 422
        assert "do not fit its schema" in bad.json()["detail"]
        wrong_type = {"approve": True, "arguments": {"order": "A-1", "amount": "lots"}}
        assert (await _decide(client, waiting["id"], r0=wrong_type)).status_code == 422
        unknown = await _decide(client, waiting["id"], r9={"approve": True})
        assert unknown.status_code == 422
        assert unknown.json()["undecided"] == ["r0", "r1"]

        # One by one: the first decision keeps the task waiting.
        edited = {"approve": True, "arguments": {"order": "A-1", "amount": 250}}
        first = await _decide(client, waiting["id"], r0=edited)
        assert first.status_code == 200, first.text
        assert first.json()["state"] == "input_required"
        decided = first.json()["input_request"]["approvals"][0]["decision"]
        assert (decided["approved"], decided["edited"]) == (True, True)
        assert refunds == {}
        second = await _decide(client, waiting["id"], r1={"approve": False, "reason": "too much"})
        assert second.status_code == 200
        done = await until_state(client, waiting["id"], "completed", "failed")
    assert done["state"] == "completed", done
    assert refunds == {"A-1": 250}  # the edited amount; A-2 never refunded
    assert done["result"] == "refunded 250 on A-1 | denied: too much"


async def test_a_deadline_denies_or_fails_as_the_profile_says(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    deny = "approval_timeout_seconds = 0.5"
    async with _client(make_client, tmp_path, refunder(("A-1", 500)), profile=deny) as client:
        waiting = await _waiting(client)
        assert waiting["input_request"]["on_timeout"] == "deny"
        assert waiting["input_request"]["deadline"]
        done = await until_state(client, waiting["id"], "completed", "failed", timeout=15)
        assert done["state"] == "completed", done
        assert "nobody decided before the deadline" in done["result"]
        assert refunds == {}
    fail = 'approval_timeout_seconds = 0.5\napproval_timeout = "fail"'
    async with _client(make_client, tmp_path, refunder(("A-1", 500)), profile=fail) as client:
        waiting = await _waiting(client)
        done = await until_state(client, waiting["id"], "completed", "failed", timeout=15)
        assert done["state"] == "failed", done
        assert done["error"]["code"] == "approval_timeout"
        late = await _decide(client, waiting["id"], r0={"approve": True})
        assert late.status_code == 409
        await asyncio.sleep(0.2)
        assert refunds == {}


async def test_the_demo_asks_to_publish_and_a_message_decides(
    make_client: ClientFactory,
) -> None:
    async with make_client(workers_enabled=True) as client:
        sent = {"agent": "demo", "input": "approve, take 1s"}
        task = (await client.post("/v1/tasks", json=sent)).json()
        waiting = await until_state(client, task["id"], "input_required", timeout=15)
        [asked] = waiting["input_request"]["approvals"]
        assert asked["tool"] == "publish"
        assert asked["arguments"]["channel"] == "#demo"
        # A message (as A2A and the router send) with one decision.
        sent_message = await client.post(
            f"/v1/tasks/{task['id']}/messages",
            json={
                "input": {"approve": True, "arguments": {**asked["arguments"], "channel": "#ops"}}
            },
        )
        assert sent_message.status_code in (200, 202), sent_message.text
        done = await until_state(client, task["id"], "completed", "failed", timeout=15)
        assert done["state"] == "completed", done
        assert "You approved publishing it: published to #ops" in done["result"]
        events = (await client.get(f"/v1/tasks/{task['id']}/events")).json()["events"]
        logs = [e["data"]["message"] for e in events if e["type"] == "log"]
        assert any(line.startswith("published to #ops") for line in logs)


async def test_a_delegation_to_another_agent_waits_for_approval_before_any_subtask(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    """`ask_agent` (how a run delegates, to a local profile or a remote A2A agent)
    named by `approve`: no subtask exists until a person approves."""

    async def delegate(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.instructions == "helper":
            return ModelResponse(parts=[TextPart("helped")])
        if not any(isinstance(m, ModelResponse) for m in messages):
            call = {"agent": "helper", "input": "help me"}
            return ModelResponse(parts=[ToolCallPart("ask_agent", call, "d1")])
        return ModelResponse(parts=[TextPart(" | ".join(returns(messages)))])

    path = tmp_path / "agents.toml"
    path.write_text(
        """
[agents.boss]
model = "delegate"
tools = ["ask_agent"]
approve = ["ask_agent"]

[agents.helper]
model = "delegate"
system_prompt = "helper"
tools = []
"""
    )
    async with make_client(
        models={"delegate": FunctionModel(delegate)}, agents_file=path, workers_enabled=True
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "agent": "boss"})).json()
        waiting = await until_state(client, task["id"], "input_required", "failed", "completed")
        assert waiting["input_request"]["approvals"][0]["tool"] == "ask_agent"
        children = (await client.get("/v1/tasks", params={"parent_id": task["id"]})).json()
        assert children["tasks"] == []
        await _decide(client, task["id"], d1={"approve": True})
        done = await until_state(client, task["id"], "completed", "failed")
        children = (await client.get("/v1/tasks", params={"parent_id": task["id"]})).json()
    assert done["state"] == "completed", done
    assert "helped" in done["result"]
    assert [c["state"] for c in children["tasks"]] == ["completed"]
