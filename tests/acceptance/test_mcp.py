"""MCP at /mcp over real HTTP, with real clients: FastMCP's (revision 2026-07-28) and
the official SDK's (`mcp` 2.x, on both revisions it speaks)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fastmcp
import fastmcp_tasks  # noqa: F401  (its clients declare the Tasks extension)
import httpx
import httpx2
import mcp
import pytest
from fastmcp.exceptions import ToolError
from fastmcp_tasks import ToolTask, call_tool_task
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.keys import ApiKeyStore
from taskservice.mcp.tasks import EXTENSION
from tests.acceptance.conftest import cli_env, serve
from tests.conftest import LiveFactory, LiveServer, wait_for
from tests.integration.helpers import asks_for_a_colour


async def structured(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    [output] = info.output_tools
    return ModelResponse(parts=[ToolCallPart(output.name, {"response": {"answer": 42}})])


async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    await asyncio.sleep(3)
    return ModelResponse(parts=[TextPart("late")])


MODELS = {"structured": FunctionModel(structured), "slow": FunctionModel(slow)}


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(
        """
[agents.researcher]
description = "Looks things up"
model = "offline"

[agents.analyst]
description = "Answers with an object"
model = "structured"
output = "json"

[agents.sleeper]
model = "slow"
"""
    )
    return path


@pytest.fixture
async def served(make_live: LiveFactory, profiles: Path) -> AsyncIterator[LiveServer]:
    """The service with the profiles above, its workers running."""
    async with make_live(models=MODELS, agents_file=profiles, workers_enabled=True) as live:
        yield live


async def test_fastmcp_lists_the_profiles_and_calls_one(
    served: LiveServer, db: AsyncEngine
) -> None:
    async with fastmcp.Client(f"{served.url}/mcp") as client:
        assert client.protocol_version == "2026-07-28"
        tools = {t.name: t for t in await client.list_tools()}
        assert sorted(tools) == ["analyst", "default", "demo", "researcher", "sleeper"]
        assert tools["researcher"].description == "Looks things up"
        assert tools["researcher"].input_schema["required"] == ["input"]
        assert tools["analyst"].output_schema == {"type": "object"}
        assert tools["researcher"].output_schema is None
        said = await client.call_tool("researcher", {"input": "What is MCP?"})
        assert "What is MCP?" in said.content[0].text
        object_ = await client.call_tool("analyst", {"input": "how many?", "context_id": "c-1"})
        assert object_.structured_content == {"answer": 42}
        # Each call was an ordinary task of the tenant, on the tool's profile.
        async with httpx.AsyncClient(base_url=served.url) as http:
            listed = (await http.get("/v1/tasks", params={"context_id": "c-1"})).json()
        [task] = listed["tasks"]
        assert (task["agent"]["profile"], task["state"]) == ("analyst", "completed")
        assert task["result"] == {"answer": 42}
        # MCP carries no live output: its tasks' model responses are not streamed.
        async with db.connect() as conn:
            query = text("SELECT quiet FROM tasks WHERE id = :id")
            quiet = await conn.execute(query, {"id": task["id"]})
        assert quiet.scalar_one() is True


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_official_client_on_both_revisions(
    make_live: LiveFactory, profiles: Path, mode: str
) -> None:
    async with make_live(
        # Long enough for a quick task on a busy machine, short of the sleeper's 3 s.
        models=MODELS,
        agents_file=profiles,
        mcp_call_seconds=1.5,
        workers_enabled=True,
    ) as live:
        url = f"{live.url}/mcp"
        async with (
            httpx2.AsyncClient() as http,
            mcp.Client(streamable_http_client(url, http_client=http), mode=mode) as client,
        ):
            revision = "2025-11-25" if mode == "legacy" else "2026-07-28"
            assert client.protocol_version == revision
            page = await client.list_tools()
            assert [t.name for t in page.tools][:2] == ["analyst", "default"]
            assert page.next_cursor is None
            done = await client.call_tool("default", {"input": "hello"})
            assert done.is_error is False
            assert "hello" in done.content[0].text
            # Longer than the call waits: the task goes on, and the answer says where.
            late = await client.call_tool("sleeper", {"input": "take your time"})
            assert late.is_error is True
            assert "is still" in late.content[0].text
            task_id = late.meta["taskservice/task"]["id"]
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("nobody", {"input": "x"})
            assert unknown.value.code == -32602
            with pytest.raises(MCPError) as no_input:
                await client.call_tool("default", {"text": "x"})
            assert no_input.value.code == -32602
            with pytest.raises(MCPError) as bad_input:
                await client.call_tool("default", {"input": None})
            assert bad_input.value.code == -32602
        async with httpx.AsyncClient(base_url=live.url) as rest:
            task = (await rest.get(f"/v1/tasks/{task_id}", params={"wait": 10})).json()
            assert (task["state"], task["result"]) == ("completed", "late")
            # Refused calls made no task: the two tasks are the call that ran and the late one.
            assert len((await rest.get("/v1/tasks")).json()["tasks"]) == 2


async def test_a_key_is_needed_once_one_exists(make_live: LiveFactory, db: AsyncEngine) -> None:
    key, _ = await ApiKeyStore(db).create(tenant="mcp-tenant")
    other, _ = await ApiKeyStore(db).create(tenant="other-tenant")
    async with make_live(workers_enabled=True) as live:
        url = f"{live.url}/mcp"
        async with httpx.AsyncClient() as http:
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            anonymous = await http.post(url, json=ping)
            wrong = await http.post(url, json=ping, headers={"Authorization": "Bearer nope"})
            got = await http.get(url, headers={"Authorization": f"Bearer {key}"})
        for refused in (anonymous, wrong):
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"] == "Bearer"
            assert refused.headers["content-type"] == "application/problem+json"
        assert (got.status_code, got.headers["allow"]) == (405, "POST")
        async with fastmcp.Client(url, auth=key) as client:
            said = await client.call_tool("default", {"input": "with a key"})
        async with httpx.AsyncClient(base_url=live.url) as rest:
            headers = {"Authorization": f"Bearer {key}"}
            [task] = (await rest.get("/v1/tasks", headers=headers)).json()["tasks"]
            # Another tenant's key finds no such task.
            theirs = await rest.post(
                "/mcp",
                json=_modern("tasks/get", {"taskId": task["id"]}, tasks=True),
                headers={
                    "Authorization": f"Bearer {other}",
                    "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": "2026-07-28",
                    "Mcp-Method": "tasks/get",
                },
            )
        assert "with a key" in said.content[0].text
        assert task["input"] == "with a key"  # a task of the key's tenant
        assert theirs.json()["error"]["code"] == -32602


async def test_a_body_that_is_not_json_rpc_gets_a_json_rpc_error(make_live: LiveFactory) -> None:
    async with make_live() as live, httpx.AsyncClient(base_url=live.url) as http:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        broken = await http.post("/mcp", content=b"{", headers=headers)
        evil = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={**headers, "Host": "evil.example.com"},
        )
    assert broken.json()["error"]["code"] == -32700
    assert evil.status_code in (400, 421)  # DNS rebinding protection on loopback


# The 2026-07-28 Tasks extension, with FastMCP's client (`fastmcp[tasks]`): once
# `fastmcp_tasks` is imported, its clients declare the extension on every request.


def _painter_profiles(tmp_path: Path) -> Path:
    path = tmp_path / "painters.toml"
    path.write_text('[agents.painter]\nmodel = "painter"\ntools = ["ask_user"]\n')
    return path


async def test_a_call_made_a_task_is_polled_to_its_result(served: LiveServer) -> None:
    async with fastmcp.Client(f"{served.url}/mcp") as client:
        task = await call_tool_task(client, "researcher", {"input": "as a task"})
        async with httpx.AsyncClient(base_url=served.url) as http:
            same = (await http.get(f"/v1/tasks/{task.task_id}")).json()
        assert same["input"] == "as a task"  # the MCP task is the service's task
        said = await task.result()
        assert "as a task" in said.content[0].text
        status = await task.status()
        assert (status.status, status.poll_interval_ms) == ("completed", 500)


async def test_a_question_is_answered_through_tasks_update(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    asked: list[str] = []

    async def elicit(message: str, response_type: Any, params: Any, context: Any) -> Any:
        asked.append(message)
        return {"answer": "green"}

    models = {"painter": asks_for_a_colour()}
    async with (
        make_live(
            models=models, agents_file=_painter_profiles(tmp_path), workers_enabled=True
        ) as live,
        fastmcp.Client(f"{live.url}/mcp", elicitation_handler=elicit) as client,
    ):
        task = await call_tool_task(client, "painter", {"input": "paint the fence"})
        waiting = await task.wait(state="input_required", timeout=20)
        [(key, request)] = waiting.input_requests.items()
        assert key == "q1"  # the question's id
        assert request["params"]["message"] == "Which colour?"
        said = await task.result()  # answers through the elicitation handler
        # A plain call is a task too, answered the same way.
        again = await client.call_tool("painter", {"input": "paint the door"})
    assert said.content[0].text == "painted green"
    assert again.content[0].text == "painted green"
    assert asked == ["Which colour?", "Which colour?"]


async def test_a_task_is_cancelled_through_tasks_cancel(served: LiveServer) -> None:
    async with fastmcp.Client(f"{served.url}/mcp") as client:
        task = await call_tool_task(client, "sleeper", {"input": "never mind"})
        await task.cancel()
        await task.cancel()  # again: still fine
        status = await task.status()
        with pytest.raises(ToolError, match="cancelled"):
            await task.result()
        async with httpx.AsyncClient(base_url=served.url) as http:
            rest = (await http.get(f"/v1/tasks/{task.task_id}")).json()
    assert status.status == "cancelled"
    assert rest["state"] == "cancelled"


def _modern(method: str, params: dict[str, Any], *, tasks: bool) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"extensions": {EXTENSION: {}}} if tasks else {}
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}


async def test_task_methods_need_the_extension_and_a_task_of_the_caller(
    make_live: LiveFactory,
) -> None:
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tasks/get",
    }
    async with make_live() as live, httpx.AsyncClient(base_url=live.url) as http:
        task_id = (await http.post("/v1/tasks", json={"input": "x"})).json()["id"]
        found = await http.post(
            "/mcp", json=_modern("tasks/get", {"taskId": task_id}, tasks=True), headers=headers
        )
        undeclared = await http.post(
            "/mcp", json=_modern("tasks/get", {"taskId": task_id}, tasks=False), headers=headers
        )
        unknown = await http.post(
            "/mcp",
            json=_modern("tasks/get", {"taskId": str(uuid.uuid4())}, tasks=True),
            headers=headers,
        )
        named = await http.post(
            "/mcp",
            json=_modern("tasks/get", {"taskId": task_id}, tasks=True),
            headers={**headers, "Mcp-Name": task_id},
        )
        misnamed = await http.post(
            "/mcp",
            json=_modern("tasks/get", {"taskId": task_id}, tasks=True),
            headers={**headers, "Mcp-Name": str(uuid.uuid4())},
        )
        # A header's value is read without the spaces around it (which httpx will not
        # send: written by hand).
        body = json.dumps(_modern("tools/call", {"name": "nobody"}, tasks=False)).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", int(live.url.rsplit(":")[-1]))
        head = (
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
            f"Mcp-Method: tools/call\r\nMcp-Name:   nobody  \r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        spaced = (await reader.read()).decode()
        writer.close()
    assert named.json()["result"]["taskId"] == task_id
    assert (misnamed.status_code, misnamed.json()["error"]["code"]) == (400, -32020)
    assert "no tool 'nobody'" in spaced  # past the header check
    assert found.json()["result"]["status"] == "working"  # pending: no worker here
    assert found.json()["result"]["resultType"] == "complete"
    assert undeclared.json()["error"]["code"] == -32021
    assert unknown.json()["error"]["code"] == -32602


async def test_a_task_outlives_the_replica_that_made_it(
    database_url: str, db: AsyncEngine, tmp_path: Path
) -> None:
    """A call made a task on one replica, whose process is killed (-9) mid-run; the
    client polls the same task id on another replica and gets the result."""
    env = cli_env(
        TASKSERVICE_DATABASE_URL=database_url,
        TASKSERVICE_DEFAULT_MODEL="offline:3",
        TASKSERVICE_ALLOWED_MODELS="offline:3",
        TASKSERVICE_LEASE_SECONDS="1.5",
        TASKSERVICE_REAP_INTERVAL="0.3",
        TASKSERVICE_POLL_INTERVAL="0.5",
    )
    with serve(env, tmp_path / "a.log") as first:
        async with fastmcp.Client(f"{first.url}/mcp") as client:
            task = await call_tool_task(client, "default", {"input": "survive"})
            running = await task.wait(state="working", timeout=10)
            async with httpx.AsyncClient(base_url=first.url) as http:

                async def started() -> bool:
                    got = await http.get(f"/v1/tasks/{task.task_id}")
                    return bool(got.json()["state"] == "running")

                await wait_for(started, timeout=20)
        first.crash()
    with serve(env, tmp_path / "b.log") as second:
        # The same client's handle on the task, now driven through the other replica.
        async with fastmcp.Client(f"{second.url}/mcp") as client:
            done = await ToolTask(client, "default", task.create_result).result()
        async with httpx.AsyncClient(base_url=second.url) as http:
            rest = (await http.get(f"/v1/tasks/{task.task_id}")).json()
    assert running.status == "working"
    assert "survive" in done.content[0].text
    assert rest["attempt"] == 2  # recovered from the killed replica's lease


# 2025-11-25's core tasks, with the official SDK 1.x's client, in a venv of its own.
MCP1 = Path(tempfile.gettempdir()) / "taskservice-tests-mcp1"
MCP1_CLIENT = Path(__file__).resolve().parents[1] / "fakes" / "mcp1_client.py"


@pytest.fixture(scope="session")
def mcp1_python() -> Path:
    """A Python with the official MCP SDK 1.x (`mcp<2`), installed from the registry
    once and kept across runs."""
    python = MCP1 / "bin" / "python"
    ready = MCP1 / "ready"
    if not ready.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(MCP1)], check=True)
        install = [str(python), "-m", "pip", "install", "-q", "mcp>=1.23,<2"]
        subprocess.run(install, check=True, timeout=600)
        ready.write_text("mcp<2\n")
    return python


async def test_the_sdk_1_client_calls_tools_as_2025_tasks(
    served: LiveServer, mcp1_python: Path
) -> None:
    run = await asyncio.create_subprocess_exec(
        str(mcp1_python),
        str(MCP1_CLIENT),
        f"{served.url}/mcp",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(run.communicate(), timeout=90)
    assert run.returncode == 0, err.decode()[-3000:]
    seen = json.loads(out)
    async with httpx.AsyncClient(base_url=served.url) as http:
        task_id = seen["created"]["taskId"]
        rest = (await http.get(f"/v1/tasks/{task_id}")).json()
    assert seen["protocol"] == "2025-11-25"
    assert seen["tasks_capability"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    assert set(seen["task_support"].values()) == {"optional"}
    assert seen["created"]["status"] == "working"
    assert (seen["created"]["ttl"], seen["created"]["pollInterval"]) == (None, 500)
    assert seen["statuses"][-1] == "completed"
    assert "a 2025 task" in seen["result"]["content"][0]["text"]
    assert seen["result"]["_meta"] == {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
    assert rest["state"] == "completed"  # the MCP task is the service's task
    assert rest["metadata"]["mcp"] == {"tool": "default", "ttl_ms": 60000}  # for retention
    assert seen["cancelled"] == "cancelled"
    assert seen["cancel_again"] == -32602
    assert task_id in seen["listed"]
    assert seen["unknown"] == -32602


async def reports(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Reports progress once (report_progress), then answers."""
    if len(messages) == 1:
        call = ToolCallPart("report_progress", {"percent": 50, "note": "halfway"})
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart("all done")])


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_plain_call_reports_the_agent_s_progress(
    make_live: LiveFactory, tmp_path: Path, mode: str
) -> None:
    path = tmp_path / "reporter.toml"
    path.write_text('[agents.reporter]\nmodel = "reports"\ntools = ["report_progress"]\n')
    heard: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append((done, total, message))

    models = {"reports": FunctionModel(reports)}
    async with (
        make_live(models=models, agents_file=path, workers_enabled=True) as live,
        httpx2.AsyncClient() as http,
        mcp.Client(streamable_http_client(f"{live.url}/mcp", http_client=http), mode=mode) as c,
    ):
        said = await c.call_tool("reporter", {"input": "go"}, progress_callback=progress)
        quiet = await c.call_tool("reporter", {"input": "go"})  # no token: no notifications
    assert said.content[0].text == quiet.content[0].text == "all done"
    assert heard == [(50.0, 100.0, "halfway")]
