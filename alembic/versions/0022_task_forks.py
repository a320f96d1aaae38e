"""Forks: the task a task was forked from, and where

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28 20:00:00

`POST /v1/tasks/{id}/fork` makes a new task whose ledger begins as a copy of another
task's first `forked_at` messages (`usecases/forks.py`). `forked_from` names that
task (NULL once it is deleted: the fork keeps its copy), `forked_at` the position;
both NULL for every other task. Forks are listed by source, newest first (`GET
/v1/tasks?forked_from=`), from a partial index holding forks only, which also
serves the foreign key when a source is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "tasks",
        sa.Column(
            "forked_from",
            postgresql.UUID(as_uuid=True),
            sa.ForeignKey("tasks.id", ondelete="SET NULL", name="tasks_forked_from_fkey"),
            nullable=True,
        ),
    )
    op.add_column("tasks", sa.Column("forked_at", sa.Integer(), nullable=True))
    op.create_index(
        "ix_tasks_forked_from",
        "tasks",
        ["forked_from", sa.text("id DESC")],
        postgresql_where=sa.text("forked_from IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_forked_from", table_name="tasks")
    op.drop_column("tasks", "forked_at")
    op.drop_column("tasks", "forked_from")
