"""Live output in PostgreSQL: the model response a run is streaming, as deltas on a
channel and as the text so far in `task_live`.

```
worker (LiveWriter) ─ flush, ≤ 1 per tick ─▶ one statement: task_live += text,
                                              NOTIFY taskservice_deltas (the deltas)
every process's event hub ◀── LISTEN ─────────┘
   └▶ following/deltas.LiveFeed ─▶ the streams following that task
a stream opened mid-message ─▶ so_far(): task_live's text of the message in progress
a stream opened on a quiet task ─▶ ask(): quiet = false, NOTIFY taskservice_live_asked
   └▶ the worker running it streams its next model response (`worker/live_output.py`)
```

A flush is one autocommit statement for every run of a process that has something
to send: the rows and the notices commit together, so a reader that reads
`task_live` after subscribing misses nothing (what it read is up to a flush; later
flushes reach it as notices, with offsets to drop what it has).

The payload of a notice is a JSON array of the flush's deltas, each `[task, attempt,
position, part, kind, tool, offset, text]`: a flush of a hundred runs is a notice or
two, not a hundred, cut into several (in order, in one transaction) where it would
pass PostgreSQL's 8000 bytes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.types import Text

from taskservice.db.sql import Database, text_statement
from taskservice.domain.models import Delta

DELTAS_CHANNEL = "taskservice_deltas"
ASKED_CHANNEL = "taskservice_live_asked"  # payload: the task's id
_MAX_PAYLOAD = 7000  # bytes; PostgreSQL refuses a payload of 8000 or more

# One flush writes the pieces of every run of a process that has some (one per task
# and part), and their notices, in one autocommit statement.
_FLUSH = text_statement(
    """
WITH up AS (
    INSERT INTO task_live AS l (task_id, part, attempt, position, kind, tool, text)
    SELECT d.task, d.part, d.attempt, d.position, d.kind, d.tool, d.text
    FROM jsonb_to_recordset(:p_parts) AS d(
        task uuid, attempt int, position int, part int, kind text, tool text, text text)
    ON CONFLICT (task_id, part) DO UPDATE SET
        text = CASE
            WHEN l.attempt = excluded.attempt AND l.position = excluded.position
            THEN l.text || excluded.text
            ELSE excluded.text END,
        tool = CASE
            WHEN l.attempt = excluded.attempt AND l.position = excluded.position
            THEN coalesce(excluded.tool, l.tool)
            ELSE excluded.tool END,
        kind = excluded.kind,
        attempt = excluded.attempt,
        position = excluded.position
),
-- Ephemeral: a flush's commit need not wait for the WAL to reach the disk.
quick AS (SELECT set_config('synchronous_commit', 'off', true) AS on_commit)
SELECT pg_notify('taskservice_deltas', n.payload)
FROM unnest(:p_payloads) AS n(payload), quick
""",
    p_parts=JSONB,
    p_payloads=ARRAY(Text),
)

# The message in progress: rows of the task's current attempt whose message is not
# persisted yet (the newest position among them is the one streaming).
_SO_FAR = text_statement(
    """
SELECT l.part, l.attempt, l.position, l.kind, l.tool, l.text
FROM task_live l JOIN tasks t ON t.id = l.task_id
WHERE l.task_id = :p_task AND t.state = 'running' AND l.attempt = t.attempt
  AND NOT EXISTS (
      SELECT 1 FROM task_messages m WHERE m.task_id = l.task_id AND m.position = l.position
  )
ORDER BY l.position DESC, l.part
""",
    p_task=UUID(as_uuid=True),
)

# A stream asks for a quiet task's live output: from now on its model responses are
# streamed (the flag, for the claims to come), and the worker running it hears so.
_ASK = text_statement(
    """
UPDATE tasks SET quiet = false WHERE id = :p_task AND quiet
RETURNING pg_notify('taskservice_live_asked', id::text)
""",
    p_task=UUID(as_uuid=True),
)

# Rows no stream can want: of tasks no longer running, or of an attempt before the
# task's current one (a worker died mid-message).
_SWEEP = text_statement(
    """
DELETE FROM task_live l WHERE NOT EXISTS (
    SELECT 1 FROM tasks t WHERE t.id = l.task_id AND t.state = 'running' AND t.attempt = l.attempt
)
"""
)


def notices(deltas: Sequence[Delta]) -> list[str]:
    """The notices of one flush (the deltas of every run in it), each under
    PostgreSQL's payload limit: a JSON array of `[task, attempt, position, part, kind,
    tool, offset, text]`, a delta too long for one notice cut into consecutive ones."""
    out: list[str] = []
    batch: list[str] = []
    size = 2  # the brackets
    for item in _items(deltas):
        length = len(item.encode()) + 1  # and its comma
        if batch and size + length > _MAX_PAYLOAD:
            out.append("[" + ",".join(batch) + "]")
            batch, size = [], 2
        batch.append(item)
        size += length
    if batch:
        out.append("[" + ",".join(batch) + "]")
    return out


def _items(deltas: Sequence[Delta]) -> list[str]:
    """Each delta encoded, or split into consecutive pieces that each fit a notice."""
    items: list[str] = []
    todo = list(deltas)
    while todo:
        delta = todo.pop(0)
        item = json.dumps(
            [
                str(delta.task_id),
                delta.attempt,
                delta.position,
                delta.part,
                delta.kind,
                delta.tool,
                delta.offset,
                delta.text,
            ],
            ensure_ascii=False,
            separators=(",", ":"),
        )
        if len(item.encode()) + 2 <= _MAX_PAYLOAD or len(delta.text) <= 1:
            items.append(item)
            continue
        half = len(delta.text) // 2
        todo[:0] = [
            replace(delta, text=delta.text[:half]),
            replace(delta, offset=delta.offset + half, text=delta.text[half:]),
        ]
    return items


def parse(payload: str) -> list[Delta]:
    """The deltas of one notice (`ValueError` if it is not one)."""
    return [
        Delta(
            task_id=uuid.UUID(task),
            attempt=int(attempt),
            position=int(position),
            part=int(part),
            kind=kind,
            offset=int(offset),
            text=str(text),
            tool=tool,
        )
        for task, attempt, position, part, kind, tool, offset, text in json.loads(payload)
    ]


class LiveStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def flush(self, runs: Sequence[Sequence[Delta]]) -> None:
        """Append each run's deltas (of one task, attempt and position, one per part,
        each continuing the text so far) to the text so far, and notify every
        process, in one statement. Not idempotent: a flush that failed is not
        retried (that response sends no more deltas; its message is persisted)."""
        every = [d for deltas in runs for d in deltas]
        parts = [
            {
                "task": str(d.task_id),
                "attempt": d.attempt,
                "position": d.position,
                "part": d.part,
                "kind": d.kind,
                "tool": d.tool,
                "text": d.text,
            }
            for d in every
        ]
        await self.db.fetch(_FLUSH, {"p_parts": parts, "p_payloads": notices(every)})

    async def ask(self, task_id: uuid.UUID) -> None:
        """A stream wants the live output of `task_id`, a quiet task (`Task.quiet`)."""
        await self.db.fetch(_ASK, {"p_task": task_id})

    async def so_far(self, task_id: uuid.UUID) -> list[Delta]:
        """The message in progress (if the task is running one): each part's text so
        far, as a delta from offset 0."""
        rows = await self.db.fetch(_SO_FAR, {"p_task": task_id})
        if not rows:
            return []
        newest = rows[0]["position"]
        return [
            Delta(
                task_id=task_id,
                attempt=row["attempt"],
                position=row["position"],
                part=row["part"],
                kind=row["kind"],
                offset=0,
                text=row["text"],
                tool=row["tool"],
            )
            for row in rows
            if row["position"] == newest
        ]

    async def sweep(self) -> None:
        await self.db.fetch(_SWEEP, {})
