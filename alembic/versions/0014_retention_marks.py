"""Retention: where pruning has been

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 18:30:00

`retention_marks` holds what the pruner (`db/retention.py`) leaves for readers:
`events_pruned_before`, the id below which events may have been deleted, so that a
firehose resumed from before it is told that history is missing there rather than
given a silent gap. An index walks the roots of finished task trees in id order.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "retention_marks",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_retention_marks"),
    )
    op.create_index(
        "ix_tasks_finished_roots",
        "tasks",
        ["id"],
        postgresql_where=sa.text(
            "parent_id IS NULL AND state IN ('completed', 'failed', 'cancelled')"
        ),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_finished_roots", table_name="tasks")
    op.drop_table("retention_marks")
