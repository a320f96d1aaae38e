"""The task event log (`task_events`): how events are appended, how they are read.

Every event enters the log the same way, in the statement that changes its task:
the task row's `event_seq` grows by one (`NEXT_SEQ`) in a CTE named `t`, and
`append_events` inserts the event with that number. So a task's events are numbered
1, 2, 3, … without gaps, in the order their changes committed, and an event exists
exactly when its change does. Each insert fires the triggers described in
`db/notify.py` (the NOTIFY, the webhook outbox) in the same transaction.

Events are read two ways: a task's own log by `seq` (what `Last-Event-ID` resumes
from), and a tenant's firehose by the global `id`, never past the watermark (see
`following/hub.Watermark`).
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import ARRAY, BigInteger, Integer, Text, any_, bindparam, select, text
from sqlalchemy.dialects.postgresql import UUID

from taskservice.db.sql import Database, Row, Statement
from taskservice.db.tables import task_events
from taskservice.domain.models import EventFilter, TaskEvent

STATE_CHANGE = "state_change"
LOG = "log"
# In the SET clause of the UPDATE that changes a task: the number of its next event.
NEXT_SEQ = "event_seq = tasks.event_seq + 1"


def append_events(*, type: str, data: str, seq: str = "t.event_seq", source: str = "t") -> str:
    """The INSERT that records one event per row of the CTE `t` (task rows just
    changed, returning `id`, `tenant` and `event_seq`): SQL expressions for the
    event's `type` and `data`, and, for several events per task, its `seq` and a
    `source` that joins `t` to them. Returns the inserted events' `task_id`."""
    return f"""INSERT INTO task_events (task_id, tenant, seq, type, data)
SELECT t.id, t.tenant, {seq}, {type}, {data}
FROM {source}
RETURNING task_id"""


# What a batch of events keeps (`x` numbers the batch's log lines 1, 2, … as `line`;
# `before` is how many lines the task was offered until then): every event that is
# not a log line, log lines up to the cap, and one more that says the rest were
# dropped (none at all with a cap of 0).
def _line_kept(number: str) -> str:
    """Whether the task's log line numbered `number` (1, 2, …) is kept."""
    return f"{number} <= :p_log_cap + least(:p_log_cap, 1)"


def _kept(before: str) -> str:
    return f"(x.ev ->> 'type' <> '{LOG}' OR {_line_kept(f'{before} + x.line')})"


_LINES_IN_BATCH = f"(SELECT count(*) FROM x WHERE x.ev ->> 'type' = '{LOG}')"


def event_batch(*, where: str, changes: str = "") -> str:
    """The CTEs `x` and `t` that add the events of the JSON array `:p_events` ({type,
    data}, in order) to the one task matching `where`, with the SET `changes` (each
    followed by a comma), for `BATCH_EVENTS` to insert. `log` lines beyond
    `:p_log_cap` per task are dropped: the task's `log_lines` counts every line
    offered, under the row lock every such write takes, so the cap holds whoever
    writes. `t` returns id, tenant, event_seq, attempt and `lines_before`."""
    return f"""
x AS (
    SELECT e.ev, e.ord,
           count(*) FILTER (WHERE e.ev ->> 'type' = '{LOG}') OVER (ORDER BY e.ord) AS line
    FROM jsonb_array_elements(:p_events) WITH ORDINALITY AS e(ev, ord)
),
t AS (
    UPDATE tasks SET
        event_seq = tasks.event_seq + (SELECT count(*) FROM x WHERE {_kept("tasks.log_lines")}),
        log_lines = tasks.log_lines + {_LINES_IN_BATCH},
        {changes} updated_at = now()
    WHERE {where}
    RETURNING tasks.id, tasks.tenant, tasks.event_seq, tasks.attempt,
              tasks.log_lines - {_LINES_IN_BATCH} AS lines_before
)"""


_DROPPED = """jsonb_build_object(
    'level', 'warning', 'dropped', true,
    'message', 'this task reached its limit of ' || :p_log_cap
               || ' log lines; later lines are dropped')"""

# The events `event_batch` keeps, numbered on from the task's previous event_seq.
BATCH_EVENTS = f"""
k AS (
    SELECT x.ev, x.line, row_number() OVER (ORDER BY x.ord) AS n, count(*) OVER () AS kept
    FROM t, x WHERE {_kept("t.lines_before")}
),
e AS (
{
    append_events(
        seq="t.event_seq - k.kept + k.n",
        type="k.ev ->> 'type'",
        data=f"CASE WHEN k.ev ->> 'type' = '{LOG}' AND t.lines_before + k.line > :p_log_cap "
        f"THEN {_DROPPED} ELSE k.ev -> 'data' END",
        source="t, k",
    )
}
)"""


# A `log` line before the one event of each task a statement changes (the reaper's,
# which change many tasks at once): `LINE_SEQ` in the UPDATE's SET, `LINE_NO` in
# its RETURNING, then the INSERT of `append_with_line`. The line counts against
# the task's cap like any other.
LINE_SEQ = (
    f"event_seq = tasks.event_seq + 1 + ({_line_kept('tasks.log_lines + 1')})::int, "
    "log_lines = tasks.log_lines + 1"
)
LINE_NO = "tasks.log_lines AS line_no"


def append_with_line(*, type: str, data: str, level: str, message: str) -> str:
    """`append_events` of the event (`type`, `data`) after a `log` line at `level`
    saying `message` (SQL expressions over `t`), or after nothing once the task's
    lines are spent."""
    line = (
        f"CASE WHEN t.line_no > :p_log_cap THEN {_DROPPED} "
        f"ELSE jsonb_build_object('level', '{level}', 'message', {message}) END"
    )
    return append_events(
        seq="t.event_seq - x.back",
        type="x.type",
        data="x.data",
        source=f"""t CROSS JOIN LATERAL (VALUES (1, '{LOG}', {line}), (0, {type}, {data}))
    AS x(back, type, data)
WHERE x.back = 0 OR {_line_kept("t.line_no")}""",
    )


def log_event(level: str, message: str, *, max_chars: int) -> dict[str, Any]:
    """A `log` event for a batch (`event_batch`), its message cut to `max_chars`."""
    if len(message) > max_chars:
        message = message[: max_chars - 1] + "…"
    return {"type": LOG, "data": {"level": level, "message": message}}


def event_from_row(row: Row) -> TaskEvent:
    return TaskEvent(
        id=row["id"],
        task_id=row["task_id"],
        seq=row["seq"],
        type=row["type"],
        data=row["data"],
        created_at=row["created_at"],
    )


_PAGE = Statement(
    select(task_events)
    .where(task_events.c.task_id == bindparam("task_id"), task_events.c.seq > bindparam("after"))
    .order_by(task_events.c.seq)
    .limit(bindparam("limit"))
)
_PAGE_OF_TYPES = Statement(
    select(task_events)
    .where(
        task_events.c.task_id == bindparam("task_id"),
        task_events.c.seq > bindparam("after"),
        task_events.c.type == any_(bindparam("types", type_=ARRAY(Text))),
    )
    .order_by(task_events.c.seq)
    .limit(bindparam("limit"))
)
_IDS_AFTER = Statement(
    text("SELECT id FROM task_events WHERE id > :p_after ORDER BY id LIMIT :p_limit").bindparams(
        bindparam("p_after", type_=BigInteger), bindparam("p_limit", type_=Integer)
    )
)
_LATEST_ID = Statement(text("SELECT max(id) AS id FROM task_events"))

# A tenant's events in global order, up to the watermark, with optional filters.
_FIREHOSE = Statement(
    text("""
SELECT e.* FROM task_events e JOIN tasks t ON t.id = e.task_id
WHERE e.tenant = :p_tenant AND e.id > :p_after AND e.id <= :p_upto
  AND (CAST(:p_types AS text[]) IS NULL OR e.type = ANY(CAST(:p_types AS text[])))
  AND (CAST(:p_states AS text[]) IS NULL
       OR (e.type = 'state_change' AND e.data ->> 'to' = ANY(CAST(:p_states AS text[]))))
  AND (CAST(:p_context AS text) IS NULL OR t.context_id = :p_context)
  AND (CAST(:p_parent AS uuid) IS NULL OR t.parent_id = :p_parent)
  AND (CAST(:p_agent AS text) IS NULL OR t.agent ->> 'profile' = :p_agent)
ORDER BY e.id LIMIT :p_limit
""").bindparams(
        bindparam("p_tenant", type_=Text),
        bindparam("p_after", type_=BigInteger),
        bindparam("p_upto", type_=BigInteger),
        bindparam("p_context", type_=Text),
        bindparam("p_parent", type_=UUID(as_uuid=True)),
        bindparam("p_agent", type_=Text),
        bindparam("p_limit", type_=Integer),
    )
)


class EventLog:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def page(
        self, task_id: uuid.UUID, *, after: int, limit: int, types: frozenset[str] = frozenset()
    ) -> list[TaskEvent]:
        """A task's events with seq > `after`, in order (only of `types`, if any)."""
        params: dict[str, Any] = {"task_id": task_id, "after": after, "limit": limit}
        if types:
            rows = await self.db.fetch(_PAGE_OF_TYPES, params | {"types": sorted(types)})
        else:
            rows = await self.db.fetch(_PAGE, params)
        return [event_from_row(row) for row in rows]

    async def firehose(
        self, *, tenant: str, after: int, upto: int, filter: EventFilter, limit: int
    ) -> list[TaskEvent]:
        """A tenant's events with `after` < id <= `upto`, in global order."""
        params = {
            "p_tenant": tenant,
            "p_after": after,
            "p_upto": upto,
            "p_types": sorted(filter.types) or None,
            "p_states": sorted(filter.states) or None,
            "p_context": filter.context_id,
            "p_parent": filter.parent_id,
            "p_agent": filter.agent,
            "p_limit": limit,
        }
        return [event_from_row(row) for row in await self.db.fetch(_FIREHOSE, params)]

    async def ids_after(self, after: int, limit: int) -> list[int]:
        """Global event ids after `after`, in order, of every tenant (the watermark)."""
        rows = await self.db.fetch(_IDS_AFTER, {"p_after": after, "p_limit": limit})
        return [row["id"] for row in rows]

    async def latest_id(self) -> int:
        row = await self.db.fetchrow(_LATEST_ID, {})
        return int(row["id"]) if row is not None and row["id"] is not None else 0
