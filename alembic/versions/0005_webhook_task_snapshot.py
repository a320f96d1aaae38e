"""webhook payloads frozen at the state change: the task snapshot in the outbox row

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 22:00:00

Until now the body of a delivery was rendered from the task's *current* row at its
first attempt, and saved only when that attempt was recorded: a dispatcher killed
mid-attempt left no body, so the retry rendered a second one, and a `task.running`
delivery first attempted after the task finished showed it completed. The outbox
trigger now stores the task row as it is at the state change (`to_jsonb(tasks)`),
in the same transaction; the dispatcher renders the body from it and saves the body
before the first send. Rows queued before this revision have no snapshot: their
body is rendered once from the task and saved before their next send.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As 0004's, plus the snapshot. The trigger runs after the statement that changed the
# task (state and event are written by one statement, or the event after the update in
# the same transaction), so the row read here is the task in its new state.
OUTBOX_FUNCTION = """
CREATE OR REPLACE FUNCTION taskservice_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    target text := NEW.data ->> 'to';
BEGIN
    INSERT INTO webhook_deliveries
        (id, subscription_id, task_id, tenant, state, event_seq, occurred_at, task_snapshot)
    SELECT taskservice_uuid7(), s.id, NEW.task_id, NEW.tenant, target, NEW.seq, NEW.created_at,
           to_jsonb(t)
    FROM tasks t
    CROSS JOIN LATERAL (
        SELECT s.id FROM webhook_subscriptions s
        WHERE s.task_id = t.id AND s.enabled AND target = ANY(s.states)
        UNION ALL
        SELECT s.id FROM webhook_subscriptions s
        WHERE s.tenant = NEW.tenant AND s.task_id IS NULL AND s.enabled
          AND target = ANY(s.states)
          AND (NOT (s.filters ? 'agents') OR (s.filters -> 'agents') ? (t.agent ->> 'profile'))
          AND (NOT (s.filters ? 'context_id') OR s.filters ->> 'context_id' = t.context_id)
          AND (NOT (s.filters ? 'metadata') OR t.metadata @> (s.filters -> 'metadata'))
    ) s
    WHERE t.id = NEW.task_id
    ORDER BY s.id
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify('taskservice_webhooks', '');
    END IF;
    RETURN NULL;
END
$$
"""

PREVIOUS_OUTBOX_FUNCTION = """
CREATE OR REPLACE FUNCTION taskservice_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
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
    op.add_column(
        "webhook_deliveries",
        sa.Column("task_snapshot", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )
    op.execute(OUTBOX_FUNCTION)


def downgrade() -> None:
    op.execute(PREVIOUS_OUTBOX_FUNCTION)
    op.drop_column("webhook_deliveries", "task_snapshot")
