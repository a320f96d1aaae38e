"""The demo agent: an offline model that shows everything the service does, at a pace
a person can watch, with no configuration and no LLM.

The `demo` profile runs it. What it does is read from the task's input:

- `take 20s` (`20 seconds`): it takes about that long (default 6 s; at most 600);
- `ask`: it asks a question (`input_required`), and goes on with the answer;
- `spawn 3` (`3 subtasks`, `a subtask`): it spawns that many subtasks (at most 5),
  each a demo taking half its time, and waits for them without holding a worker;
- `approve`: it calls `publish`, a tool whose calls wait for a person's approval
  (the profile's `approve`): approved, it publishes (a `log` line); denied, the
  answer says why;

and it always reports progress and writes its answer word by word. Each step is a real
model turn (a tool call or the answer), so the events, the ledger, the live output and
the dashboard show exactly what a real agent's run shows.

```
progress 10 % ─▶ [ask_user ─▶ input_required ─▶ the answer] ─▶ [spawn_subtask (n) ─▶
wait_for_subtasks (parked) ─▶ their results] ─▶ [publish ─▶ input_required (approval)
─▶ published, or denied] ─▶ progress 70 % ─▶ the answer, streamed
```
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from taskservice.agents.approvals import Approvals
from taskservice.agents.tools import RunHooks

DEMO_MODEL = "demo"
DEMO_PROFILE = "demo"
PUBLISH = "publish"
DEMO_TOOLS = (
    "report_progress",
    "ask_user",
    "spawn_subtask",
    "wait_for_subtasks",
    "log",
    PUBLISH,
)
DEMO_PROMPT = "You are the demo agent: you show what a task's run looks like."
DEMO_DESCRIPTION = (
    "Offline demo: streams its answer word by word, reports progress; say 'take 20s', "
    "'ask', 'spawn 2' or 'approve' in the input."
)
QUESTION = "Which colour should the answer be written in?"
DEMO_APPROVALS = Approvals(
    tools=(PUBLISH,),
    note="The demo publishes its answer to #demo: approve it, edit the channel, or deny it.",
)

_DEFAULT_SECONDS = 6.0
_MAX_SECONDS = 600.0
_MAX_SUBTASKS = 5
_ANSWER_SHARE = 0.6  # of the time, for writing the answer; the rest for the steps
_SECONDS = re.compile(r"(\d+(?:\.\d+)?)\s*(?:s|secs?|seconds?)\b", re.IGNORECASE)
_SPAWN = re.compile(r"\bspawn\s+(\d+)|\b(\d+)\s+subtasks?\b", re.IGNORECASE)
_ONE_SUBTASK = re.compile(r"\b(?:a|one)\s+subtask\b|\bspawn\b", re.IGNORECASE)
_ASK = re.compile(r"\bask\b", re.IGNORECASE)
_APPROVE = re.compile(r"\bapprov", re.IGNORECASE)


async def publish(ctx: RunContext[RunHooks], channel: str, text: str) -> str:
    """Publish `text` to `channel` (the demo's side effect: a `log` line saying so).
    The demo profile's calls of it wait for a person's approval."""
    await ctx.deps.log("info", f"published to {channel}: {text}")
    return f"published to {channel}"


DEMO_TOOL_FUNCTIONS = {PUBLISH: publish}


@dataclass(frozen=True, slots=True)
class Plan:
    """What the input asks the demo to do."""

    seconds: float = _DEFAULT_SECONDS
    ask: bool = False
    subtasks: int = 0
    approve: bool = False

    @classmethod
    def of(cls, prompt: str) -> Plan:
        seconds = _SECONDS.search(prompt)
        spawn = _SPAWN.search(prompt)
        subtasks = int(spawn.group(1) or spawn.group(2)) if spawn else 0
        if not subtasks and _ONE_SUBTASK.search(prompt):
            subtasks = 1
        return cls(
            seconds=min(float(seconds.group(1)), _MAX_SECONDS) if seconds else _DEFAULT_SECONDS,
            ask=bool(_ASK.search(prompt)),
            subtasks=min(subtasks, _MAX_SUBTASKS),
            approve=bool(_APPROVE.search(prompt)),
        )


@dataclass(frozen=True, slots=True)
class Step:
    """The demo's next model response: tool calls after `pause`, or the answer
    written over `pause` seconds."""

    pause: float
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    answer: str | None = None


def _prompt(messages: list[ModelMessage]) -> str:
    for message in messages:
        for part in getattr(message, "parts", ()):
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content
    return ""


def _returns(messages: list[ModelMessage]) -> dict[str, list[Any]]:
    """What each tool returned so far, by tool name (a denied call: its reason)."""
    out: dict[str, list[Any]] = {}
    for message in messages:
        for part in getattr(message, "parts", ()):
            if isinstance(part, ToolReturnPart | RetryPromptPart):
                out.setdefault(part.tool_name or "", []).append(part.content)
    return out


def next_step(messages: list[ModelMessage]) -> Step:
    """The demo's next response, from the conversation so far (so a resumed run goes
    on where its last attempt stopped)."""
    prompt = _prompt(messages)
    plan = Plan.of(prompt)
    done = _returns(messages)
    steps = 2 + plan.ask + (2 if plan.subtasks else 0) + plan.approve  # turns before the answer
    pause = plan.seconds * (1 - _ANSWER_SHARE) / steps
    progress = len(done.get("report_progress", []))
    if progress == 0:
        return Step(pause, (("report_progress", {"percent": 10, "note": "reading the task"}),))
    if plan.ask and "ask_user" not in done:
        return Step(pause, (("ask_user", {"question": QUESTION}),))
    if plan.subtasks and "spawn_subtask" not in done:
        half = plan.seconds / 2
        calls = tuple(
            ("spawn_subtask", {"input": f"subtask {i} of {plan.subtasks}: take {half:g}s"})
            for i in range(1, plan.subtasks + 1)
        )
        return Step(pause, calls)
    if plan.subtasks and "wait_for_subtasks" not in done:
        return Step(pause, (("wait_for_subtasks", {}),))
    if plan.approve and PUBLISH not in done:
        text = f"The demo agent's answer to {prompt[:60]!r}"
        return Step(pause, ((PUBLISH, {"channel": "#demo", "text": text}),))
    if progress == 1:
        return Step(pause, (("report_progress", {"percent": 70, "note": "writing the answer"}),))
    return Step(plan.seconds * _ANSWER_SHARE, answer=_answer(prompt, plan, done))


def _answer(prompt: str, plan: Plan, done: dict[str, list[Any]]) -> str:
    said = [f"This is the demo agent, answering {prompt[:80]!r}."]
    if plan.ask:
        colour = done.get("ask_user", ["?"])[0]
        said.append(f"You asked me to ask, so I did: the answer is written in {colour}.")
    if plan.subtasks:
        outcomes = done.get("wait_for_subtasks", [[]])[0]
        states = [o.get("state") for o in outcomes if isinstance(o, dict)]
        said.append(
            f"I spawned {plan.subtasks} subtask{'s' * (plan.subtasks > 1)} and waited for "
            f"them without holding a worker; they ended {', '.join(map(str, states))}."
        )
    if plan.approve:
        outcome = str(done.get(PUBLISH, ["?"])[0])
        if outcome.startswith("published"):
            said.append(f"You approved publishing it: {outcome}.")
        else:
            said.append(f"You did not approve publishing it: {outcome}")
    said.append(
        "Every step of this run was a model turn: the progress reports and questions "
        "are tool calls in the ledger, and these words reached you as live deltas, "
        "written a few at a time, while the complete message waits to be persisted "
        "once the answer is done. No LLM was asked; set TASKSERVICE_DEFAULT_MODEL "
        "for real answers."
    )
    return " ".join(said)


def _response(step: Step) -> ModelResponse:
    if step.answer is not None:
        return ModelResponse(parts=[TextPart(step.answer)], model_name=DEMO_MODEL)
    return ModelResponse(
        parts=[ToolCallPart(name, args) for name, args in step.calls], model_name=DEMO_MODEL
    )


async def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    step = next_step(messages)
    await asyncio.sleep(step.pause)
    return _response(step)


async def _stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    step = next_step(messages)
    if step.answer is None:
        await asyncio.sleep(step.pause)
        yield {
            index: DeltaToolCall(name=name, json_args=json.dumps(args))
            for index, (name, args) in enumerate(step.calls)
        }
        return
    words = step.answer.split(" ")
    for index, word in enumerate(words):
        await asyncio.sleep(step.pause / len(words))
        yield word if index == 0 else " " + word


def demo_model() -> Model:
    return FunctionModel(_respond, stream_function=_stream, model_name=DEMO_MODEL)
