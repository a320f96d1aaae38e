"""Webhooks as the domain sees them: one asked for (`WebhookRequest`), a
subscription (which states of which tasks, and which budget events, go to which URL),
a delivery with its attempts, and a budget alert as a delivery tells it. Stored and
read by `db/webhook_subscriptions.py`, `db/webhook_deliveries.py` and
`db/spend_alerts.py`; registered through `usecases/subscriptions.py`; sent by
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
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any

from taskservice.common.pricing import decimal_text
from taskservice.domain.states import TaskState


class BudgetEvent(StrEnum):
    """A tenant's spend budget reaching 80% or 100% of a limit (100: also a request
    refused for want of room), once per period. Only a tenant-wide webhook may ask
    for them, beside task states in its `states`."""

    REACHED_80 = "budget.80"
    REACHED_100 = "budget.100"


# What a webhook may ask for: a task's state, or a budget event.
WebhookEvent = TaskState | BudgetEvent

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
    states: Sequence[WebhookEvent] = DEFAULT_STATES
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
    """A task's state change (`task_id`, `event_seq`) or a budget alert (`alert_id`;
    `state` is the `BudgetEvent`)."""

    id: uuid.UUID
    subscription_id: uuid.UUID
    task_id: uuid.UUID | None
    alert_id: int | None
    state: str
    event_seq: int | None
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


@dataclass(frozen=True, slots=True)
class BudgetAlert:
    """A budget reaching a threshold, as noted (`spend_alerts`): the figures then."""

    id: int
    key: str  # tenant:<name> or agent:<profile>
    tenant: str | None
    period: str | None  # day or month
    period_start: datetime | None
    threshold: int  # 80 or 100
    spent_cost: Decimal
    spent_tokens: int
    max_cost: Decimal | None
    max_tokens: int | None
    at: datetime

    @property
    def scope(self) -> str:
        """`tenant` or `agent` (a profile's budget): the metric's label."""
        return "tenant" if self.tenant is not None else "agent"

    @property
    def event(self) -> BudgetEvent:
        return BudgetEvent(f"budget.{self.threshold}")

    @property
    def period_end(self) -> datetime | None:
        start = self.period_start
        if start is None:
            return None
        if self.period == "day":
            return start + timedelta(days=1)
        year, month = divmod(start.month, 12)  # the next month: (0, m) or, after 12, (1, 0)
        return start.replace(year=start.year + year, month=month + 1)

    def budget(self) -> dict[str, Any]:
        """The budget as the alert found it, as a webhook's body shows it: money in USD
        as exact decimal strings."""
        shown: dict[str, Any] = {"scope": self.scope}
        if self.tenant is not None:
            shown["tenant"] = self.tenant
        else:
            shown["agent"] = self.key.removeprefix("agent:")
        return shown | {
            "period": self.period,
            "period_start": _instant(self.period_start),
            "period_end": _instant(self.period_end),
            "currency": "USD",
            "max_cost": decimal_text(self.max_cost) if self.max_cost is not None else None,
            "max_tokens": self.max_tokens,
            "spent_cost": decimal_text(self.spent_cost),
            "spent_tokens": self.spent_tokens,
        }


def _instant(at: datetime | None) -> str | None:
    return at.astimezone(UTC).isoformat() if at is not None else None
