"""Decisions on tool calls that wait for a person's approval (`usecases/approvals.py`)
and the deadlines of tasks waiting for them.

A decision is written against the waiting task's `input_request` as it was read
(compare-and-set: a decision made meanwhile, a cancel or another answer, makes it
write nothing, and the use case reads again). While some calls are undecided, the
decisions so far are kept in `input_request` (each call's `decision`) with their
`approval` events; the decision that leaves none undecided moves the task to
`running` (claimable, without an owner), writes every decision to its call's row
(`task_calls.approval`; a denied call is failed with its reason) and the questions'
answers asked with them, in one transaction. So a worker that dies after the
decision finds it in the ledger, and one that dies before the call is made makes it
once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.dialects.postgresql import JSONB, TIMESTAMP, UUID
from sqlalchemy.types import Integer, Text

from taskservice.db.eventlog import BATCH_EVENTS, event_batch
from taskservice.db.sql import Database, Row, text_statement
from taskservice.db.tasks import answer_calls
from taskservice.domain.models import Task

# The waiting task as the decision was made against, scoped to the tenant.
_AS_READ = (
    "id = :p_id AND tenant = :p_tenant AND state = 'input_required' AND input_request = :p_expected"
)
_BINDS = {
    "p_id": UUID(as_uuid=True),
    "p_tenant": Text,
    "p_expected": JSONB,
    "p_events": JSONB,
    "p_log_cap": Integer,
}

# Some calls still undecided: the decisions so far, kept in the request.
_NOTE = text_statement(
    f"""
WITH {event_batch(where=_AS_READ, changes="input_request = :p_request, wake_at = :p_wake,")}, {
        BATCH_EVENTS
    }
SELECT count(*) AS n FROM t
""",
    p_request=JSONB,
    p_wake=TIMESTAMP(timezone=True),
    **_BINDS,
)

# The last decision: the task runs again, its request gone, its deadline too.
_RESUME = text_statement(
    f"""
WITH {
        event_batch(
            where=_AS_READ,
            changes="state = 'running', input_request = NULL, wake_at = NULL,",
        )
    }, {BATCH_EVENTS}
SELECT count(*) AS n FROM t
""",
    **_BINDS,
)

# Each decision on its call's row; a denied call is failed, saying why.
_RECORD = text_statement(
    """
UPDATE task_calls
SET approval = d.decision,
    status = CASE WHEN (d.decision ->> 'approved')::boolean THEN task_calls.status
                  ELSE 'failed' END,
    error = CASE WHEN (d.decision ->> 'approved')::boolean THEN task_calls.error
                 ELSE d.denial END,
    finished_at = CASE WHEN (d.decision ->> 'approved')::boolean THEN task_calls.finished_at
                       ELSE now() END
FROM jsonb_to_recordset(:p_decisions) AS d(id text, decision jsonb, denial text)
WHERE task_calls.task_id = :p_id AND task_calls.tool_call_id = d.id
""",
    p_id=UUID(as_uuid=True),
    p_decisions=JSONB,
)

# Tasks whose approval deadline has passed, the oldest first.
_DUE = text_statement(
    """
SELECT * FROM tasks
WHERE state = 'input_required' AND wake_at IS NOT NULL AND wake_at <= now()
ORDER BY wake_at LIMIT :p_limit
""",
    p_limit=Integer,
)

_NO_LOG_CAP = 1_000_000  # decisions write no `log` lines


class ApprovalStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def note(
        self,
        task: Task,
        *,
        request: dict[str, Any],
        events: Sequence[dict[str, Any]],
        wake_at: datetime | None,
    ) -> bool:
        """Keep the decisions so far in the task's `request` (still waiting, until
        `wake_at`), with their `events`. False: the task changed since it was read."""
        params = self._params(task, events) | {"p_request": request, "p_wake": wake_at}
        row = await self.db.fetchrow(_NOTE, params)
        return row is not None and row["n"] > 0

    async def resume(
        self,
        task: Task,
        *,
        decisions: Mapping[str, dict[str, Any]],
        answers: Mapping[str, str],
        events: Sequence[dict[str, Any]],
    ) -> bool:
        """The last decision: every call's decision on its row, the questions'
        answers on theirs, and the task back to `running`, in one transaction.
        False: the task changed since it was read (nothing is written)."""
        records = [
            {"id": call, "decision": decision, "denial": denial(decision)}
            for call, decision in decisions.items()
        ]
        async with self.db.connection() as conn, conn.transaction():
            row = await conn.fetchrow(_RESUME.sql, *_RESUME.args(self._params(task, events)))
            if row is None or row["n"] == 0:
                return False
            await conn.execute(
                _RECORD.sql, *_RECORD.args({"p_id": task.id, "p_decisions": records})
            )
            if answers:
                await answer_calls(conn, task.id, answers)
        return True

    async def due(self, *, limit: int = 20) -> list[Row]:
        """Waiting tasks whose approval deadline has passed."""
        return await self.db.fetch(_DUE, {"p_limit": limit})

    @staticmethod
    def _params(task: Task, events: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {
            "p_id": task.id,
            "p_tenant": task.tenant,
            "p_expected": task.input_request,
            "p_events": list(events),
            "p_log_cap": _NO_LOG_CAP,
        }


def denial(decision: Mapping[str, Any]) -> str | None:
    """What a denied call's row says (None: it was approved)."""
    if decision.get("approved"):
        return None
    reason, by = decision.get("reason"), decision.get("by")
    said = f"denied by {by}" if by not in (None, "open", "deadline") else "denied"
    return said + (f": {reason}" if reason else "")
