"""A2A 0.3 on the wire: its parameters read into the neutral requests, and tasks,
messages and stream events written in its shapes (`kind` discriminators, lower-case
states, `final` on the last status update).

| taskservice      | A2A 0.3          | A2A 1.0                     |
| ---------------- | ---------------- | --------------------------- |
| `pending`        | `submitted`      | `TASK_STATE_SUBMITTED`      |
| `running`        | `working`        | `TASK_STATE_WORKING`        |
| `input_required` | `input-required` | `TASK_STATE_INPUT_REQUIRED` |
| `completed`      | `completed`      | `TASK_STATE_COMPLETED`      |
| `failed`         | `failed`         | `TASK_STATE_FAILED`         |
| `cancelled`      | `canceled`       | `TASK_STATE_CANCELED`       |
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from taskservice.a2a.conversation import Message, Part, PushConfig, SendRequest, context
from taskservice.a2a.errors import A2AError, Kind
from taskservice.a2a.shapes import (
    ArtifactChunk,
    HistoryLength,
    Params,
    TaskUpdate,
    Update,
    View,
    agent_says,
    own_metadata,
    params,
    result_parts,
)
from taskservice.domain.models import Task
from taskservice.domain.states import TaskState

VERSION = "0.3"
STATES = {
    TaskState.PENDING: "submitted",
    TaskState.RUNNING: "working",
    TaskState.INPUT_REQUIRED: "input-required",
    TaskState.COMPLETED: "completed",
    TaskState.FAILED: "failed",
    TaskState.CANCELLED: "canceled",
}


# -- in ------------------------------------------------------------------------------


class MessageIn(Params):
    kind: Literal["message"] = "message"
    role: Literal["user", "agent"]
    parts: list[dict[str, Any]] = Field(min_length=1)
    message_id: str = Field(alias="messageId", min_length=1, max_length=200)
    task_id: str | None = Field(default=None, alias="taskId")
    context_id: str | None = Field(default=None, alias="contextId", max_length=200)
    reference_task_ids: list[str] | None = Field(
        default=None, alias="referenceTaskIds", max_length=100
    )
    metadata: dict[str, Any] | None = None


class Authentication(Params):
    schemes: list[str] = Field(min_length=1, max_length=10)
    credentials: str | None = Field(default=None, max_length=8192)


class PushConfigIn(Params):
    id: str | None = Field(default=None, max_length=200)
    url: str = Field(min_length=1)
    token: str | None = Field(default=None, max_length=8192)
    authentication: Authentication | None = None

    def neutral(self) -> PushConfig:
        auth = self.authentication
        return PushConfig(
            VERSION,
            self.url,
            id=self.id or None,
            token=self.token or None,
            scheme=auth.schemes[0] if auth else None,
            credentials=auth.credentials if auth else None,
        )


class PushConfigSet(Params):
    task_id: str = Field(alias="taskId", min_length=1)
    push_notification_config: PushConfigIn = Field(alias="pushNotificationConfig")


class PushConfigQuery(Params):
    id: str = Field(min_length=1)  # the task's
    push_notification_config_id: str | None = Field(default=None, alias="pushNotificationConfigId")


class SendConfiguration(Params):
    blocking: bool = False
    history_length: HistoryLength = Field(default=None, alias="historyLength")
    push_notification_config: PushConfigIn | None = Field(
        default=None, alias="pushNotificationConfig"
    )


class SendParams(Params):
    message: MessageIn
    configuration: SendConfiguration | None = None
    metadata: dict[str, Any] | None = None


def _part(raw: dict[str, Any]) -> Part:
    kind = raw.get("kind")
    if kind == "text" and isinstance(raw.get("text"), str):
        return Part("text", raw["text"])
    if kind == "data" and "data" in raw:
        return Part("data", raw["data"])
    if kind == "file":
        return Part("file", raw.get("file"))
    raise A2AError(Kind.INVALID_PARAMS, f"unknown or malformed part: {kind!r}")


def send_request(raw: Any) -> SendRequest:
    sent = params(SendParams, raw)
    message, configuration = sent.message, sent.configuration or SendConfiguration()
    return SendRequest(
        message=Message(
            role=message.role,
            parts=[_part(part) for part in message.parts],
            message_id=message.message_id,
            task_id=message.task_id,
            context_id=message.context_id,
            metadata=message.metadata,
            reference_task_ids=tuple(message.reference_task_ids or ()),
        ),
        wait=configuration.blocking,
        history_length=configuration.history_length,
        metadata=sent.metadata or {},
        push=push.neutral() if (push := configuration.push_notification_config) else None,
    )


# -- out -----------------------------------------------------------------------------


def push_config(task_id: str, config: PushConfig) -> dict[str, Any]:
    """A TaskPushNotificationConfig as its owner set it."""
    out: dict[str, Any] = {"id": config.id, "url": config.url}
    if config.token is not None:
        out["token"] = config.token
    if config.scheme is not None:
        out["authentication"] = {"schemes": [config.scheme]}
        if config.credentials is not None:
            out["authentication"]["credentials"] = config.credentials
    return {"taskId": task_id, "pushNotificationConfig": out}


def _parts(parts: list[Part]) -> list[dict[str, Any]]:
    return [{"kind": part.kind, part.kind: part.value} for part in parts]


def message(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "message",
        "role": m.role,
        "messageId": m.message_id,
        "parts": _parts(m.parts),
    }
    if m.task_id is not None:
        out["taskId"] = m.task_id
    if m.context_id is not None:
        out["contextId"] = m.context_id
    return out


def status(update: TaskUpdate) -> dict[str, Any]:
    task = update.task
    out: dict[str, Any] = {"state": STATES[update.state], "timestamp": task.status_at.isoformat()}
    said = agent_says(update)
    if said is not None:
        out["message"] = message(said)
    return out


def artifact(t: Task, parts: list[Part] | None = None) -> dict[str, Any]:
    """The task's result artifact: its result, or `parts` of it (a live chunk)."""
    shown = result_parts(t) if parts is None else parts
    return {"artifactId": f"{t.id}:result", "name": "result", "parts": _parts(shown)}


def task(view: View) -> dict[str, Any]:
    t = view.task
    out: dict[str, Any] = {
        "kind": "task",
        "id": str(t.id),
        "contextId": context(t),
        "status": status(TaskUpdate(t, t.state)),
        "metadata": {**t.metadata, "taskservice": own_metadata(t)},
    }
    if t.state is TaskState.COMPLETED:
        out["artifacts"] = [artifact(t)]
    if view.history:
        out["history"] = [message(m) for m in view.history]
    return out


def events(update: Update, *, final: bool) -> list[dict[str, Any]]:
    """What a stream sends for `update`: the task, or the result as an artifact
    update, or a status update (`final` on the last one)."""
    if isinstance(update, View):
        return [task(update)]
    ids = {"taskId": str(update.task.id), "contextId": context(update.task)}
    if isinstance(update, ArtifactChunk):
        chunk = artifact(update.task, [Part("text", update.text)])
        body = {**ids, "artifact": chunk, "append": update.append, "lastChunk": False}
        return [{"kind": "artifact-update", **body}]
    if update.artifact:
        body = {**ids, "artifact": artifact(update.task), "append": False, "lastChunk": True}
        return [{"kind": "artifact-update", **body}]
    return [{"kind": "status-update", **ids, "status": status(update), "final": final}]
