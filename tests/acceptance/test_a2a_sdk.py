"""Interoperability: the official A2A Python SDK as the client, over real HTTP,
polling and streaming.

The SDK (1.x) reads the agent card and picks an interface it is given: A2A 1.0
over JSON-RPC or over HTTP+JSON (each test runs on both), or, forced onto the
card's 0.3 interface, its 0.3 compatibility layer, which validates every answer
against the 0.3 types.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from tests.conftest import LiveFactory, wait_for
from tests.fakes.webhook_receiver import Receiver
from tests.integration.helpers import asks_for_a_colour
from tests.integration.test_followups import Gate


def send_request(text: str, *, task_id: str = "", wait: bool = True) -> SendMessageRequest:
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        message.task_id = task_id
    request = SendMessageRequest(message=message)
    request.configuration.return_immediately = not wait
    return request


async def sent_task(client: Client, request: SendMessageRequest) -> Task:
    tasks = [event.task async for event in client.send_message(request)]
    assert len(tasks) == 1
    return tasks[0]


@asynccontextmanager
async def a2a_client(
    make_live: LiveFactory,
    *,
    streaming: bool,
    asker: bool = False,
    version: str = "1.0",
    binding: str = "JSONRPC",
    **overrides: Any,
) -> AsyncIterator[Client]:
    """The SDK's client for a live server (with workers whose default model asks the
    user a question, when `asker`), found from the server's agent card, on its
    interface of `version` and `binding`."""
    settings: dict[str, Any] = dict(overrides)
    if asker:
        settings |= {
            "models": {"asker": asks_for_a_colour()},
            "workers_enabled": True,
            "default_model": "asker",
        }
    async with make_live(**settings) as live, httpx.AsyncClient(timeout=30) as http:
        config = ClientConfig(
            streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding]
        )
        card = parse_agent_card((await http.get(f"{live.url}/.well-known/agent-card.json")).json())
        interfaces = [
            i
            for i in card.supported_interfaces
            if i.protocol_version == version and i.protocol_binding == binding
        ]
        assert interfaces, card.supported_interfaces
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(interfaces)
        yield await create_client(card, client_config=config)


bindings = pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])


@bindings
async def test_the_a2a_sdk_sends_follows_answers_and_cancels(
    make_live: LiveFactory, binding: str
) -> None:
    async with a2a_client(make_live, streaming=False, asker=True, binding=binding) as client:
        # A blocking send: the answer comes once the task waits for input.
        asked = await sent_task(client, send_request("paint the fence"))
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert asked.status.message.parts[0].text == "Which colour?"
        assert asked.context_id

        answered = await sent_task(client, send_request("blue", task_id=asked.id))
        assert answered.id == asked.id
        assert answered.status.state == TaskState.TASK_STATE_COMPLETED
        assert answered.artifacts[0].parts[0].text == "painted blue"

        fetched = await client.get_task(GetTaskRequest(id=asked.id))
        assert fetched.status.state == TaskState.TASK_STATE_COMPLETED

        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=asked.id))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=str(uuid.uuid4())))


@bindings
async def test_the_a2a_sdk_cancels_a_task_it_did_not_wait_for(
    make_live: LiveFactory, binding: str
) -> None:
    async with a2a_client(make_live, streaming=False, binding=binding) as client:  # no workers
        task = await sent_task(client, send_request("later", wait=False))
        assert task.status.state == TaskState.TASK_STATE_SUBMITTED
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED


@bindings
async def test_the_a2a_sdk_lists_tasks_by_pages_and_reads_history(
    make_live: LiveFactory, binding: str
) -> None:
    async with a2a_client(make_live, streaming=False, binding=binding) as client:  # no workers
        sent = [await sent_task(client, send_request(f"t{i}", wait=False)) for i in range(3)]
        first = await client.list_tasks(ListTasksRequest(page_size=2))
        second = await client.list_tasks(
            ListTasksRequest(page_size=2, page_token=first.next_page_token)
        )
        waiting = await client.list_tasks(
            ListTasksRequest(status=TaskState.TASK_STATE_SUBMITTED, history_length=1)
        )
        fetched = await client.get_task(GetTaskRequest(id=sent[0].id, history_length=1))
        none = await client.get_task(GetTaskRequest(id=sent[0].id, history_length=0))
    newest_first = [task.id for task in reversed(sent)]
    assert [task.id for task in first.tasks] == newest_first[:2]
    assert [task.id for task in second.tasks] == newest_first[2:]
    assert (first.total_size, second.next_page_token) == (3, "")
    assert [task.history[0].parts[0].text for task in waiting.tasks] == ["t2", "t1", "t0"]
    assert [m.parts[0].text for m in fetched.history] == ["t0"]
    assert list(none.history) == []


@bindings
async def test_the_a2a_sdk_streams_a_task_to_its_end(make_live: LiveFactory, binding: str) -> None:
    async with a2a_client(make_live, streaming=True, asker=True, binding=binding) as client:
        first = [event async for event in client.send_message(send_request("paint the door"))]
        assert first[0].HasField("task")
        task_id = first[0].task.id
        paused = first[-1].status_update
        assert paused.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert paused.status.message.parts[0].text == "Which colour?"

        # A subscription to the waiting task lasts until the task is finished.
        async def subscribed() -> list[Any]:
            request = SubscribeToTaskRequest(id=task_id)
            return [event async for event in client.subscribe(request)]

        subscription = asyncio.create_task(subscribed())
        await asyncio.sleep(0.3)
        assert not subscription.done()
        rest = [e async for e in client.send_message(send_request("red", task_id=task_id))]
        artifacts = [e.artifact_update.artifact for e in rest if e.HasField("artifact_update")]
        assert [a.parts[0].text for a in artifacts] == ["painted red"]
        assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        seen = await asyncio.wait_for(subscription, 20)
    assert seen[0].task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    states = [e.status_update.status.state for e in seen if e.HasField("status_update")]
    assert states == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]
    assert [
        e.artifact_update.artifact.parts[0].text
        for e in seen[1:-1]
        if e.HasField("artifact_update")
    ] == ["painted red"]


@bindings
async def test_the_a2a_sdk_sends_a_follow_up_the_working_agent_reads(
    make_live: LiveFactory, binding: str
) -> None:
    gate = Gate()
    live = {"models": {"gate": gate.model()}, "workers_enabled": True, "default_model": "gate"}
    async with a2a_client(make_live, streaming=False, binding=binding, **live) as client:
        started = await sent_task(client, send_request("draft a plan", wait=False))
        await asyncio.wait_for(gate.asked.wait(), 10)  # the agent is working on it

        request = send_request("add a budget", task_id=started.id, wait=False)
        working = await sent_task(client, request)
        assert working.id == started.id
        assert working.status.state == TaskState.TASK_STATE_WORKING
        again = await sent_task(client, request)  # a retry (same messageId) adds nothing
        assert again.id == started.id

        gate.open.set()

        async def completed() -> Task | None:
            task = await client.get_task(GetTaskRequest(id=started.id))
            return task if task.status.state == TaskState.TASK_STATE_COMPLETED else None

        await wait_for(completed, timeout=20)
        done = await client.get_task(GetTaskRequest(id=started.id))
    assert done.artifacts[0].parts[0].text == "saw ['draft a plan', 'add a budget']"
    users = [m for m in done.history if m.role == Role.ROLE_USER]
    assert [m.parts[0].text for m in users] == ["draft a plan", "add a budget"]
    assert users[1].message_id == request.message.message_id


async def test_the_a2a_sdk_on_the_0_3_interface(make_live: LiveFactory) -> None:
    async with a2a_client(make_live, streaming=True, asker=True, version="0.3") as client:
        first = [event async for event in client.send_message(send_request("paint the gate"))]
        task_id = first[0].task.id
        assert first[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        rest = [e async for e in client.send_message(send_request("teal", task_id=task_id))]
        assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        fetched = await client.get_task(GetTaskRequest(id=task_id, history_length=2))
    assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
    assert [m.parts[0].text for m in fetched.history] == ["teal", "painted teal"]
    assert fetched.artifacts[0].parts[0].text == "painted teal"


@bindings
async def test_the_a2a_sdk_manages_push_configs_whose_deliveries_arrive(
    make_live: LiveFactory, binding: str
) -> None:
    push = {"webhook_allow_http": True, "webhook_allow_targets": ["127.0.0.1/32"]}
    async with (
        Receiver() as receiver,
        a2a_client(make_live, streaming=False, binding=binding, **push) as client,  # no workers
    ):
        task = await sent_task(client, send_request("notify me", wait=False))
        config = TaskPushNotificationConfig(
            task_id=task.id,
            id="alerts",
            url=receiver.url("/alerts"),
            token="tok",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="cred"),
        )
        made = await client.create_task_push_notification_config(config)
        fetched = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="alerts")
        )
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        await client.cancel_task(CancelTaskRequest(id=task.id))

        async def both() -> list[Any] | None:
            got = receiver.at("/alerts")
            return got if len(got) >= 2 else None

        delivered = await wait_for(both, timeout=15)
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="alerts")
        )
        after = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
    assert made == config
    assert fetched == config
    assert list(listed.configs) == [config]
    assert list(after.configs) == []
    states = [r.json["task"]["status"]["state"] for r in delivered]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_CANCELED"]
    assert {r.headers["x-a2a-notification-token"] for r in delivered} == {"tok"}
    assert {r.headers["authorization"] for r in delivered} == {"Bearer cred"}


@pytest.mark.parametrize(
    ("version", "binding"), [("1.0", "JSONRPC"), ("1.0", "HTTP+JSON"), ("0.3", "JSONRPC")]
)
async def test_the_a2a_sdk_receives_the_answer_in_chunks_as_it_is_written(
    make_live: LiveFactory, version: str, binding: str
) -> None:
    # offline:1 streams its answer word by word over a second.
    slow = {"workers_enabled": True, "default_model": "offline:1"}
    async with a2a_client(
        make_live, streaming=True, version=version, binding=binding, **slow
    ) as client:
        events = [e async for e in client.send_message(send_request("write it out"))]
    updates = [e.artifact_update for e in events if e.HasField("artifact_update")]
    *chunks, whole = updates
    assert len(chunks) >= 3, updates
    assert not chunks[0].append
    assert all(chunk.append for chunk in chunks[1:])
    assert not any(chunk.last_chunk for chunk in chunks)
    assert whole.last_chunk
    assert not whole.append  # the complete result replaces the chunks
    answer = whole.artifact.parts[0].text
    assert answer.startswith("[offline model]")
    assert "".join(chunk.artifact.parts[0].text for chunk in chunks) == answer
    assert {u.artifact.artifact_id for u in updates} == {whole.artifact.artifact_id}
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


@bindings
async def test_the_a2a_sdk_continues_a_finished_task_by_referring_to_it(
    make_live: LiveFactory, binding: str
) -> None:
    """A message with `referenceTaskIds` (the SDK's `reference_task_ids`) starts a
    fork: a new task in the same context whose history is the referenced one's."""
    async with a2a_client(make_live, streaming=False, binding=binding, workers_enabled=True) as (
        client
    ):
        first = await sent_task(client, send_request("name a river"))
        assert first.status.state == TaskState.TASK_STATE_COMPLETED
        request = send_request("and a lake")
        request.message.reference_task_ids.append(first.id)
        request.message.context_id = first.context_id
        then = await sent_task(client, request)
        fetched = await client.get_task(GetTaskRequest(id=then.id))
    assert then.id != first.id
    assert then.context_id == first.context_id
    assert then.status.state == TaskState.TASK_STATE_COMPLETED
    assert [m.parts[0].text for m in fetched.history][::2] == ["name a river", "and a lake"]
    assert "and a lake" in then.artifacts[0].parts[0].text
