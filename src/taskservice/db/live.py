"""Live output in PostgreSQL: the model response a run is streaming, as deltas on a
channel and as the text so far in `task_live`.

```
worker (LiveOutput) ─ flush, ≤ 1 per interval ─▶ one statement: task_live += text,
                                                  NOTIFY taskservice_deltas (the deltas)
every process's event hub ◀── LISTEN ─────────────┘
   └▶ live.LiveFeed ─▶ the streams following that task
a stream opened mid-message ─▶ so_far(): task_live's text of the message in progress
```

A flush is one autocommit statement: the rows and the notice commit together, so a
reader that reads `task_live` after subscribing misses nothing (what it read is up to
a flush; later flushes reach it as notices, with offsets to drop what it has). A
flush sets each part's text to its first `offset` characters plus the delta, so a
flush retried after an ambiguous failure changes nothing twice.

The payload of a notice is `<task id>,<json>`: `{"a": attempt, "p": position,
"d": [[part, kind, tool, offset, text], …]}`, cut into several notices (in order, in
one transaction) when it would pass PostgreSQL's 8000 bytes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.types import Integer, Text

from taskservice.db.sql import Database, text_statement
from taskservice.models import Delta

DELTAS_CHANNEL = "taskservice_deltas"
_MAX_PAYLOAD = 7000  # bytes; PostgreSQL refuses a payload of 8000 or more

_FLUSH = text_statement(
    """
WITH d AS (
    SELECT * FROM jsonb_to_recordset(:p_parts)
        AS d(part int, kind text, tool text, "offset" int, text text)
),
up AS (
    INSERT INTO task_live AS l (task_id, part, attempt, position, kind, tool, text)
    SELECT :p_task, d.part, :p_attempt, :p_position, d.kind, d.tool, d.text FROM d
    ON CONFLICT (task_id, part) DO UPDATE SET
        text = CASE
            WHEN l.attempt = excluded.attempt AND l.position = excluded.position
            THEN left(l.text, (SELECT d."offset" FROM d WHERE d.part = excluded.part))
                 || excluded.text
            ELSE excluded.text END,
        tool = CASE
            WHEN l.attempt = excluded.attempt AND l.position = excluded.position
            THEN coalesce(excluded.tool, l.tool)
            ELSE excluded.tool END,
        kind = excluded.kind,
        attempt = excluded.attempt,
        position = excluded.position
)
SELECT pg_notify('taskservice_deltas', n.payload) FROM unnest(:p_payloads) AS n(payload)
""",
    p_parts=JSONB,
    p_task=UUID(as_uuid=True),
    p_attempt=Integer,
    p_position=Integer,
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

_CLEAR = text_statement("DELETE FROM task_live WHERE task_id = :p_task", p_task=UUID(as_uuid=True))

# Rows no stream can want: of tasks no longer running, or of an attempt before the
# task's current one (a worker died mid-message).
_SWEEP = text_statement(
    """
DELETE FROM task_live l WHERE NOT EXISTS (
    SELECT 1 FROM tasks t WHERE t.id = l.task_id AND t.state = 'running' AND t.attempt = l.attempt
)
"""
)


def payloads(deltas: Sequence[Delta]) -> list[str]:
    """The notices of one flush (deltas of one task, attempt and position), each under
    PostgreSQL's payload limit."""
    first = deltas[0]
    head = f"{first.task_id},"
    out: list[str] = []
    batch: list[list[Any]] = []

    def encode(items: list[list[Any]]) -> str:
        body = {"a": first.attempt, "p": first.position, "d": items}
        return head + json.dumps(body, ensure_ascii=False, separators=(",", ":"))

    for item in _pieces(deltas, lambda d: len(encode([_item(d)]).encode())):
        if batch and len(encode([*batch, item]).encode()) > _MAX_PAYLOAD:
            out.append(encode(batch))
            batch = []
        batch.append(item)
    if batch:
        out.append(encode(batch))
    return out


def _item(delta: Delta) -> list[Any]:
    return [delta.part, delta.kind, delta.tool, delta.offset, delta.text]


def _pieces(deltas: Sequence[Delta], size: Any) -> list[list[Any]]:
    """Each delta as one item, or split into consecutive items that fit a notice."""
    items: list[list[Any]] = []
    for delta in deltas:
        todo = [delta]
        while todo:
            piece = todo.pop(0)
            if size(piece) <= _MAX_PAYLOAD or len(piece.text) <= 1:
                items.append(_item(piece))
                continue
            half = len(piece.text) // 2
            todo[:0] = [
                replace(piece, text=piece.text[:half]),
                replace(piece, offset=piece.offset + half, text=piece.text[half:]),
            ]
    return items


def parse(payload: str) -> list[Delta]:
    """The deltas of one notice (`ValueError` if it is not one)."""
    task, _, body = payload.partition(",")
    task_id = uuid.UUID(task)
    data = json.loads(body)
    attempt, position = int(data["a"]), int(data["p"])
    return [
        Delta(
            task_id=task_id,
            attempt=attempt,
            position=position,
            part=int(part),
            kind=kind,
            offset=int(offset),
            text=str(text),
            tool=tool,
        )
        for part, kind, tool, offset, text in data["d"]
    ]


def task_of(payload: str) -> uuid.UUID:
    """The task a notice is about, read without parsing the rest."""
    return uuid.UUID(payload[:36])


class LiveStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def flush(self, deltas: Sequence[Delta]) -> None:
        """Append `deltas` (of one task, attempt and position; one per part, in
        order) to the text so far, and notify every process, in one statement."""
        first = deltas[0]
        parts = [
            {"part": d.part, "kind": d.kind, "tool": d.tool, "offset": d.offset, "text": d.text}
            for d in deltas
        ]
        await self.db.fetch(
            _FLUSH,
            {
                "p_parts": parts,
                "p_task": first.task_id,
                "p_attempt": first.attempt,
                "p_position": first.position,
                "p_payloads": payloads(deltas),
            },
        )

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

    async def clear(self, task_id: uuid.UUID) -> None:
        await self.db.fetch(_CLEAR, {"p_task": task_id})

    async def sweep(self) -> None:
        await self.db.fetch(_SWEEP, {})
