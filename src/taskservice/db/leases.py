"""Worker-side SQL: claim, heartbeat, release, and the reaper's recovery statements
(the claim's statement, which tasks and in what order, is `claims.CLAIM`).

Every write here is fenced. A claim hands out (owner, attempt) leases; a heartbeat
or release only touches rows still held by that lease; the reaper only touches rows
whose lease has expired *at the moment it writes* (the condition is re-checked on
the locked row), so it can never overwrite a task that finished or was renewed a
moment earlier.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.types import DateTime, Float, Integer, Interval, Text

from taskservice.db import notify
from taskservice.db.claims import CLAIM, CLAIM_LOCK
from taskservice.db.eventlog import LINE_NO, LINE_SEQ, NEXT_SEQ, append_events, append_with_line
from taskservice.db.rows import task_from_row
from taskservice.db.sql import Database, Row, Statement
from taskservice.domain.models import Lease, Task

# The task `:p_id` while this lease still holds it: every write of a run is fenced so.
# The row is found by its key. `state` is compared as an expression (`state || ''`):
# written plainly, the condition implies the predicate of the partial indexes over
# running tasks (`ix_tasks_running_tenant`, `ix_tasks_lease_expiry`,
# `ix_tasks_live_state`), and a plan made while few tasks ran chose one of them and
# read every running task to find this one (a finish cost 420 µs of PostgreSQL's CPU
# with 1,000 running, 590 with 4,000, until an ANALYZE replaced the plan).
HELD = "id = :p_id AND state || '' = 'running' AND lease_owner = :p_owner AND attempt = :p_attempt"


# Renew every lease this worker holds in one statement; returns those still held, and
# whether each is paused (the backstop of the `paused` notice: `worker/pool.py`).
_HEARTBEAT = Statement(
    text("""
UPDATE tasks SET lease_expires_at = now() + :p_lease
FROM unnest(CAST(:p_ids AS uuid[]), CAST(:p_attempts AS integer[])) AS held(id, attempt)
WHERE tasks.id = held.id AND tasks.attempt = held.attempt
  AND tasks.state = 'running' AND tasks.lease_owner = :p_owner
RETURNING tasks.id, tasks.paused IS NOT NULL AS paused
""").bindparams(bindparam("p_lease", type_=Interval), bindparam("p_owner", type_=Text))
)


def _owner_released(
    event_type: str,
    *,
    where: str,
    recheck: str,
    extra: str = "",
    more: str = "",
    line: str | None = None,
    lost: bool = False,
) -> str:
    """Leave running tasks ownerless, so that any worker may claim them now; with a
    `log` line (a warning saying `line`, SQL over `t`) before the event if given;
    `lost`: the lease expired, which costs the task an attempt. The event's data:
    worker, attempt, then the pairs `extra`, merged with the JSON object `more`."""
    event_data = f"jsonb_build_object('worker', t.lost_owner, 'attempt', t.attempt{extra})"
    if more:
        event_data += f" || {more}"
    lost_attempt = "lost_attempts = tasks.lost_attempts + 1, " if lost else ""
    if line is None:
        event = append_events(type=f"'{event_type}'", data=event_data)
        seq, line_no = NEXT_SEQ, ""
    else:
        event = append_with_line(
            type=f"'{event_type}'", data=event_data, level="warning", message=line
        )
        seq, line_no = LINE_SEQ, f", {LINE_NO}"
    return f"""
WITH t AS (
    UPDATE tasks SET lease_owner = NULL, lease_expires_at = NULL,
                     {lost_attempt}{seq}, updated_at = now()
    FROM (SELECT id, lease_owner AS lost_owner FROM tasks
          WHERE {where}
          ORDER BY lease_expires_at LIMIT :p_limit FOR UPDATE SKIP LOCKED) x
    WHERE tasks.id = x.id AND {recheck}
    RETURNING tasks.id, tasks.tenant, tasks.event_seq, tasks.attempt, x.lost_owner{line_no}
),
e AS (
{event}
)
SELECT t.id FROM t
"""


_RELEASE = Statement(
    text(
        _owner_released(
            "released",
            where=HELD,
            recheck="tasks.lease_owner = :p_owner AND tasks.attempt = :p_attempt",
            extra=", 'reason', :p_reason",
            # A paused run's time so far: the run that resumes it gets what is left of
            # its timeout (`worker/pool.py`).
            more="jsonb_strip_nulls(jsonb_build_object('ran_seconds', :p_ran))",
        )
    ).bindparams(
        bindparam("p_id", type_=UUID(as_uuid=True)),
        bindparam("p_owner", type_=Text),
        bindparam("p_attempt", type_=Integer),
        bindparam("p_limit", type_=Integer),
        bindparam("p_reason", type_=Text),
        bindparam("p_ran", type_=Float),
    )
)

# A run whose model request budget has no room until :p_until gives the task back
# without waiting: ownerless and delayed until then (claimable again once the
# scheduler finds it due), holding the slot it reserved for its next request.
_THROTTLED_EVENT = append_events(
    type="'throttled'",
    data="jsonb_build_object('worker', CAST(:p_owner AS text), 'attempt', t.attempt) || :p_data",
)
_PARK = Statement(
    text(f"""
WITH t AS (
    UPDATE tasks SET lease_owner = NULL, lease_expires_at = NULL, delayed = true,
                     wake_at = :p_until, paid_slot = :p_paid, {NEXT_SEQ}, updated_at = now()
    WHERE {HELD}
    RETURNING tasks.id, tasks.tenant, tasks.event_seq, tasks.attempt
),
e AS (
{_THROTTLED_EVENT}
)
SELECT t.id FROM t
""").bindparams(
        bindparam("p_id", type_=UUID(as_uuid=True)),
        bindparam("p_owner", type_=Text),
        bindparam("p_attempt", type_=Integer),
        bindparam("p_until", type_=DateTime(timezone=True)),
        bindparam("p_paid", type_=JSONB),
        bindparam("p_data", type_=JSONB),
    )
)

# An expired lease is the task's (lost_attempts + 1)th attempt lost: with none left
# of max_attempts, it fails; otherwise it is offered again.
_EXPIRED = (
    "state = 'running' AND lease_owner IS NOT NULL AND lease_expires_at < now() "
    "AND lost_attempts + 1 {op} max_attempts"
)
_EXPIRED_RECHECK = "tasks.state = 'running' AND tasks.lease_expires_at < now()"

_LOST = "'worker ' || t.lost_owner || ' stopped renewing its lease on attempt ' || t.attempt"
_LOG_CAP = bindparam("p_log_cap", type_=Integer)

# Expired leases with attempts left: offer the task again.
_RECOVER = Statement(
    text(
        _owner_released(
            "recovered",
            where=_EXPIRED.format(op="<"),
            recheck=_EXPIRED_RECHECK,
            line=f"{_LOST} || ' (it stopped, hung or lost the database); "
            "the task waits for another worker'",
            lost=True,
        )
    ).bindparams(bindparam("p_limit", type_=Integer), _LOG_CAP)
)

# Expired leases on the last attempt: the task fails, saying why.
_EXHAUSTED_EVENT = append_with_line(
    type="'state_change'",
    data="""jsonb_build_object('from', 'running', 'to', 'failed',
                              'worker', t.lost_owner, 'attempt', t.attempt)""",
    level="error",
    message=f"{_LOST} || ' (' || t.lost_attempts || ' of ' || t.max_attempts "
    "|| ' attempts lost); no attempts are left, so the task fails'",
)
_EXHAUST = Statement(
    text(f"""
WITH t AS (
    UPDATE tasks SET
        state = 'failed',
        error = jsonb_build_object(
            'type', 'attempts_exhausted',
            'message', 'worker ' || x.lost_owner || ' stopped renewing its lease on attempt '
                       || tasks.attempt || ' (' || tasks.lost_attempts + 1 || ' of '
                       || tasks.max_attempts || ' attempts lost); no attempts are left'),
        lease_owner = NULL, lease_expires_at = NULL, finished_at = now(), updated_at = now(),
        lost_attempts = tasks.lost_attempts + 1,
        {LINE_SEQ}
    FROM (SELECT id, lease_owner AS lost_owner FROM tasks
          WHERE {_EXPIRED.format(op=">=")}
          ORDER BY lease_expires_at LIMIT :p_limit FOR UPDATE SKIP LOCKED) x
    WHERE tasks.id = x.id AND {_EXPIRED_RECHECK}
    RETURNING tasks.id, tasks.tenant, tasks.event_seq, tasks.attempt, x.lost_owner,
              tasks.lost_attempts, tasks.max_attempts, tasks.parent_id, tasks.error, {LINE_NO}
),
e AS (
{_EXHAUSTED_EVENT}
)
SELECT t.id, t.parent_id, t.error FROM t
""").bindparams(bindparam("p_limit", type_=Integer), _LOG_CAP)
)

# Running tasks that recorded nothing for a while: say so, once per stall period.
_STALLED_EVENT = append_events(
    type="'stalled'",
    data="""jsonb_build_object('worker', t.lease_owner, 'quiet_since', t.quiet_since,
                              'stall_seconds', CAST(:p_stall_seconds AS float))""",
)
_STALLED = Statement(
    text(f"""
WITH t AS (
    UPDATE tasks SET {NEXT_SEQ}, updated_at = now()
    FROM (SELECT id, updated_at AS quiet_since FROM tasks
          WHERE state = 'running' AND lease_owner IS NOT NULL
            AND updated_at < now() - :p_stall
          LIMIT :p_limit FOR UPDATE SKIP LOCKED) x
    WHERE tasks.id = x.id AND tasks.state = 'running' AND tasks.updated_at < now() - :p_stall
    RETURNING tasks.id, tasks.tenant, tasks.event_seq, tasks.lease_owner, x.quiet_since
)
{_STALLED_EVENT}
""").bindparams(
        bindparam("p_stall", type_=Interval),
        bindparam("p_stall_seconds", type_=Float),
        bindparam("p_limit", type_=Integer),
    )
)

REAP_BATCH = 100  # tasks per reaper statement

# Seconds (on the database's clock) until the earliest held lease expires; NULL when
# no running task holds one. Reads the reaper's index only.
_NEXT_EXPIRY = Statement(
    text("""
SELECT EXTRACT(EPOCH FROM min(lease_expires_at) - now())::float8 AS seconds
FROM tasks WHERE state = 'running' AND lease_owner IS NOT NULL
""")
)


async def renew(
    conn: asyncpg.Connection,
    *,
    owner: str,
    leases: Iterable[tuple[uuid.UUID, int]],
    lease_seconds: float,
    paused: set[uuid.UUID] | None = None,
) -> set[uuid.UUID]:
    """Extend (task id, attempt) leases on any asyncpg connection (the heartbeat
    thread has its own); return the ids still held, adding those of them that are
    paused to `paused` if given."""
    held = list(leases)
    if not held:
        return set()
    params: dict[str, Any] = {
        "p_lease": timedelta(seconds=lease_seconds),
        "p_ids": [task_id for task_id, _ in held],
        "p_attempts": [attempt for _, attempt in held],
        "p_owner": owner,
    }
    rows = await conn.fetch(_HEARTBEAT.sql, *_HEARTBEAT.args(params))
    if paused is not None:
        paused.update(row["id"] for row in rows if row["paused"])
    return {row["id"] for row in rows}


class HeartbeatConnection:
    """The heartbeat's connection of its own (`notify.connect`: no busy pool can
    starve it), on which it renews leases (`renew`). `open` connects unless it is
    connected; after a fault, `drop` ends it, and the next `open` connects anew."""

    def __init__(self, database_url: str) -> None:
        self._database_url = database_url
        self._conn: asyncpg.Connection | None = None

    async def open(self) -> None:
        if self._conn is None or self._conn.is_closed():
            self._conn = await notify.connect(self._database_url)

    async def renew(
        self,
        *,
        owner: str,
        leases: Iterable[tuple[uuid.UUID, int]],
        lease_seconds: float,
        paused: set[uuid.UUID] | None = None,
    ) -> set[uuid.UUID]:
        """`renew` on this connection (`open` first)."""
        assert self._conn is not None
        return await renew(
            self._conn, owner=owner, leases=leases, lease_seconds=lease_seconds, paused=paused
        )

    def drop(self) -> None:
        """End the connection at once, whatever state a fault left it in."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.terminate()
        self._conn = None

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=2)


class LeaseStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def claim(
        self, *, owner: str, limit: int, lease_seconds: float, tenant_cap: int | None = None
    ) -> list[Task]:
        claimed, _ = await self.claim_timed(
            owner=owner, limit=limit, lease_seconds=lease_seconds, tenant_cap=tenant_cap
        )
        return [task for task, _ in claimed]

    async def claim_timed(
        self, *, owner: str, limit: int, lease_seconds: float, tenant_cap: int | None = None
    ) -> tuple[list[tuple[Task, float]], bool]:
        """Claim tasks (see `claims.CLAIM`), each with how long it waited to be claimed: the
        seconds since it became claimable (submitted, answered, recovered, released);
        and whether another claim now may find more (False: this one took all that
        was claimable, but for what other claimers were taking)."""
        params = {
            "p_cap": tenant_cap,
            "p_limit": limit,
            "p_owner": owner,
            "p_lease": timedelta(seconds=lease_seconds),
        }
        if tenant_cap is None:
            rows = await self.db.fetch(CLAIM, params)
        else:
            async with self.db.connection(generic_plans=True) as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", CLAIM_LOCK)
                rows = await conn.fetch(CLAIM.sql, *CLAIM.args(params))
        claimed = [(task_from_row(row), max(0.0, float(row["waited"]))) for row in rows]
        return claimed, bool(rows) and rows[0]["more"]

    async def heartbeat(
        self, *, owner: str, leases: Iterable[tuple[uuid.UUID, int]], lease_seconds: float
    ) -> set[uuid.UUID]:
        """Extend the given (task id, attempt) leases; return the ids still held."""
        async with self.db.connection() as conn:
            return await renew(conn, owner=owner, leases=leases, lease_seconds=lease_seconds)

    async def release(
        self, task_id: uuid.UUID, *, lease: Lease, reason: str, ran_seconds: float | None = None
    ) -> bool:
        """Give a running task back (graceful shutdown, a pause): it stays running,
        without an owner, and any worker may claim it at once (unless it is paused);
        `ran_seconds`, said in the `released` event, is how long its run has taken so
        far (a paused run's)."""
        params = {
            "p_id": task_id,
            "p_owner": lease.owner,
            "p_attempt": lease.attempt,
            "p_limit": 1,
            "p_reason": reason,
            "p_ran": ran_seconds,
        }
        return bool(await self.db.fetch(_RELEASE, params))

    async def park(
        self,
        task_id: uuid.UUID,
        *,
        lease: Lease,
        until: datetime,
        paid: dict[str, Any],
        data: dict[str, Any],
    ) -> bool:
        """Give a running task back until `until` (a `throttled` event with `data`),
        its reserved model request slot `paid` kept for the run that resumes it.
        False: it was no longer ours."""
        params = {
            "p_id": task_id,
            "p_owner": lease.owner,
            "p_attempt": lease.attempt,
            "p_until": until,
            "p_paid": paid,
            "p_data": data,
        }
        return bool(await self.db.fetch(_PARK, params))

    async def reap(self, *, log_cap: int, limit: int = REAP_BATCH) -> tuple[int, list[Row]]:
        """Re-offer tasks whose lease expired; fail those on their last attempt; each
        gets a `log` line saying whose lease expired (within `log_cap` lines).
        Returns how many were recovered, and the failed tasks (id, parent_id, error)."""
        params = {"p_limit": limit, "p_log_cap": log_cap}
        recovered = await self.db.fetch(_RECOVER, params)
        failed = await self.db.fetch(_EXHAUST, params)
        return len(recovered), failed

    async def next_expiry(self) -> float | None:
        """Seconds until the earliest lease expires (negative if one already has)."""
        row = await self.db.fetchrow(_NEXT_EXPIRY, {})
        return None if row is None or row["seconds"] is None else float(row["seconds"])

    async def mark_stalled(self, *, stall_seconds: float, limit: int = REAP_BATCH) -> int:
        params = {
            "p_stall": timedelta(seconds=stall_seconds),
            "p_stall_seconds": stall_seconds,
            "p_limit": limit,
        }
        return len(await self.db.fetch(_STALLED, params))
