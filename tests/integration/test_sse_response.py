"""The lean SSE response (`api.sse`) over real HTTP: keep-alives on an idle stream,
prompt cleanup when the client goes away, and streams ended on server shutdown —
with one helper task per stream, none left behind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sse_starlette import sse as upstream

from taskservice.api.sse import StreamGate
from taskservice.following.hub import TaskWatchers
from tests.conftest import LiveFactory, wait_for

STREAM = {"Accept": "text/event-stream"}


def helper_tasks() -> int:
    return sum(
        "_watch_client" in repr(task.get_coro()) for task in asyncio.all_tasks() if not task.done()
    )


@pytest.mark.parametrize(
    "path",
    ["task", "/v1/events"],
    ids=["task-stream (pings from the watchers' ticker)", "firehose (pings from the response)"],
)
async def test_an_idle_stream_gets_keep_alives(make_live: LiveFactory, path: str) -> None:
    async with (
        make_live(stream_ping_seconds=0.2) as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as client,
    ):
        if path == "task":
            task = (await client.post("/v1/tasks", json={"input": "x"})).json()
            path = f"/v1/tasks/{task['id']}/events"
        # Keep-alives keep coming (three, however slow the machine: the read is
        # bounded by the client's timeout, not a count of ticks in a wall-clock
        # window), and no faster than their interval (the first may come at once).
        lines: list[str] = []
        pings = 0
        started = time.monotonic()
        async with client.stream("GET", path, headers=STREAM) as r:
            assert r.status_code == 200
            assert r.headers["cache-control"] == "no-store"
            async for line in r.aiter_lines():
                lines.append(line)
                pings += line.startswith(": ping")
                if pings == 3:
                    break
        took = time.monotonic() - started
        assert pings == 3, lines
        assert took >= 2 * 0.2 * 0.9, (took, lines)


@asynccontextmanager
async def pending_task(
    make_live: LiveFactory,
) -> AsyncIterator[tuple[httpx.AsyncClient, TaskWatchers, dict[str, Any]]]:
    """A live server (no workers), a client, the server's watchers and a pending task."""
    async with (
        make_live() as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as client,
    ):
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        yield client, live.app.state.runtime.service._watchers, task


async def test_a_client_that_goes_away_frees_its_stream_at_once(make_live: LiveFactory) -> None:
    async with pending_task(make_live) as (client, watchers, task):
        before = helper_tasks()
        streams = [
            client.stream("GET", f"/v1/tasks/{task['id']}/events", headers=STREAM) for _ in range(5)
        ]
        for stream in streams:
            response = await stream.__aenter__()
            assert response.status_code == 200
        await wait_for(lambda: watchers.watched == 5, timeout=5)
        assert helper_tasks() == before + 5  # one helper task per stream, no more
        for stream in streams:
            await stream.__aexit__(None, None, None)
        started = time.monotonic()
        await wait_for(lambda: watchers.watched == 0 and helper_tasks() == before, timeout=5)
        assert time.monotonic() - started < 1.0


async def test_server_shutdown_ends_open_streams(make_live: LiveFactory) -> None:
    async with pending_task(make_live) as (client, watchers, task):
        lines: list[str] = []

        async def read_to_the_end() -> None:
            path = f"/v1/tasks/{task['id']}/events"
            async with client.stream("GET", path, headers=STREAM) as response:
                async for line in response.aiter_lines():
                    lines.append(line)

        reader = asyncio.create_task(read_to_the_end())
        # Open and sending: watched, and its snapshot out (a shutdown between the two
        # would end the stream before its first line, as it may).
        await wait_for(lambda: watchers.watched == 1 and "event: snapshot" in lines, timeout=5)
        # What sse-starlette's shutdown watcher does when the server begins to stop.
        for listener in list(upstream._get_shutdown_state().events):
            listener.set()
        await asyncio.wait_for(reader, timeout=5)  # the stream ended
        assert lines[0] == "event: snapshot"
        await wait_for(lambda: watchers.watched == 0, timeout=5)


async def first_line(response: httpx.Response) -> str:
    async for line in response.aiter_lines():
        if line:
            return line
    return ""


async def test_streams_are_set_up_a_few_at_a_time_and_give_their_slot_back(
    make_live: LiveFactory,
) -> None:
    async with (
        make_live() as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as client,
    ):
        gate = live.app.stream_gate = StreamGate(1, wait=30)
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        path = f"/v1/tasks/{task['id']}/events"
        assert await gate.enter()  # another stream is being set up

        async def open_stream() -> str:
            async with client.stream("GET", path, headers=STREAM) as response:
                return await first_line(response)

        opening = asyncio.create_task(open_stream())
        await asyncio.sleep(0.5)
        assert not opening.done()  # waiting for the slot, before any routing
        gate.leave()
        assert (await asyncio.wait_for(opening, 5)) == "event: snapshot"
        assert gate.in_setup == 0

        # Once its first event is out, an open stream holds no slot.
        async with client.stream("GET", path, headers=STREAM) as response:
            assert await first_line(response) == "event: snapshot"
            assert gate.in_setup == 0
        # Nor do answers that are not streams: the JSON event log, a 404.
        assert (await client.get(path)).status_code == 200
        missing = await client.get("/v1/tasks/00000000-0000-0000-0000-000000000000/events")
        assert missing.status_code == 404
        assert gate.in_setup == 0
        assert gate.waited_out == 0


async def test_a_held_up_gate_delays_a_stream_by_its_wait_at_most(make_live: LiveFactory) -> None:
    async with (
        make_live() as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as client,
    ):
        gate = live.app.stream_gate = StreamGate(1, wait=0.3)
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        assert await gate.enter()  # a setup that never finishes
        started = time.monotonic()
        path = f"/v1/tasks/{task['id']}/events"
        async with client.stream("GET", path, headers=STREAM) as response:
            assert await first_line(response) == "event: snapshot"
        assert 0.3 <= time.monotonic() - started < 8  # the wait, not the client's 10 s
        assert gate.waited_out == 1
        assert gate.in_setup == 1  # only the slot held above
