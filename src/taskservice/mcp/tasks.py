"""MCP's task shapes of the service's tasks, per revision: the 2026-07-28 Tasks
extension (`io.modelcontextprotocol/tasks`: a flat handle, `tasks/get` that inlines
the result, the error or the input requests) and the 2025-11-25 core tasks (a handle
nested under `task`, `ttl`/`pollInterval`). The MCP task id is the task's id.

Four modules are named `tasks`: this one is how MCP shows a task (its protocol binding);
the use case is `usecases/tasks.py`, the SQL `db/tasks.py`, the REST routes
`api/routes/tasks.py`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from taskservice.domain.errors import InvalidRequest
from taskservice.domain.models import Task
from taskservice.domain.states import TaskState
from taskservice.mcp.profile_tools import (
    approval_line,
    awaited,
    call_result,
    unanswered,
    undecided,
)
from taskservice.usecases.approvals import REASON_MAX

EXTENSION = "io.modelcontextprotocol/tasks"
POLL_MS = 500  # how often a client is asked to poll

STATUS = {
    TaskState.PENDING: "working",
    TaskState.RUNNING: "working",
    TaskState.INPUT_REQUIRED: "input_required",  # working while it waits for subtasks
    TaskState.COMPLETED: "completed",
    TaskState.FAILED: "failed",
    TaskState.CANCELLED: "cancelled",
}


def _stamp(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def status(task: Task) -> str:
    if task.state is TaskState.INPUT_REQUIRED and not awaited(task):
        return "working"  # on its subtasks: nothing for the client to answer
    return STATUS[task.state]


def _deciding(task: Task) -> str:
    """How a client of 2025-11-25 (which has no way to answer) decides on the calls a
    task waits on: on REST."""
    calls = undecided(task)
    example = json.dumps({"approvals": {calls[0]["id"]: {"approve": True}}})
    said = (
        f"Decide with POST /v1/tasks/{task.id}/input: {example}, or "
        '{"approve": false, "reason": "..."} to deny'
    )
    if unanswered(task):
        said += ', the questions answered in the same body ("answers", by id)'
    return said + "."


def _deadline(task: Task) -> str | None:
    request = task.input_request if isinstance(task.input_request, dict) else {}
    if not undecided(task) or not request.get("deadline"):
        return None
    then = "the task fails" if request.get("on_timeout") == "fail" else "they are denied"
    return f"Undecided at {request['deadline']}, {then}."


def _message(task: Task, *, legacy: bool = False) -> str | None:
    """The status message: the calls it waits on a person's approval of and the
    questions it waits on (at 2025-11-25, `legacy`, with how to decide on REST), that
    it is paused, its error, its cancel's reason."""
    paused = task.pause_note
    if task.state is TaskState.INPUT_REQUIRED:
        lines = awaited(task) or ["waiting for its subtasks"]
        if legacy and undecided(task):
            lines.append(_deciding(task))
        deadline = _deadline(task)
        if deadline:
            lines.append(deadline)
        if paused:
            lines.append(f"({paused})")
        return "\n".join(lines)
    if paused:
        return paused
    if task.state is TaskState.FAILED:
        return str((task.error or {}).get("message") or "the task failed")
    if task.state is TaskState.CANCELLED:
        return task.cancel_reason
    return None


def _common(task: Task, *, legacy: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "taskId": str(task.id),
        "status": status(task),
        "createdAt": _stamp(task.created_at),
        "lastUpdatedAt": _stamp(task.updated_at),
    }
    said = _message(task, legacy=legacy)
    if said:
        out["statusMessage"] = said
    return out


# 2026-07-28, the Tasks extension.


def handle(task: Task) -> dict[str, Any]:
    """What a `tools/call` answers when it made a task: a flat handle. Tasks are
    kept until they are deleted (`ttlMs` null: no expiry of their own)."""
    return {"resultType": "task", **_common(task), "ttlMs": None, "pollIntervalMs": POLL_MS}


def elicitation(question: dict[str, Any]) -> dict[str, Any]:
    """A question of the agent as the input request the extension carries: a form
    asking for one string, `answer`."""
    text = str(question.get("question") or "The agent asks for input")
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "title": "Answer", "description": text}},
        "required": ["answer"],
    }
    return {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": text, "requestedSchema": schema},
    }


APPROVAL_META = "taskservice/approval"


def approval_elicitation(task: Task, call: dict[str, Any]) -> dict[str, Any]:
    """A tool call that waits for a person's approval as the input request the
    extension carries: a form asking for `approve` (a boolean), a `reason` (read by
    the model when the call is denied) and, to make the call with other arguments,
    `arguments` (a JSON object written as a string: an elicitation form holds flat
    primitive fields only), its default the model's. The call as data (its tool,
    arguments, argument schema, the profile's note, the deadline) is in the
    request's `_meta`."""
    arguments = json.dumps(call.get("arguments"), ensure_ascii=False)
    schema = {
        "type": "object",
        "properties": {
            "approve": {
                "type": "boolean",
                "title": "Approve",
                "description": f"true: make the {call.get('tool')} call; false: deny it",
            },
            "reason": {
                "type": "string",
                "title": "Reason",
                "description": "Why it is denied (the agent reads it); for a denial only",
                "maxLength": REASON_MAX,
            },
            "arguments": {
                "type": "string",
                "title": "Arguments",
                "description": "The arguments to make the call with, a JSON object "
                "held to the tool's schema; for an approval only (default: the agent's)",
                "default": arguments,
            },
        },
        "required": ["approve"],
    }
    keys = ("id", "tool", "arguments", "schema", "note")
    about: dict[str, Any] = {k: call[k] for k in keys if k in call}
    request = task.input_request if isinstance(task.input_request, dict) else {}
    if request.get("deadline"):
        about |= {"deadline": request["deadline"], "on_timeout": request.get("on_timeout")}
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": approval_line(call),
            "requestedSchema": schema,
            "_meta": {APPROVAL_META: about},
        },
    }


def detailed(task: Task) -> dict[str, Any]:
    """`tasks/get`: the task, with its result when it completed (the CallToolResult
    of the call), its error when it failed, and its questions, keyed by their ids,
    when it waits for input."""
    out = {"resultType": "complete", **_common(task), "ttlMs": None, "pollIntervalMs": POLL_MS}
    if task.state is TaskState.COMPLETED:
        out["result"] = call_result(task)
    elif task.state is TaskState.FAILED:
        out["error"] = {"code": -32603, "message": out.get("statusMessage", "the task failed")}
    elif task.state is TaskState.INPUT_REQUIRED:
        requests = {c["id"]: approval_elicitation(task, c) for c in undecided(task)}
        requests |= {q["id"]: elicitation(q) for q in unanswered(task)}
        if requests:
            out["inputRequests"] = requests
    return out


def answer_of(response: Any) -> str | None:
    """The answer in an input response (an ElicitResult): the `answer` accepted, or
    what the person did instead, said so the agent can go on; None if it is not
    an ElicitResult."""
    if not isinstance(response, dict) or "action" not in response:
        return None
    action = response["action"]
    content = response.get("content")
    if action == "accept":
        if isinstance(content, dict) and isinstance(content.get("answer"), str):
            return str(content["answer"])
        return None
    return f"(the person chose to {action} rather than answer)"


def _invalid(key: str, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"input response {key!r} (a tool call waiting for approval): {why}",
        field="inputResponses",
    )


def decision_of(key: str, response: Any) -> dict[str, Any] | None:
    """The decision in an input response (an ElicitResult) to a call waiting for
    approval, as `ApprovalDesk` takes it: `accept` with `approve` true (and edited
    `arguments`, a JSON object or its text) or false (and a `reason`), `decline` a
    denial; None for `cancel` (dismissed, no choice made: the call stays undecided).
    A field of the form that is not for the choice made (a `reason` with an
    approval, `arguments` with a denial; forms send their defaults) is left out.
    Anything else is refused."""
    if not isinstance(response, dict) or response.get("action") not in (
        "accept",
        "decline",
        "cancel",
    ):
        raise _invalid(key, "an ElicitResult, its action accept, decline or cancel")
    if response["action"] == "cancel":
        return None
    if response["action"] == "decline":
        return {"approve": False}
    content = response.get("content")
    if not isinstance(content, dict) or not isinstance(content.get("approve"), bool):
        raise _invalid(key, "accepted, its content has a boolean `approve`")
    if not content["approve"]:
        reason = content.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise _invalid(key, "`reason` is a string")
        return {"approve": False, "reason": reason or None}
    decision: dict[str, Any] = {"approve": True}
    arguments = content.get("arguments")
    if isinstance(arguments, str) and arguments.strip():
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise _invalid(key, "`arguments` is a JSON object, not JSON at all") from None
        if not isinstance(arguments, dict):
            raise _invalid(key, "`arguments` is a JSON object")
    if isinstance(arguments, dict):
        decision["arguments"] = arguments
    elif arguments not in (None, ""):
        raise _invalid(key, "`arguments` is a JSON object (or its text)")
    return decision


# 2025-11-25, the core protocol's tasks (experimental there).

RELATED_TASK = "io.modelcontextprotocol/related-task"


def task_2025(task: Task) -> dict[str, Any]:
    """The task as 2025-11-25 shows it: `ttl` and `pollInterval`, no result."""
    return {**_common(task, legacy=True), "ttl": None, "pollInterval": POLL_MS}


def created_2025(task: Task) -> dict[str, Any]:
    """What a task-augmented `tools/call` answers: the task, nested."""
    return {"task": task_2025(task)}


def result_2025(task: Task) -> dict[str, Any]:
    """`tasks/result` of a finished task: what the call would have answered, tied to
    the task."""
    return {**call_result(task), "_meta": {RELATED_TASK: {"taskId": str(task.id)}}}
