"""Follow-up messages to a live task (`POST /v1/tasks/{id}/messages`): queued in the
ledger, read by the running agent at its next model request, never left unread by
a task that completes, and read after a crash by the run that resumes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from taskservice.worker.ledger import RunLedger
from tests.conftest import ClientFactory
from tests.integration.helpers import QUICK_RECOVERY, asks_for_a_colour, worker_dies
from tests.integration.test_worker import until_state


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        part.content
        for message in messages
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]


class Gate:
    """A model whose first request waits until the test opens the gate; each answer
    lists the user messages the model was shown."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.open = asyncio.Event()
        self.seen: list[list[str]] = []

    async def answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.asked.set()
        await self.open.wait()
        self.seen.append(prompts(messages))
        return ModelResponse(parts=[TextPart(f"saw {prompts(messages)}")])

    def model(self) -> FunctionModel:
        return FunctionModel(self.answer)


async def send(client: Any, task_id: str, input: Any, **headers: str) -> Any:
    body = {"input": input}
    return await client.post(f"/v1/tasks/{task_id}/messages", json=body, headers=headers)


async def test_a_follow_up_to_a_running_task_reaches_its_next_model_request(
    make_client: ClientFactory,
) -> None:
    gate = Gate()
    async with make_client(models={"gate": gate.model()}, workers_enabled=True) as client:
        task = (await client.post("/v1/tasks", json={"input": "write", "model": "gate"})).json()
        await asyncio.wait_for(gate.asked.wait(), 10)  # the first request is under way

        sent = await send(client, task["id"], "also mention the tests")
        assert sent.status_code == 202, sent.text
        body = sent.json()
        assert body["delivery"] == "followup"
        assert body["followup"]["seq"] == 1
        assert (body["task"]["followups"], body["task"]["followups_read"]) == (1, 0)

        gate.open.set()
        done = await until_state(client, task["id"], "completed", "failed")
        events = (await client.get(f"/v1/tasks/{task['id']}/events")).json()["events"]
    assert done["state"] == "completed", done
    # The first answer was written before the follow-up was read; the run went on.
    assert gate.seen == [["write"], ["write", "also mention the tests"]]
    assert done["result"] == "saw ['write', 'also mention the tests']"
    assert (done["followups"], done["followups_read"]) == (1, 1)
    followup = next(event for event in events if event["type"] == "followup")
    assert followup["data"] == {"seq": 1, "preview": "also mention the tests"}


async def test_follow_ups_sent_while_pending_are_read_with_the_input(
    make_client: ClientFactory,
) -> None:
    seen: list[list[str]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(prompts(messages))
        return ModelResponse(parts=[TextPart("done")])

    models = {"echo": FunctionModel(answer)}
    async with make_client(models=models) as client:  # no workers yet
        task = (await client.post("/v1/tasks", json={"input": "first", "model": "echo"})).json()
        assert (await send(client, task["id"], "second")).status_code == 202
        assert (await send(client, task["id"], {"third": 3})).status_code == 202
        queued = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert (queued["state"], queued["followups"], queued["followups_read"]) == ("pending", 2, 0)
    async with make_client(models=models, workers_enabled=True) as client:
        done = await until_state(client, task["id"], "completed", "failed")
        messages = (await client.get(f"/v1/tasks/{task['id']}/messages")).json()["messages"]
    assert done["state"] == "completed", done
    assert seen == [["first", "second", '{"third": 3}']]
    assert done["followups_read"] == 2
    marks = [m["message"]["metadata"] for m in messages if m["kind"] == "request"]
    assert marks == [None, {"followup": 1, "key": None}, {"followup": 2, "key": None}]


async def test_a_follow_up_whose_notice_is_lost_is_read_before_the_task_completes(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run never hears of it (the hub's notice is only a hint): the outcome's
    statement refuses to complete the task with it unread, and the run goes on."""
    monkeypatch.setattr(RunLedger, "tell", lambda self: None)
    gate = Gate()
    async with make_client(models={"gate": gate.model()}, workers_enabled=True) as client:
        task = (await client.post("/v1/tasks", json={"input": "write", "model": "gate"})).json()
        await asyncio.wait_for(gate.asked.wait(), 10)
        assert (await send(client, task["id"], "one more thing")).status_code == 202
        gate.open.set()
        done = await until_state(client, task["id"], "completed", "failed")
    assert gate.seen == [["write"], ["write", "one more thing"]]
    assert done["result"] == "saw ['write', 'one more thing']"
    assert done["usage"]["requests"] == 2  # both runs' requests are counted
    assert done["followups_read"] == 1


async def test_a_follow_up_handed_to_a_run_that_died_is_read_once_by_the_next(
    make_client: ClientFactory,
) -> None:
    """The follow-up was in the dead run's memory, not yet in the ledger: the run
    that resumes reads it, once."""
    seen: list[list[str]] = []
    dying = asyncio.Event()

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(prompts(messages))
        if len(seen) == 1:
            dying.set()
            await asyncio.sleep(3600)  # the worker dies in this request
        return ModelResponse(parts=[TextPart(f"saw {prompts(messages)}")])

    models = {"slow": FunctionModel(answer)}
    async with make_client(models=models, workers_enabled=True, **QUICK_RECOVERY) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "slow"})).json()
        await asyncio.wait_for(dying.wait(), 10)
        assert (await send(client, task["id"], "and this")).status_code == 202
        await asyncio.sleep(0.2)  # the run is handed it (in memory) at its next step
        worker_dies(client, task["id"])
        done = await until_state(client, task["id"], "completed", "failed")
    assert done["state"] == "completed", done
    assert done["attempt"] == 2
    assert seen[-1] == ["go", "and this"]
    assert done["result"] == "saw ['go', 'and this']"


async def test_a_message_answers_a_task_that_waits_for_one_answer(
    make_client: ClientFactory,
) -> None:
    async with make_client(models={"colour": asks_for_a_colour()}, workers_enabled=True) as client:
        task = (await client.post("/v1/tasks", json={"input": "paint", "model": "colour"})).json()
        await until_state(client, task["id"], "input_required")
        sent = await send(client, task["id"], "teal")
        assert sent.status_code == 202, sent.text
        assert sent.json()["delivery"] == "answer"
        assert sent.json()["followup"] is None
        done = await until_state(client, task["id"], "completed", "failed")
    assert done["result"] == "painted teal"


async def test_a_finished_task_refuses_messages_and_nothing_changes(
    make_client: ClientFactory,
) -> None:
    async with make_client() as client:
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        refused = await send(client, task["id"], "too late")
        assert refused.status_code == 409
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["state"] == "cancelled"
        assert "takes no more messages" in refused.json()["detail"]
        after = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert after["followups"] == 0
        events = (await client.get(f"/v1/tasks/{task['id']}/events")).json()["events"]
        assert "followup" not in {event["type"] for event in events}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"input": None}, 422),
        ({"input": 3}, 422),
        ({"input": ""}, 422),
        ({"input": ["a"]}, 422),
        ({"text": "hi"}, 422),
        ({"input": "a\u0000b"}, 422),
    ],
)
async def test_a_bad_message_is_a_problem_and_queues_nothing(
    make_client: ClientFactory, body: dict[str, Any], status: int
) -> None:
    async with make_client() as client:
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        refused = await client.post(f"/v1/tasks/{task['id']}/messages", json=body)
        assert refused.status_code == status, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert (await client.get(f"/v1/tasks/{task['id']}")).json()["followups"] == 0


async def test_a_message_to_an_unknown_task_is_404(make_client: ClientFactory) -> None:
    async with make_client() as client:
        missing = "0190f4a0-0000-7000-8000-000000000000"
        response = await send(client, missing, "hello")
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/problem+json"


async def test_an_idempotency_key_makes_a_retried_follow_up_the_same_one(
    make_client: ClientFactory,
) -> None:
    async with make_client() as client:
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        first = await send(client, task["id"], "once", **{"Idempotency-Key": "k1"})
        again = await send(client, task["id"], "once", **{"Idempotency-Key": "k1"})
        assert (first.status_code, again.status_code) == (202, 200)
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["followup"] == first.json()["followup"]
        other = await send(client, task["id"], "changed", **{"Idempotency-Key": "k1"})
        assert other.status_code == 409
        assert "different message" in other.json()["detail"]
        concurrent = await asyncio.gather(
            *(send(client, task["id"], "racing", **{"Idempotency-Key": "k2"}) for _ in range(5))
        )
        assert sorted(r.status_code for r in concurrent) == [200, 200, 200, 200, 202]
        assert len({r.json()["followup"]["seq"] for r in concurrent}) == 1
        assert (await client.get(f"/v1/tasks/{task['id']}")).json()["followups"] == 2


async def test_the_router_sends_a_message_to_the_one_running_task_of_its_context(
    make_client: ClientFactory,
) -> None:
    async with make_client() as client:
        task = (
            await client.post("/v1/tasks", json={"input": "plan a trip", "context_id": "trip"})
        ).json()
        routed = await client.post("/v1/messages", json={"text": "by train", "context_id": "trip"})
        assert routed.status_code == 200, routed.text
        body = routed.json()
        assert (body["decision"], body["delivery"]) == ("single", "followup")
        assert body["task"]["id"] == task["id"]
        explicit = await client.post("/v1/messages", json={"text": f"@{task['id']} in May"})
        assert explicit.json()["delivery"] == "followup"
        assert explicit.json()["followup"]["seq"] == 2
        # Without a context, a running task does not catch free text.
        alone = await client.post("/v1/messages", json={"text": "something else"})
        assert (alone.json()["decision"], alone.json()["delivery"]) == ("new", "new_task")
