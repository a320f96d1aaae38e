"""Delegation to a remote A2A agent, over real HTTP: the remote is a second
taskservice, on a database of its own, which the official A2A SDK's client reads
from its card; the delegating worker writes where it stands in `tasks.remote`, so a
later claim follows the same remote task and the remote gets the message once."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import override_allow_model_requests
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.agents.profiles import ProfileError
from tests.conftest import ClientFactory, LiveFactory, fresh_database, wait_for
from tests.fakes.a2a_sdk_agent import SdkAgent, sdk_agent
from tests.fakes.faulty_proxy import faulty_proxy
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.helpers import asks_for_a_colour, log_lines, rebuild, stream

INPUT = "Summarise what durable delegation means."
MODEL = "openai-chat:fake-gpt"
ANSWER = " ".join(f"word{i}" for i in range(30))


@pytest.fixture(scope="session")
async def remote_database_url(server_url: str) -> AsyncIterator[str]:
    """The remote service's own database (its tasks are not the delegator's)."""
    async with fresh_database(server_url, "taskservice_remote") as url:
        yield url


def agents_file(tmp_path: Path, card_url: str, more: str = "") -> str:
    path = tmp_path / "agents.toml"
    path.write_text(
        f'[agents.helper]\nkind = "a2a"\ncard_url = "{card_url}"\n'
        'description = "the other service"\n' + more
    )
    return str(path)


def delegating(tmp_path: Path, remote_url: str, more: str = "") -> dict[str, Any]:
    """Settings of the delegating service (the `helper` profile delegates to
    `remote_url`, `more` profiles besides): the remote on loopback is allowed."""
    return {
        "workers_enabled": True,
        "agents_file": agents_file(tmp_path, remote_url, more),
        "webhook_allow_http": True,
        "webhook_allow_targets": ["127.0.0.1/32"],
    }


async def remote_tasks(remote: httpx.AsyncClient, text_: str) -> list[dict[str, Any]]:
    listed = (await remote.get("/v1/tasks", params={"limit": 100})).json()["tasks"]
    return [t for t in listed if t["input"] == text_]


async def remote_state(engine: AsyncEngine, task_id: str) -> dict[str, Any] | None:
    async with engine.connect() as conn:
        query = text("SELECT remote FROM tasks WHERE id = :id")
        value: dict[str, Any] | None = (await conn.execute(query, {"id": task_id})).scalar_one()
        return value


async def in_state(client: httpx.AsyncClient, task_id: str, *states: str) -> dict[str, Any]:
    """The task once it is in one of `states`."""

    async def read() -> dict[str, Any] | None:
        task: dict[str, Any] = (await client.get(f"/v1/tasks/{task_id}")).json()
        return task if task["state"] in states else None

    result: dict[str, Any] = await wait_for(read, timeout=30, interval=0.1)
    return result


async def finished(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    return await in_state(client, task_id, "completed", "failed", "cancelled")


@dataclass
class Delegation:
    """A remote taskservice (its own database, workers) and a delegating one whose
    `helper` profile is the remote's agent, with a client of each."""

    remote_url: str
    remote: httpx.AsyncClient
    ours: httpx.AsyncClient

    async def delegate(self, input: str) -> str:
        return await delegate(self.ours, input)


async def delegate(ours: httpx.AsyncClient, input: str) -> str:
    """A task on `helper`, submitted to the delegating service: its id."""
    submitted = await ours.post("/v1/tasks", json={"input": input, "agent": "helper"})
    assert submitted.status_code == 201, submitted.text
    task_id: str = submitted.json()["id"]
    return task_id


@asynccontextmanager
async def delegation(
    make_live: LiveFactory,
    remote_database_url: str,
    tmp_path: Path,
    *,
    ours: dict[str, Any] | None = None,
    **remote: Any,
) -> AsyncIterator[Delegation]:
    """`remote`: the remote service's settings; `ours`: the delegating one's, over
    `delegating`'s."""
    async with (
        make_live(database_url=remote_database_url, workers_enabled=True, **remote) as server,
        make_live(**(delegating(tmp_path, server.url) | (ours or {}))) as ours_server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as remote_client,
        httpx.AsyncClient(base_url=ours_server.url, timeout=30) as ours_client,
    ):
        yield Delegation(server.url, remote_client, ours_client)


@asynccontextmanager
async def to_sdk_agent(
    make_live: LiveFactory, tmp_path: Path, **agent: Any
) -> AsyncIterator[tuple[SdkAgent, httpx.AsyncClient]]:
    """An agent on the official SDK's server (`agent`: `sdk_agent`'s options) and a
    client of a delegating service whose `helper` profile is that agent."""
    async with (
        sdk_agent(**agent) as remote,
        make_live(**delegating(tmp_path, remote.url)) as ours_server,
        httpx.AsyncClient(base_url=ours_server.url, timeout=30) as ours,
    ):
        yield remote, ours


async def submitted_unclaimed(make_live: LiveFactory, settings: dict[str, Any], input: str) -> str:
    """A task on `helper`, submitted to a delegating service without workers: its id."""
    async with (
        make_live(**(settings | {"workers_enabled": False})) as api,
        httpx.AsyncClient(base_url=api.url, timeout=30) as ours,
    ):
        return await delegate(ours, input)


async def finished_by_a_worker(
    make_live: LiveFactory, settings: dict[str, Any], task_id: str
) -> tuple[dict[str, Any], list[str]]:
    """A delegating service with workers started (the one after a crash): the task
    once it finished, and its log lines."""
    async with (
        make_live(**settings) as worker,
        httpx.AsyncClient(base_url=worker.url, timeout=30) as ours,
    ):
        task = await finished(ours, task_id)
        return task, await log_lines(ours, task_id)


async def test_a_delegated_task_completes_with_the_remote_agents_answer(
    make_live: LiveFactory, engine: AsyncEngine, remote_database_url: str, tmp_path: Path
) -> None:
    text_ = f"{INPUT} ({uuid.uuid4()})"
    async with delegation(make_live, remote_database_url, tmp_path) as both:
        task = await finished(both.ours, await both.delegate(text_))
        [theirs] = await remote_tasks(both.remote, text_)
        messages = (await both.ours.get(f"/v1/tasks/{task['id']}/messages")).json()["messages"]
        logs = await log_lines(both.ours, task["id"])
    assert task["state"] == "completed", task
    assert theirs["state"] == "completed"
    assert task["result"] == theirs["result"]
    state = await remote_state(engine, task["id"]) or {}
    assert datetime.fromisoformat(state.pop("sending_at")) <= datetime.now(UTC)
    assert state == {
        "agent": both.remote_url,
        "message_id": f"{task['id']}:1",
        "task_id": theirs["id"],
    }
    assert [m["kind"] for m in messages] == ["request", "response"]
    lines = [line for _level, line in logs]
    assert lines[0] == f"delegating to the A2A agent at {both.remote_url}"
    assert lines[1].startswith(f"delegated to remote task {theirs['id']}")
    assert lines[-1] == f"remote task {theirs['id']} is completed"  # each state seen


async def test_a_later_claim_follows_the_same_remote_task(
    make_live: LiveFactory, engine: AsyncEngine, remote_database_url: str, tmp_path: Path
) -> None:
    """The delegating service stops while the remote task waits (its task is
    released); the next claim follows that remote task and sends nothing."""
    text_ = f"{INPUT} ({uuid.uuid4()})"
    async with (
        make_live(database_url=remote_database_url, workers_enabled=False) as remote_api,
        httpx.AsyncClient(base_url=remote_api.url, timeout=30) as remote,
    ):
        settings = delegating(tmp_path, remote_api.url) | {"shutdown_grace_seconds": 0}
        async with (
            make_live(**settings) as first,
            httpx.AsyncClient(base_url=first.url, timeout=30) as ours,
        ):
            task_id = await delegate(ours, text_)
            state = await wait_for(lambda: _with_task_id(engine, task_id))
        # The remote's workers start, and the delegating service comes back.
        async with (
            make_live(database_url=remote_database_url, workers_enabled=True),
            make_live(**settings) as second,
            httpx.AsyncClient(base_url=second.url, timeout=30) as ours,
        ):
            task = await finished(ours, task_id)
            theirs = await remote_tasks(remote, text_)
            logs = (await ours.get(f"/v1/tasks/{task_id}/events", params={"type": "log"})).json()
    assert task["state"] == "completed", task
    assert [t["id"] for t in theirs] == [state["task_id"]]  # one remote task
    assert task["attempt"] == 2
    assert await remote_state(engine, task_id) == state
    # The second claim followed the remote task: it neither sent nor noted anything.
    lines = [e["data"]["message"] for e in logs["events"]]
    assert sum(line.startswith("delegat") for line in lines) == 2, lines


async def _with_task_id(engine: AsyncEngine, task_id: str) -> dict[str, Any] | None:
    state = await remote_state(engine, task_id)
    return state if state and "task_id" in state else None


async def test_a_message_sent_before_a_crash_is_sent_again_as_the_same_message(
    make_live: LiveFactory, engine: AsyncEngine, remote_database_url: str, tmp_path: Path
) -> None:
    """A worker died between writing the message id and learning the remote task:
    the next claim sends the same message, which the remote recognises."""
    text_ = f"{INPUT} ({uuid.uuid4()})"
    async with (
        make_live(database_url=remote_database_url, workers_enabled=True) as remote_server,
        httpx.AsyncClient(base_url=remote_server.url, timeout=30) as remote,
    ):
        settings, task_id, first_send = await crashed_mid_send(
            make_live, engine, remote, remote_server.url, tmp_path, text_, search=False
        )
        task, _ = await finished_by_a_worker(make_live, settings, task_id)
        theirs = await remote_tasks(remote, text_)
    assert task["state"] == "completed", task
    assert [t["id"] for t in theirs] == [first_send]
    assert (await remote_state(engine, task_id) or {})["task_id"] == first_send


async def crashed_mid_send(
    make_live: LiveFactory,
    engine: AsyncEngine,
    remote: httpx.AsyncClient,
    agent_url: str,
    tmp_path: Path,
    text_: str,
    *,
    search: bool = True,
) -> tuple[dict[str, Any], str, str]:
    """A task on `helper` (the agent at `agent_url`) whose first worker died right
    after sending its message (`died_sending`; without the time of sending, as an
    earlier version wrote it, unless `search`): the delegating settings, the task's
    id and the remote task's."""
    settings = delegating(tmp_path, agent_url)
    task_id = await submitted_unclaimed(make_live, settings, text_)
    state = {"agent": agent_url, "message_id": f"{task_id}:1"}
    if search:
        state["sending_at"] = datetime.now(UTC).isoformat()
    first_send = await died_sending(engine, remote, task_id, state, text_)
    return settings, task_id, first_send


async def died_sending(
    engine: AsyncEngine,
    remote: httpx.AsyncClient,
    task_id: str,
    state: dict[str, Any],
    text_: str,
) -> str:
    """What a worker that died mid-send did: `state` written as its first attempt's,
    the message sent (over A2A 1.0's JSON-RPC): the remote task's id."""
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE tasks SET remote = CAST(:r AS jsonb), attempt = 1 WHERE id = :id"),
            {"r": json.dumps(state), "id": task_id},
        )
    message = {"role": "ROLE_USER", "messageId": state["message_id"], "parts": [{"text": text_}]}
    params = {"message": message, "configuration": {"returnImmediately": True}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    sent = await remote.post("/a2a", json=body, headers={"A2A-Version": "1.0"})
    remote_id: str = sent.json()["result"]["task"]["id"]
    return remote_id


@pytest.mark.parametrize("delay", [0.5, 0.0], ids=["working-when-found", "done-when-found"])
async def test_a_message_sent_before_a_crash_to_an_agent_that_would_run_it_again_is_found(
    make_live: LiveFactory, engine: AsyncEngine, tmp_path: Path, delay: float
) -> None:
    """The official SDK's server makes a new task of a resent message: the next
    claim finds the task the first send created (ListTasks) and sends nothing. Found
    done already, its answer is read whole (a listing need not carry artifacts)."""
    async with (
        sdk_agent(delay=delay) as remote,
        httpx.AsyncClient(base_url=remote.url, timeout=30) as remote_client,
    ):
        settings, task_id, first_send = await crashed_mid_send(
            make_live, engine, remote_client, remote.url, tmp_path, INPUT
        )
        message_id = f"{task_id}:1"
        task, logs = await finished_by_a_worker(make_live, settings, task_id)
    assert task["state"] == "completed", task
    assert task["result"] == f"echo: {INPUT}"
    assert remote.echo.received == [message_id]  # once: not sent again
    assert (await remote_state(engine, task_id) or {})["task_id"] == first_send
    found = f"found remote task {first_send}, created by the message sent before"
    assert ("info", found) in logs


async def test_a_failed_remote_task_fails_the_delegated_one_with_its_message(
    make_live: LiveFactory, remote_database_url: str, tmp_path: Path
) -> None:
    async with delegation(
        make_live,
        remote_database_url,
        tmp_path,
        default_model="offline:5",
        task_timeout_seconds=0.3,
    ) as both:
        task = await finished(both.ours, await both.delegate(INPUT))
    assert task["state"] == "failed"
    assert task["error"]["type"] == "remote_failed"
    assert "timeout" in task["error"]["message"], task["error"]


async def test_a_remote_on_an_internal_address_is_refused_unless_allowed(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    """Checked as written when the profiles load: every run would be refused, so the
    start stops, naming the profile (allowed, it serves: the other tests)."""
    refusing = delegating(tmp_path, "http://127.0.0.1:9") | {"webhook_allow_targets": []}
    with pytest.raises(ProfileError, match=r"'helper'.*127\.0\.0\.1.*loopback"):
        async with make_client(**refusing):
            pass


async def test_cancelling_a_delegated_task_cancels_the_remote_one(
    make_live: LiveFactory, engine: AsyncEngine, remote_database_url: str, tmp_path: Path
) -> None:
    async with delegation(
        make_live, remote_database_url, tmp_path, default_model="offline:20"
    ) as both:
        task_id = await both.delegate(INPUT)
        state = await wait_for(lambda: _with_task_id(engine, task_id))
        cancelled = await both.ours.post(
            f"/v1/tasks/{task_id}/cancel", json={"reason": "not needed"}
        )
        assert cancelled.status_code == 200, cancelled.text
        theirs = await finished(both.remote, state["task_id"])
    assert theirs["state"] == "cancelled"


async def test_a_remote_question_is_asked_here_and_its_answer_sent_on(
    make_live: LiveFactory, engine: AsyncEngine, remote_database_url: str, tmp_path: Path
) -> None:
    text_ = f"paint the fence ({uuid.uuid4()})"
    async with delegation(
        make_live,
        remote_database_url,
        tmp_path,
        models={"asker": asks_for_a_colour()},
        default_model="asker",
    ) as both:
        task_id = await both.delegate(text_)
        asking = await in_state(both.ours, task_id, "input_required")
        [question] = asking["input_request"]["questions"]
        answered = await both.ours.post(f"/v1/tasks/{task_id}/input", json={"answer": "blue"})
        assert answered.status_code == 200, answered.text
        task = await finished(both.ours, task_id)
        [theirs] = await remote_tasks(both.remote, text_)
        logs = await log_lines(both.ours, task_id)
    assert question["question"] == "Which colour?"
    assert question["tool"] == "remote_question"
    assert question["id"] == f"remote:{theirs['id']}:0"
    assert task["state"] == "completed", task
    assert task["result"] == "painted blue" == theirs["result"]
    assert ("info", f"answer forwarded to remote task {theirs['id']}") in logs
    assert (await remote_state(engine, task_id) or {})["answered"] == 1


@pytest.mark.parametrize("streaming", [False, True], ids=["polled", "streamed"])
@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_an_agent_on_the_official_sdk_is_delegated_to_in_the_version_its_card_says(
    make_live: LiveFactory, tmp_path: Path, version: str, binding: str, streaming: bool
) -> None:
    """In the version and binding its card offers; followed by stream when its card
    says it streams, else polled."""
    async with to_sdk_agent(
        make_live, tmp_path, version=version, streaming=streaming, binding=binding
    ) as (remote, ours):
        task = await finished(ours, await delegate(ours, INPUT))
    assert task["state"] == "completed", task
    assert task["result"] == f"echo: {INPUT}"
    assert remote.echo.received == [f"{task['id']}:1"]  # sent once
    assert remote.handler.subscriptions == (1 if streaming else 0)


async def test_a_remote_answer_in_data_is_the_delegated_tasks_result_as_json(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    """An artifact of data (no text) is the result as JSON, its whole numbers whole."""
    async with to_sdk_agent(make_live, tmp_path, data=True) as (_, ours):
        task = await finished(ours, await delegate(ours, INPUT))
        messages = (await ours.get(f"/v1/tasks/{task['id']}/messages")).json()["messages"]
    assert task["state"] == "completed", task
    words = len(f"echo: {INPUT}".split())
    assert task["result"] == {"echo": INPUT, "words": words}
    assert isinstance(task["result"]["words"], int)
    said = messages[-1]["message"]["parts"][0]["content"]
    assert json.loads(said) == {"echo": INPUT, "words": words}


async def test_an_agent_whose_card_offers_no_binding_spoken_here_fails_the_task_saying_so(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    async with to_sdk_agent(make_live, tmp_path, binding="GRPC") as (remote, ours):
        task = await finished(ours, await delegate(ours, INPUT))
    assert task["state"] == "failed"
    assert task["error"]["type"] == "remote_unavailable"
    assert (
        "offers no interface spoken here (GRPC; spoken: JSONRPC, HTTP+JSON)"
        in (task["error"]["message"])
    )
    assert remote.echo.received == []


async def test_a_remote_answer_written_in_chunks_reaches_our_streams_as_it_is_written(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    """The chunks of the remote's artifact, as the stream it is followed by brings
    them, are the delegated task's live output: a client rebuilds the answer from
    its deltas before the complete answer is persisted."""
    async with to_sdk_agent(make_live, tmp_path, streaming=True, delay=0.1, chunk_delay=0.15) as (
        remote,
        ours,
    ):
        task_id = await delegate(ours, INPUT)
        events = await stream(ours, task_id)
        task = (await ours.get(f"/v1/tasks/{task_id}")).json()
    answer = f"echo: {INPUT}"
    assert task["result"] == answer
    assert rebuild(events) == {(1, 1): {0: answer}}
    deltas = [i for i, e in enumerate(events) if e.event == "delta"]
    messages = {
        e.json()["data"]["position"]: i for i, e in enumerate(events) if e.event == "message"
    }
    assert len(deltas) >= 3  # a word at a time, not the answer whole
    assert max(deltas) < messages[1]  # before the answer is persisted
    assert remote.handler.subscriptions == 1


async def test_a_remote_taskservice_streams_its_models_answer_through_to_ours(
    make_live: LiveFactory, remote_database_url: str, tmp_path: Path
) -> None:
    """A remote taskservice sent a message by delegation (not a blocking send) streams
    its model's response; its artifact chunks become the delegated task's deltas."""
    with FakeOpenAI() as fake, override_allow_model_requests(True):
        fake.queue(Reply(text=ANSWER, delay=0.3, chunk_delay=0.02))
        remote = {
            "openai_base_url": fake.base_url,
            "openai_api_key": "sk-test",
            "allowed_models": ["offline", MODEL],
            "default_model": MODEL,
        }
        async with delegation(make_live, remote_database_url, tmp_path, **remote) as both:
            task_id = await both.delegate(INPUT)
            events = await stream(both.ours, task_id)
            task = (await both.ours.get(f"/v1/tasks/{task_id}")).json()
        assert fake.requests[0]["stream"] is True
    assert task["result"] == ANSWER
    assert rebuild(events) == {(1, 1): {0: ANSWER}}
    assert sum(e.event == "delta" for e in events) >= 3


def asks_the_helper() -> FunctionModel:
    """A local agent that asks the `helper` agent (`ask_agent`), then says what it
    answered."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [
            part.content
            for message in messages
            for part in message.parts
            if isinstance(part, ToolReturnPart) and part.tool_name == "ask_agent"
        ]
        if not returned:
            call = ToolCallPart("ask_agent", {"agent": "helper", "input": "the weather"}, "a1")
            return ModelResponse(parts=[call])
        outcome = returned[-1]
        return ModelResponse(parts=[TextPart(f"{outcome['state']}: {outcome['result']}")])

    return FunctionModel(answer)


async def test_a_local_agent_asks_a_remote_one_and_waits_without_a_worker(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    async with sdk_agent(delay=0.5) as remote:
        boss = '[agents.boss]\nmodel = "boss"\ntools = ["ask_agent"]\n'
        settings = delegating(tmp_path, remote.url, more=boss)
        async with (
            make_live(models={"boss": asks_the_helper()}, **settings) as ours_server,
            httpx.AsyncClient(base_url=ours_server.url, timeout=30) as ours,
        ):
            submitted = await ours.post("/v1/tasks", json={"input": "go", "agent": "boss"})
            task = await finished(ours, submitted.json()["id"])
            children = (await ours.get("/v1/tasks", params={"parent_id": task["id"]})).json()
            changes = await ours.get(
                f"/v1/tasks/{task['id']}/events", params={"type": "state_change"}
            )
    assert task["state"] == "completed", task
    assert task["result"] == "completed: echo: the weather"
    [child] = children["tasks"]
    assert child["agent"]["profile"] == "helper"
    states = [e["data"]["to"] for e in changes.json()["events"]]
    # Parked on the subtask (no worker held), resumed when it ended.
    assert states == ["pending", "running", "input_required", "running", "completed"]
    assert remote.echo.received == [f"{child['id']}:1"]


@pytest.mark.parametrize(("delegations", "at_once"), [(256, 3), (0, 1)])
async def test_delegated_tasks_take_no_worker_slot_up_to_the_delegation_cap(
    make_live: LiveFactory, tmp_path: Path, delegations: int, at_once: int
) -> None:
    """One worker slot: three delegated tasks are all sent at once, and a local
    task runs meanwhile, unless the cap is 0 (then they take the slot in turn)."""
    async with sdk_agent(delay=2.0) as remote:
        settings = delegating(tmp_path, remote.url) | {
            "worker_concurrency": 1,
            "delegation_concurrency": delegations,
        }
        async with (
            make_live(**settings) as ours_server,
            httpx.AsyncClient(base_url=ours_server.url, timeout=30) as ours,
        ):
            for n in range(3):
                await delegate(ours, f"{INPUT} {n}")
            await wait_for(lambda: remote.echo.received)
            local = (await ours.post("/v1/tasks", json={"input": "hello"})).json()
            await asyncio.sleep(1.0)  # well within the remote's 2 s
            sent = len(remote.echo.received)
            local_state = (await ours.get(f"/v1/tasks/{local['id']}")).json()["state"]
    assert sent == at_once
    assert local_state == ("completed" if delegations else "pending")


async def test_a_message_sent_before_a_crash_to_a_remote_taskservice_is_found(
    make_live: LiveFactory, engine: AsyncEngine, remote_database_url: str, tmp_path: Path
) -> None:
    """This service as the remote: it lists tasks without their history unless asked,
    so the search asks for it, and finds the task the first send created (it would
    recognise the resent message too, but a search that never finds is no search)."""
    text_ = f"{INPUT} ({uuid.uuid4()})"
    async with (
        make_live(database_url=remote_database_url, workers_enabled=True) as remote_server,
        httpx.AsyncClient(base_url=remote_server.url, timeout=30) as remote,
    ):
        settings, task_id, first_send = await crashed_mid_send(
            make_live, engine, remote, remote_server.url, tmp_path, text_
        )
        task, logs = await finished_by_a_worker(make_live, settings, task_id)
        theirs = await remote_tasks(remote, text_)
    assert task["state"] == "completed", task
    assert [t["id"] for t in theirs] == [first_send]
    found = f"found remote task {first_send}, created by the message sent before"
    assert ("info", found) in logs, logs


async def test_a_search_that_fails_is_tried_again_and_the_message_not_sent_again(
    make_live: LiveFactory, engine: AsyncEngine, remote_database_url: str, tmp_path: Path
) -> None:
    """The remote answers the search for the task a dead worker's send created with
    500s at first: the search is tried again until it answers, finds the task, and
    the message is not sent again (a remote that did not recognise retried ids would
    have run it twice)."""
    text_ = f"{INPUT} ({uuid.uuid4()})"
    failures = iter([500, 502, 500])

    def lookup_fails(method: str, path: str) -> int | None:
        return next(failures, None) if method == "ListTasks" else None

    async with (
        make_live(database_url=remote_database_url, workers_enabled=True) as remote_server,
        httpx.AsyncClient(base_url=remote_server.url, timeout=30) as remote,
        faulty_proxy(remote_server.url, lookup_fails) as proxy,
    ):
        settings, task_id, first_send = await crashed_mid_send(
            make_live, engine, remote, proxy.url, tmp_path, text_
        )
        task, logs = await finished_by_a_worker(make_live, settings, task_id)
    assert task["state"] == "completed", task
    assert proxy.statuses("ListTasks") == [500, 502, 500, 0]
    assert proxy.statuses("SendMessage") == []  # not sent again
    found = f"found remote task {first_send}, created by the message sent before"
    assert ("info", found) in logs, logs


async def test_a_remote_unavailable_for_a_while_is_waited_for_and_its_tasks_complete(
    make_live: LiveFactory, remote_database_url: str, tmp_path: Path
) -> None:
    """The remote answers every call 503 with `Retry-After: 1` for two seconds: the
    delegated tasks wait (honouring it) and complete; a 4xx refusal would fail them
    at once (`test_an_agent_whose_card_offers_no_binding_spoken_here_...`)."""
    until = asyncio.get_running_loop().time() + 2.0

    def down_for_a_while(method: str, path: str) -> int | None:
        return 503 if asyncio.get_running_loop().time() < until else None

    async with (
        make_live(database_url=remote_database_url, workers_enabled=True) as remote_server,
        faulty_proxy(remote_server.url, down_for_a_while) as proxy,
        make_live(**delegating(tmp_path, proxy.url)) as ours_server,
        httpx.AsyncClient(base_url=ours_server.url, timeout=30) as ours,
    ):
        proxy.retry_after = 1
        ids = [await delegate(ours, f"{INPUT} ({n})") for n in range(3)]
        tasks = [await finished(ours, task_id) for task_id in ids]
    assert [t["state"] for t in tasks] == ["completed"] * 3, tasks
    refused = [status for _, _, status in proxy.seen if status]
    assert refused
    assert set(refused) == {503}
