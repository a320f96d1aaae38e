"""Message routing: which task does a free-form message belong to?

```
"@<task id> text"                      → that task            (explicit, 1.0)
one task in the context it can reach    → that task            (single, 1.0)
several                                 → the router model picks one, or a new task (model)
none                                    → a new task in the context (new, 1.0)
```

A message reaches a task that waits for the answer to one question (it answers
it) or for the decision on one tool call (`approve`, `deny: why`: it decides), or,
within a context, a task that is pending or running (a follow-up its run
reads at its next model request: `inbox.TaskInbox`). Without a context only
waiting tasks count: a tenant's unrelated running tasks do not catch free text.
A new task takes the text as input.
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

from taskservice.domain.errors import InvalidRequest
from taskservice.domain.ids import parse_uuid
from taskservice.domain.models import Followup, Task
from taskservice.domain.requests import TaskRequest
from taskservice.settings import OFFLINE_MODEL
from taskservice.usecases.inbox import TaskInbox
from taskservice.usecases.tasks import TaskService

Decision = Literal["explicit", "single", "model", "new"]
_EXPLICIT = re.compile(r"^@(\S+)\s*(.*)$", re.DOTALL)
_WORD = re.compile(r"[a-z0-9]+")
ROUTER_PROMPT = (
    "You route a user's message to the task it is meant for. Each candidate task "
    "either waits for an answer to its question or is still working and takes "
    "follow-up messages. Pick the task the message is for, with your confidence from "
    "0 to 1, or no task if the message starts something new."
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
    followup: Followup | None = None  # when the message was queued for the task's run
    new: bool = False  # the message started the task


def _question(task: Task) -> str | None:
    """What the task asks: its question, or whether to approve its tool call."""
    undecided = [a for a in task.approvals if "decision" not in a]
    if undecided:
        call = undecided[0]
        return f"approve {call.get('tool')} {call.get('arguments')}? (approve or deny)"
    questions = (task.input_request or {}).get("questions", [])
    return str(questions[0].get("question") or "") if questions else None


def _candidate(task: Task) -> str:
    question = _question(task)
    doing = f"asked {question!r}" if question is not None else f"is {task.state.value}"
    return f"- {task.id}: {doing} (task: {task.input!r})"


def _candidates_prompt(text: str, candidates: list[Task]) -> str:
    lines = [f"Message: {text}", "", "Tasks:", *map(_candidate, candidates)]
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
            # Words shared with its question, or with the task itself when it asks none.
            task_id, _, rest = line[2:].partition(": ")
            doing, _, task = rest.partition(" (task: ")
            about = doing.removeprefix("asked ") if doing.startswith("asked ") else task
            asked = set(_WORD.findall(about.lower()))
            overlap = len(words & asked) / len(asked) if asked else 0.0
            if overlap > best[0]:
                best = (overlap, task_id)
    choice = {"task_id": best[1], "confidence": round(best[0] if best[1] else 1.0, 3)}
    choice["reason"] = "most words shared with the task" if best[1] else "no task shares a word"
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, choice)])


class MessageRouter:
    def __init__(
        self, service: TaskService, inbox: TaskInbox, *, model: Model | str | None = None
    ) -> None:
        self.service = service
        self.inbox = inbox
        chosen: Model | str = model or FunctionModel(_offline_route, model_name=OFFLINE_MODEL)
        self.agent: Agent[None, RouteChoice] = Agent(
            chosen, output_type=RouteChoice, instructions=ROUTER_PROMPT
        )

    async def route(self, *, tenant: str, text: str, context_id: str | None) -> Routed:
        inbox = self.inbox
        explicit = _EXPLICIT.match(text)
        if explicit:
            task_id, body = explicit.groups()
            if not body.strip():
                raise InvalidRequest("nothing to send after the task id")
            sent = await inbox.send(tenant=tenant, task_id=task_id, input=body)
            return Routed(sent.task, "explicit", 1.0, "the message names the task", sent.followup)

        live = await inbox.live(tenant=tenant, context_id=context_id)
        if len(live) == 1:
            sent = await inbox.send_to(live[0], input=text)
            reason = "the only task in the context a message can reach"
            return Routed(sent.task, "single", 1.0, reason, sent.followup)
        if live:
            result = await self.agent.run(_candidates_prompt(text, live))
            choice = result.output
            chosen = parse_uuid(choice.task_id) if choice.task_id else None
            picked = next((task for task in live if task.id == chosen), None)
            if picked is not None:
                sent = await inbox.send_to(picked, input=text)
                return Routed(sent.task, "model", choice.confidence, choice.reason, sent.followup)
            created = await self._new(tenant=tenant, text=text, context_id=context_id)
            reason = choice.reason or "a new request"
            return Routed(created, "model", choice.confidence, reason, new=True)
        created = await self._new(tenant=tenant, text=text, context_id=context_id)
        return Routed(created, "new", 1.0, "no task in the context takes the message", new=True)

    async def _new(self, *, tenant: str, text: str, context_id: str | None) -> Task:
        """A new task for the message: no task it reaches takes it."""
        request = TaskRequest(tenant=tenant, input=text, context_id=context_id)
        return (await self.service.submit(request)).task
