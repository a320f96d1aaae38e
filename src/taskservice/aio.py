"""Small asyncio helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


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
