"""Interoperability: the official A2A Python SDK as the client, over real HTTP.

The SDK (1.x) reads the agent card, sees protocol 0.3 and talks to `/a2a` through
its 0.3 compatibility layer, which validates every answer against the 0.3 types.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from tests.conftest import LiveFactory
from tests.integration.helpers import asks_for_a_colour


def send_request(text: str, *, task_id: str = "", wait: bool = True) -> SendMessageRequest:
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        message.task_id = task_id
    request = SendMessageRequest(message=message)
    request.configuration.return_immediately = not wait
    return request


async def sent_task(client: object, request: SendMessageRequest) -> Task:
    tasks = [event.task async for event in client.send_message(request)]  # type: ignore[attr-defined]
    assert len(tasks) == 1
    return tasks[0]


async def test_the_a2a_sdk_sends_follows_answers_and_cancels(make_live: LiveFactory) -> None:
    models = {"asker": asks_for_a_colour()}
    async with (
        make_live(models=models, workers_enabled=True, default_model="asker") as live,
        httpx.AsyncClient(timeout=30) as http,
    ):
        client = await create_client(
            live.url, client_config=ClientConfig(streaming=False, httpx_client=http)
        )
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


async def test_the_a2a_sdk_cancels_a_task_it_did_not_wait_for(make_live: LiveFactory) -> None:
    async with make_live() as live, httpx.AsyncClient(timeout=30) as http:  # no workers
        client = await create_client(
            live.url, client_config=ClientConfig(streaming=False, httpx_client=http)
        )
        task = await sent_task(client, send_request("later", wait=False))
        assert task.status.state == TaskState.TASK_STATE_SUBMITTED
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
