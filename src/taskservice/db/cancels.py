"""Cascading cancel: a task's live subtree cancelled in one statement (a parent
cancelled, failed or timed out takes its live subtasks along, but the detached and
theirs), each with its `state_change` event, and the reaper's backstop for parents
that ended while no process was up to do it. `db.tasks.TaskStore` runs them."""

from __future__ import annotations

from sqlalchemy import Integer, Text, bindparam, text
from sqlalchemy.dialects.postgresql import UUID

from taskservice.db.eventlog import NEXT_SEQ, append_events
from taskservice.db.sql import Statement

_CASCADE_EVENT = append_events(
    type="'state_change'",
    data="""jsonb_build_object('from', t.prior_state, 'to', 'cancelled',
                  'reason', t.cancel_reason, 'cause', t.cause, 'parent_id', t.parent_id)""",
)


def cancel_tree(roots: str) -> str:
    """Cancel the live tasks `roots` selects (`id`, `cause`, `reason`) and every live
    task below them, at any depth, except below a detached one (each with its event:
    `cause` for a root, `parent_cancelled` further down; the root's reason). FOR
    UPDATE re-reads a row changed meanwhile, so a task that completed a moment ago
    is left alone."""
    return f"""
WITH RECURSIVE roots AS (
{roots}
),
tree AS (
    SELECT id, cause, reason FROM roots
    UNION
    SELECT tasks.id, 'parent_cancelled'::text, tree.reason
    FROM tasks JOIN tree ON tasks.parent_id = tree.id
    WHERE NOT tasks.detached
),
live AS (
    SELECT tasks.id, tasks.state AS prior_state, tree.cause, tree.reason
    FROM tasks JOIN tree ON tasks.id = tree.id
    WHERE tasks.state IN ('pending', 'running', 'input_required')
    FOR UPDATE OF tasks
),
t AS (
    UPDATE tasks SET state = 'cancelled', cancel_reason = live.reason,
                     finished_at = now(), updated_at = now(),
                     lease_owner = NULL, lease_expires_at = NULL, {NEXT_SEQ}
    FROM live WHERE tasks.id = live.id AND tasks.state = live.prior_state
    RETURNING tasks.id, tasks.tenant, tasks.event_seq, tasks.parent_id, tasks.cancel_reason,
              live.prior_state, live.cause
)
{_CASCADE_EVENT}
"""


# The live subtasks of a task that ended (cancelled, failed, timed out), but those
# spawned detached, with theirs.
CANCEL_SUBTASKS = Statement(
    text(
        cancel_tree("""
    SELECT id, CAST(:v_cause AS text) AS cause, CAST(:v_cancel_reason AS text) AS reason
    FROM tasks WHERE parent_id = :p_id AND NOT detached""")
    ).bindparams(
        bindparam("p_id", type_=UUID(as_uuid=True)),
        bindparam("v_cancel_reason", type_=Text),
        bindparam("v_cause", type_=Text),
    )
)
# The reaper's backstop: live subtasks (not detached) of a parent that ended failed or
# cancelled without taking them along (it ended while no process was up to, or a
# subtask was spawned as its parent ended). Read through ix_tasks_live_state.
CANCEL_ORPHANS = Statement(
    text(
        cancel_tree("""
    SELECT c.id,
           CASE WHEN p.state = 'cancelled' THEN 'parent_cancelled'
                WHEN p.error ->> 'type' = 'timeout' THEN 'parent_timeout'
                ELSE 'parent_failed' END AS cause,
           CASE WHEN p.state = 'cancelled' THEN p.cancel_reason
                WHEN p.error ->> 'type' = 'timeout' THEN 'its parent task timed out'
                ELSE 'its parent task failed' END AS reason
    FROM tasks c JOIN tasks p ON p.id = c.parent_id
    WHERE c.state IN ('pending', 'running', 'input_required') AND NOT c.detached
      AND p.state IN ('failed', 'cancelled')
    ORDER BY c.id
    LIMIT :p_limit""")
    ).bindparams(bindparam("p_limit", type_=Integer))
)


FAIL_OPEN_CALLS = Statement(
    text("""
UPDATE task_calls SET status = 'failed', error = 'cancelled', finished_at = now()
WHERE task_id = ANY(CAST(:p_ids AS uuid[])) AND status IN ('pending', 'in_progress')
""")
)
