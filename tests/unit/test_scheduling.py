"""Cron slots in a time zone (cronsim) and what a due schedule fires after downtime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from taskservice.domain.errors import InvalidRequest
from taskservice.domain.schedules import MAX_CATCH_UP, Cron, check_priority, check_run_at, plan

RIGA = "Europe/Riga"  # DST: 2026-03-29 03:00 → 04:00, 2026-10-25 04:00 → 03:00


def test_slots_are_in_the_schedules_time_zone_and_returned_in_utc() -> None:
    cron = Cron.parse("0 9 * * MON-FRI", RIGA)
    friday = datetime(2026, 11, 27, 12, tzinfo=UTC)
    # Monday 09:00 in Riga (UTC+2 in winter), then Tuesday.
    assert cron.after(friday, 2) == [
        datetime(2026, 11, 30, 7, tzinfo=UTC),
        datetime(2026, 12, 1, 7, tzinfo=UTC),
    ]
    assert cron.describe() == "At 09:00 on Monday through Friday"


def test_daylight_saving_neither_skips_nor_doubles_a_daily_slot() -> None:
    cron = Cron.parse("30 3 * * *", RIGA)
    # 03:30 does not exist on 2026-03-29: that day's run is at the jump (04:00 EEST).
    spring = cron.after(datetime(2026, 3, 28, 12, tzinfo=UTC), 2)
    assert spring == [
        datetime(2026, 3, 29, 1, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]
    # 03:30 happens twice on 2026-10-25: one run.
    autumn = cron.after(datetime(2026, 10, 24, 12, tzinfo=UTC), 2)
    assert [s.date() for s in autumn] == [
        datetime(2026, 10, 25).date(),
        datetime(2026, 10, 26).date(),
    ]


@pytest.mark.parametrize(
    ("cron", "zone", "field"),
    [
        ("61 * * * *", "UTC", "cron"),
        ("* * * *", "UTC", "cron"),
        ("0 0 31 2 *", "UTC", "cron"),
        ("0 9 * * *", "Mars/Olympus", "timezone"),
        ("0 9 * * *", "../etc/passwd", "timezone"),
    ],
)
def test_a_bad_cron_or_zone_is_a_422_naming_it(cron: str, zone: str, field: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        Cron.parse(cron, zone)
    assert refused.value.extensions["field"] == field


def test_the_latest_slot_includes_the_moment_itself() -> None:
    cron = Cron.parse("*/2 * * * * *", "UTC")
    on_slot = datetime(2026, 11, 26, 9, 0, 2, tzinfo=UTC)
    assert cron.latest(on_slot) == on_slot
    assert cron.latest(on_slot + timedelta(seconds=1.5)) == on_slot


HOURLY = Cron.parse("0 * * * *", "UTC")
DOWN_SINCE = datetime(2026, 11, 26, 0, tzinfo=UTC)  # the slot that was due
NOW = datetime(2026, 11, 26, 5, 30, tzinfo=UTC)  # back up: five more slots passed
NEXT = datetime(2026, 11, 26, 6, tzinfo=UTC)


def test_missed_all_fires_every_slot_in_order() -> None:
    firing = plan(HOURLY, DOWN_SINCE, NOW, "all")
    assert firing.slots == [DOWN_SINCE + timedelta(hours=h) for h in range(6)]
    assert firing.next_run_at == NEXT


def test_missed_all_catches_up_in_bounded_passes() -> None:
    minutely = Cron.parse("* * * * *", "UTC")
    firing = plan(minutely, DOWN_SINCE, NOW, "all")
    assert len(firing.slots) == MAX_CATCH_UP
    assert firing.next_run_at == DOWN_SINCE + timedelta(minutes=MAX_CATCH_UP)  # still due


def test_missed_latest_fires_the_last_slot_once() -> None:
    firing = plan(HOURLY, DOWN_SINCE, NOW, "latest")
    assert firing.slots == [datetime(2026, 11, 26, 5, tzinfo=UTC)]
    assert firing.next_run_at == NEXT


def test_missed_skip_fires_only_a_slot_that_is_on_time() -> None:
    assert plan(HOURLY, DOWN_SINCE, NOW, "skip").slots == []
    just_late = datetime(2026, 11, 26, 5, 0, 3, tzinfo=UTC)
    firing = plan(HOURLY, DOWN_SINCE, just_late, "skip")
    assert firing.slots == [datetime(2026, 11, 26, 5, tzinfo=UTC)]
    assert firing.next_run_at == NEXT


def test_on_time_every_policy_fires_the_one_slot() -> None:
    slot = datetime(2026, 11, 26, 5, tzinfo=UTC)
    for missed in ("all", "latest", "skip"):
        firing = plan(HOURLY, slot, slot + timedelta(seconds=0.4), missed)  # type: ignore[arg-type]
        assert firing.slots == [slot]
        assert firing.next_run_at == NEXT


@pytest.mark.parametrize("value", [True, 1.5, "3", 1001, -1001, None])
def test_priority_is_an_integer_in_range(value: object) -> None:
    with pytest.raises(InvalidRequest):
        check_priority(value)


@pytest.mark.parametrize(
    "value", ["2026-12-01T09:00:00", "tomorrow", 5, "0001-01-01T00:00:00+14:00"]
)
def test_run_at_is_a_time_with_its_offset(value: object) -> None:
    with pytest.raises(InvalidRequest):
        check_run_at(value)


def test_run_at_is_kept_in_utc() -> None:
    assert check_run_at("2026-12-01T11:00:00+02:00") == datetime(2026, 12, 1, 9, tzinfo=UTC)
