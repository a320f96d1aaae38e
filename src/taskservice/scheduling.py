"""When a task runs: its priority and the time it may start from, however they
arrive (a REST field, A2A message metadata, a schedule's template). Pure.

The claim takes a tenant's tasks highest priority first, then by `run_at`, then in
submission order (`db/leases.py`); tenants still share the workers evenly whatever
their priorities. A task submitted with a `run_at` in the future stays `pending`
(and `delayed`) until then; the scheduler (`worker/scheduler.py`) makes it claimable
within its tick of that time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from taskservice.errors import InvalidRequest

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
