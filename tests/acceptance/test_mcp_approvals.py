"""Tool calls that wait for a person's approval, over MCP at /mcp on real HTTP: the
2026-07-28 Tasks extension with FastMCP's client (an input request per call, keyed
by the call's id, decided through `tasks/update`), and 2025-11-25, which sees
`input_required` and a status message saying how to decide on REST."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import fastmcp
import fastmcp_tasks  # noqa: F401  (its clients declare the Tasks extension)
import httpx
import pytest
from fastmcp.client.elicitation import ElicitResult
from fastmcp_tasks import call_tool_task
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.keys import ApiKeyStore
from tests.acceptance.test_mcp import _modern
from tests.conftest import LiveFactory, LiveServer
from tests.integration.helpers import until_state
from tests.integration.test_approvals import lookup, refund, refunder, refunds, returns

NOTE = "Refunds need a person."


@pytest.fixture(autouse=True)
def _fresh() -> None:
    refunds.clear()


def _profiles(tmp_path: Path) -> Path:
    path = tmp_path / "billing.toml"
    path.write_text(
        "[agents.billing]\n"
        'model = "refunder"\n'
        'tools = ["lookup", "refund"]\n'
        'approve = ["refund"]\n'
        f'approval_note = "{NOTE}"\n'
    )
    return path


def _live(make_live: LiveFactory, tmp_path: Path, model: FunctionModel) -> Any:
    return make_live(
        models={"refunder": model},
        tools={"refund": refund, "lookup": lookup},
        agents_file=_profiles(tmp_path),
        workers_enabled=True,
    )


async def _rpc(
    http: httpx.AsyncClient, body: dict[str, Any], *, revision: str = "2026-07-28"
) -> dict[str, Any]:
    """A JSON-RPC request to /mcp, its answer (JSON or one SSE event)."""
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": revision}
    if revision == "2026-07-28":
        headers["Mcp-Method"] = body["method"]
    answer = await http.post("/mcp", json=body, headers=headers)
    lines = [x for x in answer.text.splitlines() if x.startswith("data:")]
    said: dict[str, Any] = json.loads(lines[0][5:] if lines else answer.text)
    return said


async def _update(http: httpx.AsyncClient, task_id: str, responses: dict[str, Any]) -> Any:
    params = {"taskId": task_id, "inputResponses": responses}
    return await _rpc(http, _modern("tasks/update", params, tasks=True))


def _accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


Elicit = Callable[[str, Any, Any, Any], Awaitable[Any]]


def answering(*replies: Any) -> tuple[list[str], Elicit]:
    """An elicitation handler for FastMCP's client that gives `replies` in turn (a
    callable one is called with the request's params), and the messages it heard."""
    asked: list[str] = []
    given = iter(replies)

    async def elicit(message: str, response_type: Any, params: Any, context: Any) -> Any:
        asked.append(message)
        reply = next(given)
        return reply(params) if callable(reply) else reply

    return asked, elicit


async def test_calls_are_decided_one_by_one_through_tasks_update(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    asked, deny = answering({"approve": False, "reason": "too much"})
    model = refunder(("A-1", 500), ("A-2", 900))
    async with (
        _live(make_live, tmp_path, model) as live,
        fastmcp.Client(f"{live.url}/mcp", elicitation_handler=deny) as client,
        httpx.AsyncClient(base_url=live.url, timeout=20) as http,
    ):
        task = await call_tool_task(client, "billing", {"input": "refund A-1 and A-2"})
        waiting = await task.wait(state="input_required", timeout=20)
        requests = waiting.input_requests or {}
        assert sorted(requests) == ["r0", "r1"]  # keyed by the calls' ids
        first = requests["r0"]["params"]
        assert first["mode"] == "form"
        assert (
            first["message"]
            == f'approve refund {{"order": "A-1", "amount": 500}}? (call r0) {NOTE}'
        )
        form = first["requestedSchema"]
        assert form["required"] == ["approve"]
        assert {k: v["type"] for k, v in form["properties"].items()} == {
            "approve": "boolean",
            "reason": "string",
            "arguments": "string",
        }
        assert json.loads(form["properties"]["arguments"]["default"]) == {
            "order": "A-1",
            "amount": 500,
        }
        about = first["_meta"]["taskservice/approval"]
        assert about["schema"]["properties"]["amount"]["type"] == "integer"
        assert waiting.status_message is not None
        assert "approve refund" in waiting.status_message
        assert "POST /v1" not in waiting.status_message  # this revision answers here

        # Invalid responses are invalid params, and decide nothing.
        for bad in (
            _accept(approve="yes"),
            {"action": "maybe"},
            _accept(approve=True, arguments="{not json"),
            _accept(approve=True, arguments="[1]"),
            _accept(approve=True, arguments=json.dumps({"order": "A-1", "amount": "lots"})),
        ):
            refused = await _update(http, task.task_id, {"r0": bad})
            assert refused["error"]["code"] == -32602, (bad, refused)
        unfit = await _update(http, task.task_id, {"r0": _accept(approve=True, arguments="{}")})
        assert "do not fit its schema" in unfit["error"]["message"]

        # Keys that are not pending are ignored; `cancel` decides nothing.
        ignored = await _update(
            http, task.task_id, {"q9": _accept(answer="x"), "r1": {"action": "cancel"}}
        )
        assert ignored["result"]["resultType"] == "complete"
        # One by one: an approval with edited arguments keeps the task waiting on r1.
        edited = json.dumps({"order": "A-1", "amount": 250})
        one = await _update(
            http, task.task_id, {"r0": _accept(approve=True, arguments=edited, reason="")}
        )
        assert one["result"]["resultType"] == "complete", one
        still = await task.status()
        assert still.status == "input_required"
        assert sorted(still.input_requests or {}) == ["r1"]
        assert refunds == {}  # nothing made before every call is decided

        # FastMCP answers the rest through its elicitation handler: a denial.
        said = await task.result()
        again = await _update(http, task.task_id, {"r0": _accept(approve=True)})  # ended
        calls = (await http.get(f"/v1/tasks/{task.task_id}/calls")).json()["calls"]
    assert asked == [f'approve refund {{"order": "A-2", "amount": 900}}? (call r1) {NOTE}']
    assert said.content[0].text == "refunded 250 on A-1 | denied: too much"
    assert refunds == {"A-1": 250}  # once, edited; A-2 never
    assert again["result"]["resultType"] == "complete"
    approvals = {c["tool_call_id"]: c["approval"] for c in calls if c.get("approval")}
    assert (approvals["r0"]["via"], approvals["r0"]["by"]) == ("mcp", "open")
    assert (approvals["r0"]["approved"], approvals["r0"]["edited"]) == (True, True)
    assert (approvals["r1"]["approved"], approvals["r1"]["reason"]) == (False, "too much")


async def test_an_approval_makes_the_call_once_and_a_decline_denies(
    make_live: LiveFactory, tmp_path: Path, db: AsyncEngine
) -> None:
    key, made = await ApiKeyStore(db).create(tenant="mcp-approvals")

    def unchanged(params: Any) -> dict[str, Any]:
        # A form sends its fields' defaults back: the model's arguments, unchanged.
        default = params.requested_schema["properties"]["arguments"]["default"]
        return {"approve": True, "arguments": default}

    _, decide = answering(unchanged, ElicitResult(action="decline"))
    async with (
        _live(make_live, tmp_path, refunder(("A-1", 500))) as live,
        fastmcp.Client(f"{live.url}/mcp", auth=key, elicitation_handler=decide) as client,
    ):
        approved = await client.call_tool("billing", {"input": "refund A-1"})
        declined = await client.call_tool("billing", {"input": "refund A-1"})
    assert approved.content[0].text == "refunded 500 on A-1"
    assert refunds == {"A-1": 500}  # made once, by the approved task only
    assert declined.content[0].text == f"denied by key:{made.id}"


async def test_the_2025_revision_sees_input_required_and_how_to_decide(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    async with (
        _live(make_live, tmp_path, refunder(("A-1", 500))) as live,
        httpx.AsyncClient(base_url=live.url, timeout=20) as http,
    ):
        sent = {"agent": "billing", "input": "refund A-1"}
        task = (await http.post("/v1/tasks", json=sent)).json()
        await until_state(http, task["id"], "input_required")
        get = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task["id"]}}
        waiting = (await _rpc(http, get, revision="2025-11-25"))["result"]
        await http.post(f"/v1/tasks/{task['id']}/pause", json={"reason": "after lunch"})
        paused = (await _rpc(http, get, revision="2025-11-25"))["result"]
        modern = await _rpc(http, _modern("tasks/get", {"taskId": task["id"]}, tasks=True))
    assert waiting["status"] == "input_required"
    lines = waiting["statusMessage"].splitlines()
    assert lines[0] == f'approve refund {{"order": "A-1", "amount": 500}}? (call r0) {NOTE}'
    assert lines[1].startswith(
        f'Decide with POST /v1/tasks/{task["id"]}/input: {{"approvals": {{"r0": '
        '{"approve": true}}}, or {"approve": false, "reason": "..."} to deny'
    )
    assert len(lines) == 2
    # Paused as well: still waiting for the decision, and said to be held.
    assert paused["status"] == "input_required"
    assert paused["statusMessage"].splitlines()[:2] == lines
    assert paused["statusMessage"].splitlines()[2].startswith("(paused: paused by open (after")
    assert modern["result"]["statusMessage"].splitlines()[0] == lines[0]
    assert list(modern["result"]["inputRequests"]) == ["r0"]


def asks_and_refunds() -> FunctionModel:
    """Asks why and asks to refund in one response, then says what it was told."""

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            ask = ToolCallPart("ask_user", {"question": "Why?"}, "q1")
            return ModelResponse(
                parts=[ask, ToolCallPart("refund", {"order": "B-2", "amount": 70}, "r0")]
            )
        return ModelResponse(parts=[TextPart(" | ".join(returns(messages)))])

    return FunctionModel(play)


async def test_a_question_asked_with_a_call_keeps_its_own_input_request(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    path = tmp_path / "asking.toml"
    path.write_text(
        '[agents.asking]\nmodel = "asking"\ntools = ["ask_user", "refund"]\napprove = ["refund"]\n'
    )
    asked, approve = answering({"approve": True})
    async with (
        make_live(
            models={"asking": asks_and_refunds()},
            tools={"refund": refund},
            agents_file=path,
            workers_enabled=True,
        ) as live,
        fastmcp.Client(f"{live.url}/mcp", elicitation_handler=approve) as client,
        httpx.AsyncClient(base_url=live.url, timeout=20) as http,
    ):
        task = await call_tool_task(client, "asking", {"input": "refund B-2"})
        waiting = await task.wait(state="input_required", timeout=20)
        requests = waiting.input_requests or {}
        assert sorted(requests) == ["q1", "r0"]
        assert requests["q1"]["params"]["requestedSchema"]["required"] == ["answer"]
        # The question first, alone: the call still waits.
        answered = await _update(http, task.task_id, {"q1": _accept(answer="damaged")})
        assert answered["result"]["resultType"] == "complete", answered
        still = await task.status()
        assert list(still.input_requests or {}) == ["r0"]
        said = await task.result()
    assert asked == ['approve refund {"order": "B-2", "amount": 70}? (call r0)']
    assert said.content[0].text == "damaged | refunded 70 on B-2"
    assert refunds == {"B-2": 70}


@pytest.fixture
async def demo(make_live: LiveFactory) -> AsyncIterator[LiveServer]:
    async with make_live(workers_enabled=True) as live:
        yield live


async def test_the_demo_publishes_once_approved_over_mcp(demo: LiveServer) -> None:
    asked, approve = answering({"approve": True})
    async with (
        fastmcp.Client(f"{demo.url}/mcp", elicitation_handler=approve) as client,
        httpx.AsyncClient(base_url=demo.url) as http,
    ):
        task = await call_tool_task(client, "demo", {"input": "approve, take 1s"})
        said = await task.result()
        events = (await http.get(f"/v1/tasks/{task.task_id}/events")).json()["events"]
    [message] = asked
    assert message.startswith("approve publish {")
    assert '"channel": "#demo"' in message
    assert "You approved publishing it: published to #demo" in said.content[0].text
    logs = [e["data"]["message"] for e in events if e["type"] == "log"]
    assert sum(line.startswith("published to #demo") for line in logs) == 1  # once
