"""Live output: the model message a run is writing, as far as it has streamed

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 14:30:00

`task_live` holds, per task and part, the text (or tool-call arguments) of the model
response its run is streaming now, so that a stream opened on any replica mid-message
starts from the text so far before it follows the deltas (NOTIFY on
`taskservice_deltas`). It is UNLOGGED: ephemeral by design (after a crash of the
server it is empty, and the step is re-run and persisted in `task_messages`), and
written up to ~25 times a second per streaming task without WAL. No foreign key: a
flush must not lock the task's row; the reaper sweeps rows of tasks no longer running.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "task_live",
        sa.Column("task_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("part", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("tool", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "part", name="pk_task_live"),
        prefixes=["UNLOGGED"],
    )


def downgrade() -> None:
    op.drop_table("task_live")
