"""The webhook outbox, the dispatcher's side: claim due deliveries, save their
bodies, record each attempt.

- `claim` takes due deliveries with `FOR UPDATE SKIP LOCKED`, counts the attempt and
  pushes `next_attempt_at` past the HTTP timeout (the in-flight lease), all in one
  statement, so two dispatchers never make the same attempt. A delivery is only due
  once every earlier delivery of its (subscription, task) is settled: states go out
  in order; a budget alert's once the subscription's earlier alerts are (80% before
  100%, a period's before the next's).
- `fix_payloads` saves each body before its first send (the first saved wins), so
  every attempt of a `webhook-id` sends the same bytes, whoever makes it.
- `record` writes the attempt's log row and its outcome, fenced on the attempt
  number: a dispatcher whose lease ran out cannot overwrite a later attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Float, Integer, Text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP, UUID

from taskservice.db.eventlog import NEXT_SEQ, append_events
from taskservice.db.rows import task_from_row
from taskservice.db.spend_alerts import ALERT_COLUMNS, alert_from_row
from taskservice.db.sql import Database, Row
from taskservice.db.sql import text_statement as _stmt
from taskservice.domain.models import Task
from taskservice.domain.webhooks import BudgetAlert

_UUID = UUID(as_uuid=True)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A delivery a dispatcher now holds for one attempt."""

    id: uuid.UUID
    subscription_id: uuid.UUID
    task_id: uuid.UUID | None  # a task's state change; else a budget alert's
    tenant: str
    state: str  # the task's state, or the budget event
    event_seq: int | None
    occurred_at: datetime
    attempt: int
    schedule_step: int
    payload: str | None  # saved before the first send; None until then
    has_snapshot: bool  # the task as it was at the state change is stored
    url: str
    secrets: tuple[str, ...]  # every secret in force: the current one, then the previous
    a2a: dict[str, Any] | None = None  # an A2A push config's version, token, authentication
    trace_context: dict[str, str] | None = None  # the task's (`common/tracing.py`)
    alert_id: int | None = None  # a budget alert (`spend_alerts`)

    @classmethod
    def of(cls, row: Row) -> Claimed:
        secrets = [row["secret"]]
        if row["previous_secret"] is not None and row["previous_in_force"]:
            secrets.append(row["previous_secret"])
        return cls(
            id=row["id"],
            subscription_id=row["subscription_id"],
            task_id=row["task_id"],
            tenant=row["tenant"],
            state=row["state"],
            event_seq=row["event_seq"],
            occurred_at=row["occurred_at"],
            attempt=row["attempts"],
            schedule_step=row["schedule_step"],
            payload=row["payload"],
            has_snapshot=row["has_snapshot"],
            url=row["url"],
            secrets=tuple(secrets),
            a2a=row["a2a"],
            trace_context=row.get("trace_context"),
            alert_id=row.get("alert_id"),
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt came to, and what the dispatcher decided follows from it."""

    started_at: datetime
    duration_ms: float
    status_code: int | None
    error: str | None
    succeeded: bool
    retry_in: float | None  # seconds until the next attempt; None: no more attempts
    disable_reason: str | None  # the subscription is to be disabled (410)


_CLAIM = _stmt(
    """
WITH due AS (
    SELECT d.id FROM webhook_deliveries d
    JOIN webhook_subscriptions s ON s.id = d.subscription_id
    WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND s.enabled
      AND NOT EXISTS (
          SELECT 1 FROM webhook_deliveries e
          WHERE e.subscription_id = d.subscription_id AND e.task_id = d.task_id
            AND e.status = 'pending' AND e.event_seq < d.event_seq)
      AND (d.alert_id IS NULL OR NOT EXISTS (
          SELECT 1 FROM webhook_deliveries e
          WHERE e.subscription_id = d.subscription_id AND e.alert_id < d.alert_id
            AND e.status = 'pending'))
    ORDER BY d.next_attempt_at
    LIMIT :p_limit
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_deliveries d SET
    attempts = d.attempts + 1,
    locked_by = :p_dispatcher,
    next_attempt_at = now() + make_interval(secs => :p_lease),
    updated_at = now()
FROM due, webhook_subscriptions s
WHERE d.id = due.id AND s.id = d.subscription_id
RETURNING d.id, d.subscription_id, d.task_id, d.alert_id, d.tenant, d.state, d.event_seq,
          d.occurred_at, d.attempts, d.schedule_step, d.payload,
          d.task_snapshot IS NOT NULL AS has_snapshot, s.url, s.secret, s.previous_secret,
          coalesce(s.previous_secret_expires_at > now(), false) AS previous_in_force, s.a2a,
          (SELECT trace_context FROM tasks WHERE tasks.id = d.task_id) AS trace_context
""",
    p_limit=Integer,
    p_dispatcher=Text,
    p_lease=Float,
)

# Log the attempt and settle the delivery, fenced on the attempt number; a success
# also ends the subscription's failure streak (written only when there is one, so a
# busy subscription's row is not rewritten on every delivery). One round trip.
_SETTLE = _stmt(
    """
WITH settled AS (
    UPDATE webhook_deliveries SET
        status = :p_status,
        next_attempt_at = CASE WHEN :p_status = 'pending'
                               THEN now() + make_interval(secs => :p_retry_in)
                               ELSE next_attempt_at END,
        schedule_step = CASE WHEN :p_status = 'succeeded' THEN schedule_step
                             ELSE schedule_step + 1 END,
        locked_by = NULL,
        last_status_code = :p_code,
        last_error = :p_error,
        delivered_at = CASE WHEN :p_status = 'succeeded' THEN now() ELSE delivered_at END,
        updated_at = now()
    WHERE id = :p_id AND attempts = :p_attempt AND status = 'pending'
    RETURNING id, subscription_id
),
logged AS (
    INSERT INTO webhook_attempts
        (delivery_id, attempt, dispatcher, started_at, duration_ms, status_code, error)
    VALUES (:p_id, :p_attempt, :p_dispatcher, :p_started, :p_duration, :p_code, :p_error)
    ON CONFLICT DO NOTHING
    RETURNING id
),
streak_ended AS (
    UPDATE webhook_subscriptions s SET consecutive_failures = 0, failing_since = NULL
    FROM settled
    WHERE s.id = settled.subscription_id AND :p_status = 'succeeded'
      AND (s.consecutive_failures <> 0 OR s.failing_since IS NOT NULL)
    RETURNING s.id
)
SELECT count(*) AS won FROM settled
""",
    p_id=_UUID,
    p_attempt=Integer,
    p_status=Text,
    p_retry_in=Float,
    p_code=Integer,
    p_error=Text,
    p_dispatcher=Text,
    p_started=TIMESTAMP(timezone=True),
    p_duration=Float,
)

# The tasks of deliveries as they were at their state changes, as task rows.
_SNAPSHOTS = _stmt(
    """
SELECT d.id AS delivery_id, t.*
FROM webhook_deliveries d
CROSS JOIN LATERAL jsonb_populate_record(NULL::tasks, d.task_snapshot) t
WHERE d.id = ANY(:p_ids) AND d.task_snapshot IS NOT NULL
""",
    p_ids=ARRAY(_UUID),
)

# The budget alerts of deliveries, as noted (the rows are never changed).
_ALERTS = _stmt(
    f"""
SELECT d.id AS delivery_id, {ALERT_COLUMNS}
FROM webhook_deliveries d JOIN spend_alerts a ON a.id = d.alert_id
WHERE d.id = ANY(:p_ids)
""",
    p_ids=ARRAY(_UUID),
)

# Bodies are saved before their first send; the first one saved wins, and every
# dispatcher sends what is saved.
_FIX_PAYLOADS = _stmt(
    """
UPDATE webhook_deliveries d SET payload = coalesce(d.payload, x.payload)
FROM unnest(CAST(:p_ids AS uuid[]), CAST(:p_payloads AS text[])) AS x(id, payload)
WHERE d.id = x.id
RETURNING d.id, d.payload
""",
    p_ids=ARRAY(_UUID),
    p_payloads=ARRAY(Text),
)

# A failure extends the streak; a 410 (p_reason set) or a streak older than
# p_disable_after disables the subscription. `newly_disabled` says this call did it.
_SUBSCRIPTION_FAILED = _stmt(
    """
WITH before AS (
    SELECT id, enabled, coalesce(failing_since, now()) AS since
    FROM webhook_subscriptions WHERE id = :p_id FOR UPDATE
),
decided AS (
    SELECT id, enabled, since,
           CASE WHEN CAST(:p_reason AS text) IS NOT NULL THEN :p_reason
                WHEN since <= now() - make_interval(secs => :p_disable_after)
                THEN 'failing since ' || to_char(since AT TIME ZONE 'UTC',
                                                 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
           END AS reason
    FROM before
)
UPDATE webhook_subscriptions s SET
    consecutive_failures = s.consecutive_failures + 1,
    failing_since = decided.since,
    enabled = s.enabled AND decided.reason IS NULL,
    disabled_reason = CASE WHEN s.enabled AND decided.reason IS NOT NULL
                           THEN decided.reason ELSE s.disabled_reason END,
    disabled_at = CASE WHEN s.enabled AND decided.reason IS NOT NULL
                       THEN now() ELSE s.disabled_at END,
    updated_at = now()
FROM decided WHERE s.id = decided.id
RETURNING s.consecutive_failures,
          (decided.enabled AND decided.reason IS NOT NULL) AS newly_disabled,
          decided.reason
""",
    p_id=_UUID,
    p_reason=Text,
    p_disable_after=Float,
)

# Operators and firehose readers learn of a disabled subscription from an event on
# the task whose delivery disabled it.
_DISABLED_APPEND = append_events(type="'webhook_disabled'", data=":p_data")
_DISABLED_EVENT = _stmt(
    f"""
WITH t AS (
    UPDATE tasks SET {NEXT_SEQ} WHERE id = :p_task
    RETURNING id, tenant, event_seq
)
{_DISABLED_APPEND}
""",
    p_task=_UUID,
    p_data=JSONB,
)

# Shutdown: attempts still in flight are handed back at once.
_RELEASE = _stmt(
    """
UPDATE webhook_deliveries SET locked_by = NULL, next_attempt_at = now(), updated_at = now()
WHERE id = :p_id AND attempts = :p_attempt AND status = 'pending' AND locked_by = :p_dispatcher
""",
    p_id=_UUID,
    p_attempt=Integer,
    p_dispatcher=Text,
)


class OutboxStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def claim(self, *, dispatcher: str, limit: int, lease_seconds: float) -> list[Claimed]:
        params = {"p_limit": limit, "p_dispatcher": dispatcher, "p_lease": lease_seconds}
        return [Claimed.of(row) for row in await self.db.fetch(_CLAIM, params)]

    async def snapshots(self, delivery_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Task]:
        """Each delivery's task as it was at its state change (deliveries queued
        before snapshots existed have none)."""
        rows = await self.db.fetch(_SNAPSHOTS, {"p_ids": list(delivery_ids)})
        return {row["delivery_id"]: task_from_row(row) for row in rows}

    async def alerts(self, delivery_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, BudgetAlert]:
        """Each delivery's budget alert."""
        rows = await self.db.fetch(_ALERTS, {"p_ids": list(delivery_ids)})
        return {row["delivery_id"]: alert_from_row(row) for row in rows}

    async def fix_payloads(self, payloads: Mapping[uuid.UUID, str]) -> dict[uuid.UUID, str]:
        """Save bodies not saved yet; answer the body each delivery now has (another
        dispatcher's, if it saved first). A delivery that is gone is left out."""
        if not payloads:
            return {}
        params = {"p_ids": list(payloads), "p_payloads": list(payloads.values())}
        return {row["id"]: row["payload"] for row in await self.db.fetch(_FIX_PAYLOADS, params)}

    async def record(
        self,
        claimed: Claimed,
        outcome: Outcome,
        *,
        dispatcher: str,
        disable_after_seconds: float,
    ) -> bool:
        """Log the attempt and settle the delivery. False: the attempt was no longer
        this dispatcher's to settle (its lease ran out and another took it over)."""
        if outcome.succeeded:
            status = "succeeded"
        elif outcome.retry_in is None:
            status = "failed"
        else:
            status = "pending"
        params = {
            "p_id": claimed.id,
            "p_attempt": claimed.attempt,
            "p_status": status,
            "p_retry_in": outcome.retry_in or 0.0,
            "p_code": outcome.status_code,
            "p_error": outcome.error,
            "p_dispatcher": dispatcher,
            "p_started": outcome.started_at,
            "p_duration": outcome.duration_ms,
        }
        async with self.db.connection() as conn:
            if outcome.succeeded:  # the common case: one statement
                return bool(await conn.fetchval(_SETTLE.sql, *_SETTLE.args(params)))
            async with conn.transaction():
                if not await conn.fetchval(_SETTLE.sql, *_SETTLE.args(params)):
                    return False
                failed = {
                    "p_id": claimed.subscription_id,
                    "p_reason": outcome.disable_reason,
                    "p_disable_after": disable_after_seconds,
                }
                row = await conn.fetchrow(
                    _SUBSCRIPTION_FAILED.sql, *_SUBSCRIPTION_FAILED.args(failed)
                )
                # The task whose delivery disabled it is told (an alert has no task:
                # the dispatcher's log line says it).
                if row is not None and row["newly_disabled"] and claimed.task_id is not None:
                    data = {
                        "subscription_id": str(claimed.subscription_id),
                        "delivery_id": str(claimed.id),
                        "reason": row["reason"],
                    }
                    event = {"p_task": claimed.task_id, "p_data": data}
                    await conn.execute(_DISABLED_EVENT.sql, *_DISABLED_EVENT.args(event))
                return True

    async def release(self, claimed: Claimed, *, dispatcher: str) -> None:
        params = {"p_id": claimed.id, "p_attempt": claimed.attempt, "p_dispatcher": dispatcher}
        async with self.db.connection() as conn:
            await conn.execute(_RELEASE.sql, *_RELEASE.args(params))
