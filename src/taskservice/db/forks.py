"""A fork's ledger, written in the transaction that creates the fork's task
(`db/tasks.TaskStore.create`): one statement marks the new task as forked from its
source at a position, copies the source's first messages and the rows of the tool
calls among them that finished, queues the fork's message as its first follow-up,
and records a `log` line saying what it was forked from (and the `followup` event).

The copied rows keep the source's content; their `attempt` is 0 (none of the
fork's attempts wrote them). Calls that had not finished (still running, waiting
for an answer or for subtasks) are not copied: the fork's run makes them itself.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.types import Integer, Text

from taskservice.db.sql import Row, text_statement
from taskservice.domain.forks import Fork

_COPY = text_statement(
    """
WITH t AS (
    UPDATE tasks SET forked_from = :p_source, forked_at = :p_at, followups = :p_followups,
        event_seq = tasks.event_seq + 1 + :p_followups, log_lines = tasks.log_lines + 1,
        updated_at = now()
    WHERE id = :p_id
    RETURNING tasks.id, tasks.tenant, tasks.event_seq
),
m AS (
    INSERT INTO task_messages (task_id, position, kind, message, attempt)
    SELECT t.id, s.position, s.kind, s.message, 0
    FROM t JOIN task_messages s ON s.task_id = :p_source AND s.position < :p_at
    RETURNING 1
),
c AS (
    INSERT INTO task_calls (task_id, tool_call_id, name, arguments, status, result, error,
                            attempt, created_at, started_at, finished_at)
    SELECT t.id, s.tool_call_id, s.name, s.arguments, s.status, s.result, s.error, 0,
           s.created_at, s.started_at, s.finished_at
    FROM t JOIN task_calls s ON s.task_id = :p_source AND s.tool_call_id = ANY(:p_calls)
    WHERE s.status IN ('completed', 'failed')
    RETURNING 1
),
f AS (
    INSERT INTO task_followups (task_id, seq, input, key)
    SELECT t.id, 1, :p_message, :p_key FROM t WHERE :p_followups > 0
    RETURNING 1
),
e AS (
    INSERT INTO task_events (task_id, tenant, seq, type, data)
    SELECT t.id, t.tenant, 2, 'log', :p_line FROM t
    UNION ALL
    SELECT t.id, t.tenant, 3, 'followup', :p_followup FROM t WHERE :p_followups > 0
    RETURNING 1
)
SELECT t.event_seq, (SELECT count(*) FROM m) AS messages, (SELECT count(*) FROM c) AS calls
FROM t
""",
    p_id=UUID(as_uuid=True),
    p_source=UUID(as_uuid=True),
    p_at=Integer,
    p_followups=Integer,
    p_calls=ARRAY(Text),
    p_message=JSONB,
    p_key=Text,
    p_line=JSONB,
    p_followup=JSONB,
)


def _line(fork: Fork) -> dict[str, Any]:
    """The fork's first `log` line (its second event, after `pending`)."""
    added = "; a message added after them" if fork.followup else ""
    message = (
        f"forked from task {fork.source} at position {fork.at} "
        f"(the first {fork.at} of its {fork.ledger} messages copied{added})"
        if fork.at
        else f"forked from task {fork.source} at position 0 (a new run of its task)"
    )
    return {
        "level": "info",
        "message": message,
        "forked_from": {"task_id": str(fork.source), "at": fork.at},
    }


async def copy_ledger(conn: asyncpg.Connection, task_id: uuid.UUID, fork: Fork) -> Row:
    """Write the fork's ledger (on `conn`, in the transaction that created the task
    `task_id`); the row says the task's `event_seq` and what was copied."""
    followup = fork.followup
    params = {
        "p_id": task_id,
        "p_source": fork.source,
        "p_at": fork.at,
        "p_followups": int(followup),
        "p_calls": list(fork.calls),
        "p_message": fork.message if followup else None,
        "p_key": fork.key,
        "p_line": _line(fork),
        "p_followup": {"seq": 1, "preview": fork.preview} if followup else None,
    }
    row: Row | None = await conn.fetchrow(_COPY.sql, *_COPY.args(params))
    assert row is not None  # the task was inserted by this transaction
    return row
