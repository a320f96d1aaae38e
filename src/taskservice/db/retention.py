"""Retention: finished tasks deleted once they are old and everyone was told.

A task tree (a root task and its subtasks, at any depth) goes in one piece, with its
events, messages, tool calls, follow-ups, webhooks, deliveries and attempts (foreign
keys ON DELETE CASCADE), once every task in it:

- is finished (completed, failed, cancelled) for longer than its tenant's retention
  (`RETENTION_DAYS`, or that tenant's `RETENTION_DAYS_BY_TENANT`; a tenant with
  neither keeps everything);
- has no webhook delivery still pending: evicted only after notified (a delivery
  that failed for good, or was cancelled, is settled);
- has outlived the time its MCP caller asked it be kept (`metadata.mcp.ttl_ms`,
  from its creation).

One pruner at a time (a transaction-scoped advisory lock: a second one skips the
batch), in batches of a bounded number of trees, walking the roots in id order with
a cursor so that trees kept back (a delivery pending) do not stall the walk. Deleted
rows are old ones nobody writes, so a batch takes no lock a submit, a claim or a
stream waits on. The highest event id a batch deleted raises `events_pruned_before`
in `retention_marks`: a firehose resumed from before it is told history may be
missing there (`api/streams.tenant_events`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from taskservice.db.engine import dumps_json
from taskservice.db.sql import Database
from taskservice.settings import Settings

PRUNE_LOCK = 0x7461736B_70726E65  # "taskprne": one pruner at a time, any replica
EVENTS_PRUNED_BEFORE = "events_pruned_before"
_TERMINAL = "('completed', 'failed', 'cancelled')"


def _expired(t: str) -> str:
    """Whether task `t` is past its tenant's retention and its MCP ttl: true, or
    false or NULL (no retention for its tenant, no finish time), both meaning kept."""
    days = f"CAST(coalesce(CAST($2 AS jsonb) ->> {t}.tenant, CAST($3 AS text)) AS float8)"
    return f"""(
    {t}.state IN {_TERMINAL}
    AND {t}.finished_at < now() - make_interval(secs => {days} * 86400)
    AND ({t}.metadata -> 'mcp' ->> 'ttl_ms' IS NULL
         OR {t}.created_at + make_interval(
                secs => CAST({t}.metadata -> 'mcp' ->> 'ttl_ms' AS float8) / 1000) < now())
)"""


def _trees(delete: bool) -> str:
    """A batch: roots after the cursor `$1` (up to `$4`), their trees, those whose
    every task may go; deleted (or, for a dry run, only counted)."""
    tail = (
        """
gone AS (
    DELETE FROM tasks WHERE id IN (SELECT id FROM doomed) RETURNING id
),
mark AS (
    INSERT INTO retention_marks (name, value)
    SELECT 'events_pruned_before', max(e.id) + 1 FROM events e HAVING max(e.id) IS NOT NULL
    ON CONFLICT (name) DO UPDATE SET value = greatest(retention_marks.value, EXCLUDED.value)
)"""
        if delete
        else """
gone AS (SELECT id FROM doomed)"""
    )
    return f"""
WITH RECURSIVE roots AS (
    SELECT r.id FROM tasks r
    WHERE r.parent_id IS NULL AND r.id > $1 AND r.state IN {_TERMINAL}
    ORDER BY r.id
    LIMIT $4
),
tree AS (
    SELECT id, id AS root FROM roots
    UNION ALL
    SELECT t.id, tree.root FROM tasks t JOIN tree ON t.parent_id = tree.id
),
kept AS (
    SELECT DISTINCT tree.root FROM tree JOIN tasks t ON t.id = tree.id
    WHERE NOT coalesce({_expired("t")}, false)  -- unknown: kept
       OR EXISTS (SELECT 1 FROM webhook_deliveries d
                  WHERE d.task_id = t.id AND d.status = 'pending')
),
doomed AS (
    SELECT id FROM tree WHERE root NOT IN (SELECT root FROM kept)
),
events AS (
    SELECT e.id FROM task_events e WHERE e.task_id IN (SELECT id FROM doomed)
),
{tail.strip()}
SELECT
  (SELECT count(*) FROM gone) AS tasks,
  (SELECT count(*) FROM events) AS events,
  (SELECT count(*) FROM task_messages m WHERE m.task_id IN (SELECT id FROM doomed)) AS messages,
  (SELECT count(*) FROM webhook_deliveries d WHERE d.task_id IN (SELECT id FROM doomed))
    AS deliveries,
  (SELECT id FROM roots ORDER BY id DESC LIMIT 1) AS last_root
"""


_PRUNE = _trees(delete=True)
_COUNT = _trees(delete=False)
_MARK = "SELECT value FROM retention_marks WHERE name = $1"


@dataclass
class Pruned:
    """What a pass removed (or, dry, would remove)."""

    tasks: int = 0
    events: int = 0
    messages: int = 0
    deliveries: int = 0

    def add(self, row: Mapping[str, Any]) -> None:
        self.tasks += row["tasks"]
        self.events += row["events"]
        self.messages += row["messages"]
        self.deliveries += row["deliveries"]


@dataclass(frozen=True)
class Policy:
    """How long finished tasks are kept, in days: `days` for every tenant (None:
    forever), `by_tenant` for some."""

    days: float | None
    by_tenant: Mapping[str, float]

    @property
    def prunes(self) -> bool:
        return self.days is not None or bool(self.by_tenant)


def retention_policy(settings: Settings) -> Policy:
    return Policy(days=settings.retention_days, by_tenant=settings.retention_days_by_tenant)


class RetentionStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def batch(
        self, policy: Policy, *, after: uuid.UUID, size: int = 100, dry_run: bool = False
    ) -> tuple[Mapping[str, Any], uuid.UUID | None] | None:
        """The trees of up to `size` roots after `after` (see the module docstring):
        deleted (or counted, `dry_run`). Returns what went and the cursor to go on
        from (None: every root was walked), or None when another pruner holds the
        lock."""
        overrides = dumps_json({tenant: str(days) for tenant, days in policy.by_tenant.items()})
        days = str(policy.days) if policy.days is not None else None
        async with self.db.connection() as conn, conn.transaction():
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", PRUNE_LOCK):
                return None
            row = await conn.fetchrow(_COUNT if dry_run else _PRUNE, after, overrides, days, size)
        assert row is not None
        return dict(row), row["last_root"]

    async def events_pruned_before(self) -> int:
        """Events with a lower id may have been deleted (0: none was)."""
        async with self.db.connection() as conn:
            value = await conn.fetchval(_MARK, EVENTS_PRUNED_BEFORE)
        return int(value or 0)


async def prune(
    store: RetentionStore,
    policy: Policy,
    *,
    size: int = 100,
    dry_run: bool = False,
    pause: float = 0.0,
) -> Pruned | None:
    """Walk every root once, a batch at a time, `pause` seconds between batches; None
    when another pruner holds the lock."""
    pruned = Pruned()
    after: uuid.UUID | None = uuid.UUID(int=0)
    while after is not None:
        done = await store.batch(policy, after=after, size=size, dry_run=dry_run)
        if done is None:
            return None
        row, after = done
        pruned.add(row)
        if after is not None and pause:
            await asyncio.sleep(pause)
    return pruned
