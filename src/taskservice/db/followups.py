"""Follow-up messages to a live task (`task_followups`): queued by the sender, read
by the task's run.

Queueing is one statement: the task row counts the message (`followups`) and takes
its event (`followup`) while the task is live, and the message is inserted with
that number. The row lock orders it against the run's outcome: a run completes
only once it has read every message counted (`db/steps`), and a task that has
finished takes no more.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.types import Integer, Text

from taskservice.db.eventlog import NEXT_SEQ, append_events
from taskservice.db.rows import task_from_row
from taskservice.db.sql import Database, Row, text_statement
from taskservice.domain.models import Followup, Task

# A task takes follow-ups while it is pending or running, or parked on its subtasks
# (its run reads them when it resumes).
TAKES_FOLLOWUPS = (
    "(state IN ('pending', 'running') "
    "OR (state = 'input_required' AND input_request ->> 'kind' = 'subtasks'))"
)

_EVENT = append_events(
    type="'followup'", data="jsonb_build_object('seq', t.followups, 'preview', :p_preview)"
)
_QUEUE = text_statement(
    f"""
WITH t AS (
    UPDATE tasks SET followups = tasks.followups + 1, {NEXT_SEQ}, updated_at = now()
    WHERE id = :p_id AND tenant = :p_tenant AND {TAKES_FOLLOWUPS}
    RETURNING tasks.*
),
f AS (
    INSERT INTO task_followups (task_id, seq, input, key)
    SELECT t.id, t.followups, :p_input, :p_key FROM t
    RETURNING task_id, created_at
),
e AS (
{_EVENT}
)
SELECT t.*, f.created_at AS followup_at FROM t JOIN f ON f.task_id = t.id
""",
    p_id=UUID(as_uuid=True),
    p_tenant=Text,
    p_input=JSONB,
    p_key=Text,
    p_preview=Text,
)

_COLUMNS = "task_id, seq, input, key, created_at"
_AFTER = text_statement(
    f"SELECT {_COLUMNS} FROM task_followups WHERE task_id = :p_id AND seq > :p_after ORDER BY seq",
    p_id=UUID(as_uuid=True),
    p_after=Integer,
)
_BY_KEY = text_statement(
    f"SELECT {_COLUMNS} FROM task_followups WHERE task_id = :p_id AND key = :p_key",
    p_id=UUID(as_uuid=True),
    p_key=Text,
)


class KeyTaken(Exception):
    """The follow-up's key was taken by another message to the task, queued at the
    same time (the key is unique per task): `sent`, that message."""

    def __init__(self, sent: Followup) -> None:
        super().__init__(f"follow-up key {sent.key!r} of task {sent.task_id} is taken")
        self.sent = sent


def _followup(row: Row) -> Followup:
    return Followup(row["task_id"], row["seq"], row["input"], row["key"], row["created_at"])


class FollowupStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def queue(
        self, task_id: uuid.UUID, *, tenant: str, input: Any, key: str | None, preview: str
    ) -> tuple[Task, Followup] | None:
        """Queue a message for the task's run. None: the task takes no follow-ups
        (finished, waiting for an answer, or not the tenant's); nothing changed.
        `KeyTaken`: a message with the same key was queued at the same time."""
        params = {
            "p_id": task_id,
            "p_tenant": tenant,
            "p_input": input,
            "p_key": key,
            "p_preview": preview,
        }
        try:
            row = await self.db.fetchrow(_QUEUE, params)
        except asyncpg.UniqueViolationError:  # the same key, sent at the same time
            assert key is not None
            sent = await self.by_key(task_id, key)
            if sent is None:
                raise
            raise KeyTaken(sent) from None
        if row is None:
            return None
        task = task_from_row(row)
        return task, Followup(task.id, task.followups, input, key, row["followup_at"])

    async def after(self, task_id: uuid.UUID, seq: int) -> list[Followup]:
        """The task's follow-ups numbered above `seq`, in order."""
        return [
            _followup(r) for r in await self.db.fetch(_AFTER, {"p_id": task_id, "p_after": seq})
        ]

    async def by_key(self, task_id: uuid.UUID, key: str) -> Followup | None:
        row = await self.db.fetchrow(_BY_KEY, {"p_id": task_id, "p_key": key})
        return _followup(row) if row is not None else None
