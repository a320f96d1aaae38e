"""Recurring schedules (`/v1/schedules`): a cron expression in a time zone and the
task each of its slots starts, checked like a submit when the schedule is made and
again when a slot fires (the catalog may have changed meanwhile).

A slot's task is an ordinary task: the template's fields, `metadata.scheduled_by`
naming the schedule and the slot, and the idempotency key `schedule:<id>:<slot>`,
which makes a slot's task unique per tenant. Missed slots (no process was up)
follow the schedule's `missed` policy (`domain/schedules.plan`). A disabled schedule has
no next run; enabled again, it goes on from its next slot after now (the slots
while it was off are not made up).

Four modules are named `schedules`, one concept seen from four layers: this one is the
use case; the values and the slot arithmetic are `domain/schedules.py`, the SQL
`db/schedules.py`, the REST routes `api/routes/schedules.py`, and the scheduler that
calls `fire_due` is `worker/scheduler.py`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from taskservice.db.schedules import NameTaken, ScheduleStore
from taskservice.db.tasks import task_params
from taskservice.domain.errors import (
    BudgetExhausted,
    Conflict,
    InvalidRequest,
    NotFound,
    ServiceError,
)
from taskservice.domain.ids import parse_uuid, uuid7
from taskservice.domain.models import NewTask
from taskservice.domain.requests import TaskRequest
from taskservice.domain.schedules import Cron, MissedPolicy, Schedule, plan
from taskservice.usecases.submission import NewTasks

log = logging.getLogger(__name__)

UPCOMING = 5  # next run times shown with a schedule


class ScheduleService:
    def __init__(self, store: ScheduleStore, new_tasks: NewTasks) -> None:
        self.store = store
        self.new_tasks = new_tasks

    async def create(
        self,
        *,
        tenant: str,
        cron: str,
        timezone: str,
        task: dict[str, Any],
        name: str | None = None,
        enabled: bool = True,
        missed: MissedPolicy = "latest",
    ) -> Schedule:
        parsed = Cron.parse(cron, timezone)
        await self._check_template(tenant, task)
        params = {
            "id": uuid7(),
            "tenant": tenant,
            "name": name,
            "cron": cron,
            "timezone": timezone,
            "task": task,
            "enabled": enabled,
            "missed": missed,
            "next_run_at": parsed.after(datetime.now(UTC))[0] if enabled else None,
        }
        try:
            return await self.store.create(params)
        except NameTaken:
            raise Conflict(f"a schedule named {name!r} exists", field="name") from None

    async def get(self, *, tenant: str, schedule_id: str) -> Schedule:
        parsed = parse_uuid(schedule_id)
        found = await self.store.get(parsed, tenant=tenant) if parsed else None
        if found is None:
            raise NotFound(f"schedule {schedule_id} not found")
        return found

    async def page(self, *, tenant: str, before: uuid.UUID | None, limit: int) -> list[Schedule]:
        return await self.store.list(tenant=tenant, before=before, limit=limit)

    async def update(
        self, *, tenant: str, schedule_id: str, changes: Mapping[str, Any]
    ) -> Schedule:
        """`changes`: the fields given (a null `name` clears it). A new cron, time
        zone or enabling starts from the next slot after now."""
        current = await self.get(tenant=tenant, schedule_id=schedule_id)
        changes = dict(changes)
        for field, value in changes.items():
            if value is None and field != "name":
                raise InvalidRequest(
                    f"{field} cannot be null (leave it out to keep it)", field=field
                )
        parsed = Cron.parse(
            changes.get("cron", current.cron), changes.get("timezone", current.timezone)
        )
        if "task" in changes:
            await self._check_template(tenant, changes["task"])
        enabled = changes.get("enabled", current.enabled)
        if {"cron", "timezone", "enabled"} & changes.keys():
            changes["next_run_at"] = parsed.after(datetime.now(UTC))[0] if enabled else None
        try:
            updated = await self.store.update(current.id, tenant=tenant, changes=changes)
        except NameTaken:
            raise Conflict(f"a schedule named {changes['name']!r} exists", field="name") from None
        if updated is None:  # deleted meanwhile
            raise NotFound(f"schedule {schedule_id} not found")
        return updated

    async def delete(self, *, tenant: str, schedule_id: str) -> None:
        parsed = parse_uuid(schedule_id)
        if parsed is None or not await self.store.delete(parsed, tenant=tenant):
            raise NotFound(f"schedule {schedule_id} not found")

    def upcoming(self, schedule: Schedule, count: int = UPCOMING) -> list[datetime]:
        """The next `count` run times (none while disabled)."""
        if schedule.next_run_at is None:
            return []
        first = schedule.next_run_at
        return [first, *Cron(schedule.cron, schedule.timezone).after(first, count - 1)]

    async def fire_due(self) -> int:
        """Start the slots of the schedules due now (called by the scheduler in every
        process; each due schedule is fired by one). Returns the tasks started."""
        started = 0
        async with self.store.due() as due:
            for schedule in due.schedules:
                assert due.now is not None
                assert schedule.next_run_at is not None  # due: enabled
                cron = Cron(schedule.cron, schedule.timezone)
                firing = plan(cron, schedule.next_run_at, due.now, schedule.missed)
                error = None
                try:
                    tasks = [task_params(await self._slot_task(schedule, s)) for s in firing.slots]
                except BudgetExhausted as exc:  # the tenant's budget: wait for its next period
                    until = due.now + timedelta(seconds=exc.retry_after)
                    await due.hold(schedule, until=until, error={"detail": exc.detail})
                    continue
                except ServiceError as exc:  # the template no longer holds (a profile gone)
                    log.warning("schedule %s: slot not started: %s", schedule.id, exc.detail)
                    tasks, error = [], {"detail": exc.detail, **exc.extensions}
                await due.fire(
                    schedule,
                    tasks,
                    slots=firing.slots if tasks else [],
                    next_run_at=firing.next_run_at,
                    error=error,
                )
                started += len(tasks)
        return started

    async def _slot_task(self, schedule: Schedule, slot: datetime) -> NewTask:
        template = dict(schedule.task)
        metadata = dict(template.pop("metadata", None) or {})
        metadata["scheduled_by"] = {"schedule_id": str(schedule.id), "slot": slot.isoformat()}
        request = TaskRequest(
            tenant=schedule.tenant,
            **template,
            metadata=metadata,
            idempotency_key=f"schedule:{schedule.id}:{slot.isoformat()}",
        )
        return await self.new_tasks.prepare(request)

    async def _check_template(self, tenant: str, task: dict[str, Any]) -> None:
        try:
            await self.new_tasks.prepare(TaskRequest(tenant=tenant, **task))
        except InvalidRequest as exc:
            field = exc.extensions.get("field")
            exc.extensions["field"] = f"task.{field}" if field else "task"
            raise
