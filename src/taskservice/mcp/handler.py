"""What an MCP client asks of the task service, independent of the transport: the
tools (a page of agent profiles) and a plain call (submit the task, wait for it).

A call is an ordinary task of the caller's tenant, on the tool's profile: it shows on
REST, SSE, webhooks and A2A like any other, and outlives the call that made it."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from taskservice.errors import InvalidRequest
from taskservice.mcp import tools
from taskservice.service import TaskService
from taskservice.states import TaskState

PAGE_SIZE = 100  # tools per tools/list page
_ARGUMENTS = {"input", "context_id"}


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"tools:{offset}".encode()).decode()


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        kind, _, offset = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
        if kind == "tools" and offset.isdigit():
            return int(offset)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise InvalidRequest("the cursor is not one this server gave", field="cursor")


@dataclass
class MCPHandler:
    service: TaskService
    tenant: str

    def list_tools(self, cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """A page of tools, one per agent profile (by name), and the cursor of the
        next page, if there is one."""
        start = _offset(cursor)
        profiles = sorted(self.service.catalog.profiles.values(), key=lambda p: p.name)
        page = profiles[start : start + PAGE_SIZE]
        more = start + PAGE_SIZE < len(profiles)
        return [tools.tool(p) for p in page], _cursor(start + PAGE_SIZE) if more else None

    async def call(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """Run the tool `name`'s agent on the arguments as a task and answer with its
        result; a task still unfinished when the wait is over goes on, and the answer
        says so (`tools.unfinished`)."""
        if self.service.catalog.profile(name) is None:
            raise InvalidRequest(f"no tool {name!r}; tools/list lists them", field="name")
        arguments = arguments or {}
        unknown = sorted(set(arguments) - _ARGUMENTS)
        if unknown:
            raise InvalidRequest(
                f"unknown arguments {unknown}; the tool takes `input` and `context_id`",
                field="arguments",
            )
        if "input" not in arguments:
            raise InvalidRequest("`input` is required: the task for the agent", field="input")
        context_id = arguments.get("context_id")
        if context_id is not None and not isinstance(context_id, str):
            raise InvalidRequest("`context_id` must be a string", field="context_id")
        task, _ = await self.service.submit(
            tenant=self.tenant,
            input=arguments["input"],
            agent=name,
            context_id=context_id,
            metadata={"mcp": {"tool": name}},
        )
        settings = self.service.settings
        waited = min(settings.mcp_call_seconds, settings.max_wait_seconds)
        task = await self.service.settle(task, waited)
        if task.state.is_terminal:
            return tools.call_result(task)
        assert task.state in (TaskState.PENDING, TaskState.RUNNING, TaskState.INPUT_REQUIRED)
        return tools.unfinished(task, waited)
