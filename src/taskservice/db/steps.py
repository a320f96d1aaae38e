"""The step ledger: a run's messages, tool calls and step events; and parents parked
on their subtasks' calls, resumed when the last one finishes.

Every worker write here is one statement fenced on the task's lease: the task row is
updated first (`event_seq` grows by the number of events it keeps: `log` lines past
the per-task cap are dropped, see `eventlog.event_batch`), and the message, calls
and events are inserted from that row, so a worker that lost its task writes
nothing at all.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from enum import Enum
from functools import lru_cache
from typing import Any, Literal

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.types import BigInteger, Integer, Text

from taskservice.db.counts import count
from taskservice.db.eventlog import (
    BATCH_EVENTS,
    event_batch,
    log_event,
)
from taskservice.db.leases import HELD
from taskservice.db.parents import CHILDREN, RESUME_PARENTS
from taskservice.db.sql import Database, Row, Statement
from taskservice.db.tables import tasks
from taskservice.domain.models import CountMode, Lease, Total
from taskservice.domain.states import TaskState, check_transition

_FENCED_TASK = event_batch(where=HELD, changes="usage = coalesce(:p_usage, tasks.usage),")

_EVENT_BINDS = (bindparam("p_events", type_=JSONB), bindparam("p_log_cap", type_=Integer))
_FENCE_BINDS = (
    bindparam("p_id", type_=UUID(as_uuid=True)),
    bindparam("p_owner", type_=Text),
    bindparam("p_attempt", type_=Integer),
    *_EVENT_BINDS,
)
_BINDS = (*_FENCE_BINDS, bindparam("p_usage", type_=JSONB))

# Complete model messages and the tool calls they ask for (as `pending`).
_MESSAGES_AND_CALLS = """
m AS (
    INSERT INTO task_messages (task_id, position, kind, message, attempt)
    SELECT t.id, (j.m ->> 'position')::int, j.m ->> 'kind', j.m -> 'message', t.attempt
    FROM t, jsonb_array_elements(:p_messages) AS j(m)
    RETURNING task_id
),
c AS (
    INSERT INTO task_calls (task_id, tool_call_id, name, arguments, status, attempt)
    SELECT t.id, j.call ->> 'id', j.call ->> 'name', coalesce(j.call -> 'arguments', '{}'),
           'pending', t.attempt
    FROM t, jsonb_array_elements(:p_calls) AS j(call)
    ON CONFLICT (task_id, tool_call_id) DO NOTHING
    RETURNING task_id
)"""

_MESSAGE_BINDS = (
    bindparam("p_messages", type_=JSONB),
    bindparam("p_calls", type_=JSONB),
    bindparam("p_read", type_=Integer),
)
# Messages written count the follow-ups among them as read.
_READ = "followups_read = greatest(tasks.followups_read, :p_read), "

_FENCED_READ = event_batch(where=HELD, changes=f"{_READ}usage = coalesce(:p_usage, tasks.usage),")

# Messages, the tool calls they ask for, their events.
_APPEND_MESSAGES = Statement(
    text(
        f"WITH {_FENCED_READ}, {_MESSAGES_AND_CALLS}, {BATCH_EVENTS} SELECT count(*) AS n FROM t"
    ).bindparams(*_BINDS, *_MESSAGE_BINDS)
)

# Whether a task is still held by this lease, with follow-ups its run has not read.
_UNREAD = Statement(
    text(
        f"SELECT 1 FROM tasks WHERE {HELD} AND followups > greatest(followups_read, :p_read)"
    ).bindparams(*_FENCE_BINDS[:3], bindparam("p_read", type_=Integer))
)


class Finished(Enum):
    """How a run's outcome write went."""

    WRITTEN = "written"
    LOST = "lost"  # the task is no longer this lease's: nothing was written
    UNREAD = "unread"  # it would complete with follow-ups unread: nothing was written


@lru_cache(maxsize=16)
def _finish_statement(target: TaskState, value_keys: tuple[str, ...]) -> Statement:
    """A run's outcome and the last of its ledger in one fenced statement: the task
    leaves `running` for `target` (with `value_keys` set), the last messages and
    their calls are inserted, and the events (the state change last) follow them.
    One round trip and one commit instead of two."""
    changes = [f"state = '{target.value}'", *(f"{key} = :v_{key}" for key in value_keys)]
    if target.is_terminal:
        changes.append("finished_at = now()")
    if target.is_terminal or target is TaskState.INPUT_REQUIRED:
        changes += ["lease_owner = NULL", "lease_expires_at = NULL"]  # nobody owns it now
    where = HELD
    if target is TaskState.COMPLETED:
        # Not with follow-ups unread: the run goes on with them (the row lock orders
        # this against a follow-up being queued).
        where += " AND followups <= greatest(followups_read, :p_read)"
    fenced = event_batch(where=where, changes=_READ + "".join(f"{c}, " for c in changes))
    binds = [bindparam(f"v_{key}", type_=tasks.c[key].type) for key in value_keys]
    return Statement(
        text(
            f"WITH {fenced}, {_MESSAGES_AND_CALLS}, {BATCH_EVENTS} SELECT count(*) AS n FROM t"
        ).bindparams(*_FENCE_BINDS, *_MESSAGE_BINDS, *binds)
    )


# Events alone (progress, log).
_APPEND_EVENTS = Statement(
    text(f"WITH {_FENCED_TASK}, {BATCH_EVENTS} SELECT count(*) AS n FROM t").bindparams(*_BINDS)
)

# A delegated task's remote state (`tasks.remote`), with the events saying so.
_NOTE_REMOTE = Statement(
    text(
        f"WITH {event_batch(where=HELD, changes='remote = :p_remote,')}, {BATCH_EVENTS} "
        "SELECT count(*) AS n FROM t"
    ).bindparams(*_FENCE_BINDS, bindparam("p_remote", type_=JSONB))
)

# Events for a task whoever holds it, as long as it is not finished (a subtask's
# news for its parent, which may be running elsewhere or parked).
_LIVE = "id = :p_id AND state NOT IN ('completed', 'failed', 'cancelled')"
_APPEND_TO_LIVE = Statement(
    text(f"WITH {event_batch(where=_LIVE)}, {BATCH_EVENTS} SELECT count(*) AS n FROM t").bindparams(
        bindparam("p_id", type_=UUID(as_uuid=True)), *_EVENT_BINDS
    )
)

# A tool call changes status (in_progress, completed, failed), with its event.
_UPDATE_CALL = Statement(
    text(f"""
WITH {_FENCED_TASK},
c AS (
    INSERT INTO task_calls (task_id, tool_call_id, name, arguments, status, attempt,
                            started_at, result, error, finished_at)
    SELECT t.id, :p_call_id, :p_name, :p_arguments, :p_status, t.attempt,
           CASE WHEN :p_status = 'in_progress' THEN now() END,
           :p_result, :p_error,
           CASE WHEN :p_status IN ('completed', 'failed') THEN now() END
    FROM t
    ON CONFLICT (task_id, tool_call_id) DO UPDATE SET
        status = excluded.status,
        attempt = excluded.attempt,
        started_at = coalesce(excluded.started_at, task_calls.started_at),
        result = excluded.result,
        error = excluded.error,
        finished_at = excluded.finished_at
    RETURNING task_id
),
{BATCH_EVENTS}
SELECT count(*) AS n FROM t
""").bindparams(
        *_BINDS,
        bindparam("p_call_id", type_=Text),
        bindparam("p_name", type_=Text),
        bindparam("p_arguments", type_=JSONB),
        bindparam("p_status", type_=Text),
        bindparam("p_result", type_=JSONB),
        bindparam("p_error", type_=Text),
    )
)

_MESSAGES = Statement(
    text("""
SELECT position, kind, message, attempt, created_at FROM task_messages
WHERE task_id = :p_id AND position > :p_after ORDER BY position LIMIT :p_limit
""").bindparams(
        bindparam("p_id", type_=UUID(as_uuid=True)),
        bindparam("p_after", type_=Integer),
        bindparam("p_limit", type_=Integer),
    )
)

_CALLS = Statement(
    text("""
SELECT id, tool_call_id, name, arguments, status, result, error, approval, attempt,
       created_at, started_at, finished_at
FROM task_calls WHERE task_id = :p_id AND id > :p_after ORDER BY id LIMIT :p_limit
""").bindparams(
        bindparam("p_id", type_=UUID(as_uuid=True)),
        bindparam("p_after", type_=BigInteger),  # task_calls.id is a bigint
        bindparam("p_limit", type_=Integer),
    )
)

# Why a task is claimed again: the last event before its claim (seq :p_seq) that
# gave the task back (a lease that expired, a release, a rate limit, input or
# subtasks arriving).
_RESUME_CAUSE = Statement(
    text("""
SELECT type, data FROM task_events
WHERE task_id = :p_id AND seq < :p_seq
  AND type IN ('recovered', 'released', 'throttled', 'state_change')
ORDER BY seq DESC LIMIT 1
""").bindparams(bindparam("p_id", type_=UUID(as_uuid=True)), bindparam("p_seq", type_=Integer))
)

_ALL_CALLS = Statement(
    text(
        "SELECT tool_call_id, name, status, result, error, approval FROM task_calls "
        "WHERE task_id = :p_id"
    ).bindparams(bindparam("p_id", type_=UUID(as_uuid=True)))
)


class LedgerStore:
    def __init__(self, db: Database, *, log_cap: int, log_chars: int) -> None:
        self.db = db
        self.log_cap = log_cap  # `log` lines kept per task (see eventlog.event_batch)
        self.log_chars = log_chars

    def log_event(self, level: str, message: str) -> dict[str, Any]:
        return log_event(level, message, max_chars=self.log_chars)

    def _fence(
        self,
        task_id: uuid.UUID,
        lease: Lease,
        events: Sequence[dict[str, Any]],
        usage: dict[str, Any] | None,
    ) -> dict[str, Any]:
        return {
            "p_id": task_id,
            "p_owner": lease.owner,
            "p_attempt": lease.attempt,
            "p_events": list(events),
            "p_log_cap": self.log_cap,
            "p_usage": usage,
        }

    async def _written(self, statement: Statement, params: dict[str, Any]) -> bool:
        row = await self.db.fetchrow(statement, params)
        return bool(row and row["n"])

    async def append_messages(
        self,
        task_id: uuid.UUID,
        *,
        lease: Lease,
        messages: Sequence[dict[str, Any]],
        calls: Sequence[dict[str, Any]],
        events: Sequence[dict[str, Any]],
        usage: dict[str, Any] | None,
        read: int = 0,
    ) -> bool:
        """`messages`: {position, kind, message}; `read`: the highest follow-up the
        run has read, up to them. False: the lease is gone and nothing was written."""
        params = self._fence(task_id, lease, events, usage) | {
            "p_messages": list(messages),
            "p_calls": list(calls),
            "p_read": read,
        }
        return await self._written(_APPEND_MESSAGES, params)

    async def finish(
        self,
        task_id: uuid.UUID,
        *,
        lease: Lease,
        target: TaskState,
        values: Mapping[str, Any],
        messages: Sequence[dict[str, Any]],
        calls: Sequence[dict[str, Any]],
        events: Sequence[dict[str, Any]],
        read: int = 0,
    ) -> Finished:
        """Move the task from `running` to `target` with `values`, writing the run's
        last `messages` (their `calls` and `events`) first; `read`: the highest
        follow-up the run has read. Not written (`Finished`) when the lease is gone,
        or when the task would complete with follow-ups unread."""
        check_transition(TaskState.RUNNING, target)
        change = {"type": "state_change", "data": {"from": "running", "to": target.value}}
        params = self._fence(task_id, lease, [*events, change], None) | {
            "p_messages": list(messages),
            "p_calls": list(calls),
            "p_read": read,
            **{f"v_{key}": value for key, value in values.items()},
        }
        if await self._written(_finish_statement(target, tuple(sorted(values))), params):
            return Finished.WRITTEN
        if target is TaskState.COMPLETED and await self.db.fetchrow(_UNREAD, params):
            return Finished.UNREAD
        return Finished.LOST

    async def append_events(
        self, task_id: uuid.UUID, *, lease: Lease, events: Sequence[dict[str, Any]]
    ) -> bool:
        return await self._written(_APPEND_EVENTS, self._fence(task_id, lease, events, None))

    async def note_remote(
        self,
        task_id: uuid.UUID,
        *,
        lease: Lease,
        remote: dict[str, Any],
        events: Sequence[dict[str, Any]],
    ) -> bool:
        """Where a delegated task stands on its remote agent, and `events` saying so."""
        params = {**self._fence(task_id, lease, events, None), "p_remote": remote}
        params.pop("p_usage")
        return await self._written(_NOTE_REMOTE, params)

    async def append_to_live(self, task_id: uuid.UUID, events: Sequence[dict[str, Any]]) -> bool:
        """Append events to a task that has not finished, whoever runs it. False: it
        has finished (or does not exist), and nothing was written."""
        params = {"p_id": task_id, "p_events": list(events), "p_log_cap": self.log_cap}
        return await self._written(_APPEND_TO_LIVE, params)

    async def subtask_ended(
        self, parent_id: uuid.UUID, child_id: uuid.UUID, state: TaskState, error: Any
    ) -> None:
        """Tell a parent that has not finished, in a `log` line, how a subtask ended
        (`error`: its error or cancel reason); then resume it if it was parked on its
        subtasks and this was the last."""
        if state is TaskState.COMPLETED:
            line = self.log_event("info", f"subtask {child_id} completed")
        else:
            why = error.get("message") if isinstance(error, dict) else error
            tail = f": {why}" if why else ""
            line = self.log_event("warning", f"subtask {child_id} {state.value}{tail}")
        await self.append_to_live(parent_id, [line])
        await self.resume_parents(parent_id=parent_id)

    async def update_call(
        self,
        task_id: uuid.UUID,
        *,
        lease: Lease,
        call_id: str,
        name: str,
        arguments: Any,
        status: str,
        result: Any = None,
        error: str | None = None,
        event: dict[str, Any],
    ) -> bool:
        params = self._fence(task_id, lease, [event], None) | {
            "p_call_id": call_id,
            "p_name": name,
            "p_arguments": arguments if arguments is not None else {},
            "p_status": status,
            "p_result": result,
            "p_error": error,
        }
        return await self._written(_UPDATE_CALL, params)

    async def messages(self, task_id: uuid.UUID, *, after: int, limit: int) -> list[Row]:
        return await self.db.fetch(_MESSAGES, {"p_id": task_id, "p_after": after, "p_limit": limit})

    async def calls(self, task_id: uuid.UUID, *, after: int, limit: int) -> list[Row]:
        return await self.db.fetch(_CALLS, {"p_id": task_id, "p_after": after, "p_limit": limit})

    async def all_messages(self, task_id: uuid.UUID) -> list[Row]:
        return await self.messages(task_id, after=-1, limit=1_000_000)

    async def resume_cause(self, task_id: uuid.UUID, *, claim_seq: int) -> Row | None:
        """The event that gave the task back before the claim numbered `claim_seq`."""
        return await self.db.fetchrow(_RESUME_CAUSE, {"p_id": task_id, "p_seq": claim_seq})

    async def children(self, task_id: uuid.UUID) -> list[Row]:
        return await self.db.fetch(CHILDREN, {"p_id": task_id})

    async def all_calls(self, task_id: uuid.UUID) -> dict[str, Row]:
        rows = await self.db.fetch(_ALL_CALLS, {"p_id": task_id})
        return {row["tool_call_id"]: row for row in rows}

    async def resume_parents(self, *, parent_id: uuid.UUID | None = None) -> int:
        """Resume parents parked on their subtasks once every subtask is finished
        (one parent, or any). Their wait call returns the subtasks' outcomes."""
        rows = await self.db.fetch(RESUME_PARENTS, {"p_parent": parent_id})
        return len(rows)

    async def count(
        self,
        table: Literal["messages", "calls"],
        task_id: uuid.UUID,
        *,
        mode: CountMode,
        timeout_ms: int,
    ) -> Total:
        """How many messages or tool calls a task has (what their pages go through)."""
        return await count(
            self.db,
            mode,
            from_where=f"FROM task_{table} WHERE task_id = :task_id",
            binds=(("task_id", UUID(as_uuid=True)),),
            params={"task_id": task_id},
            timeout_ms=timeout_ms,
        )
