"""Webhooks as the domain sees them: one asked for (`WebhookRequest`), a
subscription (which states of which tasks go to which URL) and a delivery with its
attempts. Stored and read by `db/webhook_subscriptions.py` and
`db/webhook_deliveries.py`; registered through `usecases/subscriptions.py`; sent by
`worker/webhook_dispatcher.py` and `webhooks/`.

Two modules are named `webhooks`, and a package: this one holds webhooks as values (the
domain's); `api/routes/webhooks.py` is the REST routes (over
`usecases/subscriptions.py`), and the package `webhooks/` holds the sender's adapters
(HTTP client, signatures, SSRF checks).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from taskservice.domain.states import TaskState

# What a caller usually acts on: the end of a task, or its question.
DEFAULT_STATES = (
    TaskState.INPUT_REQUIRED,
    TaskState.COMPLETED,
    TaskState.FAILED,
    TaskState.CANCELLED,
)


@dataclass(frozen=True, slots=True)
class WebhookRequest:
    """A webhook asked for: a task's own (with the task, or added later), or a
    tenant's. Checked when it is registered (`usecases/subscriptions.py`)."""

    url: str
    states: Sequence[TaskState] = DEFAULT_STATES
    secret: str | None = None  # else one is generated
    filters: Mapping[str, Any] = field(default_factory=dict)  # tenant-wide only
    a2a: Mapping[str, Any] | None = None  # an A2A push notification config (a task's)


@dataclass(frozen=True, slots=True)
class Subscription:
    id: uuid.UUID
    tenant: str
    url: str
    states: tuple[str, ...]
    task_id: uuid.UUID | None
    filters: dict[str, Any]
    enabled: bool
    consecutive_failures: int
    failing_since: datetime | None
    disabled_reason: str | None
    disabled_at: datetime | None
    previous_secret_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    secret: str  # never shown after creation or rotation
    a2a: dict[str, Any] | None = None  # an A2A push notification config's own fields


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    dispatcher: str
    started_at: datetime
    duration_ms: float
    status_code: int | None
    error: str | None


@dataclass(frozen=True, slots=True)
class Delivery:
    id: uuid.UUID
    subscription_id: uuid.UUID
    task_id: uuid.UUID
    state: str
    event_seq: int
    occurred_at: datetime
    status: str
    attempts: int
    next_attempt_at: datetime | None  # only while pending
    in_flight: bool
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
    log: tuple[Attempt, ...]
