"""The real OpenAI-compatible provider over HTTP, against a scripted local server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai.models import override_allow_model_requests

from tests.conftest import ClientFactory
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.helpers import log_lines, until_state

MODEL = "openai-chat:fake-gpt"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server, override_allow_model_requests(True):
        yield server


def provider_settings(fake: FakeOpenAI) -> dict[str, Any]:
    return {
        "workers_enabled": True,
        "openai_base_url": fake.base_url,
        "openai_api_key": "sk-test",
        "allowed_models": ["offline", MODEL],
    }


async def test_a_task_runs_over_http_with_tool_calls(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    fake.queue(
        Reply(tool_calls=[("call_1", "report_progress", {"percent": 30, "note": "reading"})]),
        Reply(text="The answer is 42."),
    )
    async with make_client(**provider_settings(fake)) as client:
        task = (
            await client.post(
                "/v1/tasks",
                json={"input": "What is the answer?", "model": MODEL, "system_prompt": "Be exact."},
            )
        ).json()
        done = await until_state(client, task["id"], "completed", "failed")
    assert done["state"] == "completed", done
    assert done["result"] == "The answer is 42."
    assert done["usage"] == {
        "input_tokens": 22,
        "output_tokens": 14,
        "requests": 2,
        "cost": None,  # genai-prices knows no fake-gpt: unpriced, not free
        "currency": "USD",
        "unpriced_requests": 2,
    }
    first, second = fake.requests
    assert first["model"] == "fake-gpt"
    assert first["messages"][0] == {"role": "system", "content": "Be exact."}
    assert {t["function"]["name"] for t in first["tools"]} == {"report_progress", "ask_user"}
    tool_messages = [m for m in second["messages"] if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_1"]
    assert fake.headers[0]["authorization"] == "Bearer sk-test"


async def test_rate_limits_are_retried_then_the_task_completes(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    fake.queue(
        Reply(status=429, retry_after_ms=10),
        Reply(status=429, retry_after_ms=10),
        Reply(text="made it"),
    )
    async with make_client(**provider_settings(fake)) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "model": MODEL})).json()
        done = await until_state(client, task["id"], "completed", "failed")
        lines = await log_lines(client, task["id"])
    assert done["state"] == "completed", done
    assert done["result"] == "made it"
    assert len(fake.requests) == 3
    # Each retry is a line of the run, told before the SDK waits to send it again.
    assert [(level, message) for level, message in lines] == [
        ("warning", "the model provider answered HTTP 429 Too Many Requests; retry 1 of 2"),
        ("warning", "the model provider answered HTTP 429 Too Many Requests; retry 2 of 2"),
    ]


async def test_a_provider_that_keeps_failing_fails_the_task_with_its_status(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    fake.queue(*[Reply(status=500, retry_after_ms=10)] * 10)
    async with make_client(**provider_settings(fake)) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "model": MODEL})).json()
        done = await until_state(client, task["id"], "completed", "failed")
    assert done["state"] == "failed"
    assert done["error"]["type"] == "model_http_error"
    assert done["error"]["status_code"] == 500
    assert "HTTP 500" in done["error"]["message"]
    assert len(fake.requests) == 3  # retried twice, then gave up


async def test_a_provider_that_cannot_be_reached_is_retried_and_each_retry_is_a_line(
    make_client: ClientFactory,
) -> None:
    with socket.socket() as sock:  # a port on loopback that nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    settings = {
        "workers_enabled": True,
        "openai_base_url": closed,
        "openai_api_key": "sk-test",
        "allowed_models": ["offline", MODEL],
    }
    with override_allow_model_requests(True):
        async with make_client(**settings) as client:
            task = (await client.post("/v1/tasks", json={"input": "x", "model": MODEL})).json()
            done = await until_state(client, task["id"], "completed", "failed")
            lines = await log_lines(client, task["id"])
    assert done["error"]["type"] == "model_unavailable"
    assert lines == [
        (
            "warning",
            f"the model request got no answer (connection error or timeout); retry {n} of 2",
        )
        for n in (1, 2)
    ]


async def test_a_slow_provider_hits_the_task_timeout(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    fake.queue(Reply(text="too late", delay=5))
    async with make_client(**provider_settings(fake)) as client:
        task = (
            await client.post(
                "/v1/tasks", json={"input": "x", "model": MODEL, "timeout_seconds": 0.5}
            )
        ).json()
        done = await until_state(client, task["id"], "completed", "failed")
        lines = await log_lines(client, task["id"])
    assert done["error"]["type"] == "timeout"
    assert lines == [("error", "the run exceeded its timeout of 0.5 s; the run was stopped")]


async def test_the_fake_server_streams_chunks_like_the_real_api(fake: FakeOpenAI) -> None:
    # The executor streams every model request (live output); the fake speaks the
    # streaming protocol as the real API does, the text exactly as written.
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=fake.base_url, api_key="sk-test")
    fake.queue(Reply(text="one two three"))
    stream = await client.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])
    assert text == "one two three"
    await client.close()
