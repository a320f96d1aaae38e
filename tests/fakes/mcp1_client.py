"""A client of the official MCP SDK 1.x (`mcp<2`, revision 2025-11-25), run in a venv of
its own (the 1.x and 2.x SDKs cannot share one): it calls tools as tasks
(`call_tool_as_task`) and prints what it saw as one JSON object.

    python mcp1_client.py http://127.0.0.1:PORT/mcp
"""

import asyncio
import json
import sys
from typing import Any

import httpx
import mcp.types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import McpError


async def main(url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    http = create_mcp_http_client(timeout=httpx.Timeout(30, read=90))
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        seen["protocol"] = init.protocolVersion
        seen["tasks_capability"] = init.capabilities.model_dump(mode="json")["tasks"]
        tools = await session.list_tools()
        seen["task_support"] = {t.name: t.execution.taskSupport for t in tools.tools}
        tasks = session.experimental

        created = await tasks.call_tool_as_task("default", {"input": "a 2025 task"}, ttl=60000)
        seen["created"] = created.task.model_dump(mode="json")
        seen["statuses"] = [s.status async for s in tasks.poll_task(created.task.taskId)]
        result = await tasks.get_task_result(created.task.taskId, types.CallToolResult)
        seen["result"] = result.model_dump(mode="json", by_alias=True)

        slow = await tasks.call_tool_as_task("sleeper", {"input": "stop me"})
        cancelled = await tasks.cancel_task(slow.task.taskId)
        seen["cancelled"] = cancelled.status
        try:
            await tasks.cancel_task(slow.task.taskId)
        except McpError as exc:
            seen["cancel_again"] = exc.error.code
        listed = await tasks.list_tasks()
        seen["listed"] = [t.taskId for t in listed.tasks]
        try:
            await tasks.get_task("00000000-0000-0000-0000-000000000000")
        except McpError as exc:
            seen["unknown"] = exc.error.code
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
