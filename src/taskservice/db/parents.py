"""Parents and their subtasks: a parent parked on its subtasks (`input_required`,
kind "subtasks") resumes when the last of them finishes, its wait call completed
with their outcomes (`LedgerStore.resume_parents`)."""

from __future__ import annotations

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import UUID

from taskservice.db.eventlog import NEXT_SEQ, append_events
from taskservice.db.sql import Statement

CHILDREN = Statement(
    text(
        "SELECT id, state, result, error, metadata -> 'spawned_by' ->> 'tool_call_id' AS call "
        "FROM tasks WHERE parent_id = :p_id ORDER BY id"
    ).bindparams(bindparam("p_id", type_=UUID(as_uuid=True)))
)

_RESUMED_EVENT = append_events(
    type="'state_change'",
    data="""jsonb_build_object('from', 'input_required', 'to', 'running',
                  'cause', 'subtasks_finished')""",
)
# Parents parked on their subtasks (input_required, kind "subtasks") whose subtasks
# have all finished go back to running, ownerless (claimable); their wait call is
# completed with the subtasks' outcomes, which the resumed run hands the model.
RESUME_PARENTS = Statement(
    text(f"""
WITH ready AS (
    SELECT p.id, p.input_request ->> 'call_id' AS call_id
    FROM tasks p
    WHERE p.state = 'input_required' AND p.input_request ->> 'kind' = 'subtasks'
      AND (CAST(:p_parent AS uuid) IS NULL OR p.id = :p_parent)
      AND NOT EXISTS (
          SELECT 1 FROM tasks c
          WHERE c.parent_id = p.id AND c.state NOT IN ('completed', 'failed', 'cancelled'))
    FOR UPDATE OF p SKIP LOCKED
),
outcomes AS (
    SELECT ready.id AS parent_id,
           jsonb_agg(jsonb_build_object('id', c.id, 'state', c.state,
                                        'result', c.result, 'error', c.error,
                                        'call', c.metadata -> 'spawned_by' ->> 'tool_call_id')
                     ORDER BY c.id) AS subtasks
    FROM ready JOIN tasks c ON c.parent_id = ready.id
    GROUP BY ready.id
),
t AS (
    UPDATE tasks SET state = 'running', input_request = NULL, updated_at = now(), {NEXT_SEQ}
    FROM ready WHERE tasks.id = ready.id AND tasks.state = 'input_required'
    RETURNING tasks.id, tasks.tenant, tasks.event_seq, ready.call_id
),
calls AS (
    UPDATE task_calls SET status = 'completed', finished_at = now(),
                          result = coalesce(outcomes.subtasks, '[]'::jsonb)
    FROM t LEFT JOIN outcomes ON outcomes.parent_id = t.id
    WHERE task_calls.task_id = t.id AND task_calls.tool_call_id = t.call_id
    RETURNING task_calls.task_id
)
{_RESUMED_EVENT}
""").bindparams(bindparam("p_parent", type_=UUID(as_uuid=True)))
)
