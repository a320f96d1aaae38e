"""Spend kept as it is written: a tenant's tokens, requests and cost per UTC day,
agent profile and model (and per context)

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-28 22:40:00

`GET /v1/usage` answers from these rows, never from a scan of `tasks`. A trigger on
`tasks` keeps them: whenever a task's `usage` changes (a run's ledger write, its
outcome, whatever path writes it), the difference between the new and the old usage
is added to the row of the task's tenant, the day of the write, its profile and its
model, in the statement that changed the usage, so the rows are always the sum of
every task's usage, written on the day it was written. A usage that names several
models (`usage.models`: a run that went on on a fallback model) is split by them.

Deleting a task (retention) leaves its spend here: what was spent stays spent.
`usage_daily` is small (one row per tenant, day, profile and model); `usage_contexts`
has a row per context and day as well, read only to group by context.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A usage's parts by model: `usage.models` when the usage names its models, else the
# whole usage as the task's model's. Usage written before costs were kept (no
# `currency`) had none of its requests priced.
_PARTS = """
CREATE FUNCTION taskservice_usage_parts(jsonb, text)
RETURNS TABLE (model text, input_tokens bigint, output_tokens bigint, requests bigint,
               cost numeric, unpriced_requests bigint)
LANGUAGE sql IMMUTABLE AS $$
SELECT m.key, coalesce((m.value->>'input_tokens')::bigint, 0),
       coalesce((m.value->>'output_tokens')::bigint, 0),
       coalesce((m.value->>'requests')::bigint, 0),
       coalesce((m.value->>'cost')::numeric, 0),
       coalesce((m.value->>'unpriced_requests')::bigint, 0)
FROM jsonb_each(CASE WHEN jsonb_typeof($1->'models') = 'object' THEN $1->'models' END) m
UNION ALL
SELECT $2, coalesce(($1->>'input_tokens')::bigint, 0),
       coalesce(($1->>'output_tokens')::bigint, 0),
       coalesce(($1->>'requests')::bigint, 0),
       coalesce(($1->>'cost')::numeric, 0),
       CASE WHEN $1 ? 'currency' THEN coalesce(($1->>'unpriced_requests')::bigint, 0)
            ELSE coalesce(($1->>'requests')::bigint, 0) END
WHERE $1 IS NOT NULL AND jsonb_typeof($1->'models') IS DISTINCT FROM 'object'
$$
"""

_SUMS = ("input_tokens", "output_tokens", "requests", "cost", "unpriced_requests")
_ADD = ", ".join(f"{c} = {{t}}.{c} + excluded.{c}" for c in _SUMS)
_COLUMNS = ", ".join(_SUMS)

# The rows touched are locked in one order (model, then the context row) by every
# writer: no two writes of usage deadlock on them.
_ROLLUP = f"""
CREATE FUNCTION taskservice_usage_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH delta AS (
        SELECT model, sum(input_tokens)::bigint AS input_tokens,
               sum(output_tokens)::bigint AS output_tokens, sum(requests)::bigint AS requests,
               sum(cost) AS cost, sum(unpriced_requests)::bigint AS unpriced_requests
        FROM (
            SELECT * FROM taskservice_usage_parts(NEW.usage, NEW.agent->>'model')
            UNION ALL
            SELECT model, -input_tokens, -output_tokens, -requests, -cost, -unpriced_requests
            FROM taskservice_usage_parts(
                CASE WHEN TG_OP = 'UPDATE' THEN OLD.usage END, NEW.agent->>'model')
        ) parts
        GROUP BY model
        HAVING sum(input_tokens) <> 0 OR sum(output_tokens) <> 0 OR sum(requests) <> 0
            OR sum(cost) <> 0 OR sum(unpriced_requests) <> 0
    ),
    daily AS (
        INSERT INTO usage_daily (tenant, day, agent, model, {_COLUMNS})
        SELECT NEW.tenant, (now() AT TIME ZONE 'UTC')::date,
               coalesce(NEW.agent->>'profile', ''), model, {_COLUMNS}
        FROM delta ORDER BY model
        ON CONFLICT (tenant, day, agent, model) DO UPDATE SET {_ADD.format(t="usage_daily")}
        RETURNING 1
    )
    INSERT INTO usage_contexts (tenant, day, context_id, agent, model, {_COLUMNS})
    SELECT NEW.tenant, (now() AT TIME ZONE 'UTC')::date, coalesce(NEW.context_id, ''),
           coalesce(NEW.agent->>'profile', ''), model, {_COLUMNS}
    FROM delta ORDER BY model
    ON CONFLICT (tenant, day, context_id, agent, model)
        DO UPDATE SET {_ADD.format(t="usage_contexts")};
    RETURN NULL;
END
$$
"""
_ON_UPDATE = """
CREATE TRIGGER tasks_usage_rollup AFTER UPDATE OF usage ON tasks
    FOR EACH ROW WHEN (OLD.usage IS DISTINCT FROM NEW.usage)
    EXECUTE FUNCTION taskservice_usage_rollup()
"""
_ON_INSERT = """
CREATE TRIGGER tasks_usage_rollup_new AFTER INSERT ON tasks
    FOR EACH ROW WHEN (NEW.usage <> '{}'::jsonb)
    EXECUTE FUNCTION taskservice_usage_rollup()
"""


def _sums() -> list[sa.Column[object]]:
    big = {"server_default": sa.text("0"), "nullable": False}
    return [
        sa.Column("input_tokens", sa.BigInteger(), **big),
        sa.Column("output_tokens", sa.BigInteger(), **big),
        sa.Column("requests", sa.BigInteger(), **big),
        sa.Column("cost", sa.Numeric(), **big),
        sa.Column("unpriced_requests", sa.BigInteger(), **big),
    ]


def upgrade() -> None:
    op.create_table(
        "usage_daily",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        *_sums(),
        sa.PrimaryKeyConstraint("tenant", "day", "agent", "model"),
    )
    op.create_table(
        "usage_contexts",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("context_id", sa.Text(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        *_sums(),
        sa.PrimaryKeyConstraint("tenant", "day", "context_id", "agent", "model"),
    )
    op.execute(_PARTS)
    op.execute(_ROLLUP)
    op.execute(_ON_UPDATE)
    op.execute(_ON_INSERT)
    # What tasks already spent counts on the day of the migration (their days are
    # not known): the rows start as the sum over tasks.
    op.execute(
        f"""
        WITH parts AS (
            SELECT t.tenant, coalesce(t.context_id, '') AS context_id,
                   coalesce(t.agent->>'profile', '') AS agent, p.*
            FROM tasks t, taskservice_usage_parts(t.usage, t.agent->>'model') p
            WHERE t.usage <> '{{}}'::jsonb
        ),
        daily AS (
            INSERT INTO usage_daily (tenant, day, agent, model, {_COLUMNS})
            SELECT tenant, (now() AT TIME ZONE 'UTC')::date, agent, model,
                   sum(input_tokens), sum(output_tokens), sum(requests), sum(cost),
                   sum(unpriced_requests)
            FROM parts GROUP BY tenant, agent, model
        )
        INSERT INTO usage_contexts (tenant, day, context_id, agent, model, {_COLUMNS})
        SELECT tenant, (now() AT TIME ZONE 'UTC')::date, context_id, agent, model,
               sum(input_tokens), sum(output_tokens), sum(requests), sum(cost),
               sum(unpriced_requests)
        FROM parts GROUP BY tenant, context_id, agent, model
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER tasks_usage_rollup_new ON tasks")
    op.execute("DROP TRIGGER tasks_usage_rollup ON tasks")
    op.execute("DROP FUNCTION taskservice_usage_rollup()")
    op.execute("DROP FUNCTION taskservice_usage_parts(jsonb, text)")
    op.drop_table("usage_contexts")
    op.drop_table("usage_daily")
