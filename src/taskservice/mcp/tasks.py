"""MCP's task shapes of the service's tasks, per revision: the 2026-07-28 Tasks
extension (`io.modelcontextprotocol/tasks`: a flat handle, `tasks/get` that inlines
the result, the error or the input requests) and the 2025-11-25 core tasks (a handle
nested under `task`, `ttl`/`pollInterval`). The MCP task id is the task's id.

Four modules are named `tasks`: this one is how MCP shows a task (its protocol binding);
the use case is `usecases/tasks.py`, the SQL `db/tasks.py`, the REST routes
`api/routes/tasks.py`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from taskservice.domain.models import Task
from taskservice.domain.states import TaskState
from taskservice.mcp.profile_tools import call_result

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
    if task.state is TaskState.INPUT_REQUIRED and not task.questions:
        return "working"  # on its subtasks: nothing for the client to answer
    return STATUS[task.state]


def _message(task: Task) -> str | None:
    """The status message: the questions it waits on, that it is paused, its error,
    its cancel's reason."""
    paused = task.pause_note
    if task.state is TaskState.INPUT_REQUIRED:
        asked = [str(q.get("question") or "") for q in task.questions]
        said = "\n".join(asked) if asked else "waiting for its subtasks"
        return f"{said}\n({paused})" if paused else said
    if paused:
        return paused
    if task.state is TaskState.FAILED:
        return str((task.error or {}).get("message") or "the task failed")
    if task.state is TaskState.CANCELLED:
        return task.cancel_reason
    return None


def _common(task: Task) -> dict[str, Any]:
    out: dict[str, Any] = {
        "taskId": str(task.id),
        "status": status(task),
        "createdAt": _stamp(task.created_at),
        "lastUpdatedAt": _stamp(task.updated_at),
    }
    said = _message(task)
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
        asked = task.questions
        if asked:
            out["inputRequests"] = {q["id"]: elicitation(q) for q in asked}
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


# 2025-11-25, the core protocol's tasks (experimental there).

RELATED_TASK = "io.modelcontextprotocol/related-task"


def task_2025(task: Task) -> dict[str, Any]:
    """The task as 2025-11-25 shows it: `ttl` and `pollInterval`, no result."""
    return {**_common(task), "ttl": None, "pollInterval": POLL_MS}


def created_2025(task: Task) -> dict[str, Any]:
    """What a task-augmented `tools/call` answers: the task, nested."""
    return {"task": task_2025(task)}


def result_2025(task: Task) -> dict[str, Any]:
    """`tasks/result` of a finished task: what the call would have answered, tied to
    the task."""
    return {**call_result(task), "_meta": {RELATED_TASK: {"taskId": str(task.id)}}}
