"""Listing by agent profile: an index leading with it

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 20:00:00

`GET /v1/tasks?agent=…` walked the tenant's tasks newest first and filtered on the
profile: quick when the profile's tasks are recent, a walk through every task when
they are not (1.8 s for a profile whose tasks are the oldest of a million, in the
scale benchmark). The index makes any profile's page as cheap as a page by context.
Built once on existing rows (a few seconds per million tasks, writes wait meanwhile).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_tasks_tenant_agent_id",
        "tasks",
        ["tenant", sa.text("(agent ->> 'profile')"), sa.text("id DESC")],
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_tenant_agent_id", table_name="tasks")
