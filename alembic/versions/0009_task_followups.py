"""Follow-up messages to a live task: queued, then read by its run

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 09:00:00

A message sent to a task that is pending or running (or parked on its subtasks) is
queued in `task_followups` (numbered 1, 2, … per task, with the sender's optional
key, so a retry finds it). `tasks.followups` counts what was queued and
`tasks.followups_read` what its runs have written into the conversation (the
ledger), in the statement that writes it: a resumed run delivers the rest, and a
run may complete only once it has read every follow-up.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    zero = sa.text("0")
    op.add_column(
        "tasks", sa.Column("followups", sa.Integer(), nullable=False, server_default=zero)
    )
    op.add_column(
        "tasks", sa.Column("followups_read", sa.Integer(), nullable=False, server_default=zero)
    )
    op.create_table(
        "task_followups",
        sa.Column("task_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("input", postgresql.JSONB(), nullable=False),
        sa.Column("key", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name="fk_task_followups_task_id_tasks",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", "seq", name="pk_task_followups"),
        sa.UniqueConstraint("task_id", "key", name="uq_task_followups_task_id_key"),
    )


def downgrade() -> None:
    op.drop_table("task_followups")
    op.drop_column("tasks", "followups_read")
    op.drop_column("tasks", "followups")
