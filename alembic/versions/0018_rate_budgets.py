"""Model rate limits: shared budgets, throttled tasks, attempts counted as lost

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 04:00:00

- `rate_budgets`: one row per configured budget (`rate_limits.py`), its requests'
  and tokens' theoretical arrival times (GCRA) and how long a provider's 429 blocks
  it; every process reserves from the same rows.
- A task waiting for budget stays `running` without an owner, `delayed` until its
  slot (`wake_at`), holding the slot it reserved (`paid_slot`) for its next model
  request. `delayed` and `wake_at` now serve both waits (a pending task's `run_at`,
  a throttled task's slot): the claim index leaves out every delayed task, the
  scheduler's index holds both kinds by `wake_at`.
- `lost_attempts`: the leases of the task that expired. A task fails for want of
  attempts when a lease expires with no attempt left of `max_attempts`, counted by
  these, no longer by claims (a task given back, throttled or answered was claimed
  again without anything being lost). Live tasks start with the count of claims
  they had lost or used, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD_CLAIMABLE = (
    "(state = 'pending' AND NOT delayed) OR (state = 'running' AND lease_owner IS NULL)"
)
_CLAIMABLE = "NOT delayed AND (state = 'pending' OR (state = 'running' AND lease_owner IS NULL))"
_DELAYED = "delayed AND state IN ('pending', 'running')"


def _claim_index(predicate: str) -> None:
    op.create_index(
        "ix_tasks_claimable",
        "tasks",
        ["tenant", sa.text("priority DESC"), "run_at", "id"],
        postgresql_where=sa.text(predicate),
    )


def upgrade() -> None:
    op.create_table(
        "rate_budgets",
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("requests", sa.Float()),
        sa.Column("requests_period", sa.Float(), nullable=False, server_default="60"),
        sa.Column("tokens", sa.Float()),
        sa.Column("tokens_period", sa.Float(), nullable=False, server_default="60"),
        sa.Column(
            "requests_tat", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column(
            "tokens_tat", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column(
            "blocked_until",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.now(),
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.add_column("tasks", sa.Column("wake_at", sa.DateTime(timezone=True)))
    op.add_column("tasks", sa.Column("paid_slot", postgresql.JSONB()))
    op.add_column(
        "tasks", sa.Column("lost_attempts", sa.Integer(), nullable=False, server_default="0")
    )
    op.execute("UPDATE tasks SET wake_at = run_at WHERE state = 'pending' AND delayed")
    op.execute(
        "UPDATE tasks SET lost_attempts = greatest(attempt - 1, 0) "
        "WHERE state IN ('pending', 'running', 'input_required') AND attempt > 1"
    )
    op.drop_index("ix_tasks_claimable", table_name="tasks")
    _claim_index(_CLAIMABLE)
    op.drop_index("ix_tasks_delayed", table_name="tasks")
    op.create_index("ix_tasks_delayed", "tasks", ["wake_at"], postgresql_where=sa.text(_DELAYED))


def downgrade() -> None:
    # A throttled task becomes claimable at once (its reserved slot forgotten).
    op.execute("UPDATE tasks SET delayed = false WHERE state = 'running' AND delayed")
    op.drop_index("ix_tasks_delayed", table_name="tasks")
    op.create_index(
        "ix_tasks_delayed",
        "tasks",
        ["run_at"],
        postgresql_where=sa.text("state = 'pending' AND delayed"),
    )
    op.drop_index("ix_tasks_claimable", table_name="tasks")
    _claim_index(_OLD_CLAIMABLE)
    op.drop_column("tasks", "lost_attempts")
    op.drop_column("tasks", "paid_slot")
    op.drop_column("tasks", "wake_at")
    op.drop_table("rate_budgets")
