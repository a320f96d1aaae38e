"""Following one task: its state now, then every event after it, as they commit.

The one way the service follows a task. The long poll (`?wait=`), the task's SSE
stream and A2A's `message/stream` / `tasks/resubscribe` all read it:

```
watch the task ─▶ snapshot (the task, read once watching) ─▶ events seq > after
                                  ▲                                     │
                                  └── hub notice, or the poll: read ◀───┘  … until a
                                                                            terminal event
```

Watching starts before the snapshot is read, so no change can slip in between. A
notice only marks the follower dirty (`hub.TaskWatchers`); it then reads what it
has not seen from the event log, in order, so a lost notice costs latency (the poll
covers it), never an event. An idle follower holds a flag, no task, page or timer.

With `deltas`, the follower also yields the live output of the model response being
written (`deltas.LiveView`): once the replay of the log is done, the text so far of the
message in progress, then each delta as it arrives. Deltas wake the follower without
marking it dirty, so they cost no read of the event log. Following a quiet task's deltas
asks for them (`deltas.LiveFeed.ask`): its model responses are streamed from the next
one on.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import TypeVar

from taskservice.db.eventlog import STATE_CHANGE, EventLog
from taskservice.db.tasks import TaskStore
from taskservice.domain.errors import NotFound
from taskservice.domain.models import Delta, EventType, Task, TaskEvent
from taskservice.domain.states import TaskState
from taskservice.following.deltas import LiveFeed, LiveView
from taskservice.following.hub import Flag, TaskWatchers
from taskservice.settings import Settings

# What a follower yields: the snapshot, an event, a delta of live output, or None
# when it was idle.
Update = Task | TaskEvent | Delta | None
Extra = TypeVar("Extra")  # what a settled wait reads with the task


def moved_to(event: TaskEvent) -> TaskState | None:
    """The state a `state_change` event moved its task to; None for other events."""
    to = event.data.get("to") if event.type == STATE_CHANGE else None
    return TaskState(to) if isinstance(to, str) else None


def _ends(event: TaskEvent) -> bool:
    state = moved_to(event)
    return state is not None and state.is_terminal


class TaskFollower:
    def __init__(
        self,
        *,
        store: TaskStore,
        log: EventLog,
        watchers: TaskWatchers,
        settings: Settings,
        live: LiveFeed | None = None,
    ) -> None:
        self.store = store
        self.log = log
        self.watchers = watchers
        self.settings = settings
        self.live = live

    async def until_settled(
        self,
        task: Task,
        *,
        deadline: float,
        settles: Callable[[TaskState], bool],
        read: Callable[[], Awaitable[tuple[Task, Extra] | None]],
    ) -> tuple[Task, Extra]:
        """`task` (as just read or created) once its state `settles`, or once
        `deadline` (loop time) passed: from the notices of its changes of state, which
        say the state they moved to, so only the task's final read touches the
        database (and a read each poll interval, should notices be lost). `read`
        reads the task afresh, with what else the caller wants read with it."""
        clock = asyncio.get_running_loop().time
        poll = self.settings.stream_poll_seconds
        with self.watchers.watch_state(task.id, after=task.event_seq) as watch:
            next_poll = clock() + poll
            while True:
                heard = watch.state is not None and settles(TaskState(watch.state))
                if heard or watch.stale or clock() >= min(next_poll, deadline):
                    watch.stale = False
                    found = await read()
                    if found is None:
                        raise NotFound(f"task {task.id} not found")
                    fresh = found[0]
                    if settles(fresh.state) or clock() >= deadline:
                        return found
                    watch.saw(fresh.event_seq, fresh.state.value)  # moved on since
                    next_poll = clock() + poll
                    continue
                watch.flag.clear()
                watch.flag.due = min(next_poll, deadline)
                await watch.flag.wait()

    @contextlib.contextmanager
    def _view(self, task_id: uuid.UUID, flag: Flag, deltas: bool) -> Iterator[LiveView | None]:
        if not deltas or self.live is None:
            yield None
            return
        with self.live.view(task_id, flag) as view:
            yield view

    async def _deltas(self, task_id: uuid.UUID, view: LiveView | None) -> list[Delta]:
        """The live output to send now (reading the text so far when asked to)."""
        if view is None or not (view.pending or view.resync):
            return []
        if view.resync and self.live is not None:
            await self.live.catch_up(task_id, view)
        return view.take()

    async def follow(
        self,
        *,
        tenant: str,
        task_id: uuid.UUID,
        after: int | None = None,
        idle: float = math.inf,
        deadline: float = math.inf,
        authorized: Callable[[], Awaitable[bool]] | None = None,
        deltas: bool = False,
    ) -> AsyncGenerator[Update, None]:
        """Yield the task, then its events with seq > `after` (by default, after the
        snapshot), in order, up to and including the terminal one; then stop. A task
        already finished stops once the events after `after` are replayed.

        `None` is yielded whenever `idle` seconds pass without anything else (a
        stream's keep-alive). The follow stops early at `deadline` (loop time), or
        when `authorized()` (asked before each read) says the caller's key no longer
        holds. With `deltas`, live output too (see the module docstring). Raises
        `NotFound` if the task is not the tenant's."""
        settings = self.settings
        with self.watchers.watch(task_id) as dirty, self._view(task_id, dirty, deltas) as view:
            snapshot = await self.store.get(task_id, tenant=tenant)
            if snapshot is None:
                raise NotFound(f"task {task_id} not found")
            finished = snapshot.state.is_terminal
            if view is not None and snapshot.quiet and not finished and self.live is not None:
                await self.live.ask(task_id)  # its model responses were not streamed
            if view is not None and snapshot.state is TaskState.RUNNING:
                view.resync = True  # it may be writing a message: start from its text
            replayed = False  # deltas go out once the log is replayed
            last = snapshot.event_seq if after is None else after
            yield snapshot
            del snapshot  # an idle follower keeps no task alive
            clock = asyncio.get_running_loop().time
            next_idle = clock() + idle
            event: TaskEvent | None = None
            while True:
                dirty.clear()
                if authorized is not None and not await authorized():
                    return
                events = await self.log.page(task_id, after=last, limit=settings.max_page_size)
                if replayed:
                    for delta in await self._deltas(task_id, view):
                        yield delta  # before the events that came after it
                for event in events:
                    yield event
                    next_idle = clock() + idle
                    last = event.seq
                    if _ends(event):
                        return
                    if view is not None and event.type == EventType.MESSAGE:
                        view.persisted(int(event.data.get("position", -1)))
                more = len(events) == settings.max_page_size
                del events
                event = None  # nor the last event yielded
                if more:
                    continue  # more to replay
                if finished:
                    return  # followed from after the end: nothing will follow
                replayed = True
                # Until a notice for this task, or the poll that covers a lost one.
                next_poll = clock() + settings.stream_poll_seconds
                while not dirty.is_set() and clock() < next_poll:
                    if clock() >= deadline:
                        return
                    live = await self._deltas(task_id, view)
                    for delta in live:
                        yield delta
                        next_idle = clock() + idle
                    if live:
                        continue
                    if clock() >= next_idle:
                        yield None
                        next_idle = clock() + idle
                    dirty.due = min(next_poll, next_idle, deadline)
                    await dirty.wait()
