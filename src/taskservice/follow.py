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
notice only marks the follower dirty (`events.TaskWatchers`); it then reads what it
has not seen from the event log, in order, so a lost notice costs latency (the poll
covers it), never an event. An idle follower holds a flag, no task, page or timer.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable

from taskservice.db.eventlog import STATE_CHANGE, EventLog
from taskservice.db.tasks import TaskStore
from taskservice.errors import NotFound
from taskservice.events import TaskWatchers
from taskservice.models import Task, TaskEvent
from taskservice.settings import Settings
from taskservice.states import TaskState

# What a follower yields: the snapshot, an event, or None when it was idle.
Update = Task | TaskEvent | None


def moved_to(event: TaskEvent) -> TaskState | None:
    """The state a `state_change` event moved its task to; None for other events."""
    to = event.data.get("to") if event.type == STATE_CHANGE else None
    return TaskState(to) if isinstance(to, str) else None


def _ends(event: TaskEvent) -> bool:
    state = moved_to(event)
    return state is not None and state.is_terminal


class TaskFollower:
    def __init__(
        self, *, store: TaskStore, log: EventLog, watchers: TaskWatchers, settings: Settings
    ) -> None:
        self.store = store
        self.log = log
        self.watchers = watchers
        self.settings = settings

    async def follow(
        self,
        *,
        tenant: str,
        task_id: uuid.UUID,
        after: int | None = None,
        idle: float = math.inf,
        deadline: float = math.inf,
        authorized: Callable[[], Awaitable[bool]] | None = None,
    ) -> AsyncGenerator[Update, None]:
        """Yield the task, then its events with seq > `after` (by default, after the
        snapshot), in order, up to and including the terminal one; then stop. A task
        already finished stops once the events after `after` are replayed.

        `None` is yielded whenever `idle` seconds pass without anything else (a
        stream's keep-alive). The follow stops early at `deadline` (loop time), or
        when `authorized()` (asked before each read) says the caller's key no longer
        holds. Raises `NotFound` if the task is not the tenant's."""
        settings = self.settings
        with self.watchers.watch(task_id) as dirty:
            snapshot = await self.store.get(task_id, tenant=tenant)
            if snapshot is None:
                raise NotFound(f"task {task_id} not found")
            finished = snapshot.state.is_terminal
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
                for event in events:
                    yield event
                    next_idle = clock() + idle
                    last = event.seq
                    if _ends(event):
                        return
                more = len(events) == settings.max_page_size
                del events
                event = None  # nor the last event yielded
                if more:
                    continue  # more to replay
                if finished:
                    return  # followed from after the end: nothing will follow
                # Until a notice for this task, or the poll that covers a lost one.
                next_poll = clock() + settings.stream_poll_seconds
                while not dirty.is_set() and clock() < next_poll:
                    if clock() >= deadline:
                        return
                    if clock() >= next_idle:
                        yield None
                        next_idle = clock() + idle
                    dirty.due = min(next_poll, next_idle, deadline)
                    await dirty.wait()
