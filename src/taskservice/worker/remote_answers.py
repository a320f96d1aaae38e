"""What a remote A2A agent's task says, read by delegation (`delegation.py`): the text
of its status message and of its artifacts, its result (text, or data), the task as
an event of its stream leaves it; and the answer shown as this task's live output as
it grows (`Answer`). Pure functions of the SDK's shapes, but for `Answer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from a2a.helpers.proto_helpers import get_data_parts
from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types import Part, StreamResponse
from a2a.types import Task as RemoteTask
from a2a.types import TaskState as RemoteState
from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta

from taskservice.worker.live_output import LiveOutput


def status_text(task: RemoteTask) -> str:
    """The text of the task's status message, its parts a line apart."""
    if not task.status.HasField("message"):
        return ""
    return "\n".join(part.text for part in task.status.message.parts if part.text)


def state_name(state: int) -> str:
    return str(RemoteState.Name(state)).removeprefix("TASK_STATE_").lower()


def _joined(groups: Iterable[Sequence[Part]]) -> str:
    """The text of groups of parts (artifacts): a group's text parts run on (an
    artifact streamed in chunks is one text, whose chunks its parts are), groups a
    line apart."""
    texts = ("".join(part.text for part in parts) for parts in groups)
    return "\n".join(text for text in texts if text)


def answer_text(task: RemoteTask) -> str:
    """The text of the task's artifacts."""
    return _joined(artifact.parts for artifact in task.artifacts)


def content(groups: Sequence[Sequence[Part]]) -> Any:
    """What groups of parts (artifacts, or a message's parts) say, as a result: their
    text; or, when they hold data and no text, the data (one value, or the list of
    them); None when neither."""
    text = _joined(groups)
    if text:
        return text
    data = [value for parts in groups for value in get_data_parts(parts)]
    if data:
        return _whole(data[0] if len(data) == 1 else data)
    return None


def result(task: RemoteTask) -> Any:
    """A completed remote task's answer, as this task's result: what its artifacts
    say, else its status message's text."""
    found = content([artifact.parts for artifact in task.artifacts])
    return status_text(task) if found is None else found


def _whole(value: Any) -> Any:
    """`value` with its whole numbers as integers again (a data part's numbers are
    doubles on the wire: 3 arrives as 3.0)."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, list):
        return [_whole(item) for item in value]
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    return value


def applied(task: RemoteTask, event: StreamResponse) -> RemoteTask:
    """`task` as an event of its stream leaves it."""
    if event.HasField("task"):
        return event.task
    if event.HasField("status_update"):
        task.status.CopyFrom(event.status_update.status)
    elif event.HasField("artifact_update"):
        append_artifact_to_task(task, event.artifact_update)
    return task


@dataclass(slots=True)
class Answer:
    """The remote's answer as it is written, as this task's live output: the text of
    its artifacts, which chunks extend. A text that knows less than was shown (a
    task's snapshot, read again, without the chunks so far) is passed over; one that
    neither begins with what was shown nor is its beginning ends the streaming (the
    complete answer, persisted, says it all)."""

    live: LiveOutput | None
    position: int  # the message the answer will be: the response after the prompt
    shown: str = ""
    diverged: bool = False

    def show(self, text: str) -> None:
        if self.live is None or self.live.quiet or self.diverged or self.shown.startswith(text):
            return
        if not text.startswith(self.shown):
            self.diverged = True
            return
        if not self.shown:
            self.live.begin(self.position)
            self.live.feed(PartStartEvent(index=0, part=TextPart(text)))
        else:
            delta = TextPartDelta(content_delta=text[len(self.shown) :])
            self.live.feed(PartDeltaEvent(index=0, delta=delta))
        self.shown = text

    async def end(self, result: str) -> None:
        """The answer is complete: its rest is sent, before it is persisted."""
        if self.live is None or not self.shown:
            return
        self.show(result)
        await self.live.end()
