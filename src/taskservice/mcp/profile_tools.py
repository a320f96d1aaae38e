"""MCP's JSON shapes of the service's things: a tool per agent profile, the result of
a call from a task. Plain dicts in the protocol's wire names; the adapter hands them
to the SDK."""

from __future__ import annotations

import json
from typing import Any

from taskservice.agents.profiles import AgentProfile
from taskservice.domain.content import CONTEXT_ID_MAX_LENGTH
from taskservice.domain.models import Task
from taskservice.domain.states import TaskState

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {
            "description": "The task for the agent: text, or a JSON object",
            "anyOf": [{"type": "string", "minLength": 1}, {"type": "object"}],
        },
        "context_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": CONTEXT_ID_MAX_LENGTH,
            "description": "Groups related tasks (a conversation, a session); optional",
        },
    },
    "required": ["input"],
    "additionalProperties": False,
}
JSON_OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}


def tool(profile: AgentProfile) -> dict[str, Any]:
    """The tool of an agent profile: its name, what it does, what it takes; and for a
    profile with JSON output, that its result is an object (`structuredContent`)."""
    out: dict[str, Any] = {
        "name": profile.name,
        "description": profile.description
        or f"Runs the {profile.name!r} agent on the input, as a durable task, and answers "
        "with what it concludes.",
        "inputSchema": INPUT_SCHEMA,
        # 2025-11-25: a call may ask to be a task (`params.task`); 2026-07-28 drops
        # the field, and the server decides (`mcp.server.Tasks`).
        "execution": {"taskSupport": "optional"},
    }
    if profile.output == "json":
        out["outputSchema"] = JSON_OUTPUT_SCHEMA
    return out


def _text(value: Any) -> dict[str, Any]:
    text = value if isinstance(value, str) else json.dumps(value)
    return {"type": "text", "text": text}


def call_result(task: Task) -> dict[str, Any]:
    """A finished task as the CallToolResult of the call that made it: the result as
    text (and as `structuredContent` when it is an object); a failure or a cancel as
    a tool error (`isError`), which the calling model reads."""
    if task.state is TaskState.COMPLETED:
        out: dict[str, Any] = {"content": [_text(task.result)], "isError": False}
        if isinstance(task.result, dict):
            out["structuredContent"] = task.result
        return out
    if task.state is TaskState.FAILED:
        error = task.error or {}
        why = str(error.get("message") or "the task failed")
        return {"content": [_text(f"task {task.id} failed: {why}")], "isError": True}
    return {"content": [_text(f"task {task.id} was cancelled")], "isError": True}


def undecided(task: Task) -> list[dict[str, Any]]:
    """The tool calls a task waits on a person's approval of, not decided yet."""
    return [call for call in task.approvals if "decision" not in call]


def unanswered(task: Task) -> list[dict[str, Any]]:
    """The questions a task waits on, not answered yet (asked with calls to approve,
    they may be answered before the calls are decided)."""
    return [q for q in task.questions if "answer" not in q]


def approval_line(call: dict[str, Any]) -> str:
    """A call that waits for approval, in words: the tool, its arguments, the
    profile's note."""
    arguments = json.dumps(call.get("arguments"), ensure_ascii=False)
    note = f" {call['note']}" if call.get("note") else ""
    return f"approve {call.get('tool')} {arguments}? (call {call.get('id')}){note}"


def awaited(task: Task) -> list[str]:
    """What a task in `input_required` waits on, a line each: the calls for a person
    to approve, the questions for them to answer; none when it waits for its
    subtasks."""
    return [approval_line(c) for c in undecided(task)] + [
        str(q.get("question") or "") for q in unanswered(task)
    ]


def unfinished(task: Task, waited: float) -> dict[str, Any]:
    """The answer to a plain call whose task is not finished when the call gives up
    waiting: a tool error that says where the task is and how to go on, the task
    itself going on."""
    where = f"GET /v1/tasks/{task.id}"
    if task.state is TaskState.INPUT_REQUIRED:
        asked = "; ".join(line for line in awaited(task) if line) or "it waits for its subtasks"
        text = (
            f"task {task.id} needs input before it can finish: {asked}. Answer (or decide) "
            f"with POST /v1/tasks/{task.id}/input, or call this tool as a task (MCP tasks) "
            "to be asked."
        )
    else:
        text = (
            f"task {task.id} is still {task.state.value} after {waited:g} s; it goes on. "
            f"Call this tool as a task (MCP tasks) to wait for it, or read it at {where}."
        )
    return {
        "content": [_text(text)],
        "isError": True,
        "_meta": {"taskservice/task": {"id": str(task.id), "state": task.state.value}},
    }
