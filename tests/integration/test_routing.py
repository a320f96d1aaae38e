"""POST /v1/messages: explicit, single, model and new routing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.conftest import ClientFactory, wait_for


async def asker(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks about the thing named in the task's input, then echoes the answer."""
    answers = [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if answers:
        return ModelResponse(parts=[TextPart(f"ok: {answers[-1]}")])
    prompt = next(
        p.content
        for p in messages[0].parts
        if isinstance(p, UserPromptPart)  # type: ignore[union-attr]
    )
    question = f"Which colour for the {prompt}?"
    return ModelResponse(parts=[ToolCallPart("ask_user", {"question": question}, "q1")])


@pytest.fixture
async def client(make_client: ClientFactory) -> Any:
    async with make_client(
        models={"asker": FunctionModel(asker)}, default_model="asker", workers_enabled=True
    ) as client:
        yield client


async def waiting_task(client: httpx.AsyncClient, thing: str, context: str) -> str:
    task = (await client.post("/v1/tasks", json={"input": thing, "context_id": context})).json()

    async def waiting() -> bool:
        current = (await client.get(f"/v1/tasks/{task['id']}")).json()
        return current["state"] == "input_required"

    await wait_for(waiting)
    return str(task["id"])


async def send(client: httpx.AsyncClient, text: str, context: str | None) -> httpx.Response:
    body: dict[str, Any] = {"text": text}
    if context is not None:
        body["context_id"] = context
    return await client.post("/v1/messages", json=body)


async def test_with_no_task_waiting_a_new_task_is_created(client: httpx.AsyncClient) -> None:
    routed = (await send(client, "bike", "c-new")).json()
    assert (routed["decision"], routed["confidence"]) == ("new", 1.0)
    assert routed["task"]["input"] == "bike"
    assert routed["task"]["context_id"] == "c-new"


async def test_the_only_waiting_task_in_the_context_gets_the_message(
    client: httpx.AsyncClient,
) -> None:
    task_id = await waiting_task(client, "bike", "c-single")
    await waiting_task(client, "car", "elsewhere")  # another context does not count
    routed = (await send(client, "red", "c-single")).json()
    assert routed["decision"] == "single"
    assert routed["task"]["id"] == task_id
    assert routed["task"]["state"] == "running"

    async def done() -> dict[str, Any] | None:
        task = (await client.get(f"/v1/tasks/{task_id}")).json()
        return task if task["state"] == "completed" else None

    assert (await wait_for(done))["result"] == "ok: red"


async def test_the_router_picks_among_several_waiting_tasks(client: httpx.AsyncClient) -> None:
    bike = await waiting_task(client, "bike", "c-many")
    car = await waiting_task(client, "car", "c-many")
    routed = (await send(client, "the car should be green", "c-many")).json()
    assert routed["decision"] == "model"
    assert routed["task"]["id"] == car
    assert 0 < routed["confidence"] <= 1
    assert routed["reason"]
    still = (await client.get(f"/v1/tasks/{bike}")).json()
    assert still["state"] == "input_required"


async def test_the_router_starts_a_new_task_when_nothing_matches(
    client: httpx.AsyncClient,
) -> None:
    bike = await waiting_task(client, "bike", "c-none")
    await waiting_task(client, "car", "c-none")
    routed = (await send(client, "translate hello into french", "c-none")).json()
    assert routed["decision"] == "model"
    assert routed["task"]["id"] != bike
    assert routed["task"]["input"] == "translate hello into french"


async def test_an_explicit_task_id_wins(client: httpx.AsyncClient) -> None:
    bike = await waiting_task(client, "bike", "c-explicit")
    await waiting_task(client, "car", "c-explicit")
    routed = (await send(client, f"@{bike} blue", None)).json()
    assert (routed["decision"], routed["task"]["id"]) == ("explicit", bike)


async def test_explicit_routing_to_a_task_not_waiting_is_refused(
    client: httpx.AsyncClient,
) -> None:
    new = (await send(client, "bike", "c-refused")).json()["task"]["id"]
    missing = await send(client, "@0193a1c2-0000-7000-8000-000000000000 hi", None)
    assert missing.status_code == 404
    empty = await send(client, f"@{new}", None)
    assert empty.status_code == 422
    bad = await send(client, "", None)
    assert bad.status_code == 422


async def test_explicit_routing_to_a_finished_task_is_409(client: httpx.AsyncClient) -> None:
    bike = await waiting_task(client, "bike", "c-409")
    await client.post(f"/v1/tasks/{bike}/cancel")
    refused = await send(client, f"@{bike} red", None)
    assert refused.status_code == 409
    assert refused.json()["state"] == "cancelled"


async def test_a_tool_call_waiting_for_approval_is_decided_by_a_free_message(
    make_client: ClientFactory,
) -> None:
    """The router reaches a task waiting on one tool call's approval as it reaches a
    question: `approve` (or `yes`) approves it; `deny: why` denies it, saying why."""
    async with make_client(workers_enabled=True) as client:

        async def waiting_on_publish(context: str) -> str:
            body = {"agent": "demo", "input": "approve, take 1s", "context_id": context}
            task = (await client.post("/v1/tasks", json=body)).json()

            async def asks() -> bool:
                current = (await client.get(f"/v1/tasks/{task['id']}")).json()
                return current["state"] == "input_required"

            await wait_for(asks, timeout=15)
            return str(task["id"])

        approved = await waiting_on_publish("c-approve")
        routed = (await send(client, "yes", "c-approve")).json()
        assert (routed["decision"], routed["task"]["id"]) == ("single", approved)
        denied = await waiting_on_publish("c-deny")
        routed = (await send(client, f"@{denied} deny: not on a Friday", None)).json()
        assert (routed["decision"], routed["task"]["id"]) == ("explicit", denied)

        async def ended(task_id: str) -> dict[str, Any] | None:
            task = (await client.get(f"/v1/tasks/{task_id}")).json()
            return task if task["state"] in ("completed", "failed") else None

        first = await wait_for(lambda: ended(approved), timeout=15)
        second = await wait_for(lambda: ended(denied), timeout=15)
    assert "You approved publishing it: published to #demo" in first["result"]
    assert "not on a Friday" in second["result"]
    assert "You did not approve publishing it" in second["result"]
