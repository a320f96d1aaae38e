"""Live output on the reading side: the deltas of the tasks this process's streams
follow, each stream's view of the message in progress.

Every process LISTENs on `taskservice_deltas` (through the event hub); a process
with no stream open reads no notice, and one with streams reads each flush's notice
once, whatever the number of tasks in it. A stream following a task
holds a `LiveView`: the deltas received and not yet sent (merged while the reader is
slow, so at most one piece per part), and what it has sent of the message in
progress, so that it sends each character once, in order:

```
notice ─▶ LiveView.add ─▶ wake the stream ─▶ LiveView.take ─▶ `delta` events
so_far (on opening mid-message, after a gap, after the hub reconnected) ──┘
```

A delta extends what was sent, or is dropped: already sent (a duplicate, or text the
text so far held), or of a message already persisted (its `message` event went out),
or of an earlier attempt. A delta past what was sent (a notice lost with the LISTEN
connection) marks the view to read the text so far again (`resync`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import replace

from taskservice.common.aio import registered
from taskservice.db.live import DELTAS_CHANNEL, LiveStore, parse
from taskservice.domain.models import Delta
from taskservice.following.hub import EventHub, Flag


def _merged(last: Delta, delta: Delta) -> Delta | None:
    """`delta` appended to `last`, when it continues it."""
    if (last.attempt, last.position, last.part) != (delta.attempt, delta.position, delta.part):
        return None
    if delta.offset != last.end:
        return None
    return replace(last, text=last.text + delta.text, tool=last.tool or delta.tool)


class LiveView:
    """One stream's view of a task's live output (see the module docstring)."""

    __slots__ = ("_flag", "_message", "_pending", "_sent", "done", "resync")

    def __init__(self, flag: Flag) -> None:
        self._flag = flag
        self._pending: list[Delta] = []
        self._message = (0, -1)  # (attempt, position) of the message being sent
        self._sent: dict[int, int] = {}  # part → characters sent
        self.done = -1  # the highest position whose complete message was sent
        self.resync = False

    def add(self, deltas: list[Delta]) -> None:
        for delta in deltas:
            merged = _merged(self._pending[-1], delta) if self._pending else None
            if merged is not None:
                self._pending[-1] = merged
            else:
                self._pending.append(delta)
        self._flag.wake()

    def reread(self, so_far: list[Delta]) -> None:
        """The text so far, read after every delta pending here was notified (so it
        holds them): it goes first."""
        self.resync = False
        self._pending[:0] = so_far

    def persisted(self, position: int) -> None:
        """The complete message at `position` was sent: its deltas are no more."""
        self.done = max(self.done, position)

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def take(self) -> list[Delta]:
        """What to send now, in order, each character once."""
        out: list[Delta] = []
        pending, self._pending = self._pending, []
        for delta in pending:
            message = (delta.attempt, delta.position)
            if delta.position <= self.done or message < self._message:
                continue
            if message > self._message:
                self._message, self._sent = message, {}
            sent = self._sent.get(delta.part, 0)
            if delta.part in self._sent and delta.end <= sent:
                continue  # sent already
            if delta.offset > sent:
                self.resync = True  # a notice was lost: read the text so far again
                continue
            if delta.offset < sent:
                delta = replace(delta, offset=sent, text=delta.text[sent - delta.offset :])
            self._sent[delta.part] = delta.end
            out.append(delta)
        return out


class LiveFeed:
    """The per-process fan-out of deltas to the streams that follow their task."""

    def __init__(self, hub: EventHub, store: LiveStore) -> None:
        self.store = store
        self._views: dict[uuid.UUID, set[LiveView]] = {}
        hub.on_channel(DELTAS_CHANNEL, self._on_payload)  # before the hub starts
        hub.on_reconnect(self._resync_all)

    def _on_payload(self, payload: str) -> None:
        if not self._views:
            return  # no stream here follows a task (a worker-only process)
        for delta in parse(payload):
            for view in self._views.get(delta.task_id, ()):
                view.add([delta])

    def _resync_all(self) -> None:
        """Notices may have been lost while the hub was away."""
        for views in self._views.values():
            for view in views:
                view.resync = True

    @contextlib.contextmanager
    def view(self, task_id: uuid.UUID, flag: Flag) -> Iterator[LiveView]:
        with registered(self._views, task_id, LiveView(flag)) as view:
            yield view

    async def ask(self, task_id: uuid.UUID) -> None:
        """A stream wants the live output of a quiet task (`Task.quiet`): its model
        responses are streamed from the next one on, wherever it runs."""
        await self.store.ask(task_id)

    async def catch_up(self, task_id: uuid.UUID, view: LiveView) -> None:
        """Read the text so far into `view`, which asked for it (`resync`)."""
        view.reread(await self.store.so_far(task_id))

    @property
    def watched(self) -> int:
        return sum(len(views) for views in self._views.values())
