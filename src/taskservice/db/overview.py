"""A tenant's overview (`GET /v1/overview`, the dashboard's first page), in one
statement, reading only what indexes reach cheaply whatever the number of tasks:

- the live states counted (`(tenant, state, id)`: pending, running and waiting tasks
  are few), of the pending ones those waiting for their `run_at` (scheduled), of the
  running ones those waiting for their model's rate limit (throttled), of those
  waiting for input the ones asking questions (needs input) apart from the parents
  waiting for their subtasks (every other `input_request`), and
  the oldest pending task that may run (the first of that index, ids being
  time-ordered), waiting since its `run_at`;
- what finished in the last `minutes`, per minute and outcome, with the latency from
  submit to the end (p50, p95) (`(tenant, status_at, id)`: only that window is read);
- the workers holding this tenant's running tasks, with their leases;
- the webhook outbox: deliveries waiting (and the oldest due), those failing (retried
  after a failed attempt), and those given up in the window.

Two modules are named `overview`: this one is the statement (storage), read through
`usecases/tasks.TaskService.overview`; `api/routes/overview.py` is the REST route and
its response's shape.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.types import Integer, Text

from taskservice.db.sql import Database, text_statement

_TOOK = "extract(epoch FROM status_at - created_at)"  # seconds, from submit to the end
_OVERVIEW = text_statement(
    f"""
SELECT
  (SELECT coalesce(jsonb_object_agg(state, n), '{{}}'::jsonb) FROM (
      SELECT state, count(*) AS n FROM tasks
      WHERE tenant = :tenant AND state IN ('pending', 'running', 'input_required')
      GROUP BY state) live) AS live,
  (SELECT count(*) FROM tasks WHERE tenant = :tenant AND state = 'pending' AND delayed)
      AS scheduled,
  (SELECT count(*) FROM tasks WHERE tenant = :tenant AND state = 'running' AND delayed)
      AS throttled,
  (SELECT count(*) FROM tasks WHERE tenant = :tenant AND state = 'input_required'
      AND input_request->>'kind' = 'questions') AS needs_input,
  (SELECT count(*) FROM tasks WHERE tenant = :tenant AND state = 'input_required'
      AND (input_request->>'kind') IS DISTINCT FROM 'questions') AS waiting_for_subtasks,
  (SELECT run_at FROM tasks WHERE tenant = :tenant AND state = 'pending' AND NOT delayed
      ORDER BY id LIMIT 1) AS oldest_pending_at,
  (SELECT coalesce(jsonb_agg(jsonb_build_object(
        'minute', minute, 'state', state, 'tasks', n, 'p50_seconds', p50, 'p95_seconds', p95)
        ORDER BY minute, state), '[]'::jsonb) FROM (
      SELECT date_trunc('minute', status_at) AS minute, state, count(*) AS n,
             percentile_cont(0.5) WITHIN GROUP (ORDER BY {_TOOK}) AS p50,
             percentile_cont(0.95) WITHIN GROUP (ORDER BY {_TOOK}) AS p95
      FROM tasks
      WHERE tenant = :tenant AND state IN ('completed', 'failed', 'cancelled')
        AND status_at >= date_trunc('minute', now()) - make_interval(mins => :minutes - 1)
      GROUP BY 1, 2) finished) AS finished,
  (SELECT coalesce(jsonb_agg(jsonb_build_object(
        'worker', lease_owner, 'leases', n, 'next_expiry', next_expiry) ORDER BY lease_owner),
        '[]'::jsonb) FROM (
      SELECT lease_owner, count(*) AS n, min(lease_expires_at) AS next_expiry FROM tasks
      WHERE tenant = :tenant AND state = 'running' AND lease_owner IS NOT NULL
      GROUP BY lease_owner) held) AS workers,
  (SELECT jsonb_build_object(
        'pending', count(*),
        'failing', count(*) FILTER (WHERE attempts > 0),
        'oldest_due_at', min(next_attempt_at))
      FROM webhook_deliveries WHERE tenant = :tenant AND status = 'pending') AS webhooks,
  (SELECT count(*) FROM webhook_deliveries
      WHERE tenant = :tenant AND status = 'failed'
        AND updated_at >= now() - make_interval(mins => :minutes)) AS webhooks_given_up,
  now() AS at
""",
    tenant=Text,
    minutes=Integer,
)


# The whole service's queue, for the metrics' gauges: each part an index's few rows
# (ix_tasks_live_state, ix_tasks_delayed, ix_webhook_deliveries_due,
# ix_tasks_lease_expiry).
_QUEUE = text_statement(
    """
SELECT
  (SELECT count(*) FROM tasks WHERE state = 'pending') AS pending,
  (SELECT count(*) FROM tasks WHERE state = 'running') AS running,
  (SELECT count(*) FROM tasks WHERE state = 'input_required') AS input_required,
  (SELECT count(*) FROM tasks WHERE state = 'pending' AND delayed) AS tasks_delayed,
  (SELECT count(*) FROM tasks WHERE state = 'running' AND delayed) AS tasks_throttled,
  coalesce(extract(epoch FROM now() - (
      SELECT run_at FROM tasks WHERE state = 'pending' AND NOT delayed ORDER BY id LIMIT 1)),
      0) AS oldest_pending_age_seconds,
  (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending') AS webhook_backlog,
  coalesce(extract(epoch FROM now() - (
      SELECT min(next_attempt_at) FROM webhook_deliveries
      WHERE status = 'pending' AND next_attempt_at <= now())), 0)
    AS webhook_oldest_due_age_seconds,
  (SELECT count(DISTINCT lease_owner) FROM tasks
      WHERE state = 'running' AND lease_owner IS NOT NULL) AS workers_with_leases
"""
)


class OverviewStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def read(self, tenant: str, *, minutes: int) -> dict[str, Any]:
        row = await self.db.fetchrow(_OVERVIEW, {"tenant": tenant, "minutes": minutes})
        assert row is not None
        return dict(row)

    async def queue(self) -> dict[str, Any]:
        """The whole service's queue (every tenant), for the metrics' gauges."""
        row = await self.db.fetchrow(_QUEUE, {})
        assert row is not None
        return dict(row)
