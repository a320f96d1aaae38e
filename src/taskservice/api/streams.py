"""Server-Sent Events: a task's event log, replayed then live (`following/follower.py`),
and the tenant's firehose.

Streams outlive the request that authorized them, so they re-check it as they poll
(`authorized`): revoking the key (or the key that minted a stream token) ends them.

The SSE `id` is the event's sequence number, so a client reconnecting with
`Last-Event-ID` gets exactly what it missed: every event is read from the table, in
order, and sent once. The stream only ever holds a dirty flag and one page.
The firehose's `id` is the global event id, read up to the watermark. A task's
stream also carries `delta` events (`DeltaOut`), with no `id`: live output is not in
the log.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing

from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

from taskservice.api.deps import CallerContext
from taskservice.api.schemas import EventOut
from taskservice.api.sse import LeanEventSourceResponse, keep_alive
from taskservice.common.aio import wait_until
from taskservice.common.metrics import EVENT_STREAMS
from taskservice.domain.models import Delta, DeltaKind, EventFilter, Task
from taskservice.domain.views import TaskOut
from taskservice.following.hub import Watermark
from taskservice.settings import Settings
from taskservice.usecases.tasks import TaskService


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


DELTA = "delta"  # the SSE event of live output


class DeltaOut(BaseModel):
    """A piece of live output (the SSE event `delta`): ephemeral, never in the event
    log. To rebuild the response being written, append `text` to part `part` of
    message `position`; `offset` (in Unicode code points) is the length of that part
    before this piece, so a stream sends each character once, in order. A higher
    `attempt` starts the message over (a worker died mid-message). Once the `message`
    event of that position arrives, the message is complete and persisted (`GET
    /v1/tasks/{id}/messages`)."""

    task_id: uuid.UUID
    attempt: int
    position: int = Field(description="The message's position in the conversation.")
    part: int = Field(description="The part of the response: 0, 1, 2 … in order.")
    kind: DeltaKind = Field(description="`text`, `tool_call` (its JSON arguments) or `thinking`.")
    offset: int
    text: str
    tool: str | None = Field(default=None, description="The tool a `tool_call` part calls.")

    @classmethod
    def of(cls, delta: Delta) -> DeltaOut:
        return cls.model_validate(delta, from_attributes=True)


async def task_events(
    caller: CallerContext, task_id: uuid.UUID, *, after: int, types: frozenset[str] = frozenset()
) -> AsyncIterator[ServerSentEvent]:
    """A task's SSE stream: the snapshot, then each event (`id` = its seq; only of
    `types`, if any), with keep-alives while idle, until the terminal event (see
    `following/follower.TaskFollower.follow`)."""
    settings = caller.settings
    follow = caller.service.follower.follow(
        tenant=caller.tenant,
        task_id=task_id,
        after=after,
        idle=settings.stream_ping_seconds or math.inf,
        authorized=caller.authorized,  # revoking the key ends the stream
        deltas=not types or DELTA in types,
    )
    with EVENT_STREAMS.labels("task").track_inprogress():
        async with aclosing(follow) as updates:
            async for update in updates:
                if update is None:
                    yield keep_alive()
                elif isinstance(update, Delta):
                    # Ephemeral: no `id`, so a reconnect resumes after the last event.
                    yield ServerSentEvent(data=DeltaOut.of(update).model_dump_json(), event=DELTA)
                elif isinstance(update, Task):
                    yield ServerSentEvent(
                        data=TaskOut.of(update).model_dump_json(),
                        event="snapshot",
                        retry=settings.stream_retry_ms,
                    )
                elif not types or update.type in types:
                    yield ServerSentEvent(
                        data=EventOut.of(update).model_dump_json(),
                        event=update.type,
                        id=str(update.seq),
                    )
                del update  # an idle stream keeps no task or event alive


async def tenant_events(
    *,
    service: TaskService,
    settings: Settings,
    watermark: Watermark,
    tenant: str,
    after: int | None,
    filter: EventFilter,
    authorized: Callable[[], Awaitable[bool]],
) -> AsyncIterator[ServerSentEvent]:
    """The firehose: the tenant's events in global order (the SSE `id` is the global
    event id), never past the watermark, so none is skipped or sent twice."""
    yield ServerSentEvent(comment="taskservice firehose", retry=settings.stream_retry_ms)
    if after is not None:
        pruned_before = await service.events_pruned_before()
        if after + 1 < pruned_before:
            # Not silence: events between `after` and this id may have been deleted.
            yield ServerSentEvent(data=json.dumps({"before": pruned_before}), event="pruned")
    with EVENT_STREAMS.labels("firehose").track_inprogress(), watermark.reading():
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
