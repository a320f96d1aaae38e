"""Lease renewal from a thread of its own.

The agent runs on the process's event loop; a tool or model client that blocks that
loop must not let leases lapse (another worker would start the task a second time).
So the heartbeat runs its own loop in its own thread, with its own connection, and
renews every lease the worker holds in one statement each interval. Leases found
lost (the task was cancelled, or recovered elsewhere) are reported back to the pool
on its loop, which stops those runs; so are leases of tasks found paused (should the
`paused` notice have been lost), whose runs the pool stops and gives back.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable

from taskservice.db.leases import HeartbeatConnection
from taskservice.db.outage import DRIVER_ERRORS, OUTAGE

log = logging.getLogger(__name__)

RECONNECT_DELAY = 1.0  # seconds


class Heartbeat:
    def __init__(
        self,
        *,
        database_url: str,
        owner: str,
        lease_seconds: float,
        on_lost: Callable[[set[uuid.UUID]], None],
        on_paused: Callable[[set[uuid.UUID]], None] | None = None,
    ) -> None:
        self._database_url = database_url
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / 3
        self._on_lost = on_lost
        # Held tasks found paused: the backstop of the `paused` notice, should it be lost.
        self._on_paused = on_paused
        self._held: dict[uuid.UUID, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="lease-heartbeat", daemon=True)
        self._caller: asyncio.AbstractEventLoop | None = None
        self.beats = 0

    def hold(self, task_id: uuid.UUID, attempt: int) -> None:
        with self._lock:
            self._held[task_id] = attempt

    def drop(self, task_id: uuid.UUID) -> None:
        with self._lock:
            self._held.pop(task_id, None)

    def start(self) -> None:
        self._caller = asyncio.get_running_loop()
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 10)

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        conn = HeartbeatConnection(self._database_url)
        while not self._stop.is_set():
            try:
                await conn.open()
                await self._beat(conn)
            except DRIVER_ERRORS as exc:
                OUTAGE.failed("lease heartbeat", exc)
                conn.drop()
                await asyncio.to_thread(self._stop.wait, RECONNECT_DELAY)
                continue
            await asyncio.to_thread(self._stop.wait, self.interval)
        await conn.close()

    async def _beat(self, conn: HeartbeatConnection) -> None:
        with self._lock:
            held = dict(self._held)
        if not held:
            return
        paused: set[uuid.UUID] = set()
        kept = await conn.renew(
            owner=self.owner, leases=held.items(), lease_seconds=self.lease_seconds, paused=paused
        )
        self.beats += 1
        lost = set(held) - kept
        if lost and self._caller is not None:
            self._caller.call_soon_threadsafe(self._on_lost, lost)
        if paused and self._on_paused is not None and self._caller is not None:
            self._caller.call_soon_threadsafe(self._on_paused, paused)
