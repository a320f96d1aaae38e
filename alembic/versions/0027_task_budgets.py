"""Task budgets: what a task's own model requests may cost and take in tokens

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-28 23:00:00

A task may set `max_cost` (US dollars, exact: NUMERIC) and `max_tokens` (input +
output tokens of its own model requests), or take its agent profile's defaults; the
run checks each model request against them before sending it (`worker/spend.py`)
and fails the task `budget_exhausted` when the next one would pass them. NULL: not
limited.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("max_cost", sa.Numeric(), nullable=True))
    op.add_column("tasks", sa.Column("max_tokens", sa.BigInteger(), nullable=True))
    op.create_check_constraint(op.f("ck_tasks_max_cost_positive"), "tasks", "max_cost > 0")
    op.create_check_constraint(op.f("ck_tasks_max_tokens_positive"), "tasks", "max_tokens > 0")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_tasks_max_cost_positive"), "tasks", type_="check")
    op.drop_constraint(op.f("ck_tasks_max_tokens_positive"), "tasks", type_="check")
    op.drop_column("tasks", "max_tokens")
    op.drop_column("tasks", "max_cost")
