"""Task rows as `domain/models.Task`: read back from any statement that returns
`tasks.*`, or made from a submit and the columns the database generated."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from taskservice.db.sql import Row
from taskservice.domain.models import AgentSpec, NewTask, Task
from taskservice.domain.states import TaskState


def task_from_row(row: Row) -> Task:
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
        timeout_seconds=row["timeout_seconds"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        cancel_reason=row["cancel_reason"],
        input_request=row["input_request"],
        usage=row["usage"],
        event_seq=row["event_seq"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        # A webhook snapshot from before migration 0007 has no status time.
        status_at=row["status_at"] or row["updated_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        # A webhook snapshot from before migration 0009 has no follow-ups.
        followups=row.get("followups", 0),
        followups_read=row.get("followups_read", 0),
        # A webhook snapshot from before migration 0012 has no `detached`.
        detached=row.get("detached", False),
        trace_context=row.get("trace_context"),
        # Before migration 0015: no priority, and run at once.
        priority=row.get("priority", 0),
        run_at=row.get("run_at") or row["created_at"],
        delayed=row.get("delayed", False),
        # Before migration 0018: no throttling, attempts lost counted by claims.
        wake_at=row.get("wake_at"),
        lost_attempts=row.get("lost_attempts", max(row["attempt"] - 1, 0)),
        paid_slot=row.get("paid") or row.get("paid_slot"),
        quiet=row.get("quiet", False),  # before migration 0019: none
        remote=row.get("remote"),
        forked_from=row.get("forked_from"),  # before migration 0022: none
        forked_at=row.get("forked_at"),
        paused=row.get("paused"),  # before migration 0023: none
        # Before migration 0027: none. A webhook snapshot's JSON has a number.
        max_cost=_decimal(row.get("max_cost")),
        max_tokens=row.get("max_tokens"),
    )


def _decimal(value: Any) -> Decimal | None:
    if value is None or isinstance(value, Decimal):
        return value
    return Decimal(str(value))


def pending_task(new: NewTask, row: Row) -> Task:
    """The task `create` just inserted, from the request and the generated columns."""
    return Task(
        id=row["id"],
        tenant=new.tenant,
        state=TaskState.PENDING,
        input=new.input,
        result=None,
        error=None,
        agent=new.agent,
        metadata=new.metadata,
        parent_id=new.parent_id,
        context_id=new.context_id,
        idempotency_key=new.idempotency_key,
        request_hash=new.request_hash,
        attempt=0,
        max_attempts=new.max_attempts,
        timeout_seconds=new.timeout_seconds,
        lease_owner=None,
        lease_expires_at=None,
        cancel_reason=None,
        input_request=None,
        usage={},
        created_at=row["created_at"],
        updated_at=row["created_at"],
        status_at=row["created_at"],
        started_at=None,
        finished_at=None,
        detached=new.detached,
        trace_context=new.trace_context,
        priority=new.priority,
        run_at=row["run_at"],
        delayed=row["delayed"],
        quiet=new.quiet,
        # A fork's ledger was written with it (`db/forks.py`): its events and
        # follow-up too.
        event_seq=row.get("event_seq", 1),
        followups=int(new.fork is not None and new.fork.followup),
        forked_from=new.fork.source if new.fork is not None else None,
        forked_at=new.fork.at if new.fork is not None else None,
        paused=row.get("paused"),
        max_cost=new.max_cost,
        max_tokens=new.max_tokens,
    )
