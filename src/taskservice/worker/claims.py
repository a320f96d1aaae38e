"""The claim loop that the worker pool (tasks) and the webhook dispatcher
(deliveries) share.

```
   woken (NOTIFY, a slot freed, stop) ─┐
          poll interval elapsed ───────┼─▶ claim ≤ free slots ─▶ start each claimed item
                                       │        │ some claimed, maybe more: claim again
                                       └────────┘ else: sleep until woken or the poll
```

A claim says whether more may be claimable at once; when it took all there was, a
claim at once would find nothing (what becomes claimable since is announced, and the
announcement wakes the loop), and under load cost a statement per wake.

A claim that fails on the database is reported once per outage (`db.outage`) and
retried after `RETRY_DELAY`; the loop never ends by itself but on `stop`, and an
unexpected error is logged at once rather than found at shutdown.

Two modules are named `claims`, one claim seen from two layers: this one is the runners'
loop; the statement that claims tasks is `db/claims.py` (storage), the one that claims
deliveries `db/webhook_outbox.py`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from taskservice.common.aio import wait_until
from taskservice.db import TRANSIENT_ERRORS
from taskservice.db.outage import OUTAGE

log = logging.getLogger(__name__)

RETRY_DELAY = 1.0  # seconds, after a database error
Item = TypeVar("Item")


class ClaimLoop(Generic[Item]):
    def __init__(
        self,
        name: str,
        *,
        capacity: int,
        busy: Callable[[], int],
        claim: Callable[[int], Awaitable[tuple[Sequence[Item], bool]]],
        start: Callable[[Item], None],
        poll_interval: float,
    ) -> None:
        """`claim(n)` takes up to n items and says whether more may be claimable
        now, `start(item)` begins one (without waiting for it), `busy()` counts those
        still under way out of `capacity`."""
        self.name = name
        self._capacity = capacity
        self._busy = busy
        self._claim = claim
        self._start = start
        self._poll_interval = poll_interval
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._held_back = False  # the last claim was limited by the free slots

    def wake(self) -> None:
        """Claim now: something may be claimable, or a slot was freed."""
        self._wake.set()

    def freed(self) -> None:
        """A slot was freed: claim now if the last claim was held back by capacity.
        Otherwise it took everything claimable then, and what became claimable since
        was announced (a notice wakes the loop): a claim now would find nothing, and
        under load cost a statement per finished item."""
        if self._held_back:
            self._wake.set()

    def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name=self.name)
        self._runner.add_done_callback(self._report_crash)

    async def stop(self) -> None:
        """Stop claiming (what was started goes on: its owner stops it)."""
        self._stopping.set()
        self._wake.set()
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)

    def _report_crash(self, runner: asyncio.Task[None]) -> None:
        # Otherwise an unexpected error would end claiming in silence until stop().
        if not runner.cancelled() and runner.exception() is not None:
            log.error("%s stopped", self.name, exc_info=runner.exception())

    async def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            free = self._capacity - self._busy()
            claimed: Sequence[Item] = ()
            more = False
            if free > 0:
                try:
                    claimed, more = await self._claim(free)
                except TRANSIENT_ERRORS as exc:
                    OUTAGE.failed(self.name, exc)
                    await asyncio.sleep(RETRY_DELAY)
                    continue
                for item in claimed:
                    self._start(item)
            self._held_back = len(claimed) >= free
            if claimed and more:
                continue  # claim again while slots are free
            await wait_until(self._wake.wait(), self._poll_interval)
