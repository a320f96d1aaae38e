"""The task store: every SQL statement about tasks and their events.

Each write that changes a task and records an event is *one* statement (a
data-modifying CTE), so it is atomic even in autocommit and costs one round trip;
the `task_events` trigger adds the NOTIFY in the same transaction. Transitions are
conditional UPDATEs: no row back means the caller lost a race and nothing was written.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    Select,
    and_,
    case,
    func,
    insert,
    literal,
    or_,
    select,
    true,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from taskservice.db.tables import task_events, tasks
from taskservice.ids import uuid7
from taskservice.models import AgentSpec, Lease, NewTask, Task, TaskEvent, TaskFilter
from taskservice.states import TaskState, check_transition

STATE_CHANGE = "state_change"


def task_from_row(row: RowMapping) -> Task:
    return Task(
        id=row["id"],
        tenant=row["tenant"],
        state=TaskState(row["state"]),
        input=row["input"],
        result=row["result"],
        error=row["error"],
        agent=AgentSpec.from_json(row["agent"]),
        metadata=row["metadata"],
        parent_id=row["parent_id"],
        context_id=row["context_id"],
        idempotency_key=row["idempotency_key"],
        request_hash=row["request_hash"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        cancel_reason=row["cancel_reason"],
        input_request=row["input_request"],
        usage=row["usage"],
        event_seq=row["event_seq"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
    )


def event_from_row(row: RowMapping) -> TaskEvent:
    return TaskEvent(
        id=row["id"],
        task_id=row["task_id"],
        seq=row["seq"],
        type=row["type"],
        data=row["data"],
        created_at=row["created_at"],
    )


def _json(value: Any) -> Any:
    return type_coerce(value, JSONB)


def fence_clause(lease: Lease) -> Any:
    """A worker's write only lands while it still holds this very lease."""
    return and_(tasks.c.lease_owner == lease.owner, tasks.c.attempt == lease.attempt)


class TaskStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # Single-statement writes need no explicit transaction: autocommit saves the
        # BEGIN and COMMIT round trips on the hot paths.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

    # -- submit -----------------------------------------------------------------

    async def create(self, new: NewTask) -> tuple[Task, bool]:
        """Insert a pending task and its first event. Returns (task, created).

        With an idempotency key already used by this tenant, nothing is written and
        the existing task comes back with created=False.
        """
        row = {
            "id": uuid7(),
            "tenant": new.tenant,
            "state": TaskState.PENDING.value,
            "input": _json(new.input),
            "agent": _json(new.agent.to_json()),
            "metadata": _json(new.metadata),
            "parent_id": new.parent_id,
            "context_id": new.context_id,
            "idempotency_key": new.idempotency_key,
            "request_hash": new.request_hash,
            "max_attempts": new.max_attempts,
            "event_seq": 1,
        }
        ins = pg_insert(tasks).values(row)
        if new.idempotency_key is not None:
            ins = ins.on_conflict_do_nothing(
                index_elements=["tenant", "idempotency_key"],
                index_where=tasks.c.idempotency_key.isnot(None),
            )
        t = ins.returning(*tasks.c).cte("t")
        e = (
            insert(task_events)
            .from_select(
                ["task_id", "tenant", "seq", "type", "data"],
                select(
                    t.c.id,
                    t.c.tenant,
                    t.c.event_seq,
                    literal(STATE_CHANGE),
                    _json({"from": None, "to": TaskState.PENDING.value}),
                ).select_from(t),
            )
            .returning(task_events.c.id)
            .cte("e")
        )
        stmt = select(t).select_from(t.join(e, true()))
        async with self._autocommit.connect() as conn:
            created = (await conn.execute(stmt)).mappings().first()
            if created is not None:
                return task_from_row(created), True
            existing = (
                (
                    await conn.execute(
                        select(tasks).where(
                            tasks.c.tenant == new.tenant,
                            tasks.c.idempotency_key == new.idempotency_key,
                        )
                    )
                )
                .mappings()
                .one()
            )
            return task_from_row(existing), False

    # -- reads ------------------------------------------------------------------

    async def get(self, task_id: uuid.UUID, *, tenant: str | None = None) -> Task | None:
        query = select(tasks).where(tasks.c.id == task_id)
        if tenant is not None:
            query = query.where(tasks.c.tenant == tenant)
        async with self._autocommit.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        return task_from_row(row) if row is not None else None

    async def list_tasks(
        self,
        *,
        tenant: str,
        filter: TaskFilter,
        before_id: uuid.UUID | None,
        limit: int,
    ) -> list[Task]:
        """Newest first. `before_id` is the keyset cursor: ids are time-ordered, so
        rows inserted while a client pages land before its cursor, never after."""
        query: Select[Any] = select(tasks).where(tasks.c.tenant == tenant)
        if filter.states:
            query = query.where(tasks.c.state.in_(sorted(s.value for s in filter.states)))
        if filter.parent_id is not None:
            query = query.where(tasks.c.parent_id == filter.parent_id)
        if filter.context_id is not None:
            query = query.where(tasks.c.context_id == filter.context_id)
        if filter.created_after is not None:
            query = query.where(tasks.c.created_at >= filter.created_after)
        if filter.created_before is not None:
            query = query.where(tasks.c.created_at < filter.created_before)
        if before_id is not None:
            query = query.where(tasks.c.id < before_id)
        query = query.order_by(tasks.c.id.desc()).limit(limit)
        async with self._autocommit.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [task_from_row(row) for row in rows]

    async def events(self, task_id: uuid.UUID, *, after: int, limit: int) -> list[TaskEvent]:
        query = (
            select(task_events)
            .where(task_events.c.task_id == task_id, task_events.c.seq > after)
            .order_by(task_events.c.seq)
            .limit(limit)
        )
        async with self._autocommit.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [event_from_row(row) for row in rows]

    # -- transitions ------------------------------------------------------------

    async def transition(
        self,
        task_id: uuid.UUID,
        *,
        source: TaskState,
        target: TaskState,
        lease: Lease | None = None,
        tenant: str | None = None,
        values: Mapping[str, Any] | None = None,
        event: Mapping[str, Any] | None = None,
        conn: AsyncConnection | None = None,
    ) -> Task | None:
        """Move a task from `source` to `target`, with its `state_change` event.

        One conditional UPDATE: returns the updated task, or None when the task was
        not in `source` (or the lease no longer matches) — the race was lost and
        nothing was written.
        """
        check_transition(source, target)
        conditions = [tasks.c.id == task_id, tasks.c.state == source.value]
        if lease is not None:
            conditions.append(fence_clause(lease))
        if tenant is not None:
            conditions.append(tasks.c.tenant == tenant)
        changes: dict[str, Any] = {
            "state": target.value,
            "event_seq": tasks.c.event_seq + 1,
            "updated_at": func.now(),
            **(values or {}),
        }
        if target.is_terminal:
            changes.setdefault("finished_at", func.now())
        if target.is_terminal or target is TaskState.INPUT_REQUIRED:
            # Nobody owns a task that waits or is done.
            changes |= {"lease_owner": None, "lease_expires_at": None}
        data = {"from": source.value, "to": target.value, **(event or {})}
        stmt = self._update_with_event(conditions, changes, STATE_CHANGE, data)
        if conn is not None:
            row = (await conn.execute(stmt)).mappings().first()
        else:
            async with self._autocommit.connect() as own:
                row = (await own.execute(stmt)).mappings().first()
        return task_from_row(row) if row is not None else None

    def _update_with_event(
        self,
        conditions: Sequence[Any],
        changes: Mapping[str, Any],
        event_type: str,
        data: Mapping[str, Any],
    ) -> Select[Any]:
        t = update(tasks).where(*conditions).values(**changes).returning(*tasks.c).cte("t")
        e = (
            insert(task_events)
            .from_select(
                ["task_id", "tenant", "seq", "type", "data"],
                select(
                    t.c.id, t.c.tenant, t.c.event_seq, literal(event_type), _json(dict(data))
                ).select_from(t),
            )
            .returning(task_events.c.id)
            .cte("e")
        )
        return select(t).select_from(t.join(e, true()))

    async def append_event(
        self,
        task_id: uuid.UUID,
        *,
        event_type: str,
        data: Mapping[str, Any],
        lease: Lease,
    ) -> bool:
        """Record a non-state event for a task the caller holds; False if it lost it."""
        conditions = [
            tasks.c.id == task_id,
            tasks.c.state == TaskState.RUNNING.value,
            fence_clause(lease),
        ]
        changes = {"event_seq": tasks.c.event_seq + 1, "updated_at": func.now()}
        stmt = self._update_with_event(conditions, changes, event_type, data)
        async with self._autocommit.connect() as conn:
            return (await conn.execute(stmt)).first() is not None

    # -- workers ----------------------------------------------------------------

    async def claim(self, *, owner: str, limit: int, lease_seconds: float) -> list[Task]:
        """Claim up to `limit` runnable tasks in one statement (FOR UPDATE SKIP LOCKED).

        Pending tasks become running (with a `state_change` event); running tasks with
        no owner (input was just given) are taken over (with a `claimed` event).
        Either way the lease is set and `attempt` grows.
        """
        candidates = (
            select(tasks.c.id, tasks.c.state.label("prior_state"))
            .where(
                or_(
                    tasks.c.state == TaskState.PENDING.value,
                    and_(tasks.c.state == TaskState.RUNNING.value, tasks.c.lease_owner.is_(None)),
                )
            )
            .order_by(tasks.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .cte("c")
        )
        t = (
            update(tasks)
            .where(tasks.c.id == candidates.c.id)
            .values(
                state=TaskState.RUNNING.value,
                lease_owner=owner,
                lease_expires_at=func.now() + timedelta(seconds=lease_seconds),
                attempt=tasks.c.attempt + 1,
                event_seq=tasks.c.event_seq + 1,
                started_at=func.coalesce(tasks.c.started_at, func.now()),
                updated_at=func.now(),
            )
            .returning(*tasks.c, candidates.c.prior_state)
            .cte("t")
        )
        was_pending = t.c.prior_state == TaskState.PENDING.value
        e = (
            insert(task_events)
            .from_select(
                ["task_id", "tenant", "seq", "type", "data"],
                select(
                    t.c.id,
                    t.c.tenant,
                    t.c.event_seq,
                    case((was_pending, literal(STATE_CHANGE)), else_=literal("claimed")),
                    func.jsonb_build_object(
                        "from",
                        t.c.prior_state,
                        "to",
                        TaskState.RUNNING.value,
                        "worker",
                        owner,
                        "attempt",
                        t.c.attempt,
                    ),
                ).select_from(t),
            )
            .returning(task_events.c.task_id)
            .cte("e")
        )
        stmt = select(t).select_from(t.join(e, e.c.task_id == t.c.id)).order_by(t.c.id)
        async with self._autocommit.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        return [task_from_row(row) for row in rows]

    async def heartbeat(self, task_id: uuid.UUID, *, lease: Lease, lease_seconds: float) -> bool:
        """Extend a lease. False means the task is no longer ours: stop the run."""
        stmt = (
            update(tasks)
            .where(
                tasks.c.id == task_id,
                tasks.c.state == TaskState.RUNNING.value,
                fence_clause(lease),
            )
            .values(lease_expires_at=func.now() + timedelta(seconds=lease_seconds))
            .returning(tasks.c.id)
        )
        async with self._autocommit.connect() as conn:
            return (await conn.execute(stmt)).first() is not None
