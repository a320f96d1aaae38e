"""Request and response bodies of the REST API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from taskservice.models import Task, TaskEvent
from taskservice.states import TaskState

NonEmptyText = Annotated[str, Field(min_length=1)]


class Request(BaseModel):
    # Unknown fields are rejected so a caller's typo surfaces instead of being ignored.
    model_config = ConfigDict(extra="forbid")


class TaskCreate(Request):
    input: NonEmptyText | dict[str, Any] = Field(
        description="What the agent should do: a prompt, or a JSON object given to it as JSON.",
        examples=["Summarise the A2A protocol in one sentence."],
    )
    system_prompt: str | None = Field(
        default=None, max_length=32_768, description="Overrides the profile's system prompt."
    )
    agent: str | None = Field(default=None, max_length=100, description="Agent profile name.")
    model: str | None = Field(
        default=None, max_length=200, description="A model from the operator's allow-list."
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Client data, stored and echoed back untouched."
    )
    parent_id: uuid.UUID | None = None
    context_id: str | None = Field(default=None, min_length=1, max_length=200)
    max_attempts: int | None = Field(default=None, ge=1, le=100)
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=86_400, description="Per attempt; the server default otherwise."
    )


class CancelRequest(Request):
    reason: str | None = Field(default=None, max_length=2_000)


class InputGiven(Request):
    answers: dict[str, Annotated[str, Field(max_length=65_536)]] | None = Field(
        default=None, description="Answers by question id (see the task's `input_request`)."
    )
    answer: str | None = Field(
        default=None, max_length=65_536, description="The answer, when one question is asked."
    )


class MessageIn(Request):
    text: str = Field(
        min_length=1,
        max_length=65_536,
        description="Free text; a leading `@<task id>` sends it to that task.",
    )
    context_id: str | None = Field(default=None, min_length=1, max_length=200)


class AgentOut(BaseModel):
    profile: str
    model: str
    system_prompt: str


class TaskOut(BaseModel):
    id: uuid.UUID
    state: TaskState
    input: Any
    result: Any = None
    error: dict[str, Any] | None = None
    agent: AgentOut
    metadata: dict[str, Any]
    parent_id: uuid.UUID | None = None
    context_id: str | None = None
    attempt: int
    max_attempts: int
    timeout_seconds: float | None = None
    cancel_reason: str | None = None
    input_request: Any = None
    usage: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @classmethod
    def of(cls, task: Task) -> TaskOut:
        return cls(
            id=task.id,
            state=task.state,
            input=task.input,
            result=task.result,
            error=task.error,
            agent=AgentOut(**task.agent.to_json()),
            metadata=task.metadata,
            parent_id=task.parent_id,
            context_id=task.context_id,
            attempt=task.attempt,
            max_attempts=task.max_attempts,
            timeout_seconds=task.timeout_seconds,
            cancel_reason=task.cancel_reason,
            input_request=task.input_request,
            usage=task.usage,
            created_at=task.created_at,
            updated_at=task.updated_at,
            started_at=task.started_at,
            finished_at=task.finished_at,
        )


class TaskList(BaseModel):
    tasks: list[TaskOut]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next (older) page; null on the last page."
    )


class EventOut(BaseModel):
    id: int = Field(description="Global event id (increasing across all tasks).")
    task_id: uuid.UUID
    seq: int = Field(description="Position in this task's event log: 1, 2, 3 … without gaps.")
    type: str
    data: dict[str, Any]
    created_at: datetime

    @classmethod
    def of(cls, event: TaskEvent) -> EventOut:
        return cls(
            id=event.id,
            task_id=event.task_id,
            seq=event.seq,
            type=event.type,
            data=event.data,
            created_at=event.created_at,
        )


class EventPage(BaseModel):
    events: list[EventOut]
    next_after: int | None = Field(
        description="Pass as `after` to read on; null when this page reached the end."
    )


class MessageOut(BaseModel):
    position: int = Field(description="0, 1, 2 … in conversation order.")
    kind: str = Field(description="`request` (to the model) or `response` (from it).")
    message: dict[str, Any] = Field(description="The complete pydantic-ai message.")
    attempt: int
    created_at: datetime


class MessagePage(BaseModel):
    messages: list[MessageOut]
    next_after: int | None


class CallOut(BaseModel):
    id: int
    tool_call_id: str
    name: str
    arguments: Any
    status: str = Field(description="pending, in_progress, completed or failed.")
    result: Any = None
    error: str | None = None
    attempt: int
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class CallPage(BaseModel):
    calls: list[CallOut]
    next_after: int | None


class ProfileOut(BaseModel):
    name: str
    description: str
    model: str
    system_prompt: str
    tools: list[str]
    request_limit: int
    output: str


class ProfileList(BaseModel):
    agents: list[ProfileOut]


class RoutedOut(BaseModel):
    task: TaskOut
    decision: str = Field(description="explicit, single, model or new.")
    confidence: float
    reason: str


class StreamTokenRequest(Request):
    task_id: uuid.UUID | None = Field(
        default=None, description="Only this task's stream; omit for every task of the tenant."
    )
    ttl_seconds: int = Field(default=300, ge=10, le=3600)


class StreamToken(BaseModel):
    token: str = Field(description="Pass as `?token=` to an event stream.")
    expires_at: datetime
    task_id: uuid.UUID | None


class Health(BaseModel):
    status: str
    schema_revision: str | None = None
