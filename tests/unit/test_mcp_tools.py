"""MCP's tools/list pages: every profile once, in name order, 100 a page."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from taskservice.agents.profiles import AgentProfile
from taskservice.domain.errors import InvalidRequest
from taskservice.mcp.handler import PAGE_SIZE, MCPHandler


def handler(count: int) -> MCPHandler:
    profiles = {
        f"p{i:03d}": AgentProfile(name=f"p{i:03d}", system_prompt="", model="offline")
        for i in range(count)
    }
    service: Any = SimpleNamespace(profiles=lambda: [profiles[name] for name in sorted(profiles)])
    unused: Any = None  # listing tools asks nothing of the inbox or the settings
    return MCPHandler(service, inbox=unused, settings=unused, tenant="tenant")


def test_the_tools_come_a_page_at_a_time_each_once() -> None:
    tools = handler(2 * PAGE_SIZE + 1)
    names: list[str] = []
    cursor = None
    pages = 0
    while True:
        page, cursor = tools.list_tools(cursor)
        names += [t["name"] for t in page]
        pages += 1
        if cursor is None:
            break
    assert pages == 3
    assert names == sorted(names) == [f"p{i:03d}" for i in range(2 * PAGE_SIZE + 1)]
    assert tools.list_tools(None)[1] is not None
    assert handler(PAGE_SIZE).list_tools(None)[1] is None  # exactly one page: no cursor


@pytest.mark.parametrize("cursor", ["not base64!", "eA==", "dG9vbHM6eA=="])
def test_a_cursor_this_server_did_not_give_is_refused(cursor: str) -> None:
    with pytest.raises(InvalidRequest, match="cursor"):
        handler(3).list_tools(cursor)
