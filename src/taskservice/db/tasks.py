"""The task store: every SQL statement about tasks and their events.

Each write that changes a task and records an event is *one* statement (a
data-modifying CTE), so it is atomic even in autocommit and costs one round trip;
the `task_events` trigger adds the NOTIFY in the same transaction. Transitions are
conditional UPDATEs: no row back means the caller lost a race and nothing was written.

Statements are built with SQLAlchemy Core once per shape and run compiled on the
asyncpg connection (see `db.sql`); submits are written in batches that share a commit
(see `db.submits`).

Four modules are named `tasks`: this one is the tasks' SQL (storage);
`usecases/tasks.py` is the use case over it (`TaskService`), `api/routes/tasks.py` the
REST routes over that, and `mcp/tasks.py` a task's shapes in MCP.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from functools import lru_cache
from typing import Any

from sqlalchemy import BindParameter, Integer, Text, bindparam, func, select, text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

from taskservice.db.cancels import CANCEL_ORPHANS, CANCEL_SUBTASKS, FAIL_OPEN_CALLS
from taskservice.db.counts import count
from taskservice.db.eventlog import NEXT_SEQ, STATE_CHANGE, append_events
from taskservice.db.followups import TAKES_FOLLOWUPS
from taskservice.db.forks import copy_ledger
from taskservice.db.rows import pending_task, task_from_row
from taskservice.db.sql import Database, Row, Statement
from taskservice.db.submits import SubmitBatcher, create_many
from taskservice.db.tables import tasks
from taskservice.db.task_pages import (
    count_query,
    filter_params,
    list_statement,
    shape,
    status_count_query,
    status_list_statement,
)
from taskservice.domain.ids import uuid7
from taskservice.domain.models import (
    CountMode,
    Lease,
    NewTask,
    StatusQuery,
    Task,
    TaskFilter,
    Total,
)
from taskservice.domain.states import TaskState, check_transition

# Writes more rows for a task being created: (connection, task id), in its transaction.
AlsoWrite = Callable[[Any, uuid.UUID], Awaitable[None]]


# -- statements, built once per shape ---------------------------------------------
# Bind parameters of UPDATEs carry a `p_` prefix: SQLAlchemy reserves column names
# for the SET clause, and inside a CTE it fails obscurely instead of saying so.


_BY_IDEMPOTENCY_KEY = Statement(
    select(tasks).where(
        tasks.c.tenant == bindparam("tenant"),
        tasks.c.idempotency_key == bindparam("idempotency_key"),
    )
)
_GET = Statement(select(tasks).where(tasks.c.id == bindparam("id")))
_GET_MANY = Statement(
    select(tasks).where(tasks.c.id == func.any(bindparam("ids", type_=ARRAY(UUID(as_uuid=True)))))
)
_GET_SCOPED = Statement(
    select(tasks).where(tasks.c.id == bindparam("id"), tasks.c.tenant == bindparam("tenant"))
)
# The task and its conversation as one snapshot, in one round trip (a blocking A2A
# send answers with both): `history`, the ledger's messages in order, each with its
# position and message. As `json`, which PostgreSQL aggregates more cheaply than
# `jsonb`: 0.18 ms a read against 0.20 (pgbench), and 0.30 for the two statements.
_GET_WITH_MESSAGES = Statement(
    text("""
SELECT t.*, (SELECT coalesce(json_agg(json_build_object('position', m.position,
                                                         'message', m.message)
                                      ORDER BY m.position), '[]')
             FROM task_messages m WHERE m.task_id = t.id) AS history
FROM tasks t WHERE t.id = :id AND t.tenant = :tenant
""").bindparams(bindparam("id", type_=UUID(as_uuid=True)), bindparam("tenant", type_=Text))
)


@lru_cache(maxsize=128)
def _transition_statement(
    target: TaskState, value_keys: tuple[str, ...], fenced: bool, scoped: bool
) -> Statement:
    """Move one task from `:p_source` to `target` and append its `state_change` event
    (`:event`), setting the columns `value_keys` (from `:v_<column>`); optionally
    only while a lease holds (`fenced`) or within a tenant (`scoped`)."""
    conditions = ["id = :p_id", "state = :p_source"]
    binds: list[BindParameter[Any]] = [
        bindparam("p_id", type_=UUID(as_uuid=True)),
        bindparam("p_source", type_=Text),
        bindparam("event", type_=JSONB),
    ]
    if fenced:  # a worker's write only lands while it still holds this very lease
        conditions += ["lease_owner = :p_owner", "attempt = :p_attempt"]
        binds += [bindparam("p_owner", type_=Text), bindparam("p_attempt", type_=Integer)]
    if scoped:
        conditions.append("tenant = :p_tenant")
        binds.append(bindparam("p_tenant", type_=Text))
    changes = [f"state = '{target.value}'", NEXT_SEQ, "updated_at = now()"]
    changes += [f"{key} = :v_{key}" for key in value_keys]
    binds += [bindparam(f"v_{key}", type_=tasks.c[key].type) for key in value_keys]
    if target.is_terminal and "finished_at" not in value_keys:
        changes.append("finished_at = now()")
    if target.is_terminal or target is TaskState.INPUT_REQUIRED:
        # Nobody owns a task that waits or is done.
        changes += ["lease_owner = NULL", "lease_expires_at = NULL"]
    return Statement(
        text(f"""
WITH t AS (
    UPDATE tasks SET {", ".join(changes)}
    WHERE {" AND ".join(conditions)}
    RETURNING tasks.*
),
e AS (
{append_events(type=f"'{STATE_CHANGE}'", data=":event")}
)
SELECT t.* FROM t JOIN e ON e.task_id = t.id
""").bindparams(*binds)
    )


_ANSWER_CALLS = Statement(
    text("""
UPDATE task_calls SET status = 'completed', result = to_jsonb(x.answer), finished_at = now()
FROM jsonb_to_recordset(:p_answers) AS x(id text, answer text)
WHERE task_calls.task_id = :p_id AND task_calls.tool_call_id = x.id
""").bindparams(bindparam("p_id", type_=UUID(as_uuid=True)), bindparam("p_answers", type_=JSONB))
)


async def answer_calls(conn: Any, task_id: uuid.UUID, answers: Mapping[str, str]) -> None:
    """Complete the question calls `answers` answers (by call id), on `conn`."""
    params = {"p_id": task_id, "p_answers": [{"id": k, "answer": v} for k, v in answers.items()]}
    await conn.execute(_ANSWER_CALLS.sql, *_ANSWER_CALLS.args(params))


# Tasks a free message may reach (`usecases/inbox.TaskInbox.live`): waiting for the
# answer to one question or the decision on one tool call, or, within a context,
# taking follow-ups.
_LIVE_IN_CONTEXT = Statement(
    text(f"""
SELECT * FROM tasks
WHERE tenant = :p_tenant AND context_id IS NOT DISTINCT FROM :p_context
  AND ((state = 'input_required' AND input_request ->> 'kind' = 'questions'
        AND jsonb_array_length(input_request -> 'questions') = 1)
       OR (state = 'input_required' AND input_request ->> 'kind' = 'approvals'
           AND (SELECT count(*) FROM jsonb_array_elements(input_request -> 'approvals') a
                WHERE NOT a ? 'decision') = 1
           AND NOT input_request ? 'questions')
       OR (:p_context IS NOT NULL AND {TAKES_FOLLOWUPS}))
ORDER BY id LIMIT 50
""").bindparams(bindparam("p_tenant", type_=Text), bindparam("p_context", type_=Text))
)


def _lease_params(lease: Lease | None) -> dict[str, Any]:
    return {"p_owner": lease.owner, "p_attempt": lease.attempt} if lease else {}


def task_params(new: NewTask) -> dict[str, Any]:
    """A new task as `submits.create_many` inserts it, with a fresh id."""
    return {
        "id": uuid7(),
        "tenant": new.tenant,
        "input": new.input,
        "agent": new.agent.to_json(),
        "metadata": new.metadata,
        "parent_id": new.parent_id,
        "context_id": new.context_id,
        "idempotency_key": new.idempotency_key,
        "request_hash": new.request_hash,
        "max_attempts": new.max_attempts,
        "timeout_seconds": new.timeout_seconds,
        "detached": new.detached,
        "trace_context": new.trace_context,
        "priority": new.priority,
        "run_at": new.run_at,
        "quiet": new.quiet,
        "max_cost": new.max_cost,
        "max_tokens": new.max_tokens,
    }


class TaskStore:
    def __init__(self, db: Database) -> None:
        # Writes are single statements, so they run without BEGIN/COMMIT round trips
        # (outside a transaction block PostgreSQL commits each statement by itself).
        self.db = db
        self._submits = SubmitBatcher(db)

    # -- submit -----------------------------------------------------------------

    async def create(self, new: NewTask, *, also: AlsoWrite | None = None) -> tuple[Task, bool]:
        """Insert a pending task and its first event. Returns (task, created).

        With an idempotency key already used by this tenant, nothing is written and
        the existing task comes back with created=False. `also` writes what belongs
        to a new task (its webhook subscriptions) on the same connection, in the same
        transaction. A fork's ledger (`new.fork`) is written in it too
        (`db/forks.py`).
        """
        params = task_params(new)
        created: Row | None
        if also is None and new.fork is None:
            created = await self._submits.insert(params)  # shares a commit with others
        else:
            async with self.db.connection() as conn, conn.transaction():
                rows = await create_many(conn, [params])
                created = rows[0] if rows else None
                if created is not None and new.fork is not None:
                    copied = await copy_ledger(conn, created["id"], new.fork)
                    created = {**created, "event_seq": copied["event_seq"]}
                if created is not None and also is not None:
                    await also(conn, created["id"])
        if created is not None:
            return pending_task(new, created), True
        existing = await self.db.fetchrow(_BY_IDEMPOTENCY_KEY, params)
        assert existing is not None  # the conflicting row is committed and ours to read
        return task_from_row(existing), False

    # -- reads ------------------------------------------------------------------

    async def get(self, task_id: uuid.UUID, *, tenant: str | None = None) -> Task | None:
        if tenant is None:
            row = await self.db.fetchrow(_GET, {"id": task_id})
        else:
            row = await self.db.fetchrow(_GET_SCOPED, {"id": task_id, "tenant": tenant})
        return task_from_row(row) if row is not None else None

    async def by_idempotency_key(self, tenant: str, key: str) -> Task | None:
        """The tenant's task submitted with this idempotency key."""
        row = await self.db.fetchrow(
            _BY_IDEMPOTENCY_KEY, {"tenant": tenant, "idempotency_key": key}
        )
        return task_from_row(row) if row is not None else None

    async def get_with_messages(
        self, task_id: uuid.UUID, *, tenant: str
    ) -> tuple[Task, list[dict[str, Any]]] | None:
        """The task and its ledger's messages (`position`, `message`), read together."""
        row = await self.db.fetchrow(_GET_WITH_MESSAGES, {"id": task_id, "tenant": tenant})
        return (task_from_row(row), row["history"]) if row is not None else None

    async def get_many(self, task_ids: list[uuid.UUID]) -> dict[uuid.UUID, Task]:
        rows = await self.db.fetch(_GET_MANY, {"ids": task_ids})
        return {row["id"]: task_from_row(row) for row in rows}

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
        statement = list_statement(shape(filter), before_id is not None)
        params = filter_params(tenant, filter) | {"before_id": before_id, "limit": limit}
        return [task_from_row(row) for row in await self.db.fetch(statement, params)]

    async def count_tasks(
        self, *, tenant: str, filter: TaskFilter, mode: CountMode, timeout_ms: int
    ) -> Total:
        """How many tasks `list_tasks` pages through with this filter (any cursor)."""
        from_where, binds = count_query(shape(filter))
        return await count(
            self.db,
            mode,
            from_where=from_where,
            binds=binds,
            params=filter_params(tenant, filter),
            timeout_ms=timeout_ms,
        )

    async def list_by_status(
        self, *, tenant: str, query: StatusQuery, limit: int, timeout_ms: int
    ) -> tuple[list[Task], Total]:
        """A page by status time, newest first, and how many tasks match (exact,
        else an estimate when counting takes longer than `timeout_ms`)."""
        shape = (query.state is not None, query.context_id is not None, query.after is not None)
        statement = status_list_statement(*shape, query.cursor is not None)
        at, last_id = query.cursor or (None, None)
        params = {
            "tenant": tenant,
            "state": query.state.value if query.state is not None else None,
            "context_id": query.context_id,
            "status_after": query.after,
            "cursor_at": at,
            "cursor_id": last_id,
            "limit": limit,
        }
        rows = await self.db.fetch(statement, params)
        from_where, binds = status_count_query(*shape)
        total = await count(
            self.db,
            "exact",
            from_where=from_where,
            binds=binds,
            params=params,
            timeout_ms=timeout_ms,
        )
        if total.value is None:
            total = await count(
                self.db,
                "estimate",
                from_where=from_where,
                binds=binds,
                params=params,
                timeout_ms=timeout_ms,
            )
        return [task_from_row(row) for row in rows], total

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
    ) -> Task | None:
        """Move a task from `source` to `target`, with its `state_change` event.

        One conditional UPDATE: returns the updated task, or None when the task was
        not in `source` (or the lease no longer matches) — the race was lost and
        nothing was written.
        """
        check_transition(source, target)
        values = values or {}
        statement = _transition_statement(
            target, tuple(sorted(values)), lease is not None, tenant is not None
        )
        params: dict[str, Any] = {
            "p_id": task_id,
            "p_source": source.value,
            "p_tenant": tenant,
            "event": {"from": source.value, "to": target.value, **(event or {})},
            **_lease_params(lease),
            **{f"v_{key}": value for key, value in values.items()},
        }
        row = await self.db.fetchrow(statement, params)
        return task_from_row(row) if row is not None else None

    async def cancel(
        self, task_id: uuid.UUID, *, source: TaskState, tenant: str, reason: str | None
    ) -> Task | None:
        """Cancel a task and, in the same transaction, every live task below it.

        Returns None (and changes nothing) when the task was no longer in `source`.
        """
        target = TaskState.CANCELLED
        check_transition(source, target)
        statement = _transition_statement(target, ("cancel_reason",), False, True)
        params = {
            "p_id": task_id,
            "p_source": source.value,
            "p_tenant": tenant,
            "v_cancel_reason": reason,
            "event": {"from": source.value, "to": target.value}
            | ({"reason": reason} if reason else {}),
        }
        async with self.db.connection() as conn, conn.transaction():
            row = await conn.fetchrow(statement.sql, *statement.args(params))
            if row is None:
                return None
            params |= {"v_cause": "parent_cancelled"}
            below = await conn.fetch(CANCEL_SUBTASKS.sql, *CANCEL_SUBTASKS.args(params))
            # Tool calls under way when the run stops never report back: close them.
            ids = [task_id, *(r["task_id"] for r in below)]
            await conn.execute(FAIL_OPEN_CALLS.sql, *FAIL_OPEN_CALLS.args({"p_ids": ids}))
        return task_from_row(row)

    async def cancel_subtasks(self, parent_id: uuid.UUID, *, cause: str, reason: str) -> int:
        """Cancel the live subtasks of a task that ended (but the detached ones), with
        theirs; how many were cancelled."""
        params = {"p_id": parent_id, "v_cause": cause, "v_cancel_reason": reason}
        return await self._cancel_tree(CANCEL_SUBTASKS, params)

    async def cancel_orphans(self, *, limit: int = 100) -> int:
        """The reaper's backstop (`CANCEL_ORPHANS`); how many were cancelled."""
        return await self._cancel_tree(CANCEL_ORPHANS, {"p_limit": limit})

    async def _cancel_tree(self, statement: Statement, params: dict[str, Any]) -> int:
        async with self.db.connection() as conn, conn.transaction():
            cancelled = await conn.fetch(statement.sql, *statement.args(params))
            ids = [row["task_id"] for row in cancelled]
            if ids:
                await conn.execute(FAIL_OPEN_CALLS.sql, *FAIL_OPEN_CALLS.args({"p_ids": ids}))
        return len(ids)

    async def provide_input(
        self, task_id: uuid.UUID, *, tenant: str, answers: Mapping[str, str]
    ) -> Task | None:
        """Answer a waiting task: it returns to `running` without an owner (claimable)
        and its question calls are completed with the answers, in one transaction.
        None: the task was no longer waiting; nothing changed."""
        statement = _transition_statement(TaskState.RUNNING, ("input_request",), False, True)
        params = {
            "p_id": task_id,
            "p_source": TaskState.INPUT_REQUIRED.value,
            "p_tenant": tenant,
            "v_input_request": None,
            "event": {"from": TaskState.INPUT_REQUIRED.value, "to": TaskState.RUNNING.value}
            | {"answered": sorted(answers)},
            "p_answers": [{"id": key, "answer": value} for key, value in answers.items()],
        }
        async with self.db.connection() as conn, conn.transaction():
            row = await conn.fetchrow(statement.sql, *statement.args(params))
            if row is None:
                return None
            await answer_calls(conn, task_id, answers)
        return task_from_row(row)

    async def live_in_context(self, *, tenant: str, context_id: str | None) -> list[Task]:
        """Tasks a free message may reach (`_LIVE_IN_CONTEXT`), oldest first."""
        params = {"p_tenant": tenant, "p_context": context_id}
        rows = await self.db.fetch(_LIVE_IN_CONTEXT, params)
        return [task_from_row(row) for row in rows]
