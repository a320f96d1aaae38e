"""Traces: the trace context a task continues

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 18:00:00

With `TASKSERVICE_OTEL` on, a task keeps the W3C trace context (`traceparent`, and
`tracestate`) of the request that submitted it (or of the run that spawned it), so
that its claim, its runs on any worker, its model requests and its webhook attempts
are spans of that one trace. NULL when tracing is off.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("trace_context", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("tasks", "trace_context")
