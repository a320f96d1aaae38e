"""service secrets: a shared key for signing stream tokens

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 08:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "service_secrets",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_service_secrets")),
    )
    # 244 random bits from two v4 UUIDs (gen_random_uuid is in core PostgreSQL 13+).
    op.execute(
        "INSERT INTO service_secrets (name, value) VALUES ('stream_tokens', "
        "replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))"
    )


def downgrade() -> None:
    op.drop_table("service_secrets")
