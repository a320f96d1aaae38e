"""The run's conversation as the ledger sees it: which messages make complete
turns, which tool calls are still open, how a follow-up enters the conversation,
and the previews the `message` events show."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from taskservice.domain.content import as_text
from taskservice.domain.models import Followup

_PREVIEW_CHARS = 500


def complete_turns(new: list[ModelMessage]) -> list[ModelMessage]:
    """`new` without its trailing requests, and without a trailing turn whose
    response calls no tool."""
    end = len(new)
    while end and not isinstance(new[end - 1], ModelResponse):
        end -= 1
    last = new[end - 1] if end else None
    if isinstance(last, ModelResponse) and not any(
        isinstance(part, ToolCallPart) for part in last.parts
    ):
        end -= 1
        while end and not isinstance(new[end - 1], ModelResponse):
            end -= 1
    return new[:end]


def followup_request(followup: Followup) -> ModelRequest:
    """A follow-up as the run reads it: a user message, marked with its number (and
    its sender's key) in the message's metadata, which the model is not shown."""
    return ModelRequest(
        parts=[UserPromptPart(as_text(followup.input))],
        metadata={"followup": followup.seq, "key": followup.key},
    )


def read_in(messages: list[ModelMessage]) -> int:
    """The highest follow-up number among `messages` (0: none)."""
    return max(
        (
            int(message.metadata["followup"])
            for message in messages
            if isinstance(message, ModelRequest)
            and message.metadata
            and "followup" in message.metadata
        ),
        default=0,
    )


def preview(value: Any) -> Any:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "…"


def summary(message: ModelMessage) -> list[dict[str, Any]]:
    parts = []
    for part in message.parts:
        entry: dict[str, Any] = {"kind": part.part_kind}
        if isinstance(part, ToolCallPart | ToolReturnPart | RetryPromptPart):
            entry["tool"] = part.tool_name
        content = getattr(part, "content", None)
        if content is not None:
            entry["content"] = preview(content)
        parts.append(entry)
    return parts


def open_tool_calls(history: list[ModelMessage]) -> list[ToolCallPart]:
    """Calls in the last model response that no later message answers."""
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if isinstance(message, ModelResponse):
            answered = {
                part.tool_call_id
                for later in history[index + 1 :]
                for part in later.parts
                if isinstance(part, ToolReturnPart | RetryPromptPart)
            }
            return [
                part
                for part in message.parts
                if isinstance(part, ToolCallPart) and part.tool_call_id not in answered
            ]
    return []
