"""Pages of a tenant's tasks (`GET /v1/tasks`) and their counts: the statements,
built once per shape of filter.

A state filter pages through one ordered scan of `(tenant, state, id)` per state,
merged (Merge Append): each reads at most a page, whatever the share of those states
among the tenant's tasks. The states are inlined (a known state only), so the
generic plan a prepared statement ends up on still knows them: with `state =
ANY($2)` it scanned the primary key backwards through every finished task.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple

from sqlalchemy import Integer, Text
from sqlalchemy.dialects.postgresql import TIMESTAMP, UUID

from taskservice.db.sql import Statement, text_statement
from taskservice.domain.ids import uuid7_floor
from taskservice.domain.models import TaskFilter
from taskservice.domain.states import TaskState

_UUID = UUID(as_uuid=True)
_FILTER_BINDS: dict[str, Any] = {
    "tenant": Text(),
    "parent_id": _UUID,
    "context_id": Text(),
    "agent": Text(),
    "forked_from": _UUID,
    "created_after": TIMESTAMP(timezone=True),
    "created_before": TIMESTAMP(timezone=True),
    "created_after_id": _UUID,
    "created_before_id": _UUID,
    "before_id": _UUID,
    "limit": Integer(),
    "state": Text(),
    "status_after": TIMESTAMP(timezone=True),
    "cursor_at": TIMESTAMP(timezone=True),
    "cursor_id": _UUID,
}


class Shape(NamedTuple):
    """Which of a list's filters are set (a statement is built once per shape);
    `paused`: None (either), True (held now) or False (not held)."""

    states: tuple[str, ...] = ()
    parent: bool = False
    context: bool = False
    after: bool = False
    before: bool = False
    agent: bool = False
    forked: bool = False
    paused: bool | None = None


# A task held by a pause: the flag set, and not finished.
_HELD = "paused IS NOT NULL AND state IN ('pending', 'running', 'input_required')"


def _filters(shape: Shape) -> list[str]:
    """A tenant's tasks, filtered (the conditions a page and its count share). The
    agent profile's condition is the expression of `ix_tasks_tenant_agent_id`. Paused
    means held now: a live task with the flag (a finished task keeps the flag it
    ended with, and is not held); they are read from `ix_tasks_tenant_paused_id`
    (inlined, so that a generic plan knows it), those not held are nearly every task
    (read through the others)."""
    conditions = ["tenant = :tenant"]
    if shape.paused is not None:
        conditions.append(f"({_HELD})" if shape.paused else f"NOT ({_HELD})")
    if shape.parent:
        conditions.append("parent_id = :parent_id")
    if shape.context:
        conditions.append("context_id = :context_id")
    if shape.agent:
        conditions.append("agent ->> 'profile' = :agent")
    if shape.forked:  # `ix_tasks_forked_from`
        conditions.append("forked_from = :forked_from")
    # A creation time is also a range of ids (UUIDv7: time-ordered), so that an old
    # window is an index range, not a walk through every newer task; the exact
    # condition is on created_at (the id's clock is the API process's).
    if shape.after:
        conditions.append("created_at >= :created_after AND id >= :created_after_id")
    if shape.before:
        conditions.append("created_at < :created_before AND id < :created_before_id")
    return conditions


def _state_literal(state: str) -> str:
    return f"'{TaskState(state).value}'"  # a known state only: safe to inline


def _binds(sql: str) -> tuple[tuple[str, Any], ...]:
    return tuple((name, kind) for name, kind in _FILTER_BINDS.items() if f":{name}" in sql)


@lru_cache(maxsize=256)
def list_statement(shape: Shape, cursor: bool) -> Statement:
    """Newest first, `:limit` of them, older than `:before_id` with a cursor."""
    states = shape.states
    conditions = _filters(shape)
    if cursor:
        conditions.append("id < :before_id")
    where = " AND ".join(conditions)
    if not states:
        sql = f"SELECT * FROM tasks WHERE {where} ORDER BY id DESC LIMIT :limit"
    else:
        branches = [
            f"(SELECT * FROM tasks WHERE {where} AND state = {_state_literal(state)} "
            "ORDER BY id DESC LIMIT :limit)"
            for state in states
        ]
        sql = f"SELECT * FROM ({' UNION ALL '.join(branches)}) page ORDER BY id DESC LIMIT :limit"
    return text_statement(sql, **dict(_binds(sql)))


def count_query(shape: Shape) -> tuple[str, tuple[tuple[str, Any], ...]]:
    conditions = _filters(shape)
    if shape.states:
        conditions.append(f"state IN ({', '.join(_state_literal(s) for s in shape.states)})")
    from_where = f"FROM tasks WHERE {' AND '.join(conditions)}"
    return from_where, _binds(from_where)


def shape(filter: TaskFilter) -> Shape:
    return Shape(
        states=tuple(sorted(s.value for s in filter.states)),
        parent=filter.parent_id is not None,
        context=filter.context_id is not None,
        after=filter.created_after is not None,
        before=filter.created_before is not None,
        agent=filter.agent is not None,
        forked=filter.forked_from is not None,
        paused=filter.paused,
    )


def filter_params(tenant: str, filter: TaskFilter) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "parent_id": filter.parent_id,
        "context_id": filter.context_id,
        "agent": filter.agent,
        "forked_from": filter.forked_from,
        "created_after": filter.created_after,
        "created_before": filter.created_before,
        "created_after_id": _id_bound(filter.created_after, -CLOCK_MARGIN),
        "created_before_id": _id_bound(filter.created_before, CLOCK_MARGIN),
    }


# How far a task's id time may be from its created_at: the API process's clock
# against the database's, and a submit's wait for its batch.
CLOCK_MARGIN = timedelta(minutes=5)


def _id_bound(moment: datetime | None, margin: timedelta) -> uuid.UUID | None:
    if moment is None:
        return None
    try:
        return uuid7_floor(moment + margin)
    except OverflowError:  # near year 1 or 9999: no bound but the ends of time
        return uuid.UUID(int=0) if margin < timedelta(0) else uuid.UUID(int=(1 << 128) - 1)


def _by_status(state: bool, context: bool, after: bool) -> list[str]:
    conditions = _filters(Shape(context=context))
    if state:
        conditions.append("state = :state")
    if after:
        conditions.append("status_at >= :status_after")
    return conditions


@lru_cache(maxsize=32)
def status_list_statement(state: bool, context: bool, after: bool, cursor: bool) -> Statement:
    """A2A's ListTasks: by the time the state last changed, newest first (an ordered
    scan of `(tenant, status_at, id)` backwards); after `(:cursor_at, :cursor_id)`."""
    conditions = _by_status(state, context, after)
    if cursor:
        conditions.append("(status_at, id) < (:cursor_at, :cursor_id)")
    sql = (
        f"SELECT * FROM tasks WHERE {' AND '.join(conditions)} "
        "ORDER BY status_at DESC, id DESC LIMIT :limit"
    )
    return text_statement(sql, **dict(_binds(sql)))


def status_count_query(
    state: bool, context: bool, after: bool
) -> tuple[str, tuple[tuple[str, Any], ...]]:
    from_where = f"FROM tasks WHERE {' AND '.join(_by_status(state, context, after))}"
    return from_where, _binds(from_where)
