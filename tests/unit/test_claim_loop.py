"""`ClaimLoop`, shared by the worker pool and the webhook dispatcher: claims up to
the free slots, again while a claim says more may be left, then sleeps until woken;
a database failure is retried; an unexpected error is logged at once."""

from __future__ import annotations

import asyncio
import logging

import pytest

from taskservice.domain.errors import DatabaseUnavailable
from taskservice.worker import claims
from taskservice.worker.claims import ClaimLoop


def backlog_loop(
    items: int, capacity: int, per_claim: int | None = None
) -> tuple[ClaimLoop[int], list[int], set[int]]:
    """A loop over a backlog of `items`, with `capacity` slots, a claim taking at most
    `per_claim` (a tenant's share) and saying whether any are left: the loop, the
    limits each claim asked for, and what is running."""
    backlog = list(range(items))
    asked: list[int] = []
    running: set[int] = set()

    async def claim(limit: int) -> tuple[list[int], bool]:
        asked.append(limit)
        n = min(limit, per_claim or limit)
        taken, backlog[:] = backlog[:n], backlog[n:]
        return taken, bool(backlog)

    loop = ClaimLoop(
        "test claim",
        capacity=capacity,
        busy=lambda: len(running),
        claim=claim,
        start=running.add,
        poll_interval=60,
    )
    return loop, asked, running


async def test_it_claims_up_to_the_free_slots_until_none_come_back_then_waits() -> None:
    loop, asked, running = backlog_loop(7, capacity=3)
    loop.start()
    try:
        await asyncio.sleep(0.05)
        assert running == {0, 1, 2}  # three slots: three started, none asked beyond
        assert asked == [3]  # full: no claim until a slot frees and wakes the loop
        running.clear()
        loop.wake()
        await asyncio.sleep(0.05)
        assert running == {3, 4, 5}
        running.discard(3)
        loop.wake()
        await asyncio.sleep(0.05)
        assert running == {4, 5, 6}
        running.clear()
        loop.wake()
        await asyncio.sleep(0.05)
        assert asked == [3, 3, 1, 3]  # the last claim found nothing: it sleeps now
    finally:
        await loop.stop()


async def test_it_claims_again_at_once_only_while_a_claim_says_more_may_be_left() -> None:
    loop, asked, running = backlog_loop(5, capacity=10, per_claim=2)
    loop.start()
    try:
        await asyncio.sleep(0.05)
        assert running == {0, 1, 2, 3, 4}
        assert asked == [10, 8, 6]  # the third took the last: no claim to find nothing
        loop.wake()
        await asyncio.sleep(0.05)
        assert asked == [10, 8, 6, 5]  # woken (something announced): it looks
    finally:
        await loop.stop()


async def test_a_freed_slot_claims_again_only_when_the_last_claim_was_held_back() -> None:
    loop, asked, running = backlog_loop(4, capacity=3)
    loop.start()
    try:
        await asyncio.sleep(0.05)
        assert asked == [3]  # held back by its three slots
        running.discard(0)
        loop.freed()
        await asyncio.sleep(0.05)
        assert running == {1, 2, 3}
        assert asked == [3, 1]  # a slot freed while work waited: claimed at once
        running.clear()
        loop.freed()
        await asyncio.sleep(0.05)
        assert asked == [3, 1, 3]  # held back before: a freed slot looks (none left)
        loop.freed()
        await asyncio.sleep(0.05)
        assert asked == [3, 1, 3]  # it took all there was: a freed slot asks nothing
    finally:
        await loop.stop()


async def test_a_database_failure_is_retried_and_an_unexpected_error_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(claims, "RETRY_DELAY", 0.01)
    calls = 0
    started: list[str] = []

    async def claim(limit: int) -> tuple[list[str], bool]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise DatabaseUnavailable("the database went away")
        if calls == 2:
            return ["after the outage"], True
        raise RuntimeError("a bug")

    loop = ClaimLoop(
        "test claim",
        capacity=4,
        busy=lambda: 0,
        claim=claim,
        start=started.append,
        poll_interval=60,
    )
    with caplog.at_level(logging.ERROR, logger="taskservice.worker.claims"):
        loop.start()
        await asyncio.sleep(0.2)
        assert started == ["after the outage"]
        assert calls == 3
        assert "test claim stopped" in caplog.text
        assert "a bug" in caplog.text
    await loop.stop()
