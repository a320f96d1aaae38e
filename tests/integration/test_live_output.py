"""Live output over the real path: the OpenAI-compatible fake server streams over
HTTP, pydantic-ai's streaming run feeds the worker's deltas into PostgreSQL, and a
real SSE client on another replica rebuilds the text exactly."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta
from pydantic_ai.models import override_allow_model_requests
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.live import LiveStore
from taskservice.db.sql import Database
from taskservice.domain.models import Delta
from taskservice.domain.states import TaskState
from taskservice.worker.live_output import LiveWriter
from tests.conftest import LiveFactory, wait_for
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.helpers import STREAM, force_state, new_task, rebuild, stream
from tests.sse import Event, read_events

MODEL = "openai-chat:fake-gpt"
WORDS = [f"word{i}" for i in range(40)]
ANSWER = " ".join(WORDS)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server, override_allow_model_requests(True):
        yield server


@pytest.fixture
async def live_db(database_url: str, db: AsyncEngine) -> AsyncIterator[Database]:
    async with Database(database_url, pool_size=4) as database:
        yield database


def provider(fake: FakeOpenAI, **more: Any) -> dict[str, Any]:
    return {
        "openai_base_url": fake.base_url,
        "openai_api_key": "sk-test",
        "allowed_models": ["offline", MODEL],
        **more,
    }


async def submit(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/v1/tasks", json={"input": "write", "model": MODEL, **body})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


@asynccontextmanager
async def two_replicas(
    make_live: LiveFactory, fake: FakeOpenAI
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Clients of the worker's replica, and of an API replica without workers."""
    async with (
        make_live(**provider(fake, workers_enabled=True)) as worker,
        make_live(**provider(fake, workers_enabled=False)) as api,
        httpx.AsyncClient(base_url=worker.url, timeout=30) as of_worker,
        httpx.AsyncClient(base_url=api.url, timeout=30) as of_api,
    ):
        yield of_worker, of_api


async def test_a_streamed_answer_reaches_a_client_of_another_replica_token_by_token(
    make_live: LiveFactory, fake: FakeOpenAI, engine: AsyncEngine
) -> None:
    fake.queue(Reply(text=ANSWER, chunk_delay=0.02))
    async with two_replicas(make_live, fake) as (submitter, watcher):
        task = await submit(submitter)
        events = await stream(watcher, task["id"])
        done = (await watcher.get(f"/v1/tasks/{task['id']}")).json()
    assert done["state"] == "completed"
    assert done["result"] == ANSWER
    deltas = [e for e in events if e.event == "delta"]
    # Coalesced: fewer pieces than the model's 40 chunks, yet several.
    assert 3 <= len(deltas) < len(WORDS) * 0.75, len(deltas)
    assert rebuild(events) == {(1, 1): {0: ANSWER}}
    assert {d.json()["kind"] for d in deltas} == {"text"}
    # Every delta comes before the complete message it belongs to.
    message_at = next(
        i
        for i, e in enumerate(events)
        if e.event == "message" and e.json()["data"]["position"] == 1
    )
    assert all(events.index(d) < message_at for d in deltas)
    async with engine.connect() as conn:
        types = (await conn.execute(text("SELECT DISTINCT type FROM task_events"))).scalars()
        assert "delta" not in set(types)


async def test_a_client_reconnecting_mid_message_gets_the_text_so_far_then_the_rest(
    make_live: LiveFactory, fake: FakeOpenAI
) -> None:
    fake.queue(Reply(text=ANSWER, chunk_delay=0.03))
    async with two_replicas(make_live, fake) as (first_replica, second_replica):
        task = await submit(first_replica)
        before = await stream(first_replica, task["id"], deltas_before_leaving=3)
        last_id = [e.id for e in before if e.id is not None][-1]
        await asyncio.sleep(0.2)  # more is written while nobody watches
        after = await stream(second_replica, task["id"], last_event_id=last_id)
    had = rebuild(before)[(1, 1)][0]
    assert had
    assert ANSWER.startswith(had)
    # The reconnected stream: the events after Last-Event-ID, then the text so far
    # (from offset 0, more than the first stream had), then the rest: the answer
    # exactly, once.
    first_delta = next(e.json() for e in after if e.event == "delta")
    assert first_delta["offset"] == 0
    assert first_delta["text"].startswith(had)
    assert len(first_delta["text"]) > len(had)
    assert rebuild(after) == {(1, 1): {0: ANSWER}}
    assert all(int(e.id) > int(last_id) for e in after if e.id is not None)


async def test_tool_call_arguments_stream_as_they_are_written(
    make_live: LiveFactory, fake: FakeOpenAI
) -> None:
    arguments = {"percent": 50, "note": "reading the whole of the input, slowly"}
    fake.queue(
        Reply(tool_calls=[("call_1", "report_progress", arguments)], chunk_delay=0.03, piece=4),
        Reply(text="done"),
    )
    async with (
        make_live(**provider(fake, workers_enabled=True)) as w,
        httpx.AsyncClient(base_url=w.url, timeout=30) as client,
    ):
        task = await submit(client)
        events = await stream(client, task["id"])
    deltas = [e.json() for e in events if e.event == "delta"]
    assert {(d["kind"], d["tool"]) for d in deltas} == {("tool_call", "report_progress")}
    assert rebuild(events)[(1, 1)] == {0: json.dumps(arguments)}
    assert any(e.event == "progress" for e in events)


async def test_an_instant_answer_sends_no_deltas_and_leaves_no_rows(
    make_live: LiveFactory, fake: FakeOpenAI, engine: AsyncEngine
) -> None:
    fake.queue(Reply(text=ANSWER))  # all chunks at once: done within the first tick
    async with (
        make_live(**provider(fake, workers_enabled=True, delta_interval_ms=400)) as w,
        httpx.AsyncClient(base_url=w.url, timeout=30) as client,
    ):
        task = await submit(client)
        events = await stream(client, task["id"])
    assert [e for e in events if e.event == "delta"] == []
    assert events[-1].json()["data"]["to"] == "completed"
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM task_live"))).scalar() == 0


async def test_a_filtered_stream_has_deltas_only_when_asked_for(
    make_live: LiveFactory, fake: FakeOpenAI
) -> None:
    fake.queue(Reply(text=ANSWER, chunk_delay=0.02), Reply(text=ANSWER, chunk_delay=0.02))
    async with (
        make_live(**provider(fake, workers_enabled=True)) as w,
        httpx.AsyncClient(base_url=w.url, timeout=30) as client,
    ):
        plain = await submit(client)
        asked = await submit(client)
        without, with_deltas = await asyncio.gather(
            stream_typed(client, plain["id"], "state_change"),
            stream_typed(client, asked["id"], "state_change", "delta"),
        )
    assert {e.event for e in without} == {"snapshot", "state_change"}
    assert {e.event for e in with_deltas} == {"snapshot", "state_change", "delta"}
    assert rebuild(with_deltas)[(1, 1)] == {0: ANSWER}


async def stream_typed(client: httpx.AsyncClient, task_id: str, *types: str) -> list[Event]:
    query = "&".join(f"type={t}" for t in types)
    events = []
    async with client.stream(
        "GET", f"/v1/tasks/{task_id}/events?{query}", headers=STREAM
    ) as response:
        assert response.status_code == 200
        async for event in read_events(response):
            events.append(event)
    return events


# -- quiet tasks: sent without a stream, streamed once a stream asks ---------------


async def a2a_send(client: httpx.AsyncClient, *, wait: bool) -> dict[str, Any]:
    """An A2A 1.0 `SendMessage` (no stream) of a new task on the fake provider."""
    params = {
        "message": {
            "role": "ROLE_USER",
            "messageId": str(uuid.uuid4()),
            "parts": [{"text": "write"}],
        },
        "configuration": {"returnImmediately": not wait},
        "metadata": {"model": MODEL},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    response = await client.post("/a2a", json=body, headers={"A2A-Version": "1.0"})
    assert response.status_code == 200, response.text
    return response.json()["result"]["task"]  # type: ignore[no-any-return]


async def quiet(engine: AsyncEngine, task_id: str) -> bool:
    async with engine.connect() as conn:
        query = text("SELECT quiet FROM tasks WHERE id = :id")
        return bool((await conn.execute(query, {"id": task_id})).scalar_one())


async def asked(engine: AsyncEngine, task_id: str) -> bool:
    return not await quiet(engine, task_id)


def streamed(fake: FakeOpenAI) -> list[bool]:
    """Whether each request the provider got asked for a stream."""
    return [bool(body.get("stream")) for body in fake.requests]


async def waited_for(client: httpx.AsyncClient) -> tuple[asyncio.Task[dict[str, Any]], str]:
    """A blocking `SendMessage` under way (a quiet task), and its task's id."""
    before = {t["id"] for t in (await client.get("/v1/tasks")).json()["tasks"]}
    sending = asyncio.create_task(a2a_send(client, wait=True))

    async def created() -> str | None:
        now = {t["id"] for t in (await client.get("/v1/tasks")).json()["tasks"]}
        return next(iter(now - before), None)

    return sending, await wait_for(created)


async def test_a_blocking_send_is_not_streamed_and_a_rest_or_non_blocking_one_is(
    make_live: LiveFactory, fake: FakeOpenAI, engine: AsyncEngine
) -> None:
    fake.queue(*(Reply(text=ANSWER, chunk_delay=0.01) for _ in range(3)))
    async with two_replicas(make_live, fake) as (worker, _api):
        sent = await a2a_send(worker, wait=True)
        assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
        assert sent["artifacts"][0]["parts"] == [{"text": ANSWER}]
        rest = await submit(worker)
        await stream(worker, rest["id"])
        not_waited = await a2a_send(worker, wait=False)  # its sender follows it
        await stream(worker, not_waited["id"])
    assert await quiet(engine, sent["id"])
    assert not await quiet(engine, rest["id"])
    assert not await quiet(engine, not_waited["id"])
    assert streamed(fake) == [False, True, True]


async def test_a_stream_asking_for_a_quiet_tasks_output_gets_its_next_response_streamed(
    make_live: LiveFactory, fake: FakeOpenAI, engine: AsyncEngine
) -> None:
    progress = {"percent": 50, "note": "half way"}
    fake.queue(
        Reply(tool_calls=[("call_1", "report_progress", progress)], delay=0.5),
        Reply(text=ANSWER, chunk_delay=0.02),
    )
    async with two_replicas(make_live, fake) as (worker, api):
        sending, task_id = await waited_for(worker)
        assert await quiet(engine, task_id)
        await wait_for(lambda: fake.requests)  # its first model request is under way
        events = await stream(api, task_id)  # on the replica without workers
        sent = await asyncio.wait_for(sending, 30)
    assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
    assert not await quiet(engine, task_id)
    assert streamed(fake) == [False, True]
    # The response under way when the stream asked came whole; the next, token by token.
    assert rebuild(events) == {(1, 3): {0: ANSWER}}
    assert events[-1].json()["data"]["to"] == "completed"


async def test_a_quiet_task_asked_for_before_its_claim_streams_its_first_response(
    make_live: LiveFactory, fake: FakeOpenAI, engine: AsyncEngine
) -> None:
    fake.queue(Reply(text=ANSWER, chunk_delay=0.02))
    async with (
        make_live(**provider(fake, workers_enabled=False)) as api_only,
        httpx.AsyncClient(base_url=api_only.url, timeout=30) as api,
    ):
        sending, task_id = await waited_for(api)  # nobody runs it yet
        watching = asyncio.create_task(stream(api, task_id))
        await wait_for(lambda: asked(engine, task_id))  # the stream asked
        async with make_live(**provider(fake, workers_enabled=True)):
            events = await asyncio.wait_for(watching, 30)
            await asyncio.wait_for(sending, 30)
    assert streamed(fake) == [True]
    assert rebuild(events) == {(1, 1): {0: ANSWER}}


# -- the worker's side, on the real database --------------------------------------


def _text_start(content: str) -> PartStartEvent:
    return PartStartEvent(index=0, part=TextPart(content))


def _text_delta(content: str) -> PartDeltaEvent:
    return PartDeltaEvent(index=0, delta=TextPartDelta(content))


class _Timed(LiveStore):
    """The real store, noting when each flush starts and for which tasks."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.flushed: list[tuple[float, set[Any]]] = []

    async def flush(self, runs: list[list[Delta]]) -> None:
        self.flushed.append((time.monotonic(), {run[0].task_id for run in runs}))
        await super().flush(runs)


async def test_runs_streaming_together_share_one_flush_an_interval_and_the_rest_at_the_end(
    live_db: Database, store: Any
) -> None:
    tasks = [await new_task(store) for _ in range(3)]
    timed = _Timed(live_db)
    writer = LiveWriter(timed, interval=0.05)
    outputs = [writer.output(task_id=task.id, attempt=1) for task in tasks]
    for output in outputs:
        output.begin(1)
        output.feed(_text_start("a"))
    started = time.monotonic()
    for _ in range(100):
        await asyncio.sleep(0.005)
        for output in outputs:
            output.feed(_text_delta("a"))
    elapsed = time.monotonic() - started
    for output in outputs:
        await output.end()
        output.close()
    await writer.stop()
    # Three runs streaming together: at most one statement a tick, and each run in
    # at most one an interval.
    assert 2 <= writer.flushes <= elapsed / writer.tick + 2, (writer.flushes, elapsed)
    for task in tasks:
        sent = sum(task.id in ids for _, ids in timed.flushed)
        assert sent <= elapsed / 0.05 + 2, (sent, elapsed)
    async with live_db.connection() as conn:
        written = await conn.fetch("SELECT text FROM task_live ORDER BY task_id")
    assert [row["text"] for row in written] == ["a" * 101] * 3


async def test_a_run_waits_for_its_own_interval_not_for_another_runs_flush(
    live_db: Database, store: Any
) -> None:
    """Two runs each writing a token every 60 ms (slower than the 40 ms interval),
    the second 5 ms after the first: each token goes out within a tick (10 ms) of
    being written, not an interval after the other run's flush; and no run sends
    more than one delta an interval."""
    tasks = [await new_task(store) for _ in range(2)]
    timed = _Timed(live_db)
    writer = LiveWriter(timed, interval=0.04)
    outputs = [writer.output(task_id=task.id, attempt=1) for task in tasks]
    fed: dict[Any, list[float]] = {task.id: [] for task in tasks}

    async def write(output: Any, delay: float) -> None:
        await asyncio.sleep(delay)
        output.begin(1)
        output.feed(_text_start("a"))
        for _ in range(8):
            await asyncio.sleep(0.06)
            fed[output.task_id].append(time.monotonic())
            output.feed(_text_delta("a"))

    await asyncio.gather(write(outputs[0], 0), write(outputs[1], 0.005))
    for output in outputs:
        await output.end()
        output.close()
    await writer.stop()
    for task in tasks:
        sent = [at for at, ids in timed.flushed if task.id in ids]
        gaps = [later - earlier for earlier, later in itertools.pairwise(sent[:-1])]
        assert min(gaps) >= 0.04 * 0.95, gaps  # the last (its end) goes at once
        waits = [min(at - token for at in sent if at >= token) for token in fed[task.id]]
        assert sorted(waits)[-2] < 0.025, waits  # one late wake-up forgiven


async def test_a_response_done_within_its_first_tick_flushes_nothing(
    live_db: Database, store: Any
) -> None:
    task = await new_task(store)
    writer = LiveWriter(LiveStore(live_db), interval=0.05)
    live = writer.output(task_id=task.id, attempt=1)
    live.begin(1)
    live.feed(_text_start("all"))
    live.feed(_text_delta(" at once"))
    await live.end()
    await asyncio.sleep(0.1)
    live.close()
    await writer.stop()
    assert writer.flushes == 0
    async with live_db.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM task_live") == 0


async def test_the_text_so_far_is_the_running_attempts_unpersisted_message_and_swept_after(
    live_db: Database, store: Any, engine: AsyncEngine
) -> None:
    task = await new_task(store)
    await force_state(engine, task.id, TaskState.RUNNING)
    attempt = (await store.get(task.id, tenant="default")).attempt
    live = LiveStore(live_db)

    def delta(position: int, offset: int, text_: str, at: int = attempt) -> Delta:
        return Delta(task.id, at, position, 0, "text", offset, text_)

    await live.flush([[delta(1, 0, "hello")]])
    await live.flush([[delta(1, 5, " world")]])
    assert [d.text for d in await live.so_far(task.id)] == ["hello world"]
    await live.flush([[delta(1, 0, "stale", at=attempt - 1)]])  # an earlier attempt's
    assert await live.so_far(task.id) == []
    await live.flush([[delta(3, 0, "next")]])
    assert [(d.position, d.offset, d.text) for d in await live.so_far(task.id)] == [(3, 0, "next")]
    await force_state(engine, task.id, TaskState.COMPLETED)
    assert await live.so_far(task.id) == []
    await live.sweep()
    async with live_db.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM task_live") == 0


async def test_a_stream_opened_mid_message_starts_with_the_text_so_far_while_the_model_is_silent(
    make_live: LiveFactory, live_db: Database, store: Any, engine: AsyncEngine
) -> None:
    task = await new_task(store)
    await force_state(engine, task.id, TaskState.RUNNING)  # attempt 1
    live = LiveStore(live_db)
    await live.flush([[Delta(task.id, 1, 1, 0, "text", 0, "hello")]])
    deltas: list[dict[str, Any]] = []
    async with (
        make_live() as api,
        httpx.AsyncClient(base_url=api.url, timeout=30) as client,
        client.stream("GET", f"/v1/tasks/{task.id}/events", headers=STREAM) as response,
    ):
        async for event in read_events(response):
            if event.event != "delta":
                continue
            deltas.append(event.json())
            if len(deltas) == 1:  # nothing more was written: it came from task_live
                await live.flush([[Delta(task.id, 1, 1, 0, "text", 5, " world")]])
            else:
                break
    assert [(d["offset"], d["text"]) for d in deltas] == [(0, "hello"), (5, " world")]


async def test_a_response_that_ends_during_a_flush_has_its_rest_written_before_end_returns(
    live_db: Database, store: Any
) -> None:
    """The ledger persists a message once `end()` returns, and readers drop deltas of
    a persisted message: the rest must be written by then, even when the response
    ends while a flush holding its earlier pieces is still in flight."""
    task = await new_task(store)
    writer = LiveWriter(LiveStore(live_db), interval=0.05)
    live = writer.output(task_id=task.id, attempt=1)
    live.begin(1)
    live.feed(_text_start("a"))
    await wait_for(lambda: writer.flushes == 1)
    async with live_db.connection() as blocker:
        lock = blocker.transaction()
        await lock.start()
        await blocker.execute("SELECT 1 FROM task_live WHERE task_id = $1 FOR UPDATE", task.id)
        live.feed(_text_delta("b"))
        await asyncio.sleep(0.2)  # the next flush (with "b") waits on the row lock
        live.feed(_text_delta("c"))
        ending = asyncio.create_task(live.end())
        await asyncio.sleep(0.1)
        assert not ending.done()
        await lock.rollback()
    await asyncio.wait_for(ending, 5)
    async with live_db.connection() as conn:
        written = await conn.fetchval("SELECT text FROM task_live WHERE task_id = $1", task.id)
    live.close()
    await writer.stop()
    assert written == "abc"
