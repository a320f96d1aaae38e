"""Message routing: which task does a free-form message belong to?

```
"@<task id> text"                      → that task            (explicit, 1.0)
one task in the context waits for input → that task            (single, 1.0)
several wait                            → the router model picks one, or a new task (model)
none waits                              → a new task in the context (new, 1.0)
```

Routing to a waiting task answers its question; a new task takes the text as input.
The router model is a pydantic-ai agent with a structured answer; by default it is
the offline router, which picks the task whose question shares the most words with
the message (deterministic, no API key).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from taskservice.errors import InvalidRequest
from taskservice.ids import parse_uuid
from taskservice.models import Task
from taskservice.service import TaskService
from taskservice.settings import OFFLINE_MODEL

Decision = Literal["explicit", "single", "model", "new"]
_EXPLICIT = re.compile(r"^@(\S+)\s*(.*)$", re.DOTALL)
_WORD = re.compile(r"[a-z0-9]+")
ROUTER_PROMPT = (
    "You route a user's message to the task waiting for it. Each candidate task is "
    "waiting for an answer to its question. Pick the task the message answers, with "
    "your confidence from 0 to 1, or no task if the message starts something new."
)


class RouteChoice(BaseModel):
    task_id: str | None = Field(description="The chosen task's id, or null for a new task.")
    confidence: float = Field(ge=0, le=1)
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Routed:
    task: Task
    decision: Decision
    confidence: float
    reason: str


def _question(task: Task) -> str:
    questions = (task.input_request or {}).get("questions", [])
    return str(questions[0].get("question") or "") if questions else ""


def _candidates_prompt(text: str, waiting: list[Task]) -> str:
    lines = [f"Message: {text}", "", "Waiting tasks:"]
    lines += [f"- {task.id}: asked {_question(task)!r} (task: {task.input!r})" for task in waiting]
    return "\n".join(lines)


async def _offline_route(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt = next(
        part.content
        for part in messages[-1].parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    )
    message = prompt.split("\n", 1)[0].removeprefix("Message: ")
    words = set(_WORD.findall(message.lower()))
    best: tuple[float, str | None] = (0.0, None)
    for line in prompt.splitlines():
        if line.startswith("- "):
            task_id, _, rest = line[2:].partition(": asked ")
            asked = set(_WORD.findall(rest.split(" (task: ", 1)[0].lower()))
            overlap = len(words & asked) / len(asked) if asked else 0.0
            if overlap > best[0]:
                best = (overlap, task_id)
    choice = {"task_id": best[1], "confidence": round(best[0] if best[1] else 1.0, 3)}
    choice["reason"] = (
        "most words shared with its question" if best[1] else "no question shares a word"
    )
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, choice)])


class MessageRouter:
    def __init__(self, service: TaskService, *, model: Model | str | None = None) -> None:
        self.service = service
        chosen: Model | str = model or FunctionModel(_offline_route, model_name=OFFLINE_MODEL)
        self.agent: Agent[None, RouteChoice] = Agent(
            chosen, output_type=RouteChoice, instructions=ROUTER_PROMPT
        )

    async def route(self, *, tenant: str, text: str, context_id: str | None) -> Routed:
        explicit = _EXPLICIT.match(text)
        if explicit:
            task_id, body = explicit.groups()
            if not body.strip():
                raise InvalidRequest("nothing to send after the task id")
            task = await self.service.provide_input(tenant=tenant, task_id=task_id, answer=body)
            return Routed(task, "explicit", 1.0, "the message names the task")

        waiting = [
            task
            for task in await self.service.waiting_for_input(tenant=tenant, context_id=context_id)
            if len((task.input_request or {}).get("questions", [])) == 1
        ]
        if len(waiting) == 1:
            task = await self.service.provide_input(
                tenant=tenant, task_id=str(waiting[0].id), answer=text
            )
            return Routed(task, "single", 1.0, "the only task waiting for input in the context")
        if waiting:
            result = await self.agent.run(_candidates_prompt(text, waiting))
            choice = result.output
            chosen = parse_uuid(choice.task_id) if choice.task_id else None
            if chosen is not None and chosen in {task.id for task in waiting}:
                task = await self.service.provide_input(
                    tenant=tenant, task_id=str(chosen), answer=text
                )
                return Routed(task, "model", choice.confidence, choice.reason)
            created, _ = await self.service.submit(tenant=tenant, input=text, context_id=context_id)
            return Routed(created, "model", choice.confidence, choice.reason or "a new request")
        created, _ = await self.service.submit(tenant=tenant, input=text, context_id=context_id)
        return Routed(created, "new", 1.0, "no task in the context waits for input")
