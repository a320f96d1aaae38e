"""The per-process event hub, fed by LISTEN on one dedicated connection.

Every committed `task_events` row NOTIFYs `taskservice_events` (a trigger does it).
The hub parses those hints and hands them to in-process subscribers: the worker pool
(wake up, stop a cancelled run) and, later, SSE streams. A notification is only a
hint: readers catch up from the tables, so a lost one costs latency, not correctness.
After the connection drops, the hub reconnects, LISTENs again and tells subscribers
to catch up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from taskservice.common.aio import registered, wait_until
from taskservice.db import TRANSIENT_ERRORS, notify
from taskservice.db.outage import DRIVER_ERRORS, OUTAGE

log = logging.getLogger(__name__)

RECONNECT_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)  # seconds, the last one repeats
HEALTH_CHECK_INTERVAL = 10.0  # seconds; finds connections that died silently


@dataclass(frozen=True, slots=True)
class EventNotice:
    event_id: int
    task_id: uuid.UUID
    seq: int
    type: str
    source: str | None
    target: str | None
    tenant: str

    @classmethod
    def parse(cls, payload: str) -> EventNotice:
        event_id, task_id, seq, type_, source, target, tenant = payload.split(",", 6)
        return cls(
            event_id=int(event_id),
            task_id=uuid.UUID(task_id),
            seq=int(seq),
            type=type_,
            source=source or None,
            target=target or None,
            tenant=tenant,
        )


Subscriber = Callable[[EventNotice], None]
ReconnectHook = Callable[[], None]


class EventHub:
    def __init__(self, database_url: str) -> None:
        self._database_url = database_url
        self._subscribers: list[Subscriber] = []
        self._reconnect_hooks: list[ReconnectHook] = []
        self._channels: dict[str, list[Callable[[str], None]]] = {}
        self._runner: asyncio.Task[None] | None = None
        self._connection: Any = None
        self._lost = asyncio.Event()
        self.listening = asyncio.Event()
        self.reconnects = 0
        self._connected_before = False

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def on_reconnect(self, hook: ReconnectHook) -> None:
        self._reconnect_hooks.append(hook)

    def on_channel(self, channel: str, callback: Callable[[str], None]) -> None:
        """Also LISTEN on `channel` (from the next connection on: call before start)
        and hand each payload to `callback`."""
        self._channels.setdefault(channel, []).append(callback)

    async def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name="event-hub")
        # Start serving only once LISTEN is in place, so no early hint is missed.
        if not await wait_until(self.listening.wait(), 30):
            raise TimeoutError("could not LISTEN within 30 s")

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        await self._close()

    @property
    def backend_pid(self) -> int | None:
        conn = self._connection
        return conn.get_server_pid() if conn is not None and not conn.is_closed() else None

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._listen_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except DRIVER_ERRORS as exc:
                delay = RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS) - 1)]
                failures += 1
                OUTAGE.failed("event listener", exc)
                log.info("event listener reconnects in %.1fs", delay)
                await asyncio.sleep(delay)
            finally:
                self.listening.clear()
                await self._close()

    async def _listen_once(self) -> None:
        self._lost.clear()
        channels: dict[str, notify.Callback] = {notify.EVENTS_CHANNEL: self._on_notify}
        channels |= {channel: self._on_other for channel in self._channels}
        conn = await notify.listen(self._database_url, channels, on_lost=self._lost.set)
        self._connection = conn
        if self._connected_before:
            self.reconnects += 1
            log.info("event listener reconnected; subscribers catch up from the tables")
            for hook in list(self._reconnect_hooks):
                hook()
        self._connected_before = True
        self.listening.set()
        while not self._lost.is_set():
            await wait_until(self._lost.wait(), HEALTH_CHECK_INTERVAL)
            if not self._lost.is_set():
                await notify.check(conn)
        raise ConnectionResetError("LISTEN connection closed")

    async def _close(self) -> None:
        conn, self._connection = self._connection, None
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            notice = EventNotice.parse(payload)
        except ValueError:
            log.error("unparseable notification payload %r", payload)
            return
        self.publish(notice)

    def _on_other(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        for callback in list(self._channels.get(channel, ())):
            try:
                callback(payload)
            except Exception:
                log.exception("listener of %s failed", channel)

    def publish(self, notice: EventNotice) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber(notice)
            except Exception:
                log.exception("event subscriber failed on %s", notice)


# The ticker's resolution: wake-ups are at most this late (and never busier than this).
_MIN_TICK = 0.01
_MAX_TICK = 0.25


class Flag:
    """A one-waiter `asyncio.Event` (set, clear, wait) that can also be woken without
    being set, at a time it asks for (`due`, kept by `TaskWatchers`' ticker).

    An open stream holds one for its whole life, so it is small: an `asyncio.Event`
    allocates its waiter queue up front (about 0.7 KiB), and a timer of its own per
    stream (`asyncio.timeout`) costs about as much again."""

    __slots__ = ("_set", "_waiter", "due")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None
        self.due = math.inf  # loop time at which the ticker wakes a waiter

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        self.wake()

    def wake(self) -> None:
        """End the current wait without marking anything changed."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        if self._set:
            return
        assert self._waiter is None or self._waiter.done(), "one waiter at a time"
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class StateWatch:
    """What a wait for a task's state knows from the notices: its latest change of
    state (`seq`, `state`: the notice's target, None until one is seen), and whether
    notices may have been lost (`stale`: the hub reconnected; read the task)."""

    __slots__ = ("flag", "seq", "stale", "state")

    def __init__(self, flag: Flag, seq: int) -> None:
        self.flag = flag  # woken by any notice of the task, and at its due time
        self.seq = seq
        self.state: str | None = None
        self.stale = False

    def saw(self, seq: int, state: str) -> None:
        if seq > self.seq:
            self.seq, self.state = seq, state


# Changes of state remembered per task (the most recent tasks'), so that a wait that
# starts just after its task changed still sees the change's notice.
_RECENT_STATES = 4096


class TaskWatchers:
    """Per-task wake-ups for streams and long polls.

    A notice only marks the watchers of its task dirty; each watcher then reads what
    it has not seen from `task_events` itself. So a slow or stalled reader holds a
    flag, never a queue of events, and cannot delay anyone else; after a reconnect
    of the hub every watcher is marked dirty to catch up.

    A wait for a state (`watch_state`) needs no read of the log at all: the notices
    of changes of state carry the state they moved to, and the latest of the most
    recent tasks' are remembered, for a wait that starts a moment after its notice.
    """

    def __init__(self, hub: EventHub) -> None:
        self._by_task: dict[uuid.UUID, set[Flag]] = {}
        self._states: dict[uuid.UUID, set[StateWatch]] = {}
        self._recent: dict[uuid.UUID, tuple[int, str]] = {}
        self._ticker: asyncio.Task[None] | None = None
        hub.subscribe(self._on_notice)
        hub.on_reconnect(self._wake_all)

    def _on_notice(self, notice: EventNotice) -> None:
        if notice.type == "state_change" and notice.target is not None:
            seen = self._recent.pop(notice.task_id, None)
            if seen is None or seen[0] < notice.seq:
                seen = (notice.seq, notice.target)
            self._recent[notice.task_id] = seen  # the most recent last
            if len(self._recent) > _RECENT_STATES:
                del self._recent[next(iter(self._recent))]
            for watch in self._states.get(notice.task_id, ()):
                watch.saw(*seen)
        for flag in self._by_task.get(notice.task_id, ()):
            flag.set()

    def _wake_all(self) -> None:
        for watches in self._states.values():
            for watch in watches:
                watch.stale = True
        for flags in self._by_task.values():
            for flag in flags:
                flag.set()

    @contextlib.contextmanager
    def watch_state(self, task_id: uuid.UUID, *, after: int) -> Iterator[StateWatch]:
        """The task's changes of state after its event `after` (the last the caller
        read), as their notices arrive; one already heard is there at once."""
        with self.watch(task_id) as flag:
            watch = StateWatch(flag, after)
            seen = self._recent.get(task_id)
            if seen is not None:
                watch.saw(*seen)
            with registered(self._states, task_id, watch):
                yield watch

    @contextlib.contextmanager
    def watch(self, task_id: uuid.UUID) -> Iterator[Flag]:
        with registered(self._by_task, task_id, Flag()) as flag:
            if self._ticker is None or self._ticker.done():
                self._ticker = asyncio.create_task(self._tick(), name="watcher-ticker")
            yield flag

    async def _tick(self) -> None:
        """One timer for every watcher: wakes each flag whose `due` time has come
        (then forgets it until the watcher asks again). Stops when nothing is
        watched; `watch` starts it again."""
        loop = asyncio.get_running_loop()
        while self._by_task:
            now = loop.time()
            earliest = math.inf
            for flags in list(self._by_task.values()):
                for flag in flags:
                    if flag.due <= now:
                        flag.due = math.inf
                        flag.wake()
                    elif flag.due < earliest:
                        earliest = flag.due
            await asyncio.sleep(min(max(earliest - now, _MIN_TICK), _MAX_TICK))

    @property
    def watched(self) -> int:
        return sum(len(flags) for flags in self._by_task.values())


class Watermark:
    """The highest global event id up to which every event has committed.

    Event ids come from a sequence at insert time, so a transaction can commit a
    higher id before another commits a lower one; a firehose reading `id > cursor`
    would then skip the lower one for good. Readers therefore never read past this
    mark, which advances only over an unbroken run of committed ids. A gap (an
    insert still in flight, or one rolled back — sequences do not roll back) holds
    the mark for at most `gap_timeout` seconds; then it is skipped.

    The mark follows every notice only while a firehose reads it (`reading`);
    otherwise it moves at the poll interval, so a process with no firehose open (a
    worker, most API replicas) does not read the event table after every commit.
    """

    def __init__(
        self,
        hub: EventHub,
        fetch_ids: Callable[[int, int], Awaitable[list[int]]],
        *,
        gap_timeout: float,
        poll_interval: float,
    ) -> None:
        self._fetch_ids = fetch_ids
        self.gap_timeout = gap_timeout
        self.poll_interval = poll_interval
        self.value = 0
        self._gap_since: dict[int, float] = {}
        self._dirty = asyncio.Event()
        self.advanced = asyncio.Condition()
        self._runner: asyncio.Task[None] | None = None
        self.readers = 0
        hub.subscribe(self._on_notice)
        hub.on_reconnect(self._dirty.set)

    def _on_notice(self, _notice: EventNotice) -> None:
        if self.readers:
            self._dirty.set()

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """While a firehose stream is open: follow every notice (and catch up now)."""
        self.readers += 1
        self._dirty.set()
        try:
            yield
        finally:
            self.readers -= 1

    async def start(self, initial: int) -> None:
        self.value = initial
        await self.advance()
        self._runner = asyncio.create_task(self._run(), name="event-watermark")

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner

    async def _run(self) -> None:
        while True:
            await wait_until(self._dirty.wait(), self.poll_interval)
            self._dirty.clear()
            try:
                await self.advance()
            except TRANSIENT_ERRORS as exc:  # the next notice or poll retries
                OUTAGE.failed("event watermark", exc)
            except Exception:
                log.warning("event watermark could not advance", exc_info=True)

    async def advance(self) -> None:
        now = asyncio.get_running_loop().time()
        mark = self.value
        while True:
            ids = await self._fetch_ids(mark, 1000)
            for event_id in ids:
                if event_id != mark + 1:
                    first_seen = self._gap_since.setdefault(mark + 1, now)
                    if now - first_seen < self.gap_timeout:
                        break  # wait for the missing ids to commit (or time out)
                    log.info("skipping event ids %d..%d (never committed)", mark + 1, event_id - 1)
                self._gap_since.pop(mark + 1, None)
                mark = event_id
            else:
                if len(ids) == 1000:
                    continue
            break
        if mark != self.value:
            self.value = mark
            async with self.advanced:
                self.advanced.notify_all()
        if self._gap_since:
            # Re-check soon: a gap resolves by a commit (notified) or by its timeout.
            asyncio.get_running_loop().call_later(min(0.2, self.gap_timeout), self._dirty.set)
