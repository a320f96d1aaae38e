"""The runs of quiet tasks hear a stream's ask for their output: while they run, just
before (the ask heard between the claim and the run's start), and, after the hub
reconnected, whether or not it was heard."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from taskservice.worker.live_output import LiveWriter, QuietRuns


@pytest.fixture
async def writer() -> AsyncIterator[LiveWriter]:
    writer = LiveWriter(None, interval=0.05, quiet=QuietRuns(remember=2))  # type: ignore[arg-type]
    yield writer
    await writer.stop()


async def test_an_ask_makes_the_quiet_run_of_its_task_stream(writer: LiveWriter) -> None:
    task, other = uuid.uuid4(), uuid.uuid4()
    run = writer.output(task_id=task, attempt=1, quiet=True)
    bystander = writer.output(task_id=other, attempt=1, quiet=True)
    loud = writer.output(task_id=uuid.uuid4(), attempt=1)
    assert (run.quiet, bystander.quiet, loud.quiet) == (True, True, False)
    assert writer.quiet is not None
    writer.quiet.heard("not a task id")  # ignored
    writer.quiet.heard(str(task))
    assert (run.quiet, bystander.quiet) == (False, True)


async def test_an_ask_heard_just_before_the_run_starts_still_counts(writer: LiveWriter) -> None:
    assert writer.quiet is not None
    early, forgotten = uuid.uuid4(), uuid.uuid4()
    writer.quiet.heard(str(forgotten))
    writer.quiet.heard(str(early))
    assert not writer.output(task_id=early, attempt=1, quiet=True).quiet
    writer.quiet.heard(str(uuid.uuid4()))
    writer.quiet.heard(str(uuid.uuid4()))  # two asks remembered: `forgotten` is no more
    assert writer.output(task_id=forgotten, attempt=1, quiet=True).quiet


async def test_after_a_reconnect_every_quiet_run_streams(writer: LiveWriter) -> None:
    assert writer.quiet is not None
    runs = [writer.output(task_id=uuid.uuid4(), attempt=1, quiet=True) for _ in range(3)]
    writer.quiet.all_asked()
    assert [run.quiet for run in runs] == [False, False, False]


async def test_a_closed_run_is_forgotten_but_not_its_successor(writer: LiveWriter) -> None:
    assert writer.quiet is not None
    task = uuid.uuid4()
    first = writer.output(task_id=task, attempt=1, quiet=True)
    second = writer.output(task_id=task, attempt=2, quiet=True)  # the task claimed again
    first.close()  # the first run ends after the second began: the second stays
    writer.quiet.heard(str(task))
    assert (first.quiet, second.quiet) == (True, False)
    second.close()
    third = writer.output(task_id=uuid.uuid4(), attempt=1, quiet=True)
    third.close()
    writer.quiet.all_asked()
    assert third.quiet  # closed: not told any more
