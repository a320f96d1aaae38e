"""webhook outbox: delivery ordering and payload columns, the attempt log, the trigger

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Time-ordered UUIDs (version 7) made by the database, for rows the trigger writes.
UUID7_FUNCTION = """
CREATE FUNCTION taskservice_uuid7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(
                        floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$
"""

# The outbox: every state_change event writes, in its own transaction, one delivery
# per enabled subscription that wants the new state: the task's own subscriptions, and
# the tenant's global ones whose filters match. The unique (subscription, task, state)
# constraint is the latch: however many paths reach a state, one delivery. Being a
# trigger, no transition path can forget it. A volatile function takes a fresh
# snapshot per statement, so a subscription committed while the transition waited for
# the task's row lock is seen.
OUTBOX_FUNCTION = """
CREATE FUNCTION taskservice_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    target text := NEW.data ->> 'to';
BEGIN
    INSERT INTO webhook_deliveries
        (id, subscription_id, task_id, tenant, state, event_seq, occurred_at)
    SELECT taskservice_uuid7(), s.id, NEW.task_id, NEW.tenant, target, NEW.seq, NEW.created_at
    FROM (
        SELECT s.id FROM webhook_subscriptions s
        WHERE s.task_id = NEW.task_id AND s.enabled AND target = ANY(s.states)
        UNION ALL
        SELECT s.id FROM webhook_subscriptions s JOIN tasks t ON t.id = NEW.task_id
        WHERE s.tenant = NEW.tenant AND s.task_id IS NULL AND s.enabled
          AND target = ANY(s.states)
          AND (NOT (s.filters ? 'agents') OR (s.filters -> 'agents') ? (t.agent ->> 'profile'))
          AND (NOT (s.filters ? 'context_id') OR s.filters ->> 'context_id' = t.context_id)
          AND (NOT (s.filters ? 'metadata') OR t.metadata @> (s.filters -> 'metadata'))
    ) s
    ORDER BY s.id
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify('taskservice_webhooks', '');
    END IF;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    # Nothing wrote deliveries before this revision, so the new NOT NULL columns need
    # no backfill; the defaults only satisfy ALTER on a table that might hold rows.
    op.add_column(
        "webhook_deliveries",
        sa.Column("event_seq", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "webhook_deliveries",
        sa.Column(
            "occurred_at",
            postgresql.TIMESTAMP(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
    )
    op.alter_column("webhook_deliveries", "event_seq", server_default=None)
    op.alter_column("webhook_deliveries", "occurred_at", server_default=None)
    op.add_column(
        "webhook_deliveries",
        sa.Column("schedule_step", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("webhook_deliveries", sa.Column("locked_by", sa.Text(), nullable=True))
    op.add_column("webhook_deliveries", sa.Column("payload", sa.Text(), nullable=True))
    op.create_index(
        "ix_webhook_deliveries_subscription_id_id",
        "webhook_deliveries",
        ["subscription_id", sa.text("id DESC")],
    )
    op.add_column(
        "webhook_subscriptions",
        sa.Column("disabled_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("delivery_id", sa.UUID(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("dispatcher", sa.Text(), nullable=False),
        sa.Column("started_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["webhook_deliveries.id"],
            name=op.f("fk_webhook_attempts_delivery_id_webhook_deliveries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_attempts")),
        sa.UniqueConstraint(
            "delivery_id", "attempt", name=op.f("uq_webhook_attempts_delivery_id_attempt")
        ),
    )
    op.execute(UUID7_FUNCTION)
    op.execute(OUTBOX_FUNCTION)
    op.execute(
        "CREATE TRIGGER task_events_webhook_outbox AFTER INSERT ON task_events "
        "FOR EACH ROW WHEN (NEW.type = 'state_change') "
        "EXECUTE FUNCTION taskservice_webhook_outbox()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER task_events_webhook_outbox ON task_events")
    op.execute("DROP FUNCTION taskservice_webhook_outbox()")
    op.execute("DROP FUNCTION taskservice_uuid7()")
    op.drop_table("webhook_attempts")
    op.drop_column("webhook_subscriptions", "disabled_at")
    op.drop_index("ix_webhook_deliveries_subscription_id_id", table_name="webhook_deliveries")
    for column in ("payload", "locked_by", "schedule_step", "occurred_at", "event_seq"):
        op.drop_column("webhook_deliveries", column)
