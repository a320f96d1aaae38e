"""Orphan cleanup: subtasks spawned to outlive their parent

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 17:30:00

When a parent ends failed, cancelled or timed out, its live subtasks are cancelled,
unless they were spawned `detached`. A column, not a metadata key: the cascade and the
reaper's orphan sweep test it in SQL. Adding a NOT NULL column with a constant default
rewrites nothing (PostgreSQL 11+).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "tasks", sa.Column("detached", sa.Boolean(), nullable=False, server_default=sa.false())
    )


def downgrade() -> None:
    op.drop_column("tasks", "detached")
