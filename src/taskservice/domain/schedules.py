"""When a task runs: its priority and the time it may start from, however they
arrive (a REST field, A2A message metadata, a schedule's template), and the slots
of recurring schedules (cron expressions in a time zone, with cronsim). Pure.

The claim takes a tenant's tasks highest priority first, then by `run_at`, then in
submission order (`db/claims.py`); tenants still share the workers evenly whatever
their priorities. A task submitted with a `run_at` in the future stays `pending`
(and `delayed`) until then; the scheduler (`worker/scheduler.py`) makes it claimable
within its tick of that time.

Four modules are named `schedules`, one concept seen from four layers: this one holds
schedules as values (`Schedule`, `Cron`, the slots `plan` gives), pure; they are stored
by `db/schedules.py`, made, checked and fired by `usecases/schedules.py` (on the
scheduler's tick, `worker/scheduler.py`), and served by `api/routes/schedules.py`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from taskservice.domain.errors import InvalidRequest

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000


def check_priority(value: Any, *, field: str = "priority") -> int:
    """An integer in [-1000, 1000] (bool is not one), else a 422 naming `field`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{field} must be an integer", field=field)
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InvalidRequest(
            f"{field} must be between {PRIORITY_MIN} and {PRIORITY_MAX}", field=field
        )
    return value


def check_run_at(value: Any, *, field: str = "run_at") -> datetime:
    """A date and time with its UTC offset: a `datetime`, or ISO 8601 text (JSON
    metadata). A naive time is refused: whose clock would it be on?"""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidRequest(
                f"{field} must be an ISO 8601 date and time, e.g. 2026-12-01T09:00:00Z",
                field=field,
            ) from None
    if not isinstance(value, datetime):
        raise InvalidRequest(f"{field} must be an ISO 8601 date and time", field=field)
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidRequest(
            f"{field} needs a UTC offset or Z (e.g. 2026-12-01T09:00:00Z)", field=field
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:  # year 1 east of UTC, year 9999 west of it
        raise InvalidRequest(f"{field} is out of range", field=field) from None


# -- recurring schedules ------------------------------------------------------------

# Slots a schedule with `missed: all` fires in one pass; the rest follow at the next.
MAX_CATCH_UP = 100
# With `missed: skip`, a slot fired at most this late still counts as on time (the
# scheduler ticks every half second; a database blip of a few seconds is no downtime).
ON_TIME = timedelta(seconds=60)
MissedPolicy = Literal["skip", "latest", "all"]


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron expression in a time zone: 5 fields (minute hour day month weekday), or
    6 with seconds first; DST handled as Debian's cron does (cronsim)."""

    expression: str
    timezone: str

    @classmethod
    def parse(cls, expression: str, timezone: str) -> Cron:
        """Or a 422 naming `cron` or `timezone`."""
        zone = _zone(timezone)
        if len(expression.split()) not in (5, 6):
            raise InvalidRequest(
                "cron needs 5 fields (minute hour day month weekday), or 6 with seconds first",
                field="cron",
            )
        try:
            CronSim(expression, datetime.now(zone))
        except CronSimError as exc:
            raise InvalidRequest(f"cron: {exc}", field="cron") from None
        return cls(expression, timezone)

    @property
    def zone(self) -> ZoneInfo:
        return _zone(self.timezone)

    def describe(self) -> str:
        """In words: "At 09:00 on Monday through Friday"."""
        try:
            return str(CronSim(self.expression, datetime.now(self.zone)).explain())
        except Exception:  # noqa: BLE001 - a description is a nicety, never an error
            return self.expression

    def after(self, moment: datetime, count: int = 1) -> list[datetime]:
        """The next `count` slots strictly after `moment`, in UTC."""
        slots = CronSim(self.expression, moment.astimezone(self.zone))
        return [next(slots).astimezone(UTC) for _ in range(count)]

    def latest(self, moment: datetime) -> datetime:
        """The last slot at or before `moment` (to the second), in UTC."""
        # Reversed from a time with microseconds, cronsim's first tick is that time
        # truncated to the second if it is a slot: so never miss `moment`'s own slot.
        start = moment.astimezone(self.zone).replace(microsecond=1)
        return next(CronSim(self.expression, start, reverse=True)).astimezone(UTC)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidRequest(
            f"unknown time zone {name!r} (an IANA name, e.g. Europe/Paris)", field="timezone"
        ) from None


@dataclass(frozen=True, slots=True)
class Firing:
    slots: list[datetime]  # to fire now, oldest first
    next_run_at: datetime  # the slot after them


def plan(cron: Cron, next_run_at: datetime, now: datetime, missed: MissedPolicy) -> Firing:
    """What a due schedule fires at `now`: its slots from `next_run_at` (itself a
    slot, at or before `now`) up to `now`. All are on time in normal running; after
    downtime `missed` decides: `all` fires each (at most MAX_CATCH_UP a pass), `latest`
    only the last, `skip` only the last and only if it is within ON_TIME of now."""
    if missed == "all":
        slots = [next_run_at]
        while len(slots) < MAX_CATCH_UP:
            [following] = cron.after(slots[-1])
            if following > now:
                return Firing(slots, following)
            slots.append(following)
        [following] = cron.after(slots[-1])
        return Firing(slots, following)  # a backlog: the rest at the next pass
    last = max(cron.latest(now), next_run_at)
    [following] = cron.after(max(last, now))
    if missed == "skip" and now - last > ON_TIME:
        return Firing([], following)
    return Firing([last], following)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring schedule as stored (`db/schedules.py`) and shown (`/v1/schedules`)."""

    id: uuid.UUID
    tenant: str
    name: str | None
    cron: str
    timezone: str
    task: dict[str, Any]  # the submit fields of each slot's task
    enabled: bool
    missed: MissedPolicy
    next_run_at: datetime | None  # None while disabled
    last_slot: datetime | None
    last_task_id: uuid.UUID | None
    last_error: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
