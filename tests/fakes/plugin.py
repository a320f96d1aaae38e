"""A plugin for worker processes in acceptance tests (TASKSERVICE_PLUGINS).

`count` records each execution in a file; `hang` marks that it started, then never
returns; the `scripted` model calls count, then hang, then answers with what it was
told about both. `refund` records each execution in a file too; the `refunder` model
calls it once (a profile that makes it wait for approval), then answers with what it
was told.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

STATE = Path(os.environ.get("TASKSERVICE_TEST_PLUGIN_DIR", "."))


async def count(ctx: RunContext[Any], step: int) -> str:
    """Counts its own executions."""
    with (STATE / "count.log").open("a") as log:
        log.write(f"{os.getpid()}\n")
    return f"counted step {step}"


async def hang(ctx: RunContext[Any]) -> str:
    """Never returns."""
    (STATE / "hanging").write_text(str(os.getpid()))
    await asyncio.sleep(3600)
    return "unreachable"


async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    if turn == 0:
        return ModelResponse(parts=[ToolCallPart("count", {"step": 1}, "c1")])
    if turn == 1:
        return ModelResponse(parts=[ToolCallPart("hang", {}, "c2")])
    told = {
        part.tool_call_id: str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart | RetryPromptPart)
    }
    return ModelResponse(parts=[TextPart(f"c1={told.get('c1')} | c2={told.get('c2')}")])


async def refund(ctx: RunContext[Any], order: str, amount: int) -> str:
    """Refunds `amount` on `order`: records each execution."""
    with (STATE / "refunds.log").open("a") as log:
        log.write(f"{os.getpid()} {order} {amount}\n")
    return f"refunded {amount} on {order}"


async def refunding(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-1", "amount": 5}, "r1")])
    told = [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart | RetryPromptPart)
    ]
    return ModelResponse(parts=[TextPart(" | ".join(told))])


TOOLS = {"count": count, "hang": hang, "refund": refund}
MODELS = {"scripted": FunctionModel(play), "refunder": FunctionModel(refunding)}
