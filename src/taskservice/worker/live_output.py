"""Live output on the worker's side: the deltas of the model responses its runs are
streaming, written to PostgreSQL (`db/live.py`) by one writer per process, in one
statement per tick whatever the number of runs, so the model's stream never waits
for the database and a hundred streaming runs cost one statement, not a hundred.

```
model stream ─ LiveOutput.feed ─▶ its buffer per part ─ marked due ─▶ LiveWriter: at
most one flush per tick (a quarter interval), of every run's buffers that are due
(a run is due an interval after its last delta) ─▶ LiveStore.flush (one statement)
end of a response ─▶ LiveOutput.end: its last piece, written at once (with every
other response ending meanwhile) and before the ledger persists the message
```

Each run sends at most one delta an interval, as soon as the writer's next tick
after its interval: a model writing more slowly than that has each token on its way
within a tick, one writing faster has its tokens coalesced, an interval apart.

A quiet task's run (`Task.quiet`: submitted by a call that waits without a stream)
is not streamed at all, until a stream asks for its live output: the ask reaches
every process (`QuietRuns`, on `db.live.ASKED_CHANNEL`) and its next model response
is streamed. Streaming costs a run about a fifth more CPU, for nobody when nobody
follows.

A response that completes within its first tick sends no deltas at all: its
complete message (persisted by the ledger a moment later) says it all, and an
instant model costs no extra statement. Once a response has sent a delta it sends
all of its text, the last piece before the message is persisted, so a reader that
rebuilds it from the deltas has every character, and gets them before the `message`
event. A flush that fails ends the deltas of the responses in it (logged at debug):
readers get their complete messages when persisted; deltas are never worth failing
or slowing a run for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import uuid
from collections import OrderedDict
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

from taskservice.common.aio import wait_until
from taskservice.db import TRANSIENT_ERRORS
from taskservice.db.live import LiveStore
from taskservice.db.outage import DRIVER_ERRORS
from taskservice.domain.models import Delta, DeltaKind

log = logging.getLogger(__name__)
_FLUSH_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, *DRIVER_ERRORS, ValueError)


@dataclass(slots=True)
class _Part:
    number: int  # ours: a part pydantic-ai replaces gets a new number
    kind: DeltaKind
    tool: str | None
    flushed: int = 0  # characters taken for writing
    buffer: str = ""
    announced: bool = False  # taken once (a tool call's name with no arguments yet)


def _args_text(args: object) -> str:
    if args is None:
        return ""
    return args if isinstance(args, str) else json.dumps(args, default=str)


class QuietRuns:
    """The runs of quiet tasks in this process, to be told when a stream asks for a
    task's live output (the hub hands it the `db.live.ASKED_CHANNEL` notices). The
    asks heard lately are remembered too: one heard between the claim that read the
    task quiet and the start of its run still counts."""

    def __init__(self, remember: int = 4096) -> None:
        self._runs: dict[uuid.UUID, LiveOutput] = {}
        self._asked: OrderedDict[uuid.UUID, None] = OrderedDict()
        self._remember = remember

    def heard(self, payload: str) -> None:
        try:
            task_id = uuid.UUID(payload)
        except ValueError:
            return
        self._asked[task_id] = None
        self._asked.move_to_end(task_id)
        if len(self._asked) > self._remember:
            self._asked.popitem(last=False)
        output = self._runs.pop(task_id, None)
        if output is not None:
            output.quiet = False

    def all_asked(self) -> None:
        """Asks may have been lost (the hub reconnected): every run here streams."""
        for output in self._runs.values():
            output.quiet = False
        self._runs.clear()

    def add(self, output: LiveOutput) -> None:
        if output.task_id in self._asked:
            output.quiet = False
        else:
            self._runs[output.task_id] = output

    def discard(self, output: LiveOutput) -> None:
        if self._runs.get(output.task_id) is output:
            del self._runs[output.task_id]


class LiveWriter:
    """The process's writer of live output: at most one flush per tick (a quarter
    `interval`), of every run's pieces that are due (a run at most once an interval);
    and at once, when a response ends, of every response ending meanwhile (see the
    module docstring). It is the only writer of the process's live output, so a
    run's pieces are written in order."""

    def __init__(
        self, store: LiveStore, *, interval: float, quiet: QuietRuns | None = None
    ) -> None:
        """`quiet`: where the runs of quiet tasks learn that a stream asked for their
        output (None: a quiet task stays unstreamed for the rest of its run)."""
        self.store = store
        self.interval = interval
        self.quiet = quiet
        self.tick = interval / 4
        self._due: dict[LiveOutput, None] = {}  # runs with something to send, in order
        self._ending: dict[LiveOutput, asyncio.Future[None]] = {}  # responses that ended
        self._wake = asyncio.Event()  # something is due
        self._hurry = asyncio.Event()  # a response ended: its rest is written at once
        self._runner: asyncio.Task[None] | None = None
        self.flushes = 0

    def output(self, *, task_id: uuid.UUID, attempt: int, quiet: bool = False) -> LiveOutput:
        """A run's live output (`quiet`: not streamed until a stream asks for it); the
        writer starts with the first."""
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="live-writer")
        output = LiveOutput(self, task_id=task_id, attempt=attempt)
        if quiet and self.quiet is not None:
            output.quiet = True
            self.quiet.add(output)
        return output

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for ending in self._ending.values():
            ending.cancel()

    def mark(self, output: LiveOutput) -> None:
        self._due[output] = None
        self._wake.set()

    def forget(self, output: LiveOutput) -> None:
        self._due.pop(output, None)

    async def flush_now(self, output: LiveOutput) -> None:
        """`output`'s rest, written by the next flush, which happens at once (with
        every other response ending meanwhile)."""
        ending = self._ending.get(output)
        if ending is None:
            ending = self._ending[output] = asyncio.get_running_loop().create_future()
        self.mark(output)
        self._hurry.set()
        await asyncio.shield(ending)

    async def _run(self) -> None:
        """Flush what is due, at most once a tick (sooner when a response ended);
        sleep, not woken by every token, while the runs that have something are not
        due yet."""
        loop = asyncio.get_running_loop()
        last = -math.inf
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._due:
                now = loop.time()
                at = max(last + self.tick, min(output.due_at() for output in self._due))
                if at > now and not self._ending:
                    self._hurry.clear()
                    await wait_until(self._hurry.wait(), at - now)
                    continue
                ready = [o for o in self._due if o.due_at() <= now or o in self._ending]
                for output in ready:
                    del self._due[output]
                    output.sent_at = now
                last = now
                await self._flush(ready)

    async def _flush(self, outputs: list[LiveOutput]) -> None:
        # Only the responses whose end was asked for before their pieces are taken
        # here are done by this flush; one that ends while it is in flight has its
        # rest written by the next.
        endings = [self._ending.pop(o) for o in outputs if o in self._ending]
        runs = [deltas for deltas in (output.take() for output in outputs) if deltas]
        try:
            if runs:
                await self.store.flush(runs)
                self.flushes += 1
        except _FLUSH_ERRORS as exc:
            for output in outputs:
                output.broken = True
            log.debug("live output stopped for %d responses: %s", len(outputs), exc)
        except Exception:
            # Never worth a run: the writer goes on, these responses send no more.
            for output in outputs:
                output.broken = True
            log.exception("live output could not be written")
        finally:
            for ending in endings:
                if not ending.done():
                    ending.set_result(None)


class LiveOutput:
    """One run's live output: `begin`, `feed`, `end` per model response, `close`
    when the run stops; its pieces are written by the process's `LiveWriter`."""

    __slots__ = (
        "_numbers",
        "_parts",
        "_position",
        "attempt",
        "broken",
        "quiet",
        "ready_at",
        "sent_at",
        "started",
        "task_id",
        "writer",
    )

    def __init__(self, writer: LiveWriter, *, task_id: uuid.UUID, attempt: int) -> None:
        self.writer = writer
        self.task_id = task_id
        self.attempt = attempt
        self._position = -1
        self._parts: dict[int, _Part] = {}  # pydantic-ai's part index → ours
        self._numbers = 0
        self.ready_at = math.inf  # the end of the response's first tick
        self.sent_at = -math.inf  # when its last delta was taken
        self.started = False  # this response has sent a delta
        self.broken = False  # a flush of this response failed
        self.quiet = False  # its model responses are not streamed (`QuietRuns`)

    def begin(self, position: int) -> None:
        """A model response starts; it will be message `position`."""
        self._position = position
        self._parts.clear()
        self._numbers = 0
        self.started = self.broken = False
        self.ready_at = math.inf

    def due_at(self) -> float:
        """When its pieces may be written: an interval after the last it sent, once
        the response has sent one; the end of its first tick before."""
        return self.sent_at + self.writer.interval if self.started else self.ready_at

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
            self._due()

    def _start(self, index: int, kind: DeltaKind, tool: str | None, text: str) -> None:
        self._parts[index] = _Part(number=self._numbers, kind=kind, tool=tool, buffer=text)
        self._numbers += 1
        self._due()

    def _due(self) -> None:
        if self.broken:
            return
        if self.ready_at == math.inf:  # the first piece opens the first tick
            self.ready_at = asyncio.get_running_loop().time() + self.writer.tick
        self.writer.mark(self)

    def take(self) -> list[Delta]:
        """The pieces not yet written, one per part (for the writer)."""
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
        if deltas and not self.broken:
            self.started = True
        return deltas

    async def end(self) -> None:
        """The response is complete: send the rest (if it sent anything), before the
        ledger persists it."""
        if self.started and not self.broken:
            await self.writer.flush_now(self)
        else:
            self.writer.forget(self)
        self._parts.clear()

    def close(self) -> None:
        """The run stopped: nothing more is sent. (The rows left in `task_live` are
        the reaper's to sweep once the task is no longer running this attempt.)"""
        self.writer.forget(self)
        if self.writer.quiet is not None:
            self.writer.quiet.discard(self)
        self._parts.clear()
