"""`log` events: how many log lines a task has been given, for the per-task cap

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 10:00:00

Workers and agents write `log` events (`level`, `message`). A task keeps at most
TASKSERVICE_MAX_LOG_LINES of them, then one saying the rest were dropped; the count
of lines offered so far lives on the task row, where every write that appends events
already takes the row's lock, so the cap holds however many writers there are.
Adding a column with a constant default does not rewrite the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "tasks",
        sa.Column("log_lines", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    op.drop_column("tasks", "log_lines")
