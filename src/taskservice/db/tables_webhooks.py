"""The webhook tables: subscriptions (plain webhooks and A2A push notification
configs), the delivery outbox (a row per subscription and state reached, written by
the `task_events` trigger, see `notify`), and the log of every delivery attempt.
`tables` exports them with the rest of the schema.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

from taskservice.db.tables_base import TZ, created, metadata

webhook_subscriptions = Table(
    "webhook_subscriptions",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("secret", Text, nullable=False),
    Column("previous_secret", Text),  # still signs until previous_secret_expires_at
    Column("previous_secret_expires_at", TZ),
    Column("states", ARRAY(Text), nullable=False),
    Column("task_id", UUID(as_uuid=True), ForeignKey("tasks.id", ondelete="CASCADE")),
    Column("filters", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("consecutive_failures", Integer, nullable=False, server_default=text("0")),
    Column("failing_since", TZ),
    Column("disabled_reason", Text),
    Column("disabled_at", TZ),
    # An A2A push notification config (migration 0008): its version, id, token and
    # authentication; NULL for a plain webhook.
    Column("a2a", JSONB),
    created(),
    Column("updated_at", TZ, nullable=False, server_default=func.now()),
    Index(
        "ix_webhook_subscriptions_a2a_config",
        "task_id",
        text("(a2a ->> 'id')"),
        unique=True,
        postgresql_where=text("a2a IS NOT NULL"),
    ),
    Index(
        "ix_webhook_subscriptions_task_id", "task_id", postgresql_where=text("task_id IS NOT NULL")
    ),
    Index(
        "ix_webhook_subscriptions_tenant_global",
        "tenant",
        postgresql_where=text("task_id IS NULL AND enabled"),
    ),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    # Time-ordered (taskservice_uuid7() when the outbox trigger writes the row); also
    # the `webhook-id` every attempt of this delivery carries.
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column(
        "subscription_id",
        UUID(as_uuid=True),
        ForeignKey("webhook_subscriptions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    # What the delivery is about (migration 0028): a task's state change (`task_id`,
    # `event_seq`), or a budget alert (`alert_id`; `state` is then the event,
    # `budget.80` or `budget.100`), written by the `spend_alerts` trigger.
    Column("task_id", UUID(as_uuid=True), ForeignKey("tasks.id", ondelete="CASCADE")),
    Column("alert_id", BigInteger, ForeignKey("spend_alerts.id", ondelete="CASCADE")),
    Column("tenant", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("event_seq", Integer),  # the state_change event: sends in this order
    Column("occurred_at", TZ, nullable=False),  # when the task reached `state`, or the alert
    Column("status", Text, nullable=False, server_default=text("'pending'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    # Failed attempts since the last (re)delivery: the position in the retry schedule.
    Column("schedule_step", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", TZ, nullable=False, server_default=func.now()),
    Column("locked_by", Text),  # the dispatcher with an attempt in flight
    # The task row as it was at the state change, written with the row by the outbox
    # trigger (migration 0005); the body is rendered from it.
    Column("task_snapshot", JSONB),
    Column("payload", Text),  # the body, saved before the first send: every attempt matches
    Column("last_status_code", Integer),
    Column("last_error", Text),
    created(),
    Column("updated_at", TZ, nullable=False, server_default=func.now()),
    Column("delivered_at", TZ),
    CheckConstraint(
        "status IN ('pending', 'succeeded', 'failed', 'cancelled')", name="status_valid"
    ),
    CheckConstraint(
        "(task_id IS NULL) <> (alert_id IS NULL) AND (task_id IS NULL) = (event_seq IS NULL)",
        name="task_or_alert",
    ),
    # The "notified" latch: however many paths race to a state, one delivery.
    UniqueConstraint("subscription_id", "task_id", "state"),
    # And one delivery per (subscription, budget alert).
    Index(
        "ix_webhook_deliveries_subscription_id_alert_id",
        "subscription_id",
        "alert_id",
        unique=True,
        postgresql_where=text("alert_id IS NOT NULL"),
    ),
    Index(
        "ix_webhook_deliveries_due",
        "next_attempt_at",
        postgresql_where=text("status = 'pending'"),
    ),
    Index("ix_webhook_deliveries_task_id", "task_id"),
    Index("ix_webhook_deliveries_subscription_id_id", "subscription_id", text("id DESC")),
)

# The delivery log: one row per attempt, whatever its outcome.
webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column(
        "delivery_id",
        UUID(as_uuid=True),
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("attempt", Integer, nullable=False),
    Column("dispatcher", Text, nullable=False),
    Column("started_at", TZ, nullable=False),
    Column("duration_ms", Float, nullable=False),
    Column("status_code", Integer),
    Column("error", Text),
    # An attempt number is claimed once: two dispatchers cannot both make attempt n.
    UniqueConstraint("delivery_id", "attempt"),
)
