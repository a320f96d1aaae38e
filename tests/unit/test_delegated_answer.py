"""A delegated task's live output: the remote's answer as its artifacts' text grows,
whatever order and shape the remote's events bring it in."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from taskservice.worker.live_output import LiveOutput, LiveWriter
from taskservice.worker.remote_answers import Answer as _Answer


@pytest.fixture
async def output() -> AsyncIterator[LiveOutput]:
    writer = LiveWriter(None, interval=60)  # type: ignore[arg-type]  # nothing is written
    yield writer.output(task_id=uuid.uuid4(), attempt=1)
    await writer.stop()


def taken(output: LiveOutput) -> list[tuple[int, int, str]]:
    """The pieces the writer would take now: (message, offset, text)."""
    return [(d.position, d.offset, d.text) for d in output.take()]


async def test_the_answer_streams_as_it_grows_and_a_snapshot_knowing_less_is_passed_over(
    output: LiveOutput,
) -> None:
    answer = _Answer(output, position=1)
    answer.show("")  # nothing yet
    answer.show("Hel")
    answer.show("Hello")
    assert taken(output) == [(1, 0, "Hello")]
    answer.show("")  # a snapshot read again, without the chunks so far
    answer.show("Hel")
    assert taken(output) == []
    answer.show("Hello, wor")
    assert taken(output) == [(1, 5, ", wor")]


async def test_an_answer_replaced_by_another_text_stops_streaming(output: LiveOutput) -> None:
    answer = _Answer(output, position=1)
    answer.show("Draft one")
    assert taken(output) == [(1, 0, "Draft one")]
    answer.show("Final answer")
    answer.show("Final answer, longer")
    assert taken(output) == []
    assert answer.diverged


async def test_a_quiet_task_streams_nothing_until_asked_then_all_it_has(
    output: LiveOutput,
) -> None:
    answer = _Answer(output, position=1)
    output.quiet = True
    answer.show("Hello")
    assert taken(output) == []
    output.quiet = False  # a stream asked
    answer.show("Hello, world")
    assert taken(output) == [(1, 0, "Hello, world")]
