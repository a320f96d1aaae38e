"""Worker throughput and pickup latency, with in-process workers.

One `taskservice serve` process (API + workers) on a fresh database, the instant
offline agent. Two phases:

- light: tasks submitted at a fixed rate (default 50/s);
- saturation: tasks submitted as fast as 32 concurrent clients can.

The clients are keep-alive sockets writing each request at once, as wrk does, so
the load generator takes little of the two cores it shares with the server;
`--client httpx` submits through httpx instead, as earlier sessions did.

Pickup latency is from the commit of a task's submit to the commit of its claim:
both commits NOTIFY, and this script LISTENs on one connection, so the latency is
the gap between the two notifications (delivery delay cancels out). Throughput is
tasks completed per second in the saturation phase. CPU per task is the server
process's CPU time over the saturation phase, beside the CPU of a bare pydantic-ai
run of the same agent (as the server builds it) measured in this process, on the
same event loop.

A third phase runs `taskservice worker` alone on a fresh database and writes the
same number of tasks straight to the table: the worker's CPU per task without the
HTTP API's share.

    .venv/bin/python bench/workers.py [--light-rate 50] [--light-seconds 10] [--burst 3000]
                                      [--client raw|httpx]

Uses TASKSERVICE_DATABASE_URL's server, else the local one at 127.0.0.1:5432.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import asyncpg
import httpx

sys.path.insert(0, os.path.dirname(__file__))
from submit import (
    DEFAULT_SERVER,
    cpu_seconds,
    drop_database,
    free_port,
    make_database,
    start_serve,
    wait_ready,
)

CONCURRENCY = 32
PROMPT = "Summarise the A2A protocol in one sentence."


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Watcher:
    """Times each task's pending and running notifications, and counts completions."""

    def __init__(self) -> None:
        self.pending: dict[uuid.UUID, float] = {}
        self.running: dict[uuid.UUID, float] = {}
        self.completed = 0
        self.done = asyncio.Event()
        self.expected = 0

    def on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        now = time.perf_counter()
        _, task_id, _, _, _, target, _ = payload.split(",", 6)
        key = uuid.UUID(task_id)
        if target == "pending":
            self.pending[key] = now
        elif target == "running":
            self.running[key] = now
        elif target == "completed":
            self.completed += 1
            if self.completed >= self.expected:
                self.done.set()

    def latencies_ms(self, ids: set[uuid.UUID]) -> list[float]:
        return [
            (self.running[i] - self.pending[i]) * 1000
            for i in ids
            if i in self.running and i in self.pending
        ]


Submit = Callable[[], Awaitable[uuid.UUID]]
BODY = json.dumps({"input": PROMPT}).encode()


class Connection:
    """One keep-alive HTTP/1.1 connection that submits a task per request, written
    at once (as wrk and curl send a small request): the load generator stays light
    on the cores it shares with the server. (httpx costs the client ~1.5 ms of CPU
    per request here, and caps submits near 550/s.)"""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def submit(self) -> uuid.UUID:
        self.writer.write(
            b"POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
        )
        status = await self.reader.readline()
        if b" 201 " not in status:
            raise RuntimeError(f"submit answered {status!r}")
        length = 0
        while (line := await self.reader.readline()) != b"\r\n":
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return uuid.UUID(json.loads(await self.reader.readexactly(length))["id"])

    def close(self) -> None:
        self.writer.close()


@asynccontextmanager
async def submitters(kind: str, port: int, count: int) -> AsyncIterator[list[Submit]]:
    """`count` ways to submit a task concurrently: raw connections, or one httpx
    client (`--client httpx`, the earlier sessions' load generator)."""
    if kind == "httpx":
        limits = httpx.Limits(max_connections=count)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30
        ) as client:

            async def submit() -> uuid.UUID:
                response = await client.post("/v1/tasks", json={"input": PROMPT})
                response.raise_for_status()
                return uuid.UUID(response.json()["id"])

            yield [submit] * count
        return
    connections = [await Connection.open(port) for _ in range(count)]
    try:
        yield [connection.submit for connection in connections]
    finally:
        for connection in connections:
            connection.close()


async def light_phase(submit: Submit, rate: float, seconds: float) -> set[uuid.UUID]:
    ids: set[uuid.UUID] = set()
    start = time.perf_counter()
    for n in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + n / rate - time.perf_counter()))
        ids.add(await submit())
    return ids


async def burst_phase(submits: list[Submit], count: int) -> set[uuid.UUID]:
    queue = iter(range(count))
    ids: set[uuid.UUID] = set()

    async def submitter(submit: Submit) -> None:
        for _ in queue:
            ids.add(await submit())

    await asyncio.gather(*(submitter(submit) for submit in submits))
    return ids


async def worker_phase(server: str, count: int, concurrency: int) -> tuple[float, float]:
    """`taskservice worker` alone draining `count` tasks written straight to the
    table (taskservice's own submit statement, 100 per batch): its CPU per task past
    start-up, and tasks per second. Returns (CPU us per task, tasks/s)."""
    from taskservice.db.submits import create_many
    from taskservice.db.tasks import task_params
    from taskservice.domain.models import AgentSpec, NewTask

    url = await make_database(server)
    env = {
        **os.environ,
        "TASKSERVICE_DATABASE_URL": url,
        "TASKSERVICE_WORKER_CONCURRENCY": str(concurrency),
    }
    command = [sys.executable, "-m", "taskservice.cli", "--log-level", "warning", "worker"]
    worker = subprocess.Popen([*command, "--no-webhooks"], env=env)
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + 60
        while await conn.fetchval("SELECT to_regclass('tasks')") is None:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the worker did not start")
            await asyncio.sleep(0.2)
        await asyncio.sleep(3)  # start-up done: the worker idles
        cpu_before = cpu_seconds(worker.pid)
        started = time.perf_counter()
        # The agent as a submit without a system prompt stores it.
        spec = {"profile": "default", "model": "offline", "system_prompt": None}
        agent = AgentSpec.from_json(spec)
        new = NewTask(tenant="default", input=PROMPT, agent=agent, metadata={}, max_attempts=3)
        for first in range(0, count, 100):
            batch = [task_params(new) for _ in range(first, min(first + 100, count))]
            await create_many(conn, batch)
        done = "SELECT count(*) FROM tasks WHERE state = 'completed'"
        while await conn.fetchval(done) < count:
            if time.perf_counter() - started > 300:
                raise SystemExit("the worker did not finish in 300 s")
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        cpu_used = cpu_seconds(worker.pid) - cpu_before
    finally:
        await conn.close()
        worker.terminate()
        worker.wait(timeout=60)
        await drop_database(server, url)
    return cpu_used / count * 1e6, count / elapsed


async def bare_agent_cpu_us(runs: int = 2000) -> float:
    """The same agent the server runs (its default profile, as the catalog builds it:
    instructions, tools, output types), run bare with `agent.run`, on the same event
    loop as the server (this script runs on uvloop where the server does)."""
    from pydantic_ai.usage import UsageLimits

    from taskservice.agents.catalog import AgentCatalog
    from taskservice.settings import Settings

    catalog = AgentCatalog(Settings(database_url=None))
    profile = catalog.profile("default")
    assert profile is not None
    agent = catalog.build(catalog.resolve())
    limits = UsageLimits(request_limit=profile.request_limit)
    for _ in range(200):
        await agent.run(PROMPT, usage_limits=limits)
    start = time.process_time()
    for _ in range(runs):
        await agent.run(PROMPT, usage_limits=limits)
    return (time.process_time() - start) / runs * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--light-rate", type=float, default=50)
    parser.add_argument("--light-seconds", type=float, default=10)
    parser.add_argument("--burst", type=int, default=3000)
    parser.add_argument("--worker-concurrency", type=int, default=16)
    parser.add_argument(
        "--processes", type=int, default=1, help="serve's processes (the bare run is one)"
    )
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="how the bench submits: keep-alive sockets, one write per request (raw), or httpx",
    )
    args = parser.parse_args()

    server = os.environ.get("TASKSERVICE_DATABASE_URL", DEFAULT_SERVER)
    url = await make_database(server)
    port = free_port()
    env = {
        "TASKSERVICE_DATABASE_URL": url,
        "TASKSERVICE_WORKER_CONCURRENCY": str(args.worker_concurrency),
    }
    process = start_serve(port, env, processes=args.processes)
    watcher = Watcher()
    listener = None
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        listener = await asyncpg.connect(url)
        await listener.add_listener("taskservice_events", watcher.on_notify)
        async with submitters(args.client, port, CONCURRENCY) as submits:
            for _ in range(100):  # warm up
                await submits[0]()
            await asyncio.sleep(1)

            light = await light_phase(submits[0], args.light_rate, args.light_seconds)
            await asyncio.sleep(1)

            watcher.completed, watcher.expected = 0, args.burst
            watcher.done.clear()
            cpu_before = cpu_seconds(process.pid)
            started = time.perf_counter()
            burst = await burst_phase(submits, args.burst)
            await asyncio.wait_for(watcher.done.wait(), timeout=300)
            elapsed = time.perf_counter() - started
            cpu_used = cpu_seconds(process.pid) - cpu_before
    finally:
        if listener is not None:
            await listener.close()
        process.terminate()
        process.wait(timeout=60)
        await drop_database(server, url)

    worker_us, worker_rate = await worker_phase(server, args.burst, args.worker_concurrency)
    agent_us = await bare_agent_cpu_us()
    light_ms = watcher.latencies_ms(light)
    burst_ms = watcher.latencies_ms(burst)
    per_task_us = cpu_used / args.burst * 1e6
    print(
        f"{os.cpu_count()} CPUs, {args.processes} serve process(es), "
        f"worker concurrency {args.worker_concurrency}, "
        f"PostgreSQL at {server.rsplit('@', 1)[-1]}"
    )
    print(
        f"pickup latency, light load ({args.light_rate:g}/s, {len(light_ms)} tasks): "
        f"p50 {statistics.median(light_ms):.1f} ms, p99 {percentile(light_ms, 0.99):.1f} ms "
        "(targets 5 / 25)"
    )
    print(
        f"pickup latency, saturation ({len(burst_ms)} tasks): "
        f"p50 {statistics.median(burst_ms):.1f} ms, p99 {percentile(burst_ms, 0.99):.1f} ms"
    )
    print(
        f"end to end at saturation: {args.burst / elapsed:.0f} tasks/s, submit to completed "
        "(target >= 250)"
    )
    print(
        f"server CPU per task (API + worker + agent): {per_task_us:.0f} us; "
        f"bare pydantic-ai run of the same agent: {agent_us:.0f} us; "
        f"service's own: {per_task_us - agent_us:.0f} us = "
        f"{(per_task_us - agent_us) / agent_us:.2f} x the agent run (target <= 0.5)"
    )
    print(
        f"taskservice worker alone, {args.burst} tasks already submitted: "
        f"{worker_rate:.0f} tasks/s; CPU per task {worker_us:.0f} us, of which its own "
        f"{worker_us - agent_us:.0f} us = {(worker_us - agent_us) / agent_us:.2f} x the agent run"
    )


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
