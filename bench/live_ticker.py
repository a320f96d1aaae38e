"""A plugin model for `bench/live.py`: it streams tokens that carry the time they were
written (`<unix ns> `), so a client can tell each token's model-to-client latency.

The input says how many tokens and over how many seconds: `tokens=100 seconds=5`.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def _plan(messages: list[ModelMessage]) -> tuple[int, float]:
    prompt = next(
        part.content
        for message in messages
        for part in getattr(message, "parts", ())
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    )
    tokens = re.search(r"tokens=(\d+)", prompt)
    seconds = re.search(r"seconds=([\d.]+)", prompt)
    return (int(tokens.group(1)) if tokens else 100, float(seconds.group(1)) if seconds else 5.0)


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    tokens, seconds = _plan(messages)
    for _ in range(tokens):
        await asyncio.sleep(seconds / tokens)
        yield f"{time.time_ns()} "


async def _whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    tokens, seconds = _plan(messages)
    await asyncio.sleep(seconds)
    return ModelResponse(parts=[TextPart(" ".join(str(time.time_ns()) for _ in range(tokens)))])


MODELS = {"ticker": FunctionModel(_whole, stream_function=_stream, model_name="ticker")}
