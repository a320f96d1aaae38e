"""Observation over real HTTP: SSE streams with exact resumption, fan-out across
replicas, and the long poll."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.conftest import LiveFactory, wait_for
from tests.sse import Event, read_events

STREAM = {"Accept": "text/event-stream"}


def progressing(steps: int, pause: float) -> FunctionModel:
    """Reports progress `steps` times, pausing between them, then answers."""

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        await asyncio.sleep(pause)
        if turn < steps:
            return ModelResponse(
                parts=[ToolCallPart("report_progress", {"percent": turn, "note": f"step {turn}"})]
            )
        return ModelResponse(parts=[TextPart("finished")])

    return FunctionModel(play)


async def collect(
    client: httpx.AsyncClient,
    task_id: str,
    *,
    last_event_id: int | None = None,
    stop_after: int | None = None,
) -> list[Event]:
    headers = dict(STREAM)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    events: list[Event] = []
    async with client.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for event in read_events(response):
            events.append(event)
            if stop_after is not None and sum(e.id is not None for e in events) >= stop_after:
                break  # the client goes away mid-stream
    return events


async def test_a_stream_starts_with_a_snapshot_and_ends_after_the_terminal_event(
    make_live: LiveFactory,
) -> None:
    steps = {"steps": progressing(3, 0.05)}
    async with (
        make_live(models=steps, workers_enabled=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as client,
    ):
        task = (await client.post("/v1/tasks", json={"input": "x", "model": "steps"})).json()
        events = await collect(client, task["id"])
    snapshot, *rest = events
    assert snapshot.event == "snapshot"
    assert snapshot.id is None
    assert snapshot.retry == 2000
    assert snapshot.json()["id"] == task["id"]
    seqs = [int(e.id) for e in rest if e.id]
    assert seqs == list(range(1, len(seqs) + 1))
    assert [e.json()["seq"] for e in rest] == seqs
    assert rest[-1].event == "state_change"
    assert rest[-1].json()["data"]["to"] == "completed"
    assert sum(e.event == "progress" for e in rest) == 3


async def test_a_reader_that_keeps_disconnecting_ends_with_every_event_exactly_once(
    make_live: LiveFactory,
) -> None:
    rng = random.Random(7)
    steps = {"steps": progressing(12, 0.03)}
    async with (
        make_live(models=steps, workers_enabled=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as client,
    ):
        task = (await client.post("/v1/tasks", json={"input": "x", "model": "steps"})).json()
        received: list[int] = []
        done = False
        reconnects = 0
        while not done:
            last = received[-1] if received else None
            chunk = await collect(
                client, task["id"], last_event_id=last, stop_after=rng.randint(1, 4)
            )
            reconnects += 1
            for event in chunk:
                if event.id is not None:
                    received.append(int(event.id))
                    done = done or (
                        event.event == "state_change" and event.json()["data"]["to"] == "completed"
                    )
            assert reconnects < 200
        total = (await client.get(f"/v1/tasks/{task['id']}/events", params={"limit": 200})).json()[
            "events"
        ]
    assert received == list(range(1, len(total) + 1))
    assert reconnects > 3


async def test_after_works_for_clients_that_cannot_set_headers(make_live: LiveFactory) -> None:
    async with make_live() as live, httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        async with client.stream(
            "GET", f"/v1/tasks/{task['id']}/events", params={"after": 1}, headers=STREAM
        ) as response:
            events = [e async for e in read_events(response)]
    assert [e.event for e in events] == ["snapshot", "state_change"]
    assert events[1].id == "2"


async def test_a_stream_resumed_after_the_end_closes_at_once(make_live: LiveFactory) -> None:
    async with make_live() as live, httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        started = time.monotonic()
        events = await collect(client, task["id"], last_event_id=2)
    assert [e.event for e in events] == ["snapshot"]
    assert time.monotonic() - started < 10  # not held open until the client gives up


async def test_an_event_written_through_one_replica_reaches_a_stream_on_another(
    make_live: LiveFactory,
) -> None:
    # Streams re-read the table only every 60 s here: only NOTIFY can be this fast.
    async with (
        make_live(stream_poll_seconds=60) as one,
        make_live(stream_poll_seconds=60) as two,
        httpx.AsyncClient(base_url=one.url, timeout=30) as writer,
        httpx.AsyncClient(base_url=two.url, timeout=30) as reader,
    ):
        task = (await writer.post("/v1/tasks", json={"input": "x"})).json()
        seen: list[tuple[str, float]] = []

        async def read() -> None:
            async with reader.stream(
                "GET", f"/v1/tasks/{task['id']}/events", headers=STREAM
            ) as response:
                async for event in read_events(response):
                    seen.append((event.event, time.monotonic()))

        reading = asyncio.create_task(read())
        await asyncio.sleep(0.5)  # the stream is live and caught up
        cancelled_at = time.monotonic()
        await writer.post(f"/v1/tasks/{task['id']}/cancel")
        await asyncio.wait_for(reading, 10)
    assert [kind for kind, _ in seen] == ["snapshot", "state_change", "state_change"]
    assert seen[-1][1] - cancelled_at < 1.0


async def test_another_tenant_cannot_stream_a_task(make_live: LiveFactory, db: Any) -> None:
    from taskservice.db.keys import ApiKeyStore

    keys = ApiKeyStore(db)
    alice, _ = await keys.create(tenant="alice")
    bob, _ = await keys.create(tenant="bob")
    async with make_live() as live, httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        task = (
            await client.post(
                "/v1/tasks", json={"input": "x"}, headers={"Authorization": f"Bearer {alice}"}
            )
        ).json()
        response = await client.get(
            f"/v1/tasks/{task['id']}/events",
            headers={**STREAM, "Authorization": f"Bearer {bob}"},
        )
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


async def test_a_long_poll_answers_as_soon_as_the_task_settles(make_live: LiveFactory) -> None:
    async with make_live() as live, httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()

        async def cancel_soon() -> None:
            await asyncio.sleep(0.3)
            await client.post(f"/v1/tasks/{task['id']}/cancel")

        started = time.monotonic()
        canceller = asyncio.create_task(cancel_soon())
        waited = await client.get(f"/v1/tasks/{task['id']}", params={"wait": 20})
        elapsed = time.monotonic() - started
        await canceller
        assert waited.json()["state"] == "cancelled"
        assert 0.25 < elapsed < 10  # the cancel, not the 20 s wait

        other = (await client.post("/v1/tasks", json={"input": "y"})).json()
        started = time.monotonic()
        unchanged = await client.get(f"/v1/tasks/{other['id']}", params={"wait": 0.5})
        assert unchanged.json()["state"] == "pending"
        assert 0.45 < time.monotonic() - started < 10
        bad = await client.get(f"/v1/tasks/{other['id']}", params={"wait": -1})
        assert bad.status_code == 422


async def test_a_stalled_reader_is_cut_off_without_delaying_others(make_live: LiveFactory) -> None:
    """A client that stops reading while a task writes megabytes of events: the
    server gives up on it after the send timeout, frees its watcher, and a healthy
    reader of the same task receives everything meanwhile."""
    note = "x" * 60_000

    async def chatty(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < 100:
            return ModelResponse(
                parts=[ToolCallPart("report_progress", {"percent": 1, "note": note})]
            )
        return ModelResponse(parts=[TextPart("done")])

    async with (
        make_live(
            models={"chatty": FunctionModel(chatty)},
            workers_enabled=True,
            stream_send_timeout=1.0,
            default_request_limit=200,
        ) as live,
        httpx.AsyncClient(base_url=live.url, timeout=60) as stalled_client,
        httpx.AsyncClient(base_url=live.url, timeout=60) as client,
    ):
        watchers = live.app.state.runtime.service._watchers
        task = (await client.post("/v1/tasks", json={"input": "x", "model": "chatty"})).json()
        stalled = stalled_client.stream("GET", f"/v1/tasks/{task['id']}/events", headers=STREAM)
        response = await stalled.__aenter__()  # headers read; the body is never read
        assert response.status_code == 200
        started = time.monotonic()
        events = await collect(client, task["id"])
        assert events[-1].json()["data"]["to"] == "completed"
        assert sum(e.event == "progress" for e in events) == 100
        assert time.monotonic() - started < 30
        # The stalled stream was given up on: no watcher is left behind...
        await wait_for(lambda: watchers.watched == 0, timeout=10)
        # ...and it really was cut short: its body ends before the terminal event.
        try:
            body = await response.aread()
        except httpx.HTTPError:
            body = b""
        await stalled.__aexit__(None, None, None)
        assert b'"to":"completed"' not in body
