"""Recurring schedules: a cron expression in a time zone, and the task each slot starts

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 19:30:00

A slot fires exactly once across replicas: the scheduler locks a due schedule's row
(SKIP LOCKED), inserts the slot's task and moves `next_run_at` on in one
transaction, and the task's idempotency key (`schedule:<id>:<slot>`, unique per
tenant) refuses a second task for the same slot whatever happens.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, TIMESTAMP, UUID

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("name", sa.Text()),
        sa.Column("cron", sa.Text(), nullable=False),
        sa.Column("timezone", sa.Text(), nullable=False),
        sa.Column("task", JSONB(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.true()),
        sa.Column("missed", sa.Text(), nullable=False, server_default="latest"),
        sa.Column("next_run_at", TZ),
        sa.Column("last_slot", TZ),
        sa.Column("last_task_id", UUID(as_uuid=True)),
        sa.Column("last_error", JSONB()),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", TZ, nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint(
            "missed IN ('skip', 'latest', 'all')", name=op.f("ck_schedules_missed_valid")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedules")),
    )
    op.create_index("ix_schedules_tenant_id", "schedules", ["tenant", sa.text("id DESC")])
    op.create_index(
        "uq_schedules_tenant_name",
        "schedules",
        ["tenant", "name"],
        unique=True,
        postgresql_where=sa.text("name IS NOT NULL"),
    )
    op.create_index(
        "ix_schedules_due", "schedules", ["next_run_at"], postgresql_where=sa.text("enabled")
    )


def downgrade() -> None:
    op.drop_table("schedules")
