"""Small asyncio helpers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Hashable, Iterator
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)
Member = TypeVar("Member", bound=Hashable)


@contextlib.contextmanager
def registered(registry: dict[Key, set[Member]], key: Key, member: Member) -> Iterator[Member]:
    """`member` in `registry[key]` for the block's duration; a key left without
    members is removed (a registry of who watches what holds only the watched)."""
    registry.setdefault(key, set()).add(member)
    try:
        yield member
    finally:
        members = registry.get(key)
        if members is not None:
            members.discard(member)
            if not members:
                del registry[key]


async def wait_until(awaitable: Awaitable[object], seconds: float) -> bool:
    """Await with a time limit; False when the time ran out.

    Built on `asyncio.timeout`, not `asyncio.wait_for`: on Python 3.11, `wait_for`
    can swallow a cancellation that arrives just as the awaited event completes,
    which leaves a loop running after it was told to stop.
    """
    try:
        async with asyncio.timeout(seconds):
            await awaitable
    except TimeoutError:
        return False
    return True
