"""The webhook delivery log as the API shows it: each delivery with its attempts,
and queueing one again on request (`/v1/webhooks/{id}/deliveries`)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Integer, Text
from sqlalchemy.dialects.postgresql import UUID

from taskservice.db.notify import WEBHOOKS_CHANNEL
from taskservice.db.sql import Database, Row
from taskservice.db.sql import text_statement as _stmt
from taskservice.domain.webhooks import Attempt, Delivery

_UUID = UUID(as_uuid=True)


def _delivery(row: Row) -> Delivery:
    pending = row["status"] == "pending"
    return Delivery(
        id=row["id"],
        subscription_id=row["subscription_id"],
        task_id=row["task_id"],
        alert_id=row["alert_id"],
        state=row["state"],
        event_seq=row["event_seq"],
        occurred_at=row["occurred_at"],
        status=row["status"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"] if pending else None,
        in_flight=pending and row["locked_by"] is not None,
        last_status_code=row["last_status_code"],
        last_error=row["last_error"],
        created_at=row["created_at"],
        delivered_at=row["delivered_at"],
        log=tuple(
            Attempt(
                attempt=a["attempt"],
                dispatcher=a["dispatcher"],
                started_at=datetime.fromisoformat(a["started_at"]),
                duration_ms=a["duration_ms"],
                status_code=a["status_code"],
                error=a["error"],
            )
            for a in row["log"] or ()
        ),
    )


# Deliveries with their attempt log, newest first (not their task snapshot or body:
# those can be as large as the task).
_DELIVERY_SELECT = """
SELECT d.id, d.subscription_id, d.task_id, d.alert_id, d.state, d.event_seq, d.occurred_at,
       d.status, d.attempts, d.next_attempt_at, d.locked_by, d.last_status_code, d.last_error,
       d.created_at, d.delivered_at, (
    SELECT jsonb_agg(jsonb_build_object(
               'attempt', a.attempt, 'dispatcher', a.dispatcher, 'started_at', a.started_at,
               'duration_ms', a.duration_ms, 'status_code', a.status_code, 'error', a.error)
           ORDER BY a.attempt)
    FROM webhook_attempts a WHERE a.delivery_id = d.id
) AS log
FROM webhook_deliveries d
"""

_DELIVERIES = _stmt(
    _DELIVERY_SELECT
    + """
WHERE d.tenant = :p_tenant
  AND (CAST(:p_subscription AS uuid) IS NULL OR d.subscription_id = :p_subscription)
  AND (CAST(:p_task AS uuid) IS NULL OR d.task_id = :p_task)
  AND (CAST(:p_status AS text) IS NULL OR d.status = :p_status)
  AND (CAST(:p_before AS uuid) IS NULL OR d.id < :p_before)
ORDER BY d.id DESC LIMIT :p_limit
""",
    p_tenant=Text,
    p_subscription=_UUID,
    p_task=_UUID,
    p_status=Text,
    p_before=_UUID,
    p_limit=Integer,
)

_DELIVERY = _stmt(
    _DELIVERY_SELECT + "WHERE d.id = :p_id AND d.tenant = :p_tenant",
    p_id=_UUID,
    p_tenant=Text,
)

# Due again now, with a fresh retry schedule. Not while an attempt is in flight (its
# result would land on the new round), and not for a disabled subscription.
_REDELIVER = _stmt(
    """
UPDATE webhook_deliveries d SET
    status = 'pending', next_attempt_at = now(), schedule_step = 0, delivered_at = NULL,
    updated_at = now()
FROM webhook_subscriptions s
WHERE d.id = :p_id AND d.tenant = :p_tenant AND s.id = d.subscription_id AND s.enabled
  AND NOT (d.status = 'pending' AND d.locked_by IS NOT NULL AND d.next_attempt_at > now())
RETURNING d.id
""",
    p_id=_UUID,
    p_tenant=Text,
)


class DeliveryLog:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def deliveries(
        self,
        *,
        tenant: str,
        subscription_id: uuid.UUID | None = None,
        task_id: uuid.UUID | None = None,
        status: str | None = None,
        before: uuid.UUID | None = None,
        limit: int,
    ) -> list[Delivery]:
        params = {
            "p_tenant": tenant,
            "p_subscription": subscription_id,
            "p_task": task_id,
            "p_status": status,
            "p_before": before,
            "p_limit": limit,
        }
        return [_delivery(row) for row in await self.db.fetch(_DELIVERIES, params)]

    async def delivery(self, *, tenant: str, delivery_id: uuid.UUID) -> Delivery | None:
        row = await self.db.fetchrow(_DELIVERY, {"p_id": delivery_id, "p_tenant": tenant})
        return _delivery(row) if row is not None else None

    async def redeliver(self, *, tenant: str, delivery_id: uuid.UUID) -> bool:
        """False: in flight, or its subscription is disabled (the caller says which)."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                _REDELIVER.sql, *_REDELIVER.args({"p_id": delivery_id, "p_tenant": tenant})
            )
            if row is not None:
                await conn.execute("SELECT pg_notify($1, '')", WEBHOOKS_CHANNEL)
            return row is not None
