"""A2A ↔ taskservice: states, parts, the task object, the agent card, error codes.

| taskservice      | A2A              |
| ---------------- | ---------------- |
| `pending`        | `submitted`      |
| `running`        | `working`        |
| `input_required` | `input-required` |
| `completed`      | `completed`      |
| `failed`         | `failed`         |
| `cancelled`      | `canceled`       |
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskservice.agents import AgentProfile
from taskservice.errors import DatabaseUnavailable, NotFound, ServiceError
from taskservice.models import Task
from taskservice.states import TaskState

PROTOCOL_VERSION = "0.3.0"
STATES = {
    TaskState.PENDING: "submitted",
    TaskState.RUNNING: "working",
    TaskState.INPUT_REQUIRED: "input-required",
    TaskState.COMPLETED: "completed",
    TaskState.FAILED: "failed",
    TaskState.CANCELLED: "canceled",
}

# JSON-RPC 2.0 and A2A error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
CONTENT_TYPE_NOT_SUPPORTED = -32005


class A2AError(Exception):
    """An A2A error: its code, message and optional data, whatever the transport."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def from_service(exc: ServiceError) -> A2AError:
    """The A2A error for a refusal of the use cases."""
    data = {"detail": exc.detail, **exc.extensions}
    if isinstance(exc, NotFound):
        return A2AError(TASK_NOT_FOUND, "Task not found", data)
    if isinstance(exc, DatabaseUnavailable):
        return A2AError(INTERNAL_ERROR, "Internal error", {**data, "retryable": True})
    return A2AError(INVALID_PARAMS, exc.detail, data)


# -- params ------------------------------------------------------------------------


class Params(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Message(Params):
    kind: Literal["message"] = "message"
    role: Literal["user", "agent"]
    parts: list[dict[str, Any]] = Field(min_length=1)
    message_id: str = Field(alias="messageId", min_length=1, max_length=200)
    task_id: str | None = Field(default=None, alias="taskId")
    context_id: str | None = Field(default=None, alias="contextId", max_length=200)
    metadata: dict[str, Any] | None = None


class SendConfiguration(Params):
    blocking: bool = False


class SendParams(Params):
    message: Message
    configuration: SendConfiguration | None = None
    metadata: dict[str, Any] | None = None


class TaskIdParams(Params):
    id: str


P = TypeVar("P", bound=Params)


def params(model: type[P], raw: Any) -> P:
    """`raw` validated as `model`, or INVALID_PARAMS saying what is wrong."""
    try:
        return model.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors(include_url=False)]
        raise A2AError(INVALID_PARAMS, "invalid params", {"errors": errors}) from None


# -- parts and objects ---------------------------------------------------------------


def content(parts: list[dict[str, Any]]) -> Any:
    """A task's input from a message's parts: its text parts joined, or the data of
    a lone data part. Files are not accepted."""
    texts: list[str] = []
    data: list[Any] = []
    for part in parts:
        kind = part.get("kind")
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "data" and "data" in part:
            data.append(part["data"])
        elif kind == "file":
            raise A2AError(CONTENT_TYPE_NOT_SUPPORTED, "file parts are not supported; send text")
        else:
            raise A2AError(INVALID_PARAMS, f"unknown or malformed part: {part.get('kind')!r}")
    if texts and not data:
        return "\n".join(texts)
    if len(data) == 1 and not texts:
        return data[0]
    raise A2AError(INVALID_PARAMS, "send text parts, or one data part")


def context(task: Task) -> str:
    """A2A requires a context: a task submitted over REST without one is its own."""
    return task.context_id or str(task.id)


def _agent_message(task: Task, text: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "agent",
        "messageId": f"{task.id}:{task.event_seq}",
        "taskId": str(task.id),
        "contextId": context(task),
        "parts": [{"kind": "text", "text": text}],
    }


def status(task: Task, state: TaskState) -> dict[str, Any]:
    """The A2A status of `task` in `state` (its state now, or the one an event moved
    it to): the question it waits on, or the error it failed with, as the message."""
    out: dict[str, Any] = {"state": STATES[state], "timestamp": task.updated_at.isoformat()}
    if state is not task.state:
        return out
    if state is TaskState.INPUT_REQUIRED:
        request = task.input_request or {}
        questions = [str(q.get("question") or "") for q in request.get("questions", [])]
        waiting = "\n".join(questions) if questions else "waiting for its subtasks"
        out["message"] = _agent_message(task, waiting)
    elif state is TaskState.FAILED and task.error:
        out["message"] = _agent_message(task, str(task.error.get("message", task.error)))
    return out


def artifact(task: Task) -> dict[str, Any]:
    result = task.result
    if isinstance(result, str):
        part: dict[str, Any] = {"kind": "text", "text": result}
    else:  # a data part holds an object
        part = {"kind": "data", "data": result if isinstance(result, dict) else {"result": result}}
    return {"artifactId": f"{task.id}:result", "name": "result", "parts": [part]}


def a2a_task(task: Task) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "task",
        "id": str(task.id),
        "contextId": context(task),
        "status": status(task, task.state),
        "metadata": {**task.metadata, "taskservice": {"state": task.state.value}},
    }
    if task.state is TaskState.COMPLETED:
        out["artifacts"] = [artifact(task)]
    return out


def pauses(state: TaskState) -> bool:
    """The states that end a stream: terminal, or waiting for the client's reply."""
    return state.is_terminal or state is TaskState.INPUT_REQUIRED


def agent_card(
    *, base_url: str, endpoint: str, version: str, profiles: Iterable[AgentProfile]
) -> dict[str, Any]:
    """The agent card: one skill per agent profile, the endpoint, bearer auth."""
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "name": "taskservice",
        "description": "Runs LLM sub-agents as durable tasks. Pick a skill (an agent "
        "profile) with the message's `metadata.agent`, and a model with `metadata.model`.",
        "url": f"{base_url}{endpoint}",
        "preferredTransport": "JSONRPC",
        "version": version,
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [
            {
                "id": profile.name,
                "name": profile.name,
                "description": profile.description or f"the {profile.name} agent profile",
                "tags": ["agent-profile"],
            }
            for profile in profiles
        ],
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "security": [{"bearer": []}],
    }
