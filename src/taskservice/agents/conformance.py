"""An agent for the A2A conformance kits (the TCK), for testing only: a plugin,
never on unless configured.

The kits signal what the agent under test should do in the id of the message that
starts a task (the 1.0-dev kit's `scenarios/*.feature`, and its
`docs/SUT_REQUIREMENTS.md`). The `conformance` model reads that id (the task's
`metadata.a2a.messageId`) and does it:

```
messageId starts with        the task
tck-complete-task            completes: "Hello from TCK"
tck-artifact-text            completes: "Generated text content"
tck-input-required           asks a question (ask_user): input-required; answered, completes
tck-reject-task              fails: "rejected"
tck-stream-001, -003,        works a moment, then completes with the scenario's text
  -ordering-001, -artifact-text
test-resubscribe-message-id  works 2 x TCK_STREAMING_TIMEOUT (default 2 s), then completes
anything else                works TASKSERVICE_CONFORMANCE_SECONDS (default 2 s), then
                             answers "Done: <the last user message>"
```

So tests that must see a task working (to cancel it, subscribe to it, or send it a
follow-up) find it working. What it cannot do is listed in docs/conformance.md (A2A,
conformance): file artifacts, a message instead of a task, chunked artifacts.

    TASKSERVICE_PLUGINS=taskservice.agents.conformance TASKSERVICE_DEFAULT_MODEL=conformance \\
    TASKSERVICE_DEFAULT_TOOLS=ask_user taskservice serve
"""

from __future__ import annotations

import asyncio
import os

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from taskservice.agents.tools import ASK_USER, CURRENT_RUN

_MOMENT = 0.5  # seconds a streaming scenario works before it completes
# Texts of the scenarios that complete, by messageId prefix (longest first).
_TEXTS = {
    "tck-complete-task": "Hello from TCK",
    "tck-artifact-text": "Generated text content",
    "tck-stream-artifact-text": "Streamed text content",
    "tck-stream-ordering-001": "Ordered output",
    "tck-stream-001": "Stream hello from TCK",
    "tck-stream-003": "Stream task lifecycle",
}
_STREAMING = ("tck-stream-",)
QUESTION = "What input should the TCK task continue with?"


class Rejected(Exception):
    """The scenario asks the agent to reject the task."""


def _message_id() -> str:
    run = CURRENT_RUN.get()
    a2a = run.task.metadata.get("a2a") if run is not None else None
    return str(a2a.get("messageId", "")) if isinstance(a2a, dict) else ""


def _last_prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content
    return ""


def _answered(messages: list[ModelMessage]) -> str | None:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.tool_name == ASK_USER:
                return str(part.content)
    return None


async def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    message_id = _message_id()
    if message_id.startswith("tck-reject-task"):
        raise Rejected("rejected")
    if message_id.startswith("tck-input-required"):
        answer = _answered(messages)
        if answer is None:
            return ModelResponse(parts=[ToolCallPart(ASK_USER, {"question": QUESTION})])
        return ModelResponse(parts=[TextPart(f"Continued with {answer}")])
    for prefix, text in _TEXTS.items():
        if message_id.startswith(prefix):
            if message_id.startswith(_STREAMING):
                await asyncio.sleep(_MOMENT)
            return ModelResponse(parts=[TextPart(text)])
    if message_id.startswith("test-resubscribe-message-id"):
        await asyncio.sleep(2 * float(os.environ.get("TCK_STREAMING_TIMEOUT", "2")) + _MOMENT)
        return ModelResponse(parts=[TextPart("Resubscribe task done")])
    await asyncio.sleep(float(os.environ.get("TASKSERVICE_CONFORMANCE_SECONDS", "2")))
    return ModelResponse(parts=[TextPart(f"Done: {_last_prompt(messages)}")])


MODELS: dict[str, Model] = {"conformance": FunctionModel(_answer, model_name="conformance")}
