"""Bodies of `/v1/schedules`: a cron expression in a time zone, the task each slot
starts, and what happens to slots missed while no process was up."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, Field

from taskservice.api.schemas import Request, TaskTemplate
from taskservice.domain.schedules import Cron, MissedPolicy, Schedule

_CRON = (
    "Five fields (minute hour day-of-month month day-of-week), or six with seconds "
    "first; names (`MON`, `JAN`), ranges, steps and lists as in cron. In `timezone`, "
    "with daylight saving handled as Debian's cron does."
)
_MISSED = (
    "Slots that passed while no process was up: `latest` (default) starts one task "
    "for the last of them, `all` one per slot (in order, 100 per pass), `skip` none "
    "(only a slot less than a minute late still starts)."
)


class ScheduleCreate(Request):
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Unique per tenant when given (a second one with it is 409).",
    )
    cron: str = Field(min_length=1, max_length=200, description=_CRON, examples=["0 9 * * MON-FRI"])
    timezone: str = Field(
        default="UTC",
        min_length=1,
        max_length=100,
        description="An IANA time zone.",
        examples=["Europe/Paris"],
    )
    task: TaskTemplate = Field(description="The task each slot starts; checked like a submit.")
    enabled: bool = True
    missed: MissedPolicy = Field(default="latest", description=_MISSED)


class ScheduleUpdate(Request):
    """Only the fields given change. A new cron, time zone or `enabled` starts from the
    next slot after now."""

    name: str | None = Field(default=None, min_length=1, max_length=200)
    cron: str | None = Field(default=None, min_length=1, max_length=200)
    timezone: str | None = Field(default=None, min_length=1, max_length=100)
    task: TaskTemplate | None = None
    enabled: bool | None = None
    missed: MissedPolicy | None = None


class ScheduleOut(BaseModel):
    id: uuid.UUID
    name: str | None
    cron: str
    timezone: str
    description: str = Field(description="The cron expression in words.")
    task: dict[str, Any]
    enabled: bool
    missed: MissedPolicy
    next_run_at: datetime | None = Field(description="The next slot; null while disabled.")
    next_runs: list[datetime] = Field(description="The next few slots, from `next_run_at`.")
    last_slot: datetime | None = Field(description="The last slot that started a task.")
    last_task_id: uuid.UUID | None = Field(description="The task it started.")
    last_error: dict[str, Any] | None = Field(
        description="Why the last slot due started no task (its template no longer "
        "holds, e.g. a profile removed); null once one starts again."
    )
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, schedule: Schedule, upcoming: list[datetime]) -> Self:
        return cls(
            id=schedule.id,
            name=schedule.name,
            cron=schedule.cron,
            timezone=schedule.timezone,
            description=Cron(schedule.cron, schedule.timezone).describe(),
            task=schedule.task,
            enabled=schedule.enabled,
            missed=schedule.missed,
            next_run_at=schedule.next_run_at,
            next_runs=upcoming,
            last_slot=schedule.last_slot,
            last_task_id=schedule.last_task_id,
            last_error=schedule.last_error,
            created_at=schedule.created_at,
            updated_at=schedule.updated_at,
        )


class ScheduleList(BaseModel):
    schedules: list[ScheduleOut]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next (older) page; null on the last page."
    )
