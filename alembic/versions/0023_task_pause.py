"""Pause and resume: a hold on a task, and the operators' brake on an agent profile

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28 20:00:00

A pause is a hold on the task, not a state (`usecases/pauses.py`): `tasks.paused`
holds who paused it, when and why (NULL: not paused), and the claim never takes a
paused task, so the claim index leaves paused tasks out. Paused tasks are listed
by tenant, newest first (`GET /v1/tasks?paused=true`), from a partial index that
holds them alone. `agent_pauses` is the operators' brake: one row per agent
profile held for a tenant; a task submitted to a held profile is created paused.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD_CLAIMABLE = (
    "NOT delayed AND (state = 'pending' OR (state = 'running' AND lease_owner IS NULL))"
)
_CLAIMABLE = (
    "NOT delayed AND paused IS NULL"
    " AND (state = 'pending' OR (state = 'running' AND lease_owner IS NULL))"
)


def _claim_index(predicate: str) -> None:
    op.create_index(
        "ix_tasks_claimable",
        "tasks",
        ["tenant", sa.text("priority DESC"), "run_at", "id"],
        postgresql_where=sa.text(predicate),
    )


def upgrade() -> None:
    op.add_column("tasks", sa.Column("paused", postgresql.JSONB(), nullable=True))
    op.create_index(
        "ix_tasks_tenant_paused_id",
        "tasks",
        ["tenant", sa.text("id DESC")],
        postgresql_where=sa.text("paused IS NOT NULL"),
    )
    op.drop_index("ix_tasks_claimable", table_name="tasks")
    _claim_index(_CLAIMABLE)
    op.create_table(
        "agent_pauses",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("profile", sa.Text(), nullable=False),
        sa.Column("paused_by", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("tenant", "profile", name="pk_agent_pauses"),
    )


def downgrade() -> None:
    # Every held task becomes claimable again.
    op.drop_table("agent_pauses")
    op.drop_index("ix_tasks_claimable", table_name="tasks")
    _claim_index(_OLD_CLAIMABLE)
    op.drop_index("ix_tasks_tenant_paused_id", table_name="tasks")
    op.drop_column("tasks", "paused")
