"""A2A 1.0 on the wire (ProtoJSON of `specification/a2a.proto`): its requests read
into the neutral ones, and tasks, messages and stream responses written in its
shapes: enum names (`ROLE_USER`, `TASK_STATE_COMPLETED`), parts without `kind`,
results and stream events wrapped (`{"task": …}`, `{"statusUpdate": …}`), UTC
timestamps with milliseconds. The state table is in `a2a.v03`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import Field, field_validator

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

VERSION = "1.0"
STATES = {
    TaskState.PENDING: "TASK_STATE_SUBMITTED",
    TaskState.RUNNING: "TASK_STATE_WORKING",
    TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.CANCELLED: "TASK_STATE_CANCELED",
}
STATE_OF = {name: state for state, name in STATES.items()}
ROLES = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_ROLE_OF: dict[Any, str] = {"ROLE_USER": "user", 1: "user", "ROLE_AGENT": "agent", 2: "agent"}


# -- in ------------------------------------------------------------------------------


class MessageIn(Params):
    role: str | int
    parts: list[dict[str, Any]] = Field(min_length=1)
    message_id: str = Field(alias="messageId", min_length=1, max_length=200)
    task_id: str | None = Field(default=None, alias="taskId")
    context_id: str | None = Field(default=None, alias="contextId", max_length=200)
    reference_task_ids: list[str] | None = Field(
        default=None, alias="referenceTaskIds", max_length=100
    )
    metadata: dict[str, Any] | None = None

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str | int) -> str | int:
        if role not in _ROLE_OF:
            raise ValueError("role is ROLE_USER or ROLE_AGENT")
        return role


class Authentication(Params):
    scheme: str = Field(min_length=1, max_length=100)
    credentials: str | None = Field(default=None, max_length=8192)


class PushConfigIn(Params):
    """A TaskPushNotificationConfig (the task's id comes from the request)."""

    id: str | None = Field(default=None, max_length=200)
    task_id: str | None = Field(default=None, alias="taskId")
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
            scheme=auth.scheme if auth else None,
            credentials=auth.credentials if auth else None,
        )


class PushConfigQuery(Params):
    task_id: str = Field(alias="taskId", min_length=1)
    id: str = Field(min_length=1)


class PushConfigList(Params):
    task_id: str = Field(alias="taskId", min_length=1)


class SendConfiguration(Params):
    return_immediately: bool = Field(default=False, alias="returnImmediately")
    history_length: HistoryLength = Field(default=None, alias="historyLength")
    task_push_notification_config: PushConfigIn | None = Field(
        default=None, alias="taskPushNotificationConfig"
    )


class SendParams(Params):
    message: MessageIn
    configuration: SendConfiguration | None = None
    metadata: dict[str, Any] | None = None


class ListParams(Params):
    context_id: str | None = Field(default=None, alias="contextId", max_length=200)
    status: str | None = None
    page_size: int | None = Field(default=None, alias="pageSize", ge=1, le=100)
    page_token: str | None = Field(default=None, alias="pageToken")
    history_length: HistoryLength = Field(default=None, alias="historyLength")
    status_timestamp_after: datetime | None = Field(default=None, alias="statusTimestampAfter")
    include_artifacts: bool = Field(default=False, alias="includeArtifacts")

    @field_validator("status")
    @classmethod
    def _known_state(cls, status: str | None) -> str | None:
        if status is not None and status not in STATE_OF and status != "TASK_STATE_UNSPECIFIED":
            raise ValueError(f"the states are {', '.join(STATE_OF)}")
        return status

    @field_validator("status_timestamp_after", mode="before")
    @classmethod
    def _iso_text(cls, moment: Any) -> Any:
        # ProtoJSON writes a Timestamp as RFC 3339 text; numbers (seconds since the
        # epoch, "-1") are not one.
        if moment is not None and not (isinstance(moment, str) and "T" in moment.upper()):
            raise ValueError("an RFC 3339 time with its zone, e.g. 2025-10-28T10:30:00Z")
        return moment

    @field_validator("status_timestamp_after")
    @classmethod
    def _with_zone(cls, moment: datetime | None) -> datetime | None:
        if moment is not None and moment.tzinfo is None:
            raise ValueError("an ISO 8601 time with its zone, e.g. 2025-10-28T10:30:00Z")
        return moment


_CONTENT = ("text", "raw", "url", "data")


def _part(raw: dict[str, Any], index: int) -> Part:
    present = [key for key in _CONTENT if key in raw]
    if len(present) != 1:
        raise A2AError(
            Kind.INVALID_PARAMS,
            violations=[
                (("message", "parts", index), "a part holds exactly one of text, raw, url, data")
            ],
        )
    [key] = present
    if key == "text":
        if not isinstance(raw["text"], str):
            raise A2AError(
                Kind.INVALID_PARAMS, violations=[(("message", "parts", index, "text"), "not text")]
            )
        return Part("text", raw["text"])
    if key == "data":
        return Part("data", raw["data"])
    return Part("file", {key: raw[key], "mediaType": raw.get("mediaType")})


def send_request(raw: Any) -> SendRequest:
    sent = params(SendParams, raw)
    message, configuration = sent.message, sent.configuration or SendConfiguration()
    role = _ROLE_OF[message.role]
    return SendRequest(
        message=Message(
            role="user" if role == "user" else "agent",
            parts=[_part(part, i) for i, part in enumerate(message.parts)],
            message_id=message.message_id,
            task_id=message.task_id,
            context_id=message.context_id,
            metadata=message.metadata,
            reference_task_ids=tuple(message.reference_task_ids or ()),
        ),
        wait=not configuration.return_immediately,
        history_length=configuration.history_length,
        metadata=sent.metadata or {},
        push=push.neutral() if (push := configuration.task_push_notification_config) else None,
    )


# -- out -----------------------------------------------------------------------------


def timestamp(moment: datetime) -> str:
    """ISO 8601 in UTC with milliseconds: `2025-10-28T10:30:00.000Z`."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _parts(parts: list[Part]) -> list[dict[str, Any]]:
    return [{part.kind: part.value} for part in parts]


def message(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "messageId": m.message_id,
        "role": ROLES[m.role],
        "parts": _parts(m.parts),
    }
    if m.task_id is not None:
        out["taskId"] = m.task_id
    if m.context_id is not None:
        out["contextId"] = m.context_id
    return out


def status(update: TaskUpdate) -> dict[str, Any]:
    out: dict[str, Any] = {
        "state": STATES[update.state],
        "timestamp": timestamp(update.task.status_at),
    }
    said = agent_says(update)
    if said is not None:
        out["message"] = message(said)
    return out


def artifact(t: Task, parts: list[Part] | None = None) -> dict[str, Any]:
    """The task's result artifact: its result, or `parts` of it (a live chunk)."""
    shown = result_parts(t) if parts is None else parts
    return {"artifactId": f"{t.id}:result", "name": "result", "parts": _parts(shown)}


def task(view: View, *, artifacts: bool = True) -> dict[str, Any]:
    t = view.task
    out: dict[str, Any] = {
        "id": str(t.id),
        "contextId": context(t),
        "status": status(TaskUpdate(t, t.state)),
        "metadata": {**t.metadata, "taskservice": own_metadata(t)},
    }
    if artifacts and t.state is TaskState.COMPLETED:
        out["artifacts"] = [artifact(t)]
    if view.history:
        out["history"] = [message(m) for m in view.history]
    return out


def push_config(task_id: str, config: PushConfig) -> dict[str, Any]:
    """A TaskPushNotificationConfig as its owner set it."""
    out: dict[str, Any] = {"id": config.id, "taskId": task_id, "url": config.url}
    if config.token is not None:
        out["token"] = config.token
    if config.scheme is not None:
        out["authentication"] = {"scheme": config.scheme}
        if config.credentials is not None:
            out["authentication"]["credentials"] = config.credentials
    return out


def task_list(views: list[View], *, next_token: str, total: int, artifacts: bool) -> dict[str, Any]:
    """`pageSize` is the number of tasks on this page, as the official .NET and Java
    SDKs and the conformance kit read "the page size used for this response"."""
    return {
        "tasks": [task(view, artifacts=artifacts) for view in views],
        "nextPageToken": next_token,
        "pageSize": len(views),
        "totalSize": total,
    }


def events(update: Update, *, final: bool) -> list[dict[str, Any]]:
    """What a stream sends for `update`, each a StreamResponse (1.0 has no `final`:
    the stream ends)."""
    if isinstance(update, View):
        return [{"task": task(update)}]
    ids = {"taskId": str(update.task.id), "contextId": context(update.task)}
    if isinstance(update, ArtifactChunk):
        chunk = artifact(update.task, [Part("text", update.text)])
        body = {**ids, "artifact": chunk, "append": update.append, "lastChunk": False}
        return [{"artifactUpdate": body}]
    if update.artifact:
        body = {**ids, "artifact": artifact(update.task), "append": False, "lastChunk": True}
        return [{"artifactUpdate": body}]
    return [{"statusUpdate": {**ids, "status": status(update)}}]
