"""Domain objects. Pure: nothing here does I/O or imports the project's I/O layers."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, Literal

from taskservice.domain.forks import Fork
from taskservice.domain.states import TaskState

JSON = Any


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """Which agent runs a task: a profile, its model, and the system prompt in force."""

    profile: str
    model: str
    system_prompt: str

    def to_json(self) -> dict[str, str]:
        return {"profile": self.profile, "model": self.model, "system_prompt": self.system_prompt}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentSpec:
        return cls(
            profile=data["profile"], model=data["model"], system_prompt=data["system_prompt"]
        )


@dataclass(frozen=True, slots=True)
class Lease:
    """What fences a worker's writes: it owns the task for this attempt only."""

    owner: str
    attempt: int


@dataclass(frozen=True, slots=True)
class NewTask:
    tenant: str
    input: JSON
    agent: AgentSpec
    metadata: dict[str, Any]
    max_attempts: int
    timeout_seconds: float | None = None
    parent_id: uuid.UUID | None = None
    context_id: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    detached: bool = False  # a subtask that outlives its parent's failure or cancel
    # The span it continues (`common/tracing.py`).
    trace_context: dict[str, str] | None = None
    priority: int = 0  # claimed higher first
    run_at: datetime | None = None  # not claimed before; None: at once
    quiet: bool = False  # no live output until a stream asks for it (`Task.quiet`)
    fork: Fork | None = None  # its ledger copied from another task's (`domain/forks.py`)
    # Its budget (`domain/budgets.py`): US dollars, and input + output tokens of its
    # own model requests (None: not limited).
    max_cost: Decimal | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Task:
    id: uuid.UUID
    tenant: str
    state: TaskState
    input: JSON
    result: JSON
    error: dict[str, Any] | None
    agent: AgentSpec
    metadata: dict[str, Any]
    parent_id: uuid.UUID | None
    context_id: str | None
    idempotency_key: str | None
    request_hash: str | None
    attempt: int
    max_attempts: int
    timeout_seconds: float | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    cancel_reason: str | None
    input_request: JSON
    usage: dict[str, Any]
    event_seq: int
    created_at: datetime
    updated_at: datetime  # the last event
    status_at: datetime  # the last change of state
    started_at: datetime | None
    finished_at: datetime | None
    followups: int = 0  # follow-up messages queued for it (`Followup`)
    followups_read: int = 0  # how many of them its runs have written into the conversation
    detached: bool = False  # a subtask not cancelled when its parent fails or is cancelled
    trace_context: dict[str, str] | None = None  # W3C headers of the span it continues
    priority: int = 0  # claimed higher first, then by run_at, then FIFO
    run_at: datetime | None = None  # not claimed before this (None: the creation time)
    delayed: bool = False  # pending until run_at, or throttled, until wake_at
    wake_at: datetime | None = None  # when a delayed task becomes claimable
    lost_attempts: int = 0  # leases that expired (attempts lost, of max_attempts)
    # The model request slot a throttled task reserved (`worker/budget.py`): on the
    # claim that resumes it only.
    paid_slot: dict[str, Any] | None = None
    # Its model requests are not streamed (no live output) until a stream asks for
    # its deltas: submitted by a call that waits without a stream
    # (`following/deltas.LiveFeed`).
    quiet: bool = False
    # Delegated to a remote A2A agent: {agent, message_id, task_id} (`worker/delegation.py`).
    remote: dict[str, Any] | None = None
    # Forked from that task's first `forked_at` messages (`usecases/forks.py`); None
    # for a task that is not a fork (`forked_at` stays when the source is deleted).
    forked_from: uuid.UUID | None = None
    forked_at: int | None = None
    # Held (`usecases/tasks.TaskService.pause`): {by, at, reason, scope}, `scope` "task"
    # (paused alone) or "agent" (its profile's brake); None: not paused. The claim
    # never takes a paused task, whatever its state.
    paused: dict[str, Any] | None = None
    # Its budget (`domain/budgets.py`, `worker/spend.py`): what its own model requests
    # may cost in US dollars, and take in tokens (None: not limited).
    max_cost: Decimal | None = None
    max_tokens: int | None = None

    @property
    def questions(self) -> list[dict[str, Any]]:
        """The questions the task waits on (`id`, `question`, …): none unless it is
        `input_required` on questions (rather than on its subtasks)."""
        request = self.input_request if isinstance(self.input_request, dict) else {}
        if self.state is not TaskState.INPUT_REQUIRED or request.get("kind") not in (
            "questions",
            "approvals",  # questions asked in the same response as the calls
        ):
            return []
        return [q for q in request.get("questions", []) if isinstance(q, dict) and q.get("id")]

    @property
    def pause_note(self) -> str | None:
        """What a status message says of the task's pause (A2A, MCP): None unless it is
        paused and not finished."""
        if self.paused is None or self.state.is_terminal:
            return None
        by = self.paused.get("by")
        if self.paused.get("scope") == "agent":
            who = f"its agent profile {self.agent.profile!r} was paused by {by}"
        else:
            who = f"paused by {by}"
        reason = self.paused.get("reason")
        why = f" ({reason})" if reason else ""
        return f"paused: {who}{why}; it does not run until it is resumed"

    @property
    def approvals(self) -> list[dict[str, Any]]:
        """The tool calls the task waits on a person's approval of (`id`, `tool`,
        `arguments`, `schema`, `note`; `decision` once decided)."""
        request = self.input_request if isinstance(self.input_request, dict) else {}
        if self.state is not TaskState.INPUT_REQUIRED or request.get("kind") != "approvals":
            return []
        return [a for a in request.get("approvals", []) if isinstance(a, dict) and a.get("id")]

    @property
    def unread(self) -> int:
        """Follow-ups queued that no run has read yet."""
        return self.followups - self.followups_read

    @property
    def lease(self) -> Lease | None:
        return Lease(self.lease_owner, self.attempt) if self.lease_owner else None


class EventType(StrEnum):
    """What happened; an event's `data` holds, by type: `state_change` from, to (and
    worker, attempt, cause, answered or reason); `claimed`, `released`, `recovered`
    worker, attempt (and reason); `stalled` worker, quiet_since; `throttled` worker,
    attempt, model, budgets, until, wait_seconds, reason; `followup` seq,
    preview; `message` position,
    kind, parts; `usage` input_tokens, output_tokens, requests, cost, currency,
    unpriced_requests; `tool_call` and
    `tool_result` tool_call_id, name, status, arguments or result or error; `progress`
    percent, note; `log` level (debug, info, warning, error), message (and `dropped:
    true` on the line saying the task reached its limit of lines); `webhook_disabled`
    the webhook and why; `paused` by, reason, scope; `resumed` by; `approval`
    tool_call_id, tool, approved, by, via, arguments or reason."""

    STATE_CHANGE = "state_change"  # from, to; worker and attempt, cause, answered, reason
    CLAIMED = "claimed"  # a worker took over a running task: worker, attempt
    RELEASED = "released"  # a worker gave it back: worker, attempt, reason
    RECOVERED = "recovered"  # a lost worker's lease expired: worker, attempt
    STALLED = "stalled"  # running, but nothing recorded for a while: worker, quiet_since
    # waiting, without a worker, for its model's rate limit budget: worker, attempt,
    # model, budgets, until, wait_seconds, reason (budget, provider_429)
    THROTTLED = "throttled"
    FOLLOWUP = "followup"  # a message for the run was queued: seq, preview
    MESSAGE = "message"  # a complete model message: position, kind, parts (previews)
    USAGE = "usage"  # tokens, requests, cost so far (`domain/views.TaskOut.usage`)
    TOOL_CALL = "tool_call"  # a tool call started: tool_call_id, name, status, arguments
    TOOL_RESULT = "tool_result"  # it ended: tool_call_id, name, status, result or error
    PROGRESS = "progress"  # the agent's report_progress: percent, note
    LOG = "log"  # a line to read: level (debug, info, warning, error), message; dropped
    WEBHOOK_DISABLED = "webhook_disabled"  # a failing webhook was disabled
    # held: by (who), reason, scope ("task": paused alone, "agent": its profile's brake)
    PAUSED = "paused"
    RESUMED = "resumed"  # let go: by
    # a person approved or denied a tool call: tool_call_id, tool, approved, by, via,
    # arguments (approved: those the call is made with), reason (denied)
    APPROVAL = "approval"


@dataclass(frozen=True, slots=True)
class Followup:
    """A message sent to a live task, queued for its run, which reads it at its next
    model request. `seq`: 1, 2, … per task; `key`: the sender's, if it gave one."""

    task_id: uuid.UUID
    seq: int
    input: JSON
    key: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TaskEvent:
    id: int
    task_id: uuid.UUID
    seq: int
    type: str
    data: dict[str, Any]
    created_at: datetime


DeltaKind = Literal["text", "tool_call", "thinking"]


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of the model response a run is streaming: `text` extends part `part`
    of the response that will be message `position` of the conversation (attempt
    `attempt`) at character `offset` (Unicode code points). Ephemeral: never a row of
    the event log; the complete message is persisted when it completes. Offset 0 on
    a part that has text starts it over (a new attempt, or a part replaced)."""

    task_id: uuid.UUID
    attempt: int
    position: int
    part: int
    kind: DeltaKind
    offset: int
    text: str
    tool: str | None = None  # a tool call's name

    @property
    def end(self) -> int:
        return self.offset + len(self.text)


CountMode = Literal["exact", "estimate"]


@dataclass(frozen=True, slots=True)
class Total:
    """How many rows a list matches, when asked (`db.counts`)."""

    value: int | None
    note: str | None = None  # why there is no value, or what kind of value it is


@dataclass(frozen=True, slots=True)
class TaskPage:
    tasks: list[Task]
    next_cursor: str | None
    total: Total | None = None


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[TaskEvent]
    next_after: int | None  # the seq to read on from; None when the log was read to its end


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a firehose shows: by type, by the state a state change reaches,
    and by the task's context, parent and agent profile."""

    types: frozenset[str] = frozenset()
    states: frozenset[str] = frozenset()
    context_id: str | None = None
    parent_id: uuid.UUID | None = None
    agent: str | None = None


@dataclass(frozen=True, slots=True)
class TaskFilter:
    states: frozenset[TaskState] = frozenset()
    parent_id: uuid.UUID | None = None
    context_id: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    agent: str | None = None  # the agent profile's name
    forked_from: uuid.UUID | None = None  # its forks (`Task.forked_from`)
    paused: bool | None = None  # only paused tasks (True), only those not paused (False)


@dataclass(frozen=True, slots=True)
class StatusQuery:
    """A list by status time (A2A's ListTasks): by state, context, and status time
    from `after` on; `cursor` is the last (status time, id) of the previous page."""

    state: TaskState | None = None
    context_id: str | None = None
    after: datetime | None = None
    cursor: tuple[datetime, uuid.UUID] | None = None


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: uuid.UUID
    tenant: str
    name: str | None
    prefix: str
    created_at: datetime
    revoked_at: datetime | None
    admin: bool = False  # an operator's key: also the admin routes (`keys create --admin`)
