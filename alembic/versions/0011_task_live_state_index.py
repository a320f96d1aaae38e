"""Metrics: the live tasks by state, across tenants

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 17:00:00

The queue's gauges (`GET /metrics`) count the pending, running and waiting tasks of
every tenant and find the oldest pending one. The per-tenant indexes lead with the
tenant, so without this one that would scan every task; this partial index holds
only the live ones, whatever the number of finished tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_tasks_live_state",
        "tasks",
        ["state", "id"],
        postgresql_where=sa.text("state IN ('pending', 'running', 'input_required')"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_live_state", table_name="tasks")
