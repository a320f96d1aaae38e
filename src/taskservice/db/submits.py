"""Group commit for submits: concurrent submits share one statement and one commit.

Every submit commits a task, its `pending` event and that event's NOTIFY. PostgreSQL
serializes the commits of transactions that NOTIFY (a global lock held until the
commit record is flushed), so one submit per transaction caps a server at one WAL
flush per submit, whatever the number of connections. Batching restores what group
commit gives plain inserts: submits that arrive while a batch is being written wait
for the next one, which takes them all in one `INSERT … SELECT FROM unnest(…)`. A
lone submit goes out at once; nothing waits on a timer.

Each task still commits with its own event and NOTIFY in one transaction (DESIGN.md),
only the transaction is shared. A batch that PostgreSQL rejects as a whole (one bad
row) is retried row by row, so each submit gets its own answer; a lost connection
fails every submit of the batch, none of which committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import asyncpg

from taskservice.db.engine import dumps_json
from taskservice.db.eventlog import append_events
from taskservice.db.sql import Database, Row

# The task row and its first event, for any number of tasks; `unnest` keeps it one
# prepared statement. Rows that hit a used idempotency key are skipped (not returned).
# A task of an agent profile the tenant's brake holds (`agent_pauses`, `db/pauses.py`)
# is created paused, its first event saying so.
_FIRST_EVENT = append_events(
    seq="1",
    type="'state_change'",
    data="""'{"from": null, "to": "pending"}'::jsonb
            || CASE WHEN t.paused IS NULL THEN '{}'::jsonb
                    ELSE jsonb_build_object('paused', t.paused) END""",
)
CREATE_MANY = f"""
WITH r AS (
    SELECT *
    FROM unnest(
        $1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::uuid[],
        $7::text[], $8::text[], $9::text[], $10::int[], $11::float8[], $12::bool[],
        $13::text[], $14::int[], $15::timestamptz[], $16::bool[], $17::numeric[],
        $18::bigint[]
    ) AS r(id, tenant, input, agent, metadata, parent_id, context_id,
           idempotency_key, request_hash, max_attempts, timeout_seconds, detached,
           trace_context, priority, run_at, quiet, max_cost, max_tokens)
), t AS (
    -- A task for later is `delayed` until the scheduler finds its time has come.
    INSERT INTO tasks (id, tenant, state, input, agent, metadata, parent_id, context_id,
                       idempotency_key, request_hash, max_attempts, timeout_seconds,
                       detached, trace_context, priority, run_at, delayed, wake_at,
                       quiet, event_seq, paused, max_cost, max_tokens)
    SELECT id, tenant, 'pending', input::jsonb, agent::jsonb, metadata::jsonb, parent_id,
           context_id, idempotency_key, request_hash, max_attempts, timeout_seconds,
           detached, trace_context::jsonb, priority, coalesce(run_at, now()),
           coalesce(run_at > now(), false), CASE WHEN run_at > now() THEN run_at END, quiet, 1,
           (SELECT jsonb_build_object('by', p.paused_by, 'at', now(), 'reason', p.reason,
                                      'scope', 'agent')
            FROM agent_pauses p
            WHERE p.tenant = r.tenant AND p.profile = r.agent::jsonb ->> 'profile'),
           max_cost, max_tokens
    FROM r
    ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, tenant, created_at, run_at, delayed, paused
), e AS (
{_FIRST_EVENT}
)
SELECT id, created_at, run_at, delayed, paused FROM t
"""
_FIELDS = (
    "id",
    "tenant",
    "input",
    "agent",
    "metadata",
    "parent_id",
    "context_id",
    "idempotency_key",
    "request_hash",
    "max_attempts",
    "timeout_seconds",
    "detached",
    "trace_context",
    "priority",
    "run_at",
    "quiet",
    "max_cost",
    "max_tokens",
)
_JSON_FIELDS = frozenset({"input", "agent", "metadata", "trace_context"})
_NULLABLE_JSON = frozenset({"trace_context"})  # None is SQL NULL, not JSON null
# Larger batches gain little once the commit is shared, and hold more submits back
# when PostgreSQL rejects the batch and it goes row by row.
MAX_BATCH = 128
# Batches in flight at once: while one commits, the next can be written.
MAX_IN_FLIGHT = 2


def _encode(name: str, value: Any) -> Any:
    if value is None and name in _NULLABLE_JSON:
        return None
    return dumps_json(value) if name in _JSON_FIELDS else value


def _columns(batch: list[Mapping[str, Any]]) -> list[list[Any]]:
    return [[_encode(name, params[name]) for params in batch] for name in _FIELDS]


async def create_many(conn: asyncpg.Connection, batch: list[Mapping[str, Any]]) -> list[Row]:
    """Insert the tasks and their events; the rows created (id, created_at, run_at,
    delayed, paused)."""
    rows: list[Row] = await conn.fetch(CREATE_MANY, *_columns(batch))
    return rows


_Waiting = tuple[Mapping[str, Any], "asyncio.Future[Row | None]"]


class SubmitBatcher:
    """`insert` returns the created row (id, created_at, run_at, delayed, paused), or
    None when the task's idempotency key was used before."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._waiting: list[_Waiting] = []
        self._flushers: set[asyncio.Task[None]] = set()

    async def insert(self, params: Mapping[str, Any]) -> Row | None:
        future: asyncio.Future[Row | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((params, future))
        if len(self._flushers) < MAX_IN_FLIGHT:
            flusher = asyncio.create_task(self._flush())
            self._flushers.add(flusher)
            flusher.add_done_callback(self._flushers.discard)
        return await future

    async def _flush(self) -> None:
        while self._waiting:
            batch = [item for item in self._waiting[:MAX_BATCH] if not item[1].done()]
            del self._waiting[:MAX_BATCH]
            if batch:
                await self._write(batch)

    async def _write(self, batch: list[_Waiting]) -> None:
        try:
            async with self.db.connection() as conn:
                rows = await create_many(conn, [params for params, _ in batch])
        except asyncpg.PostgresError as exc:
            if len(batch) == 1:
                _fail(batch, exc)
            else:
                for item in batch:  # one bad row must not fail the others
                    await self._write([item])
            return
        except Exception as exc:  # noqa: BLE001 - it goes to the submits that waited
            # e.g. DatabaseUnavailable: nothing was committed, each caller may retry
            _fail(batch, exc)
            return
        except BaseException:  # cancelled: shutting down
            for _, future in batch:
                future.cancel()
            raise
        created = {row["id"]: row for row in rows}
        for params, future in batch:
            if not future.done():
                future.set_result(created.get(params["id"]))


def _fail(batch: list[_Waiting], exc: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)
