"""A2A push notification configs: a task's webhook that speaks A2A

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 14:00:00

An A2A push notification config is a task's own webhook subscription (the outbox,
retries, delivery log and SSRF checks are the webhooks'), with what A2A adds in
`a2a`: the protocol version its payloads are written in, the client's config id
(unique per task), the `token` echoed in `X-A2A-Notification-Token`, and the
`authentication` sent as the `Authorization` header. NULL for plain webhooks.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("webhook_subscriptions", sa.Column("a2a", postgresql.JSONB(), nullable=True))
    op.execute(
        "CREATE UNIQUE INDEX ix_webhook_subscriptions_a2a_config "
        "ON webhook_subscriptions (task_id, (a2a ->> 'id')) WHERE a2a IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ix_webhook_subscriptions_a2a_config")
    op.drop_column("webhook_subscriptions", "a2a")
