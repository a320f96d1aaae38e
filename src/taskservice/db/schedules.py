"""The scheduler's SQL (`worker/scheduler.py`): tasks submitted for later become
claimable when their time comes.

`promote_due` clears `delayed` on pending tasks whose `run_at` has passed, putting
them in the claim index (`ix_tasks_claimable`). Any number of processes run it at
once: the rows are locked (not skipped), so a process that found its tasks taken
by another returns after that one committed, and a claim it then makes sees them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.types import Integer

from taskservice.db.sql import Database, text_statement

# Due tasks in bounded batches (the scheduler repeats while a batch was full), and
# how long until the next one not yet due, read in the same snapshot.
_PROMOTE = text_statement(
    """
WITH due AS (
    SELECT id FROM tasks
    WHERE state = 'pending' AND delayed AND run_at <= now()
    ORDER BY run_at
    LIMIT :limit
    FOR UPDATE
), promoted AS (
    UPDATE tasks SET delayed = false
    FROM due WHERE tasks.id = due.id AND tasks.state = 'pending' AND tasks.delayed
    RETURNING tasks.id
)
SELECT (SELECT count(*) FROM promoted) AS promoted,
       (SELECT extract(epoch FROM min(run_at) - now()) FROM tasks
        WHERE state = 'pending' AND delayed AND run_at > now()) AS next_in
""",
    limit=Integer,
)


@dataclass(frozen=True, slots=True)
class Promoted:
    count: int  # tasks made claimable
    full: bool  # the batch was full: more may be due
    next_in: float | None  # seconds until the next delayed task is due; None: none


class ScheduleStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def promote_due(self, *, limit: int = 1000) -> Promoted:
        row = await self.db.fetchrow(_PROMOTE, {"limit": limit})
        assert row is not None
        count = int(row["promoted"])
        next_in = row["next_in"]
        return Promoted(count, count >= limit, float(next_in) if next_in is not None else None)
