"""JSON views of the domain that more than one transport shows: the REST API's
task, and the task inside a webhook payload are the same document.

Below the transports (`api/`) and the runners (the webhook dispatcher), so both
import it and neither imports the other.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, Field

from taskservice.domain.models import Task
from taskservice.domain.states import TaskState


class AgentOut(BaseModel):
    profile: str
    model: str
    system_prompt: str


class ForkedFrom(BaseModel):
    task_id: uuid.UUID | None = Field(
        description="The source task (null once it was deleted: the fork keeps its copy)."
    )
    at: int = Field(description="How many of the source's messages the fork began with.")


class PausedOut(BaseModel):
    by: str = Field(description="Who paused it: `key:<API key id>`, or `open` (open mode).")
    at: datetime = Field(description="When it was paused.")
    reason: str | None = None
    scope: str = Field(
        default="task",
        description="`task`: paused alone; `agent`: held by its agent profile's brake "
        "(`POST /v1/agents/{name}/pause`), let go when the brake is released.",
    )


class TaskOut(BaseModel):
    id: uuid.UUID
    state: TaskState
    input: Any
    result: Any = None
    error: dict[str, Any] | None = None
    agent: AgentOut
    metadata: dict[str, Any]
    parent_id: uuid.UUID | None = None
    detached: bool = Field(
        default=False, description="A subtask that is not cancelled with its parent."
    )
    context_id: str | None = None
    attempt: int = Field(description="Claims of the task by a worker so far.")
    max_attempts: int = Field(
        description="How many of its attempts may be lost (a worker's lease expiring) "
        "before it fails."
    )
    lost_attempts: int = Field(default=0, description="Attempts lost so far, of max_attempts.")
    timeout_seconds: float | None = None
    cancel_reason: str | None = None
    input_request: Any = None
    usage: dict[str, Any] = Field(
        description="Its model requests so far (empty before the first): `input_tokens`, "
        "`output_tokens`, `requests`, and what they cost: `cost` (US dollars as an exact "
        'decimal string, e.g. `"0.0005412"`, priced by genai-prices or '
        "`TASKSERVICE_MODEL_PRICES`; null when requests were unpriced and none priced "
        'added to it, never a claimed `"0"`), `currency` (`USD`), `unpriced_requests` '
        "(requests nobody prices: while above 0, `cost` covers only the others). A "
        "fork's starts empty; a subtask has its own. Read by id (`GET /v1/tasks/{task_id}`), "
        "a task with subtasks also shows `subtree`: the same figures for it and every task "
        "below it together, with `tasks`, how many that is."
    )
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    followups: int = Field(default=0, description="Follow-up messages sent to the task.")
    followups_read: int = Field(default=0, description="How many of them its run has read.")
    priority: int = Field(default=0, description="Claimed higher first (-1000 … 1000).")
    run_at: datetime | None = Field(
        default=None,
        description="Not started before this: the submission time unless it asked later.",
    )
    forked_from: ForkedFrom | None = Field(
        default=None,
        description="A fork (`POST /v1/tasks/{task_id}/fork`): the task and position its "
        "conversation was copied from.",
    )
    paused: PausedOut | None = Field(
        default=None,
        description="Held, whatever its state (null: not paused): the claim never takes "
        "a paused task, a running one gives its worker back, one waiting for input "
        "waits on and, answered, runs only once resumed (`POST /v1/tasks/{id}/resume`). "
        "A task that finished while paused (cancelled) keeps the pause it ended with; "
        "`GET /v1/tasks?paused=true` lists only the tasks held now.",
    )

    @classmethod
    def of(cls, task: Task) -> Self:
        return cls(
            id=task.id,
            state=task.state,
            input=task.input,
            result=task.result,
            error=task.error,
            agent=AgentOut(**task.agent.to_json()),
            metadata=task.metadata,
            parent_id=task.parent_id,
            detached=task.detached,
            context_id=task.context_id,
            attempt=task.attempt,
            max_attempts=task.max_attempts,
            lost_attempts=task.lost_attempts,
            timeout_seconds=task.timeout_seconds,
            cancel_reason=task.cancel_reason,
            input_request=task.input_request,
            usage=task.usage,
            created_at=task.created_at,
            updated_at=task.updated_at,
            started_at=task.started_at,
            finished_at=task.finished_at,
            followups=task.followups,
            followups_read=task.followups_read,
            priority=task.priority,
            run_at=task.run_at,
            forked_from=ForkedFrom(task_id=task.forked_from, at=task.forked_at)
            if task.forked_at is not None
            else None,
            paused=PausedOut.model_validate(task.paused) if task.paused else None,
        )
