"""Delegated tasks: the remote A2A task a task was handed to

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 08:00:00

A task on an `a2a` agent profile is delegated to a remote A2A agent. Its `remote`
holds the `messageId` it sends (written before the message is sent) and, once the
remote answered, the remote task's id: a worker that dies mid-delegation is followed
by one that sends the same message again (which the remote recognises) or follows
the same remote task, never a second one. NULL for every other task.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("remote", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("tasks", "remote")
