"""`Flag` and the watchers' shared ticker: wake-ups at a due time without a timer per
watcher, and notices that are not lost between waits."""

from __future__ import annotations

import asyncio
import uuid

from taskservice.following.hub import EventHub, Flag, TaskWatchers


async def test_a_set_flag_does_not_wait_until_cleared() -> None:
    flag = Flag()
    flag.set()
    await asyncio.wait_for(flag.wait(), 0.1)
    await asyncio.wait_for(flag.wait(), 0.1)  # still set
    flag.clear()
    waiting = asyncio.create_task(flag.wait())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    flag.set()
    await asyncio.wait_for(waiting, 0.1)


async def test_wake_ends_a_wait_without_setting() -> None:
    flag = Flag()
    waiting = asyncio.create_task(flag.wait())
    await asyncio.sleep(0)
    flag.wake()
    await asyncio.wait_for(waiting, 0.1)
    assert not flag.is_set()
    flag.wake()  # nobody waiting: nothing happens, nothing is remembered
    waiting = asyncio.create_task(flag.wait())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    waiting.cancel()


async def test_the_ticker_wakes_each_watcher_at_its_due_time() -> None:
    watchers = TaskWatchers(EventHub("postgresql://unused@127.0.0.1/none"))  # never started
    loop = asyncio.get_running_loop()
    woken: dict[str, float] = {}

    async def watch(name: str, after: float) -> None:
        with watchers.watch(uuid.uuid4()) as flag:
            started = loop.time()
            flag.due = started + after
            await flag.wait()
            woken[name] = loop.time() - started
            assert not flag.is_set()  # woken, not marked changed

    await asyncio.wait_for(asyncio.gather(watch("soon", 0.05), watch("later", 0.4)), 2)
    assert 0.04 <= woken["soon"] < 0.35
    assert 0.39 <= woken["later"] < 0.8
    await asyncio.sleep(0.3)
    assert watchers._ticker is not None
    assert watchers._ticker.done()  # it stops when nothing is watched
