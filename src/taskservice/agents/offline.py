"""The built-in offline model: a deterministic answer with no LLM and no key, so the
service works out of the box (`offline`); `offline:<seconds>` answers after a delay,
streaming its words across it (for demos, load tests and failure drills)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from taskservice.settings import OFFLINE_MODEL

_OFFLINE_ECHO_CHARS = 200


def _answer_offline(messages: list[ModelMessage]) -> ModelResponse:
    prompt = ""
    for message in reversed(messages):
        for part in getattr(message, "parts", []):
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                prompt = part.content
                break
        if prompt:
            break
    shown = prompt[:_OFFLINE_ECHO_CHARS] + ("…" if len(prompt) > _OFFLINE_ECHO_CHARS else "")
    text = (
        f"[offline model] Task received ({len(prompt)} characters): {shown!r}. "
        "This deterministic answer comes from the built-in offline model; set "
        "TASKSERVICE_DEFAULT_MODEL and a provider API key for real answers."
    )
    return ModelResponse(parts=[TextPart(text)], model_name=OFFLINE_MODEL)


def offline_model(delay: float = 0.0) -> Model:
    """The deterministic offline model; `offline:<seconds>` answers after a delay
    (for demos, load tests and failure drills), and streams it: its words spread
    over the delay, so live output can be watched."""

    # async on purpose: pydantic-ai runs a sync model function in a worker thread.
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if delay:
            await asyncio.sleep(delay)
        return _answer_offline(messages)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        text = _answer_offline(messages).parts[0]
        assert isinstance(text, TextPart)
        words = text.content.split(" ")
        for index, word in enumerate(words):
            await asyncio.sleep(delay / len(words))
            yield word if index == 0 else " " + word

    if not delay:  # an instant answer: nothing to watch, and streaming costs more
        return FunctionModel(answer, model_name=OFFLINE_MODEL)
    return FunctionModel(answer, stream_function=stream, model_name=f"{OFFLINE_MODEL}:{delay:g}")


def offline_delay(name: str) -> float | None:
    """The delay of an offline model name, or None when it is not one."""
    if name == OFFLINE_MODEL:
        return 0.0
    prefix, _, seconds = name.partition(":")
    if prefix != OFFLINE_MODEL:
        return None
    try:
        delay = float(seconds)
    except ValueError:
        return None
    return delay if 0 <= delay <= 3600 else None
