"""Pauses: the SQL of holding a task (`tasks.paused`) and of the operators' brake on an
agent profile (`agent_pauses`).

A pause is a hold, not a state: the flag keeps the claim from taking the task (the
claim index leaves paused tasks out: `claims._claimable`), whatever its state. Each
change of the flag is one statement with its `paused` or `resumed` event, so the
`task_events` trigger NOTIFYs it in the same transaction: a worker running the task
hears `paused` and gives it back (`worker/pool.py`), the claim loops hear `resumed`.

The brake pauses every live task of a profile for a tenant and makes the submits of
that profile create their tasks paused (`submits.CREATE_MANY` reads `agent_pauses`).
A submit racing the brake must not slip through: an INSERT whose snapshot came before
the brake's commit does not see its row, and the brake's UPDATE does not see a task
committed after that UPDATE began. So the brake writes its row and then takes the
tasks table in SHARE ROW EXCLUSIVE mode before its UPDATE: that waits for every
transaction writing tasks at that moment (the racing submits among them, which the
UPDATE then sees) and holds new writers until the brake commits (whose snapshots then
see its row). Task writes stall for as long as the brake's UPDATE takes, once per
brake pulled or released: an operator's action, not a hot path. The lock waits
`BRAKE_LOCK_TIMEOUT` at most (then the brake fails with nothing written, and may be
pulled again: a 409).
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from sqlalchemy import BindParameter, bindparam, text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.types import Text

from taskservice.db.eventlog import NEXT_SEQ, append_events
from taskservice.db.rows import task_from_row
from taskservice.db.sql import Database, Row, Statement, text_statement
from taskservice.domain.errors import Conflict
from taskservice.domain.models import Task

LIVE = "state IN ('pending', 'running', 'input_required')"

# How long the brake waits for the writes under way on tasks (a lock_timeout).
BRAKE_LOCK_TIMEOUT = "10s"


def _flag(pausing: bool) -> tuple[str, str, list[BindParameter[Any]]]:
    """What pausing (or resuming) sets, the event it writes, and the binds it adds."""
    if pausing:
        paused = [bindparam("p_paused", type_=JSONB)]
        return "paused = jsonb_build_object('at', now()) || :p_paused", "'paused'", paused
    return "paused = NULL", "'resumed'", []


def _flag_statement(*, pausing: bool) -> Statement:
    """Pause (`pausing`) or resume the live task `:p_id` of `:p_tenant` that is not
    (or is) paused, with its event; returns the task as changed, nothing when there
    was nothing to change."""
    change, event, binds = _flag(pausing)
    held = "paused IS NULL" if pausing else "paused IS NOT NULL"
    return Statement(
        text(f"""
WITH t AS (
    UPDATE tasks SET {change}, {NEXT_SEQ}, updated_at = now()
    WHERE id = :p_id AND tenant = :p_tenant AND {held} AND {LIVE}
    RETURNING tasks.*
),
e AS (
{append_events(type=event, data=":p_event")}
)
SELECT t.* FROM t JOIN e ON e.task_id = t.id
""").bindparams(
            bindparam("p_id", type_=UUID(as_uuid=True)),
            bindparam("p_tenant", type_=Text),
            bindparam("p_event", type_=JSONB),
            *binds,
        )
    )


_PAUSE = _flag_statement(pausing=True)
_RESUME = _flag_statement(pausing=False)

_OF_PROFILE = f"tenant = :p_tenant AND agent ->> 'profile' = :p_profile AND {LIVE}"


def _brake_statement(*, pausing: bool) -> Statement:
    """The brake's sweep: every live task of the profile not paused (pausing), or
    every task the brake paused (releasing), with its event; returns how many."""
    change, event, binds = _flag(pausing)
    which = "paused IS NULL" if pausing else "paused ->> 'scope' = 'agent'"
    return Statement(
        text(f"""
WITH t AS (
    UPDATE tasks SET {change}, {NEXT_SEQ}, updated_at = now()
    WHERE {_OF_PROFILE} AND {which}
    RETURNING tasks.id, tasks.tenant, tasks.event_seq
),
e AS (
{append_events(type=event, data=":p_event")}
)
SELECT count(*) AS n FROM e
""").bindparams(
            bindparam("p_tenant", type_=Text),
            bindparam("p_profile", type_=Text),
            bindparam("p_event", type_=JSONB),
            *binds,
        )
    )


_BRAKE = _brake_statement(pausing=True)
_RELEASE_BRAKE = _brake_statement(pausing=False)

_PULL = text_statement(
    """
INSERT INTO agent_pauses (tenant, profile, paused_by, reason)
VALUES (:p_tenant, :p_profile, :p_by, :p_reason)
ON CONFLICT (tenant, profile) DO NOTHING
RETURNING *
""",
    p_tenant=Text(),
    p_profile=Text(),
    p_by=Text(),
    p_reason=Text(),
)
_LET_GO = text_statement(
    "DELETE FROM agent_pauses WHERE tenant = :p_tenant AND profile = :p_profile RETURNING *",
    p_tenant=Text(),
    p_profile=Text(),
)
_BRAKES = text_statement(
    "SELECT * FROM agent_pauses WHERE tenant = :p_tenant ORDER BY profile", p_tenant=Text()
)
_BRAKE_OF = text_statement(
    "SELECT * FROM agent_pauses WHERE tenant = :p_tenant AND profile = :p_profile",
    p_tenant=Text(),
    p_profile=Text(),
)
_LOCK = "LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE"


async def _lock_tasks(conn: Any) -> None:
    """The brake's lock on tasks (see the module), waiting `BRAKE_LOCK_TIMEOUT` at
    most: then a 409, the brake's transaction rolled back (nothing written)."""
    await conn.execute(f"SET LOCAL lock_timeout = '{BRAKE_LOCK_TIMEOUT}'")
    try:
        await conn.execute(_LOCK)
    except asyncpg.LockNotAvailableError:
        raise Conflict(
            f"the brake waited {BRAKE_LOCK_TIMEOUT} for the writes under way on tasks; "
            "nothing changed: try again"
        ) from None


class PauseStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def pause(
        self, task_id: uuid.UUID, *, tenant: str, by: str, reason: str | None
    ) -> Task | None:
        """Hold the live task, with its `paused` event; None when it was paused
        already, finished, or not the tenant's (nothing written)."""
        params = {
            "p_id": task_id,
            "p_tenant": tenant,
            "p_paused": {"by": by, "reason": reason, "scope": "task"},
            "p_event": {"by": by, "reason": reason, "scope": "task"},
        }
        row = await self.db.fetchrow(_PAUSE, params)
        return task_from_row(row) if row is not None else None

    async def resume(self, task_id: uuid.UUID, *, tenant: str, by: str) -> Task | None:
        """Let the paused live task go, with its `resumed` event; None when it was
        not paused, finished, or not the tenant's."""
        params = {"p_id": task_id, "p_tenant": tenant, "p_event": {"by": by}}
        row = await self.db.fetchrow(_RESUME, params)
        return task_from_row(row) if row is not None else None

    async def brakes(self, tenant: str) -> dict[str, Row]:
        """The tenant's held profiles, by name."""
        return {row["profile"]: row for row in await self.db.fetch(_BRAKES, {"p_tenant": tenant})}

    async def brake(self, *, tenant: str, profile: str) -> Row | None:
        return await self.db.fetchrow(_BRAKE_OF, {"p_tenant": tenant, "p_profile": profile})

    async def pull_brake(
        self, *, tenant: str, profile: str, by: str, reason: str | None
    ) -> tuple[Row, int]:
        """Hold the profile for the tenant and pause its live tasks (see the module's
        note on the lock). Returns the brake and how many tasks it paused now (0
        when the brake was on already: nothing is written)."""
        params: dict[str, Any] = {
            "p_tenant": tenant,
            "p_profile": profile,
            "p_by": by,
            "p_reason": reason,
            "p_paused": {"by": by, "reason": reason, "scope": "agent"},
            "p_event": {"by": by, "reason": reason, "scope": "agent"},
        }
        while True:
            async with self.db.connection() as conn, conn.transaction():
                pulled = await conn.fetchrow(_PULL.sql, *_PULL.args(params))
                if pulled is None:
                    existing = await conn.fetchrow(_BRAKE_OF.sql, *_BRAKE_OF.args(params))
                    if existing is None:  # released between the two: pull it again
                        continue
                    return existing, 0
                await _lock_tasks(conn)
                swept = await conn.fetchval(_BRAKE.sql, *_BRAKE.args(params))
            return pulled, int(swept)

    async def release_brake(self, *, tenant: str, profile: str, by: str) -> tuple[Row, int] | None:
        """Let the profile go for the tenant and resume the tasks its brake paused
        (not those paused one by one). None when it was not held."""
        params = {"p_tenant": tenant, "p_profile": profile, "p_event": {"by": by}}
        async with self.db.connection() as conn, conn.transaction():
            released = await conn.fetchrow(_LET_GO.sql, *_LET_GO.args(params))
            if released is None:
                return None
            await _lock_tasks(conn)
            swept = await conn.fetchval(_RELEASE_BRAKE.sql, *_RELEASE_BRAKE.args(params))
        return released, int(swept)
