"""webhook outbox: a state change no subscription wants costs a lookup, not an insert

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 12:45:00

Every state change runs the outbox trigger, and most match no subscription. The
trigger read the task and prepared an INSERT … SELECT into `webhook_deliveries`
(opening the table, its indexes and the conflict arbiter) only to insert nothing:
32 µs of PostgreSQL's CPU per state change, three per task. It now first asks whether
any enabled subscription, of the task or of its tenant, wants this state, and goes
on only if one does (4 µs when none). The insert that follows is 0005's, unchanged:
it still applies a tenant-wide subscription's filters.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _revision_0005() -> ModuleType:
    """0005's module, whose function the downgrade restores (the versions folder is
    not a package: loaded from its file)."""
    path = Path(__file__).with_name("0005_webhook_task_snapshot.py")
    spec = importlib.util.spec_from_file_location("taskservice_revision_0005", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OUTBOX_FUNCTION = """
CREATE OR REPLACE FUNCTION taskservice_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    target text := NEW.data ->> 'to';
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM webhook_subscriptions s
        WHERE s.task_id = NEW.task_id AND s.enabled AND target = ANY(s.states)
    ) AND NOT EXISTS (
        SELECT 1 FROM webhook_subscriptions s
        WHERE s.tenant = NEW.tenant AND s.task_id IS NULL AND s.enabled
          AND target = ANY(s.states)
    ) THEN
        RETURN NULL;  -- nobody subscribed to this state
    END IF;
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


def upgrade() -> None:
    op.execute(OUTBOX_FUNCTION)


def downgrade() -> None:
    op.execute(_revision_0005().OUTBOX_FUNCTION)
