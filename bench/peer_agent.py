"""The echo agent both servers of `bench/peers.py` run: a pydantic-ai `FunctionModel`
that answers with the prompt, at once or after BENCH_MODEL_DELAY_MS (a model that
mostly waits on the network).

- taskservice loads it as a plugin (`TASKSERVICE_PLUGINS=peer_agent`): model `echo`;
- fasta2a serves `app` (pydantic-ai's `agent_to_a2a`, in-memory storage and broker),
  in the bench's own environment (`bench/.peers-venv`, made by `bench/peers.py`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel

DELAY = float(os.environ.get("BENCH_MODEL_DELAY_MS", "0")) / 1000


def _prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


async def echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if DELAY:
        await asyncio.sleep(DELAY)
    return ModelResponse(parts=[TextPart(_prompt(messages))])


async def echo_stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    if DELAY:
        await asyncio.sleep(DELAY)
    yield _prompt(messages)


MODELS = {"echo": FunctionModel(echo, stream_function=echo_stream)}


def _fasta2a_app() -> Any:
    from fasta2a.pydantic_ai import agent_to_a2a  # the bench's own environment only
    from pydantic_ai import Agent

    return agent_to_a2a(Agent(MODELS["echo"], name="echo"))


def __getattr__(name: str) -> Any:  # `uvicorn peer_agent:app`, built on first use
    if name == "app":
        return _fasta2a_app()
    raise AttributeError(name)
