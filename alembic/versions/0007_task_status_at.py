"""A2A ListTasks: when a task's state last changed, indexed per tenant

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 12:00:00

A2A's ListTasks pages through a tenant's tasks by status timestamp, newest first.
`updated_at` moves with every event (it says when a task was last heard of, for
stall detection), so an index on it would make every event write update an index;
`status_at` moves only when the state does. A trigger sets it on every change of
state, whichever statement makes it (its WHEN clause is checked without calling
the function, so other updates pay nothing); state changes already update indexed
columns, so its index costs them one entry more.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FUNCTION = """
CREATE FUNCTION taskservice_status_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.status_at := now();
    RETURN NEW;
END
$$
"""
_TRIGGER = """
CREATE TRIGGER tasks_status_at BEFORE UPDATE OF state ON tasks
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION taskservice_status_at()
"""


def upgrade() -> None:
    op.add_column("tasks", sa.Column("status_at", sa.TIMESTAMP(timezone=True), nullable=True))
    op.execute("UPDATE tasks SET status_at = updated_at")
    op.alter_column("tasks", "status_at", nullable=False, server_default=sa.func.now())
    op.create_index("ix_tasks_tenant_status_at", "tasks", ["tenant", "status_at", "id"])
    op.execute(_FUNCTION)
    op.execute(_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER tasks_status_at ON tasks")
    op.execute("DROP FUNCTION taskservice_status_at()")
    op.drop_index("ix_tasks_tenant_status_at", table_name="tasks")
    op.drop_column("tasks", "status_at")
