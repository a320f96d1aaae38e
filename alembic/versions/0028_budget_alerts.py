"""Budget alerts reach webhooks and metrics: a tenant-wide webhook subscribed to
`budget.80` or `budget.100` gets one delivery per alert of its tenant's budget

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-29 10:00:00

An outbox row is now about a task's state change (`task_id`, `event_seq`, as before)
or about a budget alert (`alert_id`, a row of `spend_alerts`; `state` is the event,
`budget.80` or `budget.100`): exactly one of the two. Alert rows have their own latch,
unique (subscription, alert), and are written by a trigger on `spend_alerts` INSERT,
so in the transaction (the very statement) that noted the alert: the reservation that
crossed the threshold. Only the alerts of a tenant's budget (`tenant` set) go to that
tenant's tenant-wide webhooks that ask for the event (their task filters do not
apply); a profile's budget (`tenant` null) is the operators': counted and logged,
sent to no tenant.

`spend_alerts` gains `period` (the budget's, `day` or `month`, copied from
`spend_budgets` as the alert is written, so a later change of the budget does not
change what the alert says) and `counted_at`: the first process to see the alert
counts it in `taskservice_budget_alerts_total` and logs it, setting `counted_at` so
that no other process does (`db/spend_alerts.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The budget's period, as the alert is noted. The alert is written by the
# `spend_budgets` trigger before the budget's row is updated, so the row read here is
# the budget as it was before the statement: its period only changes when an operator
# or an admin sets a new kind of period, which starts afresh (period_start reset).
_PERIOD = """
CREATE FUNCTION taskservice_spend_alert_period() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.period IS NULL THEN
        NEW.period := (SELECT period FROM spend_budgets WHERE key = NEW.key);
    END IF;
    RETURN NEW;
END
$$
"""

# The outbox for budget alerts: one delivery per enabled tenant-wide webhook of the
# alert's tenant that asks for the event. A tenant's budget only: a profile's alert
# (no tenant) goes to no tenant's webhooks.
_OUTBOX = """
CREATE FUNCTION taskservice_budget_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event text := 'budget.' || NEW.threshold;
BEGIN
    IF NEW.tenant IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries
        (id, subscription_id, alert_id, tenant, state, occurred_at)
    SELECT taskservice_uuid7(), s.id, NEW.id, NEW.tenant, event, NEW.at
    FROM webhook_subscriptions s
    WHERE s.tenant = NEW.tenant AND s.task_id IS NULL AND s.enabled AND event = ANY(s.states)
    ORDER BY s.id
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify('taskservice_webhooks', '');
    END IF;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.add_column("spend_alerts", sa.Column("period", sa.Text()))
    op.add_column("spend_alerts", sa.Column("counted_at", sa.TIMESTAMP(timezone=True)))
    op.create_index(
        "ix_spend_alerts_id",
        "spend_alerts",
        ["id"],
        postgresql_where=sa.text("counted_at IS NULL"),
    )
    op.alter_column("webhook_deliveries", "task_id", nullable=True)
    op.alter_column("webhook_deliveries", "event_seq", nullable=True)
    op.add_column(
        "webhook_deliveries",
        sa.Column(
            "alert_id",
            sa.BigInteger(),
            sa.ForeignKey(
                "spend_alerts.id",
                name="fk_webhook_deliveries_alert_id_spend_alerts",
                ondelete="CASCADE",
            ),
        ),
    )
    op.create_check_constraint(
        op.f("ck_webhook_deliveries_task_or_alert"),
        "webhook_deliveries",
        "(task_id IS NULL) <> (alert_id IS NULL) AND (task_id IS NULL) = (event_seq IS NULL)",
    )
    # The latch of alert deliveries: one per (subscription, alert).
    op.create_index(
        "ix_webhook_deliveries_subscription_id_alert_id",
        "webhook_deliveries",
        ["subscription_id", "alert_id"],
        unique=True,
        postgresql_where=sa.text("alert_id IS NOT NULL"),
    )
    op.execute(_PERIOD)
    op.execute(
        "CREATE TRIGGER spend_alerts_period BEFORE INSERT ON spend_alerts "
        "FOR EACH ROW EXECUTE FUNCTION taskservice_spend_alert_period()"
    )
    op.execute(_OUTBOX)
    op.execute(
        "CREATE TRIGGER spend_alerts_webhook_outbox AFTER INSERT ON spend_alerts "
        "FOR EACH ROW EXECUTE FUNCTION taskservice_budget_outbox()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER spend_alerts_webhook_outbox ON spend_alerts")
    op.execute("DROP FUNCTION taskservice_budget_outbox()")
    op.execute("DROP TRIGGER spend_alerts_period ON spend_alerts")
    op.execute("DROP FUNCTION taskservice_spend_alert_period()")
    op.execute("DELETE FROM webhook_deliveries WHERE alert_id IS NOT NULL")
    op.drop_index("ix_webhook_deliveries_subscription_id_alert_id", table_name="webhook_deliveries")
    op.drop_constraint(
        op.f("ck_webhook_deliveries_task_or_alert"), "webhook_deliveries", type_="check"
    )
    op.drop_column("webhook_deliveries", "alert_id")
    op.alter_column("webhook_deliveries", "event_seq", nullable=False)
    op.alter_column("webhook_deliveries", "task_id", nullable=False)
    op.drop_index("ix_spend_alerts_id", table_name="spend_alerts")
    op.drop_column("spend_alerts", "counted_at")
    op.drop_column("spend_alerts", "period")
