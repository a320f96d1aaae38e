"""Retry timing: the schedule, jitter, Retry-After and its cap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from taskservice.settings import Settings
from taskservice.webhooks.http import parse_retry_after
from taskservice.worker.webhook_dispatcher import Dispatcher


def test_retry_after_is_read_as_seconds_or_as_an_http_date() -> None:
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    assert parse_retry_after("120") == 120
    assert (
        parse_retry_after(format_datetime(now + timedelta(seconds=90), usegmt=True), now=now) == 90
    )
    assert (
        parse_retry_after(format_datetime(now - timedelta(seconds=90), usegmt=True), now=now) == 0
    )
    for bad in (None, "", "soon", "-5", "1.5e3"):
        assert parse_retry_after(bad) is None


def delays(**settings: Any) -> Dispatcher:
    # next_delay reads only the settings; no database, hub or sender is used.
    dispatcher = Dispatcher.__new__(Dispatcher)
    dispatcher.settings = Settings(**settings)
    return dispatcher


def test_the_schedule_with_jitter_and_its_end() -> None:
    d = delays(webhook_retry_schedule=[0, 10, 100], webhook_jitter=0.2)
    assert d.next_delay(0, None) == 0
    samples = [d.next_delay(1, None) for _ in range(200)]
    assert all(s is not None and 8 <= s <= 12 for s in samples)
    assert len(set(samples)) > 1  # jittered
    assert d.next_delay(3, None) is None  # three attempts, all used


def test_retry_after_postpones_but_never_hastens_and_is_capped() -> None:
    d = delays(
        webhook_retry_schedule=[0, 10, 100],
        webhook_jitter=0,
        webhook_max_retry_after_seconds=3600,
    )
    assert d.next_delay(1, 60) == 60
    assert d.next_delay(1, 2) == 10
    assert d.next_delay(1, 10**9) == 3600
    assert d.next_delay(3, 60) is None


@pytest.mark.parametrize("schedule", ["", "5,-1"])
def test_an_unusable_schedule_is_refused(schedule: str) -> None:
    with pytest.raises(ValueError, match="retry schedule"):
        Settings(webhook_retry_schedule=schedule)
