"""TaskClient and the CLI verbs, over real HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from taskservice.cli_remote import EXIT_INTERRUPTED, EXIT_REFUSED
from taskservice.client import LiveText, TaskClient, TaskServiceError
from taskservice.common.pricing import parse_model_prices
from tests.conftest import LiveFactory


def progressing(steps: int) -> FunctionModel:
    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        await asyncio.sleep(0.02)
        if turn < steps:
            return ModelResponse(parts=[ToolCallPart("report_progress", {"percent": turn})])
        return ModelResponse(parts=[TextPart("finished")])

    return FunctionModel(play)


async def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise RuntimeError("no luck")


class CuttingTransport(httpx.AsyncBaseTransport):
    """Cuts the first few event streams after a couple of chunks, like a flaky proxy."""

    def __init__(self, cuts: int) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.cuts = cuts

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if "text/event-stream" not in request.headers.get("accept", "") or self.cuts <= 0:
            return response
        self.cuts -= 1
        original = response.stream

        async def cut() -> AsyncIterator[bytes]:
            chunks = 0
            async for chunk in original:  # type: ignore[union-attr]
                yield chunk
                chunks += 1
                if chunks >= 2:
                    await original.aclose()  # type: ignore[union-attr]
                    raise httpx.ReadError("connection cut")

        return httpx.Response(
            response.status_code, headers=response.headers, stream=_Stream(cut()), request=request
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Stream(httpx.AsyncByteStream):
    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.chunks:
            yield chunk


async def test_the_client_verbs(make_live: LiveFactory) -> None:
    async with make_live(workers_enabled=True) as live, TaskClient(live.url) as client:
        task = await client.submit("hello", metadata={"k": 1}, idempotency_key="once")
        again = await client.submit("hello", metadata={"k": 1}, idempotency_key="once")
        assert again["id"] == task["id"]
        done = await client.wait(task["id"], within=10)
        assert done["state"] == "completed"
        listed = await client.list(state="completed")
        assert [t["id"] for t in listed["tasks"]] == [task["id"]]
        with pytest.raises(TaskServiceError) as refused:
            await client.cancel(task["id"])
        assert refused.value.status == 409
        assert refused.value.problem["state"] == "completed"
        with pytest.raises(TaskServiceError) as missing:
            await client.get("not-a-task")
        assert missing.value.status == 404


async def test_pause_and_resume_from_the_client_and_the_command(make_live: LiveFactory) -> None:
    """Nothing runs (no workers): the verbs' requests and answers."""
    async with make_live() as live, TaskClient(live.url) as client:
        task = await client.submit("hold me")
        paused = await client.pause(task["id"], reason="wait")
        assert paused["paused"]["reason"] == "wait"
        listed = await client.list(paused="true")
        assert [t["id"] for t in listed["tasks"]] == [task["id"]]
        assert (await client.resume(task["id"]))["paused"] is None

        code, out, err = await run_cli(live.url, "tasks", "pause", task["id"], "--reason", "cli")
        assert code == 0, err
        assert json.loads(out)["paused"]["reason"] == "cli"
        code, out, _ = await run_cli(live.url, "tasks", "list", "--paused", "yes")
        assert [t["id"] for t in json.loads(out)["tasks"]] == [task["id"]]
        code, out, _ = await run_cli(live.url, "tasks", "resume", task["id"])
        assert (code, json.loads(out)["paused"]) == (0, None)

        braked = await client.pause_agent("default", reason="flaky model")
        assert braked["paused"]["reason"] == "flaky model"
        assert braked["tasks"] == 1
        [default] = [a for a in await client.agents() if a["name"] == "default"]
        assert default["paused"]["reason"] == "flaky model"
        assert (await client.resume_agent("default"))["tasks"] == 1
        code, out, err = await run_cli(live.url, "agents", "pause", "demo", "--reason", "r")
        assert code == 0, err
        assert json.loads(out)["paused"]["reason"] == "r"
        code, out, _ = await run_cli(live.url, "agents", "resume", "demo")
        assert json.loads(out) == {"name": "demo", "paused": None, "tasks": 0}
        code, _, err = await run_cli(live.url, "agents", "pause", "nobody")
        assert code == EXIT_REFUSED
        assert "404" in err


async def test_the_stream_resumes_by_itself_after_dropped_connections(
    make_live: LiveFactory,
) -> None:
    transport = CuttingTransport(cuts=4)
    async with (
        make_live(models={"steps": progressing(8)}, workers_enabled=True) as live,
        TaskClient(live.url, transport=transport) as client,
    ):
        task = await client.submit("x", model="steps")
        seqs = [event["seq"] async for event in client.stream(task["id"])]
        total = (await client.get(task["id"]))["state"]
    assert transport.cuts == 0  # every cut happened
    assert seqs == list(range(1, len(seqs) + 1))
    assert total == "completed"


async def test_the_stream_with_deltas_rebuilds_the_answer_as_it_is_written(
    make_live: LiveFactory,
) -> None:
    async with make_live(workers_enabled=True) as live, TaskClient(live.url) as client:
        task = await client.submit("write slowly", model="offline:1")
        text = LiveText()
        events = [event async for event in client.stream(task["id"], deltas=True)]
        for event in events:
            if event["type"] == "delta":
                text.feed(event["data"])
        done = await client.get(task["id"])
    assert sum(event["type"] == "delta" for event in events) >= 3
    assert text.text == done["result"]
    seqs = [event["seq"] for event in events if event["type"] != "delta"]
    assert seqs == list(range(1, len(seqs) + 1))


async def run_cli(url: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKSERVICE_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "taskservice.cli",
        *args,
        "--url",
        url,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_submit_follow_prints_events_and_exits_with_the_final_state(
    make_live: LiveFactory,
) -> None:
    async with make_live(models={"broken": FunctionModel(broken)}, workers_enabled=True) as live:
        code, out, err = await run_cli(live.url, "submit", "What is 2+2?", "--follow")
        assert code == 0, err
        assert "[offline model]" in out
        assert "state_change" in err
        assert "completed" in err
        code, _, err = await run_cli(live.url, "submit", "x", "--model", "broken", "--follow")
        assert code == 1
        assert "no luck" in err
        code, out, _ = await run_cli(live.url, "submit", "plain")
        assert code == 0
        task: dict[str, Any] = json.loads(out)
        code, out, _ = await run_cli(live.url, "tasks", "get", task["id"], "--wait", "5")
        assert code == 0
        assert '"state": "completed"' in out
        code, _, err = await run_cli(live.url, "tasks", "cancel", task["id"])
        assert code == EXIT_REFUSED  # not 1, a failed task's code
        assert "409" in err
        code, _, err = await run_cli(live.url, "submit", "x", "--priority", "5000")
        assert code == EXIT_REFUSED
        assert "priority" in err


async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    await asyncio.sleep(3)
    return ModelResponse(parts=[TextPart("done, slowly")])


async def test_ctrl_c_stops_following_not_the_task(make_live: LiveFactory) -> None:
    """Ctrl-C during `submit --follow`: one message saying the task goes on and how
    to follow it, exit 130, no traceback; the task runs to its end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKSERVICE_")}
    async with (
        make_live(models={"slow": FunctionModel(slow)}, workers_enabled=True) as live,
        TaskClient(live.url) as client,
    ):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "taskservice.cli",
            "submit",
            "take your time",
            "--model",
            "slow",
            "--follow",
            "--url",
            live.url,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stderr is not None
        seen = b""
        while b"state_change" not in seen:  # following: the task is running
            line = await asyncio.wait_for(process.stderr.readline(), 30)
            assert line, seen
            seen += line
        process.send_signal(signal.SIGINT)
        _, rest = await asyncio.wait_for(process.communicate(), 30)
        err = (seen + rest).decode()
        task_id = err.split("task ", 1)[1].split(" ", 1)[0]
        done = await client.wait(task_id, within=30)
    assert process.returncode == EXIT_INTERRUPTED
    assert f"interrupted: task {task_id} goes on" in err, err
    assert "Traceback" not in err, err
    assert done["state"] == "completed"
    assert done["result"] == "done, slowly"


async def test_submit_follow_prints_the_answer_as_the_model_writes_it(
    make_live: LiveFactory,
) -> None:
    async with make_live(workers_enabled=True) as live:
        code, out, err = await run_cli(
            live.url, "submit", "write slowly", "--model", "offline:1", "--follow"
        )
    assert code == 0, err
    written = [line.strip() for line in err.splitlines() if line.startswith("      ")]
    assert written == [out.strip()]  # the answer, printed piece by piece on one line
    assert out.startswith("[offline model]")


async def test_an_unreachable_service_has_its_own_exit_code() -> None:
    code, _, err = await run_cli("http://127.0.0.1:9", "tasks", "list")
    assert code == 4
    assert "cannot reach" in err


async def test_fork_from_the_client_and_the_command(make_live: LiveFactory) -> None:
    async with make_live(workers_enabled=True) as live, TaskClient(live.url) as client:
        source = await client.wait((await client.submit("hello"))["id"], within=10)
        assert source["state"] == "completed"
        # The offline model's conversation: the prompt (0), its answer (1).
        fork = await client.fork(source["id"], at=1, idempotency_key="again")
        assert fork["forked_from"] == {"task_id": source["id"], "at": 1}
        assert (await client.fork(source["id"], at=1, idempotency_key="again"))["id"] == fork["id"]
        assert (await client.wait(fork["id"], within=10))["state"] == "completed"
        with pytest.raises(TaskServiceError) as refused:
            await client.fork(source["id"])  # after the answer, with nothing to say
        assert refused.value.status == 422
        assert refused.value.problem["valid_positions"] == [0, 1]

        code, out, err = await run_cli(
            live.url, "fork", source["id"], "--at", "0", "--input", "goodbye", "--follow"
        )
        assert code == 0, err
        assert "goodbye" in out
        assert "forked (Ctrl-C stops following" in err
        code, out, err = await run_cli(live.url, "fork", source["id"], "--at", "2")
        assert code == EXIT_REFUSED
        assert "valid positions" in err
        code, out, _ = await run_cli(live.url, "tasks", "list", "--forked-from", source["id"])
        assert code == 0
        forks = json.loads(out)["tasks"]
        assert len(forks) == 2
        assert {t["forked_from"]["at"] for t in forks} == {0, 1}


async def test_tool_calls_are_approved_and_denied_from_the_client_and_the_command(
    make_live: LiveFactory,
) -> None:
    async with make_live(workers_enabled=True) as live, TaskClient(live.url) as client:
        first = await client.submit("approve, take 1s", agent="demo")
        waiting = await client.wait(first["id"], within=15)
        assert waiting["input_request"]["kind"] == "approvals"
        edited = {"channel": "#ops", "text": "from the client"}
        await client.approve(first["id"], arguments=edited)
        done = await client.wait(first["id"], within=15)
        assert "published to #ops" in done["result"]
        with pytest.raises(TaskServiceError) as nothing:
            await client.approve(first["id"])  # it waits on nothing now
        assert nothing.value.status == 409

        second = await client.submit("approve, take 1s", agent="demo")
        waiting = await client.wait(second["id"], within=15)
        call = waiting["input_request"]["approvals"][0]["id"]
        code, out, err = await run_cli(
            live.url, "tasks", "deny", second["id"], call, "--reason", "not now"
        )
        assert code == 0, err
        assert json.loads(out)["id"] == second["id"]
        done = await client.wait(second["id"], within=15)
        assert "not now" in done["result"]
        third = await client.submit("approve, take 1s", agent="demo")
        await client.wait(third["id"], within=15)
        code, _, err = await run_cli(
            live.url, "tasks", "approve", third["id"], "--arguments", '{"channel": 5}'
        )
        assert code == EXIT_REFUSED
        assert "do not fit its schema" in err
        code, _, err = await run_cli(live.url, "tasks", "approve", third["id"])
        assert code == 0, err
        assert "published to #demo" in (await client.wait(third["id"], within=15))["result"]


async def test_usage_from_the_client_and_the_command(make_live: LiveFactory) -> None:
    # The offline model priced by the operator: $1 per million input tokens, $2 output.
    prices = parse_model_prices('{"offline": {"input": 1, "output": 2}}')
    async with (
        make_live(workers_enabled=True, model_prices=prices) as live,
        TaskClient(live.url) as client,
    ):
        for text in ("hello", "goodbye"):
            assert (await client.wait((await client.submit(text))["id"], within=10))[
                "state"
            ] == "completed"
        tasks = (await client.list())["tasks"]
        cost = sum(Decimal(t["usage"]["cost"]) for t in tasks)
        by_model = await client.usage(group_by=["model"])
        code, out, err = await run_cli(live.url, "usage")
        json_code, json_out, _ = await run_cli(live.url, "usage", "--by", "model", "--json")
        bad_code, _, bad_err = await run_cli(live.url, "usage", "--from", "2026-13-01")
    assert [(g["model"], g["requests"]) for g in by_model["groups"]] == [("offline", 2)]
    assert Decimal(by_model["total"]["cost"]) == cost > 0
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("spend from ")
    assert lines[0].endswith("(UTC days), in USD")
    total = next(line for line in lines if line.strip().startswith("total"))
    assert total.split()[1:] == [
        "2",
        str(by_model["total"]["input_tokens"]),
        str(by_model["total"]["output_tokens"]),
        f"${by_model['total']['cost']}",
    ]
    assert [line for line in lines if line.startswith("by ")] == [
        "by agent",
        "by model",
        "by day",
    ]
    assert any(line.split()[:2] == ["offline", "2"] for line in lines)
    assert json_code == 0
    assert json.loads(json_out) == by_model
    assert bad_code == EXIT_REFUSED
    assert "from" in bad_err
