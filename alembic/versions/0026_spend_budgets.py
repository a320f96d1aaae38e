"""Spend budgets shared by every process: a tenant's per day or month, an agent
profile's total per day or month; and the alerts of a budget reaching 80% and 100%

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-28 22:50:00

A budget is a rate limit that does not refill until its period ends: each row holds
its limits (USD and/or tokens), the UTC period it counts (`day` or `month`, from
`period_start`), and what was spent in it, reserved before each model request and
settled with the real figure after (`db/spend_budgets.py`). `exhausted` marks a
period in which a request was refused for want of room: the tenant's submits are
refused until the period ends. A tenant's row comes from the operator's default
(`source = 'settings'`) or from an admin's change (`'admin'`).

A schedule of a tenant whose budget is spent waits (`schedules.held_until`, the
period's end): its slot fires then, as its `missed` policy says, and the schedules
of other tenants are not held up behind it.

A trigger on the rows notes, per period, the first time a budget reaches 80% and
100% of a limit (or is exhausted) in `spend_alerts`, once each: tenant-wide
webhooks subscribed to `budget.80` and `budget.100` are sent from there.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The share of the tightest limit spent (1 when exhausted).
_USED = """greatest(
    CASE WHEN NEW.max_cost > 0 THEN NEW.spent_cost / NEW.max_cost ELSE 0 END,
    CASE WHEN NEW.max_tokens > 0 THEN NEW.spent_tokens::numeric / NEW.max_tokens ELSE 0 END,
    CASE WHEN NEW.exhausted THEN 1 ELSE 0 END)"""

_ALERTS = f"""
CREATE FUNCTION taskservice_spend_alerts() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    used numeric := {_USED};
    reached smallint := CASE WHEN used >= 1 THEN 100 WHEN used >= 0.8 THEN 80 ELSE 0 END;
BEGIN
    IF NEW.period_start IS DISTINCT FROM OLD.period_start THEN
        NEW.alerted := 0;  -- a new period: its thresholds are not reached yet
    END IF;
    IF reached > NEW.alerted THEN
        INSERT INTO spend_alerts (key, tenant, period_start, threshold, spent_cost,
                                  spent_tokens, max_cost, max_tokens)
        SELECT NEW.key, NEW.tenant, NEW.period_start, t, NEW.spent_cost, NEW.spent_tokens,
               NEW.max_cost, NEW.max_tokens
        FROM unnest(ARRAY[80, 100]) t WHERE t > NEW.alerted AND t <= reached
        ON CONFLICT DO NOTHING;
        NEW.alerted := reached;
        PERFORM pg_notify('taskservice_spend', NEW.key);
    END IF;
    RETURN NEW;
END
$$
"""
_TRIGGER = """
CREATE TRIGGER spend_budgets_alerts BEFORE UPDATE ON spend_budgets
    FOR EACH ROW EXECUTE FUNCTION taskservice_spend_alerts()
"""


def upgrade() -> None:
    op.create_table(
        "spend_budgets",
        sa.Column("key", sa.Text(), primary_key=True),  # tenant:<name> or agent:<profile>
        sa.Column("tenant", sa.Text()),  # a tenant's budget: whose (null: a profile's)
        sa.Column("period", sa.Text(), nullable=False),
        sa.Column("max_cost", sa.Numeric()),  # USD; null: no limit in money
        sa.Column("max_tokens", sa.BigInteger()),  # null: no limit in tokens
        sa.Column(
            "period_start",
            sa.TIMESTAMP(timezone=True),
            nullable=False,
            server_default=sa.text("'-infinity'"),
        ),
        sa.Column("spent_cost", sa.Numeric(), nullable=False, server_default=sa.text("0")),
        sa.Column("spent_tokens", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("exhausted", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("alerted", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("set_by", sa.Text()),
        sa.Column(
            "updated_at", sa.TIMESTAMP(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.CheckConstraint("period IN ('day', 'month')", name="period_valid"),
        sa.CheckConstraint("source IN ('settings', 'admin')", name="source_valid"),
    )
    op.create_table(
        "spend_alerts",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), primary_key=True),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("tenant", sa.Text()),
        sa.Column("period_start", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("threshold", sa.SmallInteger(), nullable=False),
        sa.Column("spent_cost", sa.Numeric(), nullable=False),
        sa.Column("spent_tokens", sa.BigInteger(), nullable=False),
        sa.Column("max_cost", sa.Numeric()),
        sa.Column("max_tokens", sa.BigInteger()),
        sa.Column("at", sa.TIMESTAMP(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.UniqueConstraint("key", "period_start", "threshold"),
    )
    op.add_column("schedules", sa.Column("held_until", sa.TIMESTAMP(timezone=True)))
    op.add_column(
        "api_keys",
        sa.Column("admin", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )
    op.execute(_ALERTS)
    op.execute(_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER spend_budgets_alerts ON spend_budgets")
    op.execute("DROP FUNCTION taskservice_spend_alerts()")
    op.drop_column("api_keys", "admin")
    op.drop_column("schedules", "held_until")
    op.drop_table("spend_alerts")
    op.drop_table("spend_budgets")
