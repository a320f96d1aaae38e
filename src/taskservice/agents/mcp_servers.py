"""MCP servers an agent profile lists: their tools, for its sub-agent, through
pydantic-ai's own MCP toolset (FastMCP's client underneath).

    [[agents.researcher.mcp_servers]]
    url = "https://tools.example.com/mcp"   # streamable HTTP
    token_env = "TOOLS_TOKEN"               # optional: a bearer credential, from the environment
    tools = ["search", "fetch"]             # optional: the tools the agent gets (default: all)

Each call goes into the task's ledger like a call of a built-in tool (`tools.recorded`):
a call in progress when its worker died is failed when the task resumes, never
repeated behind the model's back. A server's URL passes the webhooks' rules
(`webhooks.targets`: https unless `WEBHOOK_ALLOW_HTTP`, no private, loopback,
link-local or metadata address unless `WEBHOOK_ALLOW_TARGETS` admits it), checked
when a profile is loaded and resolved again each time a run connects.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import urlsplit

from pydantic_ai import RunContext
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from taskservice.agents.tools import RunHooks, recorded
from taskservice.settings import Settings
from taskservice.webhooks.targets import AllowList, UnsafeTarget, resolve

_KEYS = {"url", "token_env", "tools"}


class McpServerError(ValueError):
    """A profile's MCP server is not usable as written."""


@dataclass(frozen=True, slots=True)
class McpServer:
    url: str
    token_env: str | None = None
    tools: tuple[str, ...] | None = None  # None: every tool the server lists


def parse_servers(profile: str, raw: Any) -> tuple[McpServer, ...]:
    """The `mcp_servers` of a profile, checked as far as can be without the network."""
    if not isinstance(raw, list):
        raise McpServerError(f"profile {profile!r}: mcp_servers must be a list of tables")
    servers = []
    for entry in raw:
        if not isinstance(entry, Mapping) or "url" not in entry or set(entry) - _KEYS:
            raise McpServerError(
                f"profile {profile!r}: each MCP server is a table of url, token_env, tools"
            )
        url = str(entry["url"])
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise McpServerError(f"profile {profile!r}: MCP server URL {url!r} is not http(s)")
        if parts.username or parts.password:
            raise McpServerError(f"profile {profile!r}: put credentials in token_env, not {url!r}")
        tools = entry.get("tools")
        if tools is not None and not (
            isinstance(tools, list) and all(isinstance(t, str) for t in tools)
        ):
            raise McpServerError(f"profile {profile!r}: tools must be a list of tool names")
        token_env = entry.get("token_env")
        if token_env is not None and not os.environ.get(str(token_env)):
            raise McpServerError(f"profile {profile!r}: ${token_env} (token_env) is not set")
        servers.append(
            McpServer(
                url=url,
                token_env=str(token_env) if token_env is not None else None,
                tools=tuple(tools) if tools is not None else None,
            )
        )
    return tuple(servers)


@dataclass
class Ledgered(WrapperToolset[RunHooks]):
    """An MCP server's toolset: its URL checked before each connection, each call
    recorded in the ledger."""

    url: str
    settings: Settings = field(repr=False)

    async def __aenter__(self) -> Self:
        try:
            await resolve(
                self.url,
                allow=AllowList.parse(self.settings.webhook_allow_targets),
                allow_http=self.settings.webhook_allow_http,
            )
        except UnsafeTarget as exc:
            raise McpServerError(f"MCP server {self.url} refused: {exc}") from exc
        try:
            await self.wrapped.__aenter__()
        except Exception as exc:  # any failure to connect: the run fails, saying so
            raise McpServerError(f"MCP server {self.url} cannot be reached: {exc}") from exc
        return self

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[RunHooks],
        tool: ToolsetTool[RunHooks],
    ) -> Any:
        return await recorded(
            ctx, name, tool_args, self.wrapped.call_tool(name, tool_args, ctx, tool)
        )


def toolset(server: McpServer, settings: Settings) -> AbstractToolset[RunHooks]:
    """The tools of `server` for an agent (only those its `tools` name). pydantic-ai's
    MCP client (FastMCP's underneath, a second or more to import) is loaded here, by
    the first run of a profile with MCP servers, not by every process's start."""
    from pydantic_ai.mcp import MCPToolset

    headers = None
    if server.token_env is not None:  # set: `parse_servers` checked it
        headers = {"Authorization": f"Bearer {os.environ[server.token_env]}"}
    tools: AbstractToolset[RunHooks] = MCPToolset(
        server.url, headers=headers, tool_error_behavior="failed"
    )
    if server.tools is not None:
        allowed = frozenset(server.tools)
        tools = tools.filtered(lambda ctx, definition: definition.name in allowed)
    return Ledgered(tools, url=server.url, settings=settings)
