"""Recurring schedules: `/v1/schedules` (`usecases/schedules.ScheduleService`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from taskservice.api.deps import Caller
from taskservice.api.errors import problem_responses
from taskservice.api.schedule_schemas import (
    ScheduleCreate,
    ScheduleList,
    ScheduleOut,
    ScheduleUpdate,
)
from taskservice.domain.ids import decode_cursor, encode_cursor
from taskservice.domain.schedules import Schedule

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])

Limit = Annotated[int | None, Query(ge=1, description="Capped by the server.")]
Cursor = Annotated[str | None, Query(description="`next_cursor` of the previous page.")]


def _out(caller: Caller, schedule: Schedule) -> ScheduleOut:
    return ScheduleOut.of(schedule, caller.schedules.upcoming(schedule))


@router.post(
    "",
    operation_id="createSchedule",
    status_code=status.HTTP_201_CREATED,
    response_model=ScheduleOut,
    responses=problem_responses(401, 409, 413, 422),
    summary="Create a recurring schedule",
    description="Each slot of `cron` in `timezone` starts one task from `task`, exactly "
    "once across replicas. The task carries `metadata.scheduled_by` (schedule id and slot).",
)
async def create_schedule(body: ScheduleCreate, caller: Caller, response: Response) -> ScheduleOut:
    schedule = await caller.schedules.create(
        tenant=caller.tenant,
        name=body.name,
        cron=body.cron,
        timezone=body.timezone,
        task=body.task.model_dump(mode="json", exclude_defaults=True),
        enabled=body.enabled,
        missed=body.missed,
    )
    response.headers["Location"] = f"/v1/schedules/{schedule.id}"
    return _out(caller, schedule)


@router.get(
    "",
    operation_id="listSchedules",
    response_model=ScheduleList,
    responses=problem_responses(401, 422),
    summary="List schedules, newest first",
)
async def list_schedules(
    caller: Caller, cursor: Cursor = None, limit: Limit = None
) -> ScheduleList:
    size = caller.service.page_size(limit)
    found = await caller.schedules.page(
        tenant=caller.tenant, before=decode_cursor(cursor) if cursor else None, limit=size
    )
    items = [_out(caller, s) for s in found]
    last = encode_cursor(items[-1].id) if len(items) == size else None
    return ScheduleList(schedules=items, next_cursor=last)


@router.get(
    "/{schedule_id}",
    operation_id="getSchedule",
    response_model=ScheduleOut,
    responses=problem_responses(401, 404),
    summary="Get a schedule, with its next run times",
)
async def get_schedule(schedule_id: str, caller: Caller) -> ScheduleOut:
    return _out(caller, await caller.schedules.get(tenant=caller.tenant, schedule_id=schedule_id))


@router.patch(
    "/{schedule_id}",
    operation_id="updateSchedule",
    response_model=ScheduleOut,
    responses=problem_responses(401, 404, 409, 413, 422),
    summary="Change a schedule, or enable or disable it",
)
async def update_schedule(schedule_id: str, body: ScheduleUpdate, caller: Caller) -> ScheduleOut:
    changes = body.model_dump(mode="json", exclude_unset=True, exclude={"task"})
    if "task" in body.model_fields_set:  # a null one is refused with the others
        task = body.task
        changes["task"] = task.model_dump(mode="json", exclude_defaults=True) if task else None
    schedule = await caller.schedules.update(
        tenant=caller.tenant, schedule_id=schedule_id, changes=changes
    )
    return _out(caller, schedule)


@router.delete(
    "/{schedule_id}",
    operation_id="deleteSchedule",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=problem_responses(401, 404),
    summary="Delete a schedule (the tasks it started stay)",
)
async def delete_schedule(schedule_id: str, caller: Caller) -> Response:
    await caller.schedules.delete(tenant=caller.tenant, schedule_id=schedule_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
