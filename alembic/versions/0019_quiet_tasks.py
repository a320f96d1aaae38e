"""Quiet tasks: model responses not streamed until someone follows the task

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27 07:00:00

A task submitted by a call that waits for its outcome without a stream (A2A
`SendMessage`, MCP `tools/call`) has nobody to read its live output, and streaming a
model's response costs its run a fifth more CPU. Such a task is `quiet`: its model
requests are not streamed until a stream asks for its live output, which clears the
flag (and tells the worker running it at once, on `taskservice_loud`). Every existing
task keeps streaming: the default is false, a change of the catalog only.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "tasks", sa.Column("quiet", sa.Boolean(), nullable=False, server_default=sa.text("false"))
    )


def downgrade() -> None:
    op.drop_column("tasks", "quiet")
