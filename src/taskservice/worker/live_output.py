"""One run's live output: the deltas of the model response it is streaming, written to
PostgreSQL (`db/live.py`) at most once per interval, by a task of its own, so the
model's stream never waits for the database.

```
model stream ─ feed(event) ─▶ buffer per part ─▶ LiveStore.flush: one interval after
                                                 the first delta, then at most one
                                                 flush per interval
end of the response ─▶ the rest, flushed before the ledger persists the message
```

A response that completes within its first interval sends no deltas at all: its
complete message (persisted by the ledger a moment later) says it all, and an
instant model costs no extra statement. Once a response has sent a delta it sends
all of its text, the last piece before the message is persisted, so a reader that
rebuilds it from the deltas has every character, and gets them before the `message`
event. A flush that fails ends the deltas of that response (logged at debug): the
reader gets the complete message when it is persisted; deltas are never worth
failing or slowing a run for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import uuid
from dataclasses import dataclass

from pydantic_ai.messages import (
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)

from taskservice.db import TRANSIENT_ERRORS
from taskservice.db.live import LiveStore
from taskservice.db.outage import DRIVER_ERRORS
from taskservice.models import Delta, DeltaKind

log = logging.getLogger(__name__)
_FLUSH_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, *DRIVER_ERRORS, ValueError)


@dataclass(slots=True)
class _Part:
    number: int  # ours: a part pydantic-ai replaces gets a new number
    kind: DeltaKind
    tool: str | None
    flushed: int = 0  # characters written
    buffer: str = ""
    announced: bool = False  # written once (a tool call's name with no arguments yet)


def _args_text(args: object) -> str:
    if args is None:
        return ""
    return args if isinstance(args, str) else json.dumps(args, default=str)


class LiveOutput:
    """See the module docstring. `begin`, `feed`, `end` per model response; `close`
    when the run stops."""

    def __init__(
        self, store: LiveStore, *, task_id: uuid.UUID, attempt: int, interval: float
    ) -> None:
        self.store = store
        self.task_id = task_id
        self.attempt = attempt
        self.interval = interval
        self._position = -1
        self._parts: dict[int, _Part] = {}  # pydantic-ai's part index → ours
        self._numbers = 0
        self._last_flush = -math.inf
        self._started = False  # this response has sent a delta
        self._broken = False  # a flush of this response failed
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        self.flushes = 0

    def begin(self, position: int) -> None:
        """A model response starts; it will be message `position`."""
        self._position = position
        self._parts.clear()
        self._numbers = 0
        self._started = self._broken = False
        self._last_flush = -math.inf

    def feed(self, event: object) -> None:
        """An event of the model's stream (what is not a part's text is ignored)."""
        if isinstance(event, PartStartEvent):
            part = event.part
            if isinstance(part, TextPart):
                self._start(event.index, "text", None, part.content)
            elif isinstance(part, ThinkingPart):
                self._start(event.index, "thinking", None, part.content)
            elif isinstance(part, ToolCallPart):
                self._start(event.index, "tool_call", part.tool_name, _args_text(part.args))
            return
        if not isinstance(event, PartDeltaEvent):
            return
        current = self._parts.get(event.index)
        if current is None:
            return
        delta = event.delta
        if isinstance(delta, TextPartDelta | ThinkingPartDelta):
            text = delta.content_delta or ""
        elif isinstance(delta, ToolCallPartDelta):
            if delta.tool_name_delta:
                current.tool = (current.tool or "") + delta.tool_name_delta
            text = _args_text(delta.args_delta)
        else:
            return
        if text:
            current.buffer += text
            self._schedule()

    def _start(self, index: int, kind: DeltaKind, tool: str | None, text: str) -> None:
        self._parts[index] = _Part(number=self._numbers, kind=kind, tool=tool, buffer=text)
        self._numbers += 1
        self._schedule()

    def _schedule(self) -> None:
        if self._broken or self._timer is not None or self._flushing is not None:
            return  # a flush is due, or running (it schedules the next when it is done)
        loop = asyncio.get_running_loop()
        if self._last_flush == -math.inf:
            self._last_flush = loop.time()  # the first delta opens the first interval
        delay = max(0.0, self._last_flush + self.interval - loop.time())
        self._timer = loop.call_later(delay, self._due)

    def _due(self) -> None:
        self._timer = None
        self._flushing = asyncio.create_task(self._flush(), name=f"live-{self.task_id}")

    def _take(self) -> list[Delta]:
        deltas = []
        for part in self._parts.values():
            if not part.buffer and part.announced:
                continue
            deltas.append(
                Delta(
                    task_id=self.task_id,
                    attempt=self.attempt,
                    position=self._position,
                    part=part.number,
                    kind=part.kind,
                    offset=part.flushed,
                    text=part.buffer,
                    tool=part.tool,
                )
            )
            part.flushed += len(part.buffer)
            part.buffer = ""
            part.announced = True
        return deltas

    async def _flush(self) -> None:
        try:
            deltas = self._take()
            if deltas and not self._broken:
                self._started = True
                self._last_flush = asyncio.get_running_loop().time()
                await self.store.flush(deltas)
                self.flushes += 1
        except _FLUSH_ERRORS as exc:
            self._broken = True
            log.debug("task %s: live output stopped for this response: %s", self.task_id, exc)
        finally:
            self._flushing = None
        if any(part.buffer for part in self._parts.values()):
            self._schedule()

    async def end(self) -> None:
        """The response is complete: send the rest (if it sent anything), before the
        ledger persists it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None:
            await self._flushing
        if self._timer is not None:  # the flush that just ended scheduled another
            self._timer.cancel()
            self._timer = None
        if self._started and not self._broken:
            await self._flush()
        self._parts.clear()

    async def close(self) -> None:
        """The run stopped: nothing more is sent. (The rows left in `task_live` are
        the reaper's to sweep once the task is no longer running this attempt.)"""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None:
            self._flushing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flushing
            self._flushing = None
