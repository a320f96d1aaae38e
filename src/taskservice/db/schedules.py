"""The scheduler's SQL (`worker/scheduler.py`) and the schedules' (`/v1/schedules`).

- `tick`: clears `delayed` on tasks whose `wake_at` has passed (pending tasks
  submitted for later, running tasks throttled by a model's rate limit), putting
  them in the claim index (`ix_tasks_claimable`), and says how long until the next
  delayed task and the next schedule are due. Any number of processes run it at
  once: the rows are locked (not skipped), so a process that found its tasks taken
  by another returns after that one committed, and a claim it then makes sees them.
- `due`: a transaction holding the due schedules' rows (SKIP LOCKED: one process
  fires a schedule, the others pass it by); `Due.fire` inserts each slot's task and
  moves the schedule on, together. The task's idempotency key
  (`schedule:<id>:<slot>`, unique per tenant) refuses a second task for a slot even
  if a schedule's `next_run_at` were ever set back.

Four modules are named `schedules`, one concept seen from four layers: this one is the
schedules' SQL and the scheduler's (storage); `domain/schedules.py` holds the values and
the pure slot arithmetic, `usecases/schedules.py` the use case (made, checked, fired),
`api/routes/schedules.py` the REST routes.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import asyncpg
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.types import Boolean, DateTime, Integer, Text

from taskservice.db.engine import dumps_json
from taskservice.db.sql import Database, Row, Statement, text_statement
from taskservice.db.submits import create_many
from taskservice.domain.schedules import Schedule

_UUID = UUID(as_uuid=True)
_TZ = DateTime(timezone=True)

# Due tasks in bounded batches (the scheduler repeats while a batch was full), and
# how long until the next delayed task and the next schedule, in the same snapshot.
_TICK = text_statement(
    """
WITH due AS (
    SELECT id FROM tasks
    WHERE delayed AND state IN ('pending', 'running') AND wake_at <= now()
    ORDER BY wake_at
    LIMIT :limit
    FOR UPDATE
), promoted AS (
    UPDATE tasks SET delayed = false
    FROM due WHERE tasks.id = due.id AND tasks.state IN ('pending', 'running')
                   AND tasks.delayed
    RETURNING tasks.id
)
SELECT (SELECT count(*) FROM promoted) AS promoted,
       (SELECT extract(epoch FROM min(wake_at) - now()) FROM tasks
        WHERE delayed AND state IN ('pending', 'running') AND wake_at > now()) AS task_in,
       (SELECT extract(epoch FROM min(next_run_at) - now()) FROM schedules
        WHERE enabled) AS schedule_in
""",
    limit=Integer,
)


@dataclass(frozen=True, slots=True)
class Tick:
    promoted: int  # tasks made claimable
    full: bool  # the batch was full: more may be due
    task_in: float | None  # seconds until the next delayed task is due; None: none
    schedule_in: float | None  # seconds until a schedule is due (≤ 0: now); None: none


def _schedule(row: Row) -> Schedule:
    return Schedule(**{field.name: row[field.name] for field in fields(Schedule)})


_COLUMNS = "id, tenant, name, cron, timezone, task, enabled, missed, next_run_at, " + (
    "last_slot, last_task_id, last_error, created_at, updated_at"
)
_CREATE = text_statement(
    f"""
INSERT INTO schedules (id, tenant, name, cron, timezone, task, enabled, missed, next_run_at)
VALUES (:id, :tenant, :name, :cron, :timezone, :task, :enabled, :missed, :next_run_at)
ON CONFLICT (tenant, name) WHERE name IS NOT NULL DO NOTHING
RETURNING {_COLUMNS}
""",
    id=_UUID,
    tenant=Text,
    name=Text,
    cron=Text,
    timezone=Text,
    task=JSONB,
    enabled=Boolean,
    missed=Text,
    next_run_at=_TZ,
)
_GET = text_statement(
    f"SELECT {_COLUMNS} FROM schedules WHERE id = :id AND tenant = :tenant", id=_UUID, tenant=Text
)
_LIST = text_statement(
    f"""
SELECT {_COLUMNS} FROM schedules
WHERE tenant = :tenant AND (CAST(:before AS uuid) IS NULL OR id < :before)
ORDER BY id DESC LIMIT :limit
""",
    tenant=Text,
    before=_UUID,
    limit=Integer,
)
_DELETE = text_statement(
    "DELETE FROM schedules WHERE id = :id AND tenant = :tenant RETURNING id",
    id=_UUID,
    tenant=Text,
)
# Fields a change may set; each statement is made once per set of fields.
_SETTABLE = {
    "name": Text,
    "cron": Text,
    "timezone": Text,
    "task": JSONB,
    "enabled": Boolean,
    "missed": Text,
    "next_run_at": _TZ,
}
_updates: dict[frozenset[str], Statement] = {}


def _update(names: frozenset[str]) -> Statement:
    if names not in _updates:
        sets = ", ".join(f"{name} = :{name}" for name in sorted(names))
        _updates[names] = text_statement(
            f"""
UPDATE schedules SET {sets}, updated_at = now()
WHERE id = :id AND tenant = :tenant
RETURNING {_COLUMNS}
""",
            id=_UUID,
            tenant=Text,
            **{name: _SETTABLE[name] for name in names},
        )
    return _updates[names]


_DUE = f"""
SELECT {_COLUMNS}, now() AS now FROM schedules
WHERE enabled AND next_run_at <= now() AND (held_until IS NULL OR held_until <= now())
ORDER BY next_run_at
LIMIT $1
FOR UPDATE SKIP LOCKED
"""
_FIRED = """
UPDATE schedules SET next_run_at = $2, last_slot = coalesce($3, last_slot),
       last_task_id = coalesce($4, last_task_id), last_error = $5::jsonb, held_until = NULL,
       updated_at = now()
WHERE id = $1
"""
_HELD = """
UPDATE schedules SET held_until = $2, last_error = $3::jsonb, updated_at = now() WHERE id = $1
"""
_SLOT_TASK = """
SELECT id FROM tasks WHERE tenant = $1 AND idempotency_key = $2
"""


class NameTaken(Exception):
    """Another schedule of the tenant has that name."""


class Due:
    """The due schedules, locked in a transaction until the block ends; `now` is the
    database's clock."""

    def __init__(self, conn: asyncpg.Connection, rows: list[Row]) -> None:
        self._conn = conn
        self.schedules = [_schedule(row) for row in rows]
        self.now: datetime | None = rows[0]["now"] if rows else None

    async def fire(
        self,
        schedule: Schedule,
        tasks: Sequence[Mapping[str, Any]],
        *,
        slots: Sequence[datetime],
        next_run_at: datetime,
        error: dict[str, Any] | None = None,
    ) -> uuid.UUID | None:
        """Insert the slots' tasks (`db.tasks.task_params`, keyed per slot) and move
        the schedule on; the last slot's task id (one made before for it, if any)."""
        last_task: uuid.UUID | None = None
        if tasks:
            try:
                async with self._conn.transaction():  # a savepoint: one schedule's failure
                    await create_many(self._conn, list(tasks))
            except asyncpg.PostgresError as exc:  # e.g. a template the database refuses
                error, slots = {"detail": f"the task could not be stored: {exc}"}, []
            else:
                key = tasks[-1]["idempotency_key"]
                last_task = await self._conn.fetchval(_SLOT_TASK, schedule.tenant, key)
        last_slot = slots[-1] if slots else None
        await self._conn.execute(
            _FIRED, schedule.id, next_run_at, last_slot, last_task, _json(error)
        )
        return last_task

    async def hold(self, schedule: Schedule, *, until: datetime, error: dict[str, Any]) -> None:
        """Not due again before `until`; its slots stay as they are, to fire then."""
        await self._conn.execute(_HELD, schedule.id, until, _json(error))


def _json(value: dict[str, Any] | None) -> str | None:
    return dumps_json(value) if value is not None else None


class ScheduleStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def tick(self, *, limit: int = 1000) -> Tick:
        row = await self.db.fetchrow(_TICK, {"limit": limit})
        assert row is not None
        count = int(row["promoted"])
        task_in, schedule_in = row["task_in"], row["schedule_in"]
        return Tick(
            count,
            count >= limit,
            float(task_in) if task_in is not None else None,
            float(schedule_in) if schedule_in is not None else None,
        )

    @asynccontextmanager
    async def due(self, *, limit: int = 20) -> AsyncIterator[Due]:
        async with self.db.connection() as conn, conn.transaction():
            yield Due(conn, await conn.fetch(_DUE, limit))

    async def create(self, params: Mapping[str, Any]) -> Schedule:
        row = await self.db.fetchrow(_CREATE, params)
        if row is None:
            raise NameTaken(params["name"])
        return _schedule(row)

    async def get(self, schedule_id: uuid.UUID, *, tenant: str) -> Schedule | None:
        row = await self.db.fetchrow(_GET, {"id": schedule_id, "tenant": tenant})
        return _schedule(row) if row is not None else None

    async def list(self, *, tenant: str, before: uuid.UUID | None, limit: int) -> list[Schedule]:
        rows = await self.db.fetch(_LIST, {"tenant": tenant, "before": before, "limit": limit})
        return [_schedule(row) for row in rows]

    async def update(
        self, schedule_id: uuid.UUID, *, tenant: str, changes: Mapping[str, Any]
    ) -> Schedule | None:
        if not changes:
            return await self.get(schedule_id, tenant=tenant)
        statement = _update(frozenset(changes))
        try:
            row = await self.db.fetchrow(
                statement, {**changes, "id": schedule_id, "tenant": tenant}
            )
        except asyncpg.UniqueViolationError:
            raise NameTaken(changes.get("name")) from None
        return _schedule(row) if row is not None else None

    async def delete(self, schedule_id: uuid.UUID, *, tenant: str) -> bool:
        return await self.db.fetchrow(_DELETE, {"id": schedule_id, "tenant": tenant}) is not None
