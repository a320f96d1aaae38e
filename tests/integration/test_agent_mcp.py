"""An agent profile's MCP servers: a small FastMCP server on loopback whose tools the
sub-agent calls, each call in the task's ledger, the URL under the webhooks' rules."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fastmcp
import pytest
import uvicorn
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from taskservice.agents.profiles import ProfileError
from tests.conftest import ClientFactory, wait_for
from tests.fakes.loopback import free_port

offered: list[list[str]] = []


def calls_add(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    offered.append(sorted(tool.name for tool in info.function_tools))
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 40}, tool_call_id="m1")])
    return ModelResponse(parts=[TextPart(f"sum {returns[-1].content}")])


@contextlib.asynccontextmanager
async def tool_server() -> AsyncIterator[str]:
    """A FastMCP server on 127.0.0.1 with two tools, `add` and `secret`."""
    server = fastmcp.FastMCP("calc")

    @server.tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    @server.tool
    def secret() -> str:
        """Not for this agent."""
        return "hidden"

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(server.http_app(), host="127.0.0.1", port=port, log_level="warning")
    running = uvicorn.Server(config)
    running.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    serving = asyncio.create_task(running.serve())
    try:
        await wait_for(lambda: running.started or serving.done(), timeout=20)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        running.should_exit = True
        await asyncio.wait_for(serving, timeout=20)


def calculator(
    make_client: ClientFactory, tmp_path: Path, url: str, extra: str = "", **settings: Any
) -> Any:
    """The service with a `calculator` profile whose MCP server is at `url`."""
    return make_client(
        models={"calls_add": FunctionModel(calls_add)},
        agents_file=profiles(tmp_path, url, extra),
        workers_enabled=True,
        webhook_allow_http=True,
        **settings,
    )


def profiles(tmp_path: Path, url: str, extra: str = "") -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(
        f"""
[agents.calculator]
model = "calls_add"
tools = []
{extra}

[[agents.calculator.mcp_servers]]
url = "{url}"
tools = ["add"]
"""
    )
    return path


async def test_a_profile_s_mcp_server_gives_its_agent_tools_whose_calls_are_ledgered(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    offered.clear()
    async with (
        tool_server() as url,
        calculator(make_client, tmp_path, url, webhook_allow_targets=["127.0.0.1/32"]) as client,
    ):
        task = (
            await client.post("/v1/tasks", json={"input": "2+40", "agent": "calculator"})
        ).json()

        async def done() -> dict[str, Any] | None:
            got = (await client.get(f"/v1/tasks/{task['id']}")).json()
            return got if got["state"] in ("completed", "failed") else None

        finished = await wait_for(done, timeout=30)
        calls = (await client.get(f"/v1/tasks/{task['id']}/calls")).json()["calls"]
    assert finished["state"] == "completed", finished["error"]
    assert finished["result"] == "sum 42"
    assert offered[0] == ["add"]  # the allow-list: `secret` is not offered
    assert [(c["tool_call_id"], c["name"], c["status"]) for c in calls] == [
        ("m1", "add", "completed")
    ]
    assert (calls[0]["arguments"], calls[0]["result"]) == ({"a": 2, "b": 40}, 42)


async def test_an_mcp_server_on_a_forbidden_address_stops_the_start_naming_it(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    """Checked as written when the profiles load: a loopback URL not allow-listed
    would be refused at every run, so the start stops, naming the profile."""
    with pytest.raises(ProfileError, match=r"'calculator'.*loopback"):
        async with calculator(make_client, tmp_path, "http://127.0.0.1:9/mcp"):
            pass
    with pytest.raises(ProfileError, match=r"'calculator'.*loopback"):
        async with calculator(make_client, tmp_path, "http://localhost:9/mcp"):
            pass


async def test_a_run_whose_mcp_server_refuses_connections_fails_saying_so(
    make_client: ClientFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Allowed, but nothing listens there: the task fails with a code of its own
    and the server's URL, and no traceback is logged."""
    url = f"http://127.0.0.1:{free_port()}/mcp"
    async with calculator(
        make_client, tmp_path, url, webhook_allow_targets=["127.0.0.1/32"], default_max_attempts=1
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "agent": "calculator"})).json()

        async def failed() -> dict[str, Any] | None:
            got = (await client.get(f"/v1/tasks/{task['id']}")).json()
            return got if got["state"] == "failed" else None

        finished = await wait_for(failed, timeout=30)
    assert finished["error"]["type"] == "mcp_server_unavailable", finished["error"]
    assert url in finished["error"]["message"]
    assert not [r for r in caplog.records if r.exc_info], caplog.text


@pytest.mark.parametrize(
    ("servers", "why"),
    [
        ('mcp_servers = "x"', "must be a list"),
        ('[[agents.a.mcp_servers]]\nurl = "ftp://x/mcp"', "is not http"),
        ('[[agents.a.mcp_servers]]\nurl = "https://u:p@x/mcp"', "token_env"),
        ('[[agents.a.mcp_servers]]\nurl = "https://x/mcp"\nport = 1', "a table of url"),
        (
            '[[agents.a.mcp_servers]]\nurl = "https://x/mcp"\ntoken_env = "TS_TEST_NO_SUCH_VAR"',
            "TS_TEST_NO_SUCH_VAR",
        ),
    ],
)
async def test_a_bad_mcp_server_entry_stops_the_start(
    make_client: ClientFactory, tmp_path: Path, servers: str, why: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[agents.a]\n" + servers + "\n")
    with pytest.raises(ProfileError, match=why):
        async with make_client(agents_file=path):
            pass


async def test_an_mcp_server_s_tool_named_by_a_pattern_waits_for_approval(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    """`approve` matches an MCP server's tools by name or pattern: the call is not
    made until approved, with the schema the server declared."""
    async with (
        tool_server() as url,
        calculator(
            make_client,
            tmp_path,
            url,
            extra='approve = ["ad*"]',
            webhook_allow_targets=["127.0.0.1/32"],
        ) as client,
    ):
        task = (
            await client.post("/v1/tasks", json={"input": "2+40", "agent": "calculator"})
        ).json()

        async def waiting() -> dict[str, Any] | None:
            got = (await client.get(f"/v1/tasks/{task['id']}")).json()
            return got if got["state"] != "pending" and got["state"] != "running" else None

        asked = await wait_for(waiting, timeout=30)
        assert asked["state"] == "input_required", asked
        [call] = asked["input_request"]["approvals"]
        assert (call["tool"], call["arguments"]) == ("add", {"a": 2, "b": 40})
        assert call["schema"]["properties"]["b"]["type"] == "integer"
        edited = {"m1": {"approve": True, "arguments": {"a": 2, "b": 2}}}
        decided = await client.post(f"/v1/tasks/{task['id']}/input", json={"approvals": edited})
        assert decided.status_code == 200, decided.text
        finished = await wait_for(waiting, timeout=30)
        calls = (await client.get(f"/v1/tasks/{task['id']}/calls")).json()["calls"]
    assert finished["state"] == "completed", finished
    assert finished["result"] == "sum 4"  # made once, with the edited arguments
    # The row keeps what the model asked; its approval, what the call was made with.
    [made] = calls
    assert (made["name"], made["status"], made["arguments"]) == (
        "add",
        "completed",
        {"a": 2, "b": 40},
    )
    assert (made["approval"]["arguments"], made["approval"]["edited"]) == ({"a": 2, "b": 2}, True)
