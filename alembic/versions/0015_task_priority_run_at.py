"""Scheduling: a task's priority and the time it may run from

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 19:00:00

`priority` (higher first) and `run_at` (not before; the submission time unless asked
later) order the claim within a tenant: priority, then run_at, then id (FIFO). A
task submitted for later is `delayed`: out of the claim index until the scheduler
(`worker/scheduler.py`) finds its time has come, so a deep backlog of tasks for
later never slows a claim. The claim index is rebuilt on the new order; it holds
only claimable rows, so that is quick at any table size.

`run_at` is added without a default first, so no row is rewritten: the live tasks
get their creation time (few rows, through ix_tasks_live_state); finished ones keep
NULL, read as their creation time. New rows default to now().
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import TIMESTAMP

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CLAIMABLE = "(state = 'pending' AND NOT delayed) OR (state = 'running' AND lease_owner IS NULL)"


def upgrade() -> None:
    op.add_column(
        "tasks", sa.Column("priority", sa.SmallInteger(), nullable=False, server_default="0")
    )
    op.add_column("tasks", sa.Column("run_at", TIMESTAMP(timezone=True)))
    op.execute(
        "UPDATE tasks SET run_at = created_at "
        "WHERE state IN ('pending', 'running', 'input_required')"
    )
    op.alter_column("tasks", "run_at", server_default=sa.func.now())
    op.add_column(
        "tasks", sa.Column("delayed", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.create_check_constraint(
        op.f("ck_tasks_priority_range"), "tasks", "priority BETWEEN -1000 AND 1000"
    )
    op.drop_index("ix_tasks_claimable", table_name="tasks")
    op.create_index(
        "ix_tasks_claimable",
        "tasks",
        ["tenant", sa.text("priority DESC"), "run_at", "id"],
        postgresql_where=sa.text(_CLAIMABLE),
    )
    op.create_index(
        "ix_tasks_delayed",
        "tasks",
        ["run_at"],
        postgresql_where=sa.text("state = 'pending' AND delayed"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_delayed", table_name="tasks")
    op.drop_index("ix_tasks_claimable", table_name="tasks")
    # A task waiting for its time would be claimable at once without the column.
    op.execute("UPDATE tasks SET delayed = false WHERE state = 'pending' AND delayed")
    op.create_index(
        "ix_tasks_claimable",
        "tasks",
        ["tenant", "id"],
        postgresql_where=sa.text(
            "state = 'pending' OR (state = 'running' AND lease_owner IS NULL)"
        ),
    )
    op.drop_constraint(op.f("ck_tasks_priority_range"), "tasks", type_="check")
    op.drop_column("tasks", "delayed")
    op.drop_column("tasks", "run_at")
    op.drop_column("tasks", "priority")
