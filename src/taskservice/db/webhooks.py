"""Every SQL statement about webhook subscriptions, deliveries and attempts.

Deliveries are written by the `task_events` trigger (migrations 0004, 0005) in the
same transaction as the state change that causes them, with a snapshot of the task as
it is then; this module reads them, registers subscriptions, and moves deliveries
through their attempts:

- `claim` takes due deliveries with `FOR UPDATE SKIP LOCKED`, counts the attempt and
  pushes `next_attempt_at` past the HTTP timeout (the in-flight lease), all in one
  statement, so two dispatchers never make the same attempt. A delivery is only due
  once every earlier delivery of its (subscription, task) is settled: states go out
  in order.
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

from sqlalchemy import Boolean, Float, Integer, Text, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP, UUID

from taskservice.db.eventlog import NEXT_SEQ, append_events
from taskservice.db.notify import WEBHOOKS_CHANNEL
from taskservice.db.rows import task_from_row
from taskservice.db.sql import Database, Row, Statement
from taskservice.models import Task

_UUID = UUID(as_uuid=True)


@dataclass(frozen=True, slots=True)
class Subscription:
    id: uuid.UUID
    tenant: str
    url: str
    states: tuple[str, ...]
    task_id: uuid.UUID | None
    filters: dict[str, Any]
    enabled: bool
    consecutive_failures: int
    failing_since: datetime | None
    disabled_reason: str | None
    disabled_at: datetime | None
    previous_secret_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    secret: str  # never shown after creation or rotation

    @classmethod
    def of(cls, row: Row) -> Subscription:
        return cls(
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
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    dispatcher: str
    started_at: datetime
    duration_ms: float
    status_code: int | None
    error: str | None


@dataclass(frozen=True, slots=True)
class Delivery:
    id: uuid.UUID
    subscription_id: uuid.UUID
    task_id: uuid.UUID
    state: str
    event_seq: int
    occurred_at: datetime
    status: str
    attempts: int
    next_attempt_at: datetime | None  # only while pending
    in_flight: bool
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
    log: tuple[Attempt, ...]

    @classmethod
    def of(cls, row: Row) -> Delivery:
        pending = row["status"] == "pending"
        return cls(
            id=row["id"],
            subscription_id=row["subscription_id"],
            task_id=row["task_id"],
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


@dataclass(frozen=True, slots=True)
class Claimed:
    """A delivery a dispatcher now holds for one attempt."""

    id: uuid.UUID
    subscription_id: uuid.UUID
    task_id: uuid.UUID
    tenant: str
    state: str
    event_seq: int
    occurred_at: datetime
    attempt: int
    schedule_step: int
    payload: str | None  # saved before the first send; None until then
    has_snapshot: bool  # the task as it was at the state change is stored
    url: str
    secrets: tuple[str, ...]  # every secret in force: the current one, then the previous

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


def _stmt(sql: str, **types: Any) -> Statement:
    return Statement(text(sql).bindparams(*(bindparam(k, type_=t) for k, t in types.items())))


# A task's own subscription. The task's row is share-locked, so a transition racing
# this registration either committed before (its state is read here, and delivered if
# wanted) or waits and then sees the subscription from its outbox trigger.
_CREATE_FOR_TASK = _stmt(
    """
WITH t AS (
    SELECT id, tenant, state, to_jsonb(tasks) AS snapshot FROM tasks
    WHERE id = :p_task AND tenant = :p_tenant FOR SHARE
),
s AS (
    INSERT INTO webhook_subscriptions (id, tenant, url, secret, states, task_id, filters)
    SELECT :p_id, t.tenant, :p_url, :p_secret, :p_states, t.id, '{}'::jsonb FROM t
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

# Deliveries with their attempt log, newest first (not their task snapshot or body:
# those can be as large as the task).
_DELIVERY_SELECT = """
SELECT d.id, d.subscription_id, d.task_id, d.state, d.event_seq, d.occurred_at, d.status,
       d.attempts, d.next_attempt_at, d.locked_by, d.last_status_code, d.last_error,
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
RETURNING d.id, d.subscription_id, d.task_id, d.tenant, d.state, d.event_seq,
          d.occurred_at, d.attempts, d.schedule_step, d.payload,
          d.task_snapshot IS NOT NULL AS has_snapshot, s.url, s.secret, s.previous_secret,
          coalesce(s.previous_secret_expires_at > now(), false) AS previous_in_force
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


class WebhookStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- subscriptions ----------------------------------------------------------

    async def create_for_task(
        self,
        conn: Any,
        *,
        tenant: str,
        task_id: uuid.UUID,
        subscription_id: uuid.UUID,
        url: str,
        secret: str,
        states: Sequence[str],
    ) -> Subscription | None:
        """On `conn`, inside the caller's transaction (submit) or alone. None: no such
        task for this tenant. A state the task is in already is delivered at once."""
        params = {
            "p_task": task_id,
            "p_tenant": tenant,
            "p_id": subscription_id,
            "p_url": url,
            "p_secret": secret,
            "p_states": list(states),
        }
        row = await conn.fetchrow(_CREATE_FOR_TASK.sql, *_CREATE_FOR_TASK.args(params))
        if row is None:
            return None
        if row["delivered_now"]:
            await conn.execute("SELECT pg_notify($1, '')", WEBHOOKS_CHANNEL)
        return Subscription.of(row)

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
        return Subscription.of(row)

    async def get(self, *, tenant: str, subscription_id: uuid.UUID) -> Subscription | None:
        row = await self.db.fetchrow(_GET, {"p_id": subscription_id, "p_tenant": tenant})
        return Subscription.of(row) if row is not None else None

    async def subscriptions(
        self, *, tenant: str, task_id: uuid.UUID | None, before: uuid.UUID | None, limit: int
    ) -> list[Subscription]:
        params = {"p_tenant": tenant, "p_task": task_id, "p_before": before, "p_limit": limit}
        return [Subscription.of(row) for row in await self.db.fetch(_LIST, params)]

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
        return Subscription.of(row) if row is not None else None

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
        return Subscription.of(row) if row is not None else None

    # -- deliveries -------------------------------------------------------------

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
        return [Delivery.of(row) for row in await self.db.fetch(_DELIVERIES, params)]

    async def delivery(self, *, tenant: str, delivery_id: uuid.UUID) -> Delivery | None:
        row = await self.db.fetchrow(_DELIVERY, {"p_id": delivery_id, "p_tenant": tenant})
        return Delivery.of(row) if row is not None else None

    async def redeliver(self, *, tenant: str, delivery_id: uuid.UUID) -> bool:
        """False: in flight, or its subscription is disabled (the caller says which)."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                _REDELIVER.sql, *_REDELIVER.args({"p_id": delivery_id, "p_tenant": tenant})
            )
            if row is not None:
                await conn.execute("SELECT pg_notify($1, '')", WEBHOOKS_CHANNEL)
            return row is not None

    # -- the dispatcher's side ----------------------------------------------------

    async def claim(self, *, dispatcher: str, limit: int, lease_seconds: float) -> list[Claimed]:
        params = {"p_limit": limit, "p_dispatcher": dispatcher, "p_lease": lease_seconds}
        return [Claimed.of(row) for row in await self.db.fetch(_CLAIM, params)]

    async def snapshots(self, delivery_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Task]:
        """Each delivery's task as it was at its state change (deliveries queued
        before snapshots existed have none)."""
        rows = await self.db.fetch(_SNAPSHOTS, {"p_ids": list(delivery_ids)})
        return {row["delivery_id"]: task_from_row(row) for row in rows}

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
                if row is not None and row["newly_disabled"]:
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
