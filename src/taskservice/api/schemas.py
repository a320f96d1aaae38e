"""Request and response bodies of the REST API."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal, Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from taskservice.api.params import INT32_MAX
from taskservice.domain.agent_options import AGENT, MODEL, SYSTEM_PROMPT
from taskservice.domain.budgets import MAX_COST_LIMIT, MAX_TOKENS_LIMIT
from taskservice.domain.content import CONTEXT_ID_MAX_LENGTH
from taskservice.domain.forks import ForkRequest
from taskservice.domain.models import ApiKey, EventType, TaskEvent, Total
from taskservice.domain.requests import TaskRequest
from taskservice.domain.schedules import PRIORITY_MAX, PRIORITY_MIN
from taskservice.domain.states import TaskState
from taskservice.domain.views import TaskOut
from taskservice.domain.webhooks import (
    DEFAULT_STATES,
    BudgetEvent,
    Delivery,
    Subscription,
    WebhookEvent,
    WebhookRequest,
)

NonEmptyText = Annotated[str, Field(min_length=1)]


class Request(BaseModel):
    # Unknown fields are rejected so a caller's typo surfaces instead of being ignored.
    model_config = ConfigDict(extra="forbid")


class _WebhookBase(Request):
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="https URL called with a signed POST (Standard Webhooks) when the task "
        "reaches one of `states`. Private, loopback and metadata addresses are refused "
        "unless the operator allows them.",
        examples=["https://alerts.example.com/hooks/taskservice"],
    )
    secret: str | None = Field(
        default=None,
        max_length=200,
        description="Your own signing secret (`whsec_` + base64 of 24-64 bytes); "
        "otherwise one is generated and shown in the response, once.",
    )

    def _states(self) -> Sequence[WebhookEvent] | None:
        raise NotImplementedError

    def request(self, filters: dict[str, Any] | None = None) -> WebhookRequest:
        states = self._states()
        return WebhookRequest(
            url=self.url,
            states=tuple(states) if states else DEFAULT_STATES,
            secret=self.secret,
            filters=filters or {},
        )


class WebhookIn(_WebhookBase):
    """A task's own webhook: task states only."""

    states: list[TaskState] | None = Field(
        default=None,
        min_length=1,
        description="States to be notified of; default input_required and the terminal ones.",
    )

    def _states(self) -> Sequence[WebhookEvent] | None:
        return self.states


class WebhookFilters(Request):
    agents: list[Annotated[str, Field(min_length=1, max_length=100)]] | None = Field(
        default=None, max_length=100, description="Only tasks run by one of these profiles."
    )
    context_id: str | None = Field(default=None, min_length=1, max_length=200)
    metadata: dict[str, Any] | None = Field(
        default=None, description="Only tasks whose metadata contains this object."
    )


_EVENTS = (
    "States to be notified of, for every task of the tenant (default input_required and "
    "the terminal ones); and `budget.80`, `budget.100`: the tenant's spend budget reached "
    "80% or 100% (once each per period; see the webhooks guide)."
)


class WebhookCreate(_WebhookBase):
    """A tenant-wide webhook: task states and budget events."""

    states: list[TaskState | BudgetEvent] | None = Field(
        default=None, min_length=1, description=_EVENTS
    )
    filters: WebhookFilters | None = Field(
        default=None,
        description="Which tasks (all when absent); budget events are not filtered.",
    )

    def _states(self) -> Sequence[WebhookEvent] | None:
        return self.states


class WebhookUpdate(Request):
    url: str | None = Field(default=None, min_length=1, max_length=2048)
    states: list[TaskState | BudgetEvent] | None = Field(
        default=None, min_length=1, description="Budget events: a tenant-wide webhook's only."
    )
    filters: WebhookFilters | None = None
    enabled: bool | None = Field(
        default=None, description="true re-enables a disabled webhook and clears its failures."
    )


class SecretRotation(Request):
    secret: str | None = Field(default=None, max_length=200, description="Else generated.")
    overlap_seconds: float | None = Field(
        default=None,
        ge=0,
        le=7 * 86_400,
        description="How long the old secret keeps signing too; the server default otherwise.",
    )


class WebhookOut(BaseModel):
    id: uuid.UUID
    url: str
    states: list[TaskState | BudgetEvent]
    task_id: uuid.UUID | None = Field(description="Set for a task's own webhook.")
    filters: dict[str, Any]
    enabled: bool
    disabled_reason: str | None = None
    disabled_at: datetime | None = None
    consecutive_failures: int
    failing_since: datetime | None = None
    previous_secret_expires_at: datetime | None = Field(
        default=None, description="Until then the previous secret signs too (rotation)."
    )
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, sub: Subscription) -> WebhookOut:
        return cls(**cls._fields(sub))

    @classmethod
    def _fields(cls, sub: Subscription) -> dict[str, Any]:
        return {
            "id": sub.id,
            "url": sub.url,
            "states": [_event(s) for s in sub.states],
            "task_id": sub.task_id,
            "filters": sub.filters,
            "enabled": sub.enabled,
            "disabled_reason": sub.disabled_reason,
            "disabled_at": sub.disabled_at,
            "consecutive_failures": sub.consecutive_failures,
            "failing_since": sub.failing_since,
            "previous_secret_expires_at": sub.previous_secret_expires_at,
            "created_at": sub.created_at,
            "updated_at": sub.updated_at,
        }


class WebhookWithSecret(WebhookOut):
    secret: str = Field(description="The signing secret: shown here only, keep it.")

    @classmethod
    def of(cls, sub: Subscription) -> WebhookWithSecret:
        return cls(**cls._fields(sub), secret=sub.secret)


class WebhookList(BaseModel):
    webhooks: list[WebhookOut]
    next_cursor: str | None


class AttemptOut(BaseModel):
    attempt: int
    started_at: datetime
    duration_ms: float
    status_code: int | None = Field(description="null when no answer came (see error).")
    error: str | None = None
    dispatcher: str


def _event(value: str) -> TaskState | BudgetEvent:
    return BudgetEvent(value) if value.startswith("budget.") else TaskState(value)


class DeliveryOut(BaseModel):
    id: uuid.UUID = Field(description="Also the `webhook-id` header of every attempt.")
    webhook_id: uuid.UUID
    task_id: uuid.UUID | None = Field(description="The task, for a task's state change.")
    alert_id: int | None = Field(
        default=None, description="The budget alert, for `budget.80` and `budget.100`."
    )
    state: TaskState | BudgetEvent = Field(description="The task's state, or the budget event.")
    event_seq: int | None = Field(description="The state change's `seq` in the task's events.")
    occurred_at: datetime
    status: str = Field(description="pending, succeeded or failed.")
    attempts: int
    in_flight: bool
    next_attempt_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = None
    created_at: datetime
    delivered_at: datetime | None = None
    attempt_log: list[AttemptOut]

    @classmethod
    def of(cls, d: Delivery) -> DeliveryOut:
        return cls(
            id=d.id,
            webhook_id=d.subscription_id,
            task_id=d.task_id,
            alert_id=d.alert_id,
            state=_event(d.state),
            event_seq=d.event_seq,
            occurred_at=d.occurred_at,
            status=d.status,
            attempts=d.attempts,
            in_flight=d.in_flight,
            next_attempt_at=d.next_attempt_at,
            last_status_code=d.last_status_code,
            last_error=d.last_error,
            created_at=d.created_at,
            delivered_at=d.delivered_at,
            attempt_log=[
                AttemptOut(
                    attempt=a.attempt,
                    started_at=a.started_at,
                    duration_ms=a.duration_ms,
                    status_code=a.status_code,
                    error=a.error,
                    dispatcher=a.dispatcher,
                )
                for a in d.log
            ],
        )


class DeliveryPage(BaseModel):
    deliveries: list[DeliveryOut]
    next_cursor: str | None


def max_cost_field(description: str) -> Any:
    """`max_cost`: US dollars above 0, a decimal string or a number, kept exact."""
    return Field(
        default=None,
        gt=0,
        le=MAX_COST_LIMIT,
        allow_inf_nan=False,
        description=description,
        examples=["0.50"],
    )


def max_tokens_field(description: str) -> Any:
    return Field(default=None, gt=0, le=MAX_TOKENS_LIMIT, description=description)


class TaskTemplate(Request):
    """The fields of a task to run: submitted now, or at each slot of a schedule."""

    input: NonEmptyText | dict[str, Any] = Field(
        description="What the agent should do: a prompt, or a JSON object given to it as JSON.",
        examples=["Summarise the A2A protocol in one sentence."],
    )

    @field_validator("input", mode="before")
    @classmethod
    def _text_or_object(cls, value: Any) -> Any:
        """One error a person reads for what is neither (the union's own would be one
        per member: `constrained-str: …; dict[str,any]: …`)."""
        if (isinstance(value, str) and value) or isinstance(value, dict):
            return value
        raise ValueError("input must be a non-empty text or a JSON object")

    system_prompt: str | None = Field(
        default=None,
        max_length=SYSTEM_PROMPT.max_length,
        description="Overrides the profile's system prompt (or `metadata.system_prompt`).",
    )
    agent: str | None = Field(
        default=None,
        max_length=AGENT.max_length,
        description="Agent profile name (or `metadata.config_name`).",
    )
    model: str | None = Field(
        default=None,
        max_length=MODEL.max_length,
        description="A model from the operator's allow-list (or `metadata.model_name`).",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="Client data, stored and echoed back untouched. As in the original "
        "design, `system_prompt`, `model_name` and `config_name` here configure the agent "
        "when the field of that name is absent; both given, they must agree.",
    )
    context_id: str | None = Field(default=None, min_length=1, max_length=CONTEXT_ID_MAX_LENGTH)
    max_attempts: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="How many attempts the task may lose to workers that stop (their "
        "lease expiring) before it fails; unset: the service's default.",
    )
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=86_400, description="Per attempt; the server default otherwise."
    )
    max_cost: Decimal | None = max_cost_field(
        "Its budget in US dollars (a decimal string or a number, kept exact): before each "
        "model request the run checks what the request may cost at most; one that would "
        "pass it is not sent, and the task fails with `error.code` `budget_exhausted`, "
        "keeping its partial result (fork it with a larger budget to go on). Unset: its "
        "agent profile's default, if any. A model nobody prices counts 0 here (its "
        "requests are counted in `usage.unpriced_requests`)."
    )
    max_tokens: int | None = max_tokens_field(
        "Its budget of tokens (input + output of its own model requests), checked like "
        "`max_cost`. Unset: its agent profile's default, if any."
    )
    priority: int = Field(
        default=0,
        ge=PRIORITY_MIN,
        le=PRIORITY_MAX,
        description="Higher runs first within the tenant (FIFO within a priority); tenants "
        "still share the workers evenly. Subtasks inherit it.",
    )


class TaskCreate(TaskTemplate):
    parent_id: uuid.UUID | None = None
    detached: bool = Field(
        default=False,
        description="With `parent_id`: the subtask runs on when its parent fails, times "
        "out or is cancelled (by default it is cancelled with it).",
    )
    webhooks: list[WebhookIn] = Field(
        default_factory=list,
        description="The task's own webhooks, registered with it (before any state change).",
    )
    run_at: AwareDatetime | None = Field(
        default=None,
        description="Not started before this time (with its UTC offset): the task stays "
        "`pending` until then and is claimed within a second of it. Past or absent: at once.",
        examples=["2026-12-01T09:00:00Z"],
    )

    def request(self, tenant: str, idempotency_key: str | None) -> TaskRequest:
        """The submit this body asks for: each field is the request's of that name."""
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        fields["webhooks"] = tuple(hook.request() for hook in self.webhooks)
        return TaskRequest(tenant=tenant, idempotency_key=idempotency_key, **fields)


class TaskFork(Request):
    """A fork: a new task whose conversation begins as the source's first `at`
    messages, and whose run continues from there (no tool call recorded before `at`
    runs again). Every other field, unset, is the source's."""

    at: int | None = Field(
        default=None,
        ge=0,
        le=INT32_MAX,
        description="How many of the source's messages the fork begins with (its "
        "conversation's positions are 0, 1, …): 0 starts over; unset, all of them (run "
        "it again from where it stopped). Not between a response's tool calls and the "
        "request carrying their results, nor after the model's answer unless `input` is "
        "given: a 422 names the valid positions.",
        examples=[4],
    )
    input: NonEmptyText | dict[str, Any] | None = Field(
        default=None,
        description="A message added after the copied ones, as the user's next message "
        "(at 0: the fork's prompt). To edit the user message at position N, fork at N "
        "with the new text.",
        examples=["Now in French."],
    )
    system_prompt: str | None = Field(default=None, max_length=SYSTEM_PROMPT.max_length)
    agent: str | None = Field(
        default=None,
        max_length=AGENT.max_length,
        description="Another agent profile (its system prompt and model, unless given).",
    )
    model: str | None = Field(
        default=None,
        max_length=MODEL.max_length,
        description="A model from the operator's allow-list.",
    )
    metadata: dict[str, Any] | None = Field(
        default=None, description="Replaces the source's metadata (unset: a copy of it)."
    )
    max_attempts: int | None = Field(default=None, ge=1, le=100)
    timeout_seconds: float | None = Field(default=None, gt=0, le=86_400)
    max_cost: Decimal | None = max_cost_field(
        "The fork's budget in US dollars (unset: the source's). A fork's spend starts at "
        "zero: how a task that failed `budget_exhausted` goes on."
    )
    max_tokens: int | None = max_tokens_field("The fork's budget of tokens (unset: the source's).")
    webhooks: list[WebhookIn] = Field(
        default_factory=list,
        description="The fork's own webhooks (the source's are not copied).",
    )

    def request(self, tenant: str, task_id: str, idempotency_key: str | None) -> ForkRequest:
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        fields["webhooks"] = tuple(hook.request() for hook in self.webhooks)
        return ForkRequest(
            tenant=tenant, task_id=task_id, idempotency_key=idempotency_key, **fields
        )


class CancelRequest(Request):
    reason: str | None = Field(default=None, max_length=2_000)


class PauseRequest(Request):
    reason: str | None = Field(
        default=None, max_length=2_000, description="Why: shown on the task and its event."
    )


class BrakeOut(BaseModel):
    """An agent profile held for the tenant by the operators' brake."""

    by: str = Field(description="Who pulled it: `key:<API key id>`, or `open` (open mode).")
    at: datetime
    reason: str | None = None


class BrakeChange(BaseModel):
    """An agent profile's brake pulled or released."""

    name: str
    paused: BrakeOut | None = Field(
        description="The brake now (null: released): the profile's tasks are held while "
        "it is on, and a task submitted to it is created paused."
    )
    tasks: int = Field(
        description="How many tasks this request paused (pulled) or resumed (released): "
        "0 when the brake was already in that position."
    )


class TaskCreated(TaskOut):
    webhooks: list[WebhookWithSecret] = Field(
        default_factory=list,
        description="The webhooks registered with the task, with their secrets: the one "
        "answer that shows them. A task as read later (`GET /v1/tasks/{task_id}`) has no "
        "`webhooks`; `GET /v1/tasks/{task_id}/webhooks` lists them, without secrets.",
    )


class Counted(BaseModel):
    """A page that can say how many rows its list has in all (`?count=`)."""

    total: int | None = Field(
        default=None,
        description="With `count`: the rows the filters match, on every page alike; "
        "null without `count`, or when an exact count ran out of time.",
    )
    total_note: str | None = Field(
        default=None,
        description="`estimate` for an estimate; why `total` is null after a timeout.",
    )

    def counted(self, total: Total | None) -> Self:
        if total is not None:
            self.total, self.total_note = total.value, total.note
        return self


class TaskList(Counted):
    tasks: list[TaskOut]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next (older) page; null on the last page."
    )


class EventOut(BaseModel):
    id: int = Field(description="Global event id (increasing across all tasks).")
    task_id: uuid.UUID
    seq: int = Field(description="Position in this task's event log: 1, 2, 3 … without gaps.")
    type: EventType
    data: dict[str, Any]
    created_at: datetime

    @classmethod
    def of(cls, event: TaskEvent) -> EventOut:
        return cls(
            id=event.id,
            task_id=event.task_id,
            seq=event.seq,
            type=EventType(event.type),
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


class MessagePage(Counted):
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
    approval: dict[str, Any] | None = Field(
        default=None,
        description="A call that waited for a person's approval: the decision (`approved`, "
        "`by`, `via`, `at`; approved: the `arguments` it is made with and whether they "
        "were `edited`; denied: the `reason`).",
    )
    attempt: int
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class CallPage(Counted):
    calls: list[CallOut]
    next_after: int | None


class ApprovalsOut(BaseModel):
    tools: list[str] = Field(description="Tool names or patterns whose calls wait.")
    note: str = Field(description="Shown with each request.")
    timeout_seconds: float | None = Field(
        default=None, description="How long a call may wait (null: as long as it takes)."
    )
    on_timeout: str = Field(description="`deny` (the run goes on) or `fail` (the task fails).")


class ProfileOut(BaseModel):
    name: str
    description: str
    model: str
    system_prompt: str
    tools: list[str]
    request_limit: int
    output: str
    paused: BrakeOut | None = Field(
        default=None,
        description="The operators' brake on this profile for the tenant (null: none): "
        "`POST /v1/agents/{name}/pause` and `/resume`.",
    )
    approvals: ApprovalsOut | None = Field(
        default=None,
        description="The tool calls of this profile that wait for a person's approval "
        "(null: none).",
    )


class ProfileList(BaseModel):
    agents: list[ProfileOut]


class StreamTokenRequest(Request):
    task_id: uuid.UUID | None = Field(
        default=None, description="Only this task's stream; omit for every task of the tenant."
    )
    ttl_seconds: int = Field(default=300, ge=10, le=3600)


class StreamToken(BaseModel):
    token: str = Field(description="Pass as `?token=` to an event stream.")
    expires_at: datetime
    task_id: uuid.UUID | None


class ApiKeyCreate(Request):
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="What the key is for, to recognise it in the list.",
        examples=["ci"],
    )


class ApiKeyOut(BaseModel):
    """An API key of the caller's tenant: never the key itself, nor its hash."""

    id: uuid.UUID
    name: str | None
    prefix: str = Field(description="The key's first characters, to recognise it.")
    created_at: datetime
    revoked_at: datetime | None
    current: bool = Field(
        description="The key this request was made with (revoking it signs you out)."
    )
    admin: bool = Field(
        default=False,
        description="An operator's key (made by `taskservice keys create --admin` only): "
        "it may also call the admin routes.",
    )

    @classmethod
    def of(cls, key: ApiKey, current: uuid.UUID | None) -> Self:
        return cls(
            id=key.id,
            name=key.name,
            prefix=key.prefix,
            created_at=key.created_at,
            revoked_at=key.revoked_at,
            current=key.id == current,
            admin=key.admin,
        )


class ApiKeyCreated(ApiKeyOut):
    key: str = Field(description="The API key: shown in this response only, keep it.")
    ended_open_mode: bool = Field(
        description="It was the first key: open development mode has ended, and every "
        "request needs a key from now on."
    )


class ApiKeyList(BaseModel):
    keys: list[ApiKeyOut]
    open_mode: bool = Field(
        description="Requests without a key are served (as tenant `default`): open "
        "development mode, on loopback before the first key."
    )
    first_key_ends_open_mode: bool = Field(
        description="Whether creating a key ends open mode (in `auto` mode, for good)."
    )


class Health(BaseModel):
    """Alive: the process answers (nothing is read from the database)."""

    status: Literal["ok"] = "ok"
    version: str = Field(description="The service's version.")


class Readiness(BaseModel):
    """Ready: the database answers and its schema is the one this version runs on."""

    status: Literal["ready"] = "ready"
    version: str = Field(description="The service's version.")
    schema_revision: str = Field(description="The database schema's migration revision.")
