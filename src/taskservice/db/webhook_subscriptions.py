"""Webhook subscriptions: the statements behind `/v1/webhooks` and a task's own
webhooks (registered with the task, in its transaction).

Deliveries are written by the `task_events` trigger (migrations 0004, 0005) in the
same transaction as the state change that causes them, with a snapshot of the task as
it is then (see `db/notify.py`): a subscription only says which ones. A registration
or change that makes a delivery due NOTIFYs the dispatchers. The delivery log is
`db/webhook_deliveries.py`; sending is the outbox's (`db/webhook_outbox.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Boolean, Float, Integer, Text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

from taskservice.db.notify import WEBHOOKS_CHANNEL
from taskservice.db.sql import Database, Row
from taskservice.db.sql import text_statement as _stmt
from taskservice.domain.webhooks import Subscription

_UUID = UUID(as_uuid=True)


def _subscription(row: Row) -> Subscription:
    return Subscription(
        id=row["id"],
        tenant=row["tenant"],
        url=row["url"],
        states=tuple(row["states"]),
        task_id=row["task_id"],
        filters=row["filters"],
        enabled=row["enabled"],
        consecutive_failures=row["consecutive_failures"],
        failing_since=row["failing_since"],
        disabled_reason=row["disabled_reason"],
        disabled_at=row["disabled_at"],
        previous_secret_expires_at=row["previous_secret_expires_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        secret=row["secret"],
        a2a=row["a2a"],
    )


_CREATE_FOR_TASK = _stmt(
    """
WITH t AS (
    SELECT id, tenant, state, to_jsonb(tasks) AS snapshot FROM tasks
    WHERE id = :p_task AND tenant = :p_tenant FOR SHARE
),
s AS (
    INSERT INTO webhook_subscriptions (id, tenant, url, secret, states, task_id, filters, a2a)
    SELECT :p_id, t.tenant, :p_url, :p_secret, :p_states, t.id, '{}'::jsonb, :p_a2a FROM t
    -- An A2A config set again under its id replaces the one before.
    ON CONFLICT (task_id, (a2a ->> 'id')) WHERE a2a IS NOT NULL DO UPDATE SET
        url = EXCLUDED.url, states = EXCLUDED.states, a2a = EXCLUDED.a2a, enabled = true,
        consecutive_failures = 0, failing_since = NULL, disabled_reason = NULL,
        disabled_at = NULL, updated_at = now()
    RETURNING *
),
last AS (
    SELECT e.seq, e.created_at FROM task_events e JOIN t ON e.task_id = t.id
    WHERE e.type = 'state_change' ORDER BY e.seq DESC LIMIT 1
),
d AS (
    INSERT INTO webhook_deliveries
        (id, subscription_id, task_id, tenant, state, event_seq, occurred_at, task_snapshot)
    SELECT taskservice_uuid7(), s.id, t.id, t.tenant, t.state, last.seq, last.created_at,
           t.snapshot
    FROM s, t, last WHERE t.state = ANY(s.states)
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT s.*, (SELECT count(*) FROM d) AS delivered_now FROM s
""",
    p_task=_UUID,
    p_tenant=Text,
    p_id=_UUID,
    p_url=Text,
    p_secret=Text,
    p_states=ARRAY(Text),
    p_a2a=JSONB,
)

# How many webhooks a task of the tenant has; no row: no such task of the tenant.
_COUNT_FOR_TASK = _stmt(
    """
SELECT (SELECT count(*) FROM webhook_subscriptions s WHERE s.task_id = t.id) AS n
FROM tasks t WHERE t.id = :p_task AND t.tenant = :p_tenant
""",
    p_task=_UUID,
    p_tenant=Text,
)

_CREATE_GLOBAL = _stmt(
    """
INSERT INTO webhook_subscriptions (id, tenant, url, secret, states, task_id, filters)
VALUES (:p_id, :p_tenant, :p_url, :p_secret, :p_states, NULL, :p_filters)
RETURNING *
""",
    p_id=_UUID,
    p_tenant=Text,
    p_url=Text,
    p_secret=Text,
    p_states=ARRAY(Text),
    p_filters=JSONB,
)

_GET = _stmt(
    "SELECT * FROM webhook_subscriptions WHERE id = :p_id AND tenant = :p_tenant",
    p_id=_UUID,
    p_tenant=Text,
)

_LIST = _stmt(
    """
SELECT * FROM webhook_subscriptions
WHERE tenant = :p_tenant
  AND (CASE WHEN CAST(:p_task AS uuid) IS NULL THEN task_id IS NULL ELSE task_id = :p_task END)
  AND (CAST(:p_before AS uuid) IS NULL OR id < :p_before)
ORDER BY id DESC LIMIT :p_limit
""",
    p_tenant=Text,
    p_task=_UUID,
    p_before=_UUID,
    p_limit=Integer,
)

_DELETE = _stmt(
    "DELETE FROM webhook_subscriptions WHERE id = :p_id AND tenant = :p_tenant RETURNING id",
    p_id=_UUID,
    p_tenant=Text,
)

# Enabling again forgets the failure streak that disabled it.
_UPDATE = _stmt(
    """
UPDATE webhook_subscriptions SET
    url = coalesce(:p_url, url),
    states = coalesce(:p_states, states),
    filters = CASE WHEN task_id IS NULL THEN coalesce(:p_filters, filters) ELSE filters END,
    enabled = coalesce(:p_enabled, enabled),
    disabled_reason = CASE WHEN :p_enabled THEN NULL
                           WHEN NOT :p_enabled THEN 'disabled by the API' ELSE disabled_reason END,
    disabled_at = CASE WHEN :p_enabled THEN NULL
                       WHEN NOT :p_enabled AND enabled THEN now() ELSE disabled_at END,
    consecutive_failures = CASE WHEN :p_enabled THEN 0 ELSE consecutive_failures END,
    failing_since = CASE WHEN :p_enabled THEN NULL ELSE failing_since END,
    updated_at = now()
WHERE id = :p_id AND tenant = :p_tenant
RETURNING *
""",
    p_id=_UUID,
    p_tenant=Text,
    p_url=Text,
    p_states=ARRAY(Text),
    p_filters=JSONB,
    p_enabled=Boolean,
)

_ROTATE = _stmt(
    """
UPDATE webhook_subscriptions SET
    previous_secret = secret,
    previous_secret_expires_at = now() + make_interval(secs => :p_overlap),
    secret = :p_secret,
    updated_at = now()
WHERE id = :p_id AND tenant = :p_tenant
RETURNING *
""",
    p_id=_UUID,
    p_tenant=Text,
    p_secret=Text,
    p_overlap=Float,
)


class SubscriptionStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- subscriptions ----------------------------------------------------------

    async def create_for_task(
        self,
        conn: Any | None,
        *,
        tenant: str,
        task_id: uuid.UUID,
        subscription_id: uuid.UUID,
        url: str,
        secret: str,
        states: Sequence[str],
        a2a: Mapping[str, Any] | None = None,
    ) -> Subscription | None:
        """On `conn`, inside the caller's transaction (submit), or on a connection of
        its own (None). None: no such task for this tenant. A state the task is in
        already is delivered at once. With `a2a`, an A2A push notification config,
        which replaces the task's config of the same id."""
        if conn is None:
            async with self.db.connection() as own:
                return await self.create_for_task(
                    own,
                    tenant=tenant,
                    task_id=task_id,
                    subscription_id=subscription_id,
                    url=url,
                    secret=secret,
                    states=states,
                    a2a=a2a,
                )
        params = {
            "p_task": task_id,
            "p_tenant": tenant,
            "p_id": subscription_id,
            "p_url": url,
            "p_secret": secret,
            "p_states": list(states),
            "p_a2a": dict(a2a) if a2a is not None else None,
        }
        row = await conn.fetchrow(_CREATE_FOR_TASK.sql, *_CREATE_FOR_TASK.args(params))
        if row is None:
            return None
        if row["delivered_now"]:
            await conn.execute("SELECT pg_notify($1, '')", WEBHOOKS_CHANNEL)
        return _subscription(row)

    async def count_for_task(self, *, tenant: str, task_id: uuid.UUID) -> int | None:
        """How many webhooks the task has; None: the tenant has no such task."""
        row = await self.db.fetchrow(_COUNT_FOR_TASK, {"p_task": task_id, "p_tenant": tenant})
        return int(row["n"]) if row is not None else None

    async def create_global(
        self,
        *,
        tenant: str,
        subscription_id: uuid.UUID,
        url: str,
        secret: str,
        states: Sequence[str],
        filters: Mapping[str, Any],
    ) -> Subscription:
        params = {
            "p_id": subscription_id,
            "p_tenant": tenant,
            "p_url": url,
            "p_secret": secret,
            "p_states": list(states),
            "p_filters": dict(filters),
        }
        row = await self.db.fetchrow(_CREATE_GLOBAL, params)
        assert row is not None
        return _subscription(row)

    async def get(self, *, tenant: str, subscription_id: uuid.UUID) -> Subscription | None:
        row = await self.db.fetchrow(_GET, {"p_id": subscription_id, "p_tenant": tenant})
        return _subscription(row) if row is not None else None

    async def subscriptions(
        self, *, tenant: str, task_id: uuid.UUID | None, before: uuid.UUID | None, limit: int
    ) -> list[Subscription]:
        params = {"p_tenant": tenant, "p_task": task_id, "p_before": before, "p_limit": limit}
        return [_subscription(row) for row in await self.db.fetch(_LIST, params)]

    async def delete(self, *, tenant: str, subscription_id: uuid.UUID) -> bool:
        row = await self.db.fetchrow(_DELETE, {"p_id": subscription_id, "p_tenant": tenant})
        return row is not None

    async def update(
        self,
        *,
        tenant: str,
        subscription_id: uuid.UUID,
        url: str | None = None,
        states: Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        enabled: bool | None = None,
    ) -> Subscription | None:
        params = {
            "p_id": subscription_id,
            "p_tenant": tenant,
            "p_url": url,
            "p_states": list(states) if states is not None else None,
            "p_filters": dict(filters) if filters is not None else None,
            "p_enabled": enabled,
        }
        async with self.db.connection() as conn:
            row = await conn.fetchrow(_UPDATE.sql, *_UPDATE.args(params))
            if row is not None and enabled:
                # Deliveries held back while it was disabled are due now.
                await conn.execute("SELECT pg_notify($1, '')", WEBHOOKS_CHANNEL)
        return _subscription(row) if row is not None else None

    async def rotate(
        self, *, tenant: str, subscription_id: uuid.UUID, secret: str, overlap_seconds: float
    ) -> Subscription | None:
        params = {
            "p_id": subscription_id,
            "p_tenant": tenant,
            "p_secret": secret,
            "p_overlap": overlap_seconds,
        }
        row = await self.db.fetchrow(_ROTATE, params)
        return _subscription(row) if row is not None else None
