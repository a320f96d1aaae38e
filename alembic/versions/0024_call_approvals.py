"""Approvals: a tool call's decision, and the deadline of a task waiting for one

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28 20:10:00

An agent profile may name tools whose calls wait for a person's approval
(`agents/approvals.py`): the task waits in `input_required` with the calls in its
`input_request`. The decision (approved or denied, by whom, when, with which
arguments, why) is kept on the call's row in `approval`, written in the transaction
that resumes the task, and read by the run that makes (or does not make) the call.
A profile's approval deadline is the waiting task's `wake_at`; the scheduler finds
the tasks past it from a partial index of waiting tasks that have one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("task_calls", sa.Column("approval", postgresql.JSONB(), nullable=True))
    op.create_index(
        "ix_tasks_input_deadline",
        "tasks",
        ["wake_at"],
        postgresql_where=sa.text("state = 'input_required' AND wake_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_input_deadline", table_name="tasks")
    op.drop_column("task_calls", "approval")
