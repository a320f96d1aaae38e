"""Server-Sent Events: a task's event log, replayed then live.

```
snapshot (no id) ─▶ events seq > Last-Event-ID, read from task_events ─▶ live ─▶ terminal event: end
                                   ▲                                        │
                                   └──── hub notice or poll: read again ◀───┘
```

Streams outlive the request that authorized them, so they re-check it as they poll
(`authorized`): revoking the key (or the key that minted a stream token) ends them.

The SSE `id` is the event's sequence number, so a client reconnecting with
`Last-Event-ID` gets exactly what it missed: every event is read from the table, in
order, and sent once. The stream only ever holds a dirty flag and one page.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable

from sse_starlette import EventSourceResponse, ServerSentEvent

from taskservice.aio import wait_until
from taskservice.api.schemas import EventOut
from taskservice.api.sse import LeanEventSourceResponse, keep_alive
from taskservice.events import TaskWatchers, Watermark
from taskservice.models import EventFilter, Task, TaskEvent
from taskservice.service import TaskService
from taskservice.settings import Settings
from taskservice.states import TaskState
from taskservice.views import TaskOut


def event_stream(
    content: AsyncIterator[ServerSentEvent], settings: Settings, *, pings: bool = True
) -> EventSourceResponse:
    """An SSE response with a send timeout for stalled readers, and no caching or
    proxy buffering; one helper task per stream (see `api.sse`). With `pings`, the
    response sends the keep-alive comments; else `content` yields them itself."""
    return LeanEventSourceResponse(
        content,
        ping=settings.stream_ping_seconds if pings else 0,
        send_timeout=settings.stream_send_timeout,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _is_terminal_event(kind: str, data: dict[str, object]) -> bool:
    to = data.get("to")
    return kind == "state_change" and isinstance(to, str) and TaskState(to).is_terminal


async def task_events(
    *,
    service: TaskService,
    watchers: TaskWatchers,
    tenant: str,
    task: Task,
    after: int,
    authorized: Callable[[], Awaitable[bool]],
) -> AsyncIterator[ServerSentEvent]:
    settings = service.settings
    task_id = str(task.id)
    with watchers.watch(task.id) as dirty:
        # Read the snapshot once watching: whatever happens next wakes us.
        snapshot = await service.get(tenant=tenant, task_id=task.id)
        finished = snapshot.state.is_terminal
        yield ServerSentEvent(
            data=TaskOut.of(snapshot).model_dump_json(),
            event="snapshot",
            retry=settings.stream_retry_ms,
        )
        # An idle stream keeps no task, page, event or timer alive (the watchers'
        # ticker wakes it to poll and to ping): memory per open stream is what a
        # thousand browsers cost.
        del snapshot, task
        clock = asyncio.get_running_loop().time
        ping_every = settings.stream_ping_seconds or math.inf
        next_ping = clock() + ping_every
        last = after
        event: TaskEvent | None = None
        while True:
            dirty.clear()
            if not await authorized():
                return  # the key was revoked: a reconnect gets the 401
            page = await service.events(
                tenant=tenant, task_id=task_id, after=last, limit=settings.max_page_size
            )
            for event in page.events:
                yield ServerSentEvent(
                    data=EventOut.of(event).model_dump_json(), event=event.type, id=str(event.seq)
                )
                next_ping = clock() + ping_every
                last = event.seq
                if _is_terminal_event(event.type, event.data):
                    return
            more = page.next_after is not None
            del page
            event = None  # nor the last event sent
            if more:
                continue  # more to replay
            if finished:
                return  # resumed after the end: nothing will follow
            # Until a notice for this task, or the poll that covers a lost one; send
            # keep-alives meanwhile.
            next_poll = clock() + settings.stream_poll_seconds
            while not dirty.is_set() and clock() < next_poll:
                if clock() >= next_ping:
                    yield keep_alive()
                    next_ping = clock() + ping_every
                dirty.due = min(next_poll, next_ping)
                await dirty.wait()


async def tenant_events(
    *,
    service: TaskService,
    watermark: Watermark,
    tenant: str,
    after: int | None,
    filter: EventFilter,
    authorized: Callable[[], Awaitable[bool]],
) -> AsyncIterator[ServerSentEvent]:
    """The firehose: the tenant's events in global order (the SSE `id` is the global
    event id), never past the watermark, so none is skipped or sent twice."""
    settings = service.settings
    yield ServerSentEvent(comment="taskservice firehose", retry=settings.stream_retry_ms)
    with watermark.reading():
        last = watermark.value if after is None else after
        while True:
            if not await authorized():
                return  # the key was revoked: a reconnect gets the 401
            upto = watermark.value
            events = await service.firehose_page(
                tenant=tenant, after=last, upto=upto, filter=filter
            )
            for event in events:
                yield ServerSentEvent(
                    data=EventOut.of(event).model_dump_json(), event=event.type, id=str(event.id)
                )
            if len(events) == settings.max_page_size:
                last = events[-1].id
                continue
            last = max(last, upto)  # everything up to the mark has been looked at
            await _until_past(watermark, last, settings.stream_poll_seconds)


async def _until_past(watermark: Watermark, mark: int, seconds: float) -> None:
    """Wait (at most `seconds`) for the watermark to move past `mark`."""
    async with watermark.advanced:
        await wait_until(watermark.advanced.wait_for(lambda: watermark.value > mark), seconds)
