"""webhook outbox: a state change no subscription wants costs a lookup, not an insert

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 12:45:00

Every state change runs the outbox trigger, and most match no subscription. The
trigger read the task and prepared an INSERT … SELECT into `webhook_deliveries`
(opening the table, its indexes and the conflict arbiter) only to insert nothing:
32 µs of PostgreSQL's CPU per state change, three per task. It now first asks whether
any enabled subscription, of the task or of its tenant, wants this state, and goes
on only if one does (4 µs when none): 0005's function, the question put first.
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


# Asked right after BEGIN, before 0005's insert (which still applies a tenant-wide
# subscription's filters).
_PRECHECK = """
    IF NOT EXISTS (
        SELECT 1 FROM webhook_subscriptions s
        WHERE s.task_id = NEW.task_id AND s.enabled AND target = ANY(s.states)
    ) AND NOT EXISTS (
        SELECT 1 FROM webhook_subscriptions s
        WHERE s.tenant = NEW.tenant AND s.task_id IS NULL AND s.enabled
          AND target = ANY(s.states)
    ) THEN
        RETURN NULL;  -- nobody subscribed to this state
    END IF;"""


def _with_precheck(function: str) -> str:
    head, begin, body = function.partition("\nBEGIN")
    assert begin, "0005's function has a BEGIN"
    return head + begin + _PRECHECK + body


def upgrade() -> None:
    op.execute(_with_precheck(_revision_0005().OUTBOX_FUNCTION))


def downgrade() -> None:
    op.execute(_revision_0005().OUTBOX_FUNCTION)
