"""worker durability: per-task timeouts, fair claim indexes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 07:57:57.888423
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("timeout_seconds", sa.Float(), nullable=True))
    op.drop_index(
        op.f("ix_tasks_claimable"),
        table_name="tasks",
        postgresql_where="((state = 'pending'::text) OR ((state = 'running'::text) AND (lease_owner IS NULL)))",
    )
    op.create_index(
        "ix_tasks_claimable",
        "tasks",
        ["tenant", "id"],
        unique=False,
        postgresql_where=sa.text(
            "state = 'pending' OR (state = 'running' AND lease_owner IS NULL)"
        ),
    )
    op.create_index(
        "ix_tasks_running_tenant",
        "tasks",
        ["tenant"],
        unique=False,
        postgresql_where=sa.text("state = 'running' AND lease_owner IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_tasks_running_tenant",
        table_name="tasks",
        postgresql_where=sa.text("state = 'running' AND lease_owner IS NOT NULL"),
    )
    op.drop_index(
        "ix_tasks_claimable",
        table_name="tasks",
        postgresql_where=sa.text(
            "state = 'pending' OR (state = 'running' AND lease_owner IS NULL)"
        ),
    )
    op.create_index(
        op.f("ix_tasks_claimable"),
        "tasks",
        ["id"],
        unique=False,
        postgresql_where="((state = 'pending'::text) OR ((state = 'running'::text) AND (lease_owner IS NULL)))",
    )
    op.drop_column("tasks", "timeout_seconds")
