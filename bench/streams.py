"""SSE fan-out: many subscribers on one process, commit-to-receipt latency, memory.

One `taskservice serve --no-workers` on a fresh database; T tasks with S subscribers
each (default 100 x 10 = 1,000 streams), opened with plain asyncio sockets so the
load generator stays light. Memory per stream: the server's RSS with the streams
open and idle, minus before, over the count. Latency: the script commits `log`
events to random tasks at a fixed rate, each carrying its send time; every
subscriber of that task records when the event arrives. Streams re-read the table
only every 60 s here, so what is measured is the NOTIFY path.

    .venv/bin/python bench/streams.py [--tasks 100] [--per-task 10] [--events 200] [--rate 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time

import asyncpg
import httpx

sys.path.insert(0, os.path.dirname(__file__))
from submit import (
    DEFAULT_SERVER,
    drop_database,
    free_port,
    make_database,
    start_serve,
    wait_ready,
)

APPEND = """
WITH t AS (UPDATE tasks SET event_seq = event_seq + 1 WHERE id = $1
           RETURNING id, tenant, event_seq)
INSERT INTO task_events (task_id, tenant, seq, type, data)
SELECT id, tenant, event_seq, 'log', jsonb_build_object('sent', $2::float8) FROM t
"""


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def subscriber(port: int, task_id: str, ready: asyncio.Event, latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /v1/tasks/{task_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"event: snapshot"):
                ready.set()
            elif line.startswith(b"data: ") and b'"sent"' in line:
                received = time.time()
                event = json.loads(line[6:])
                latencies.append((received - event["data"]["sent"]) * 1000)
    finally:
        writer.close()


async def bare_stream_kib(count: int) -> float:
    """RSS per idle stream of the bare FastAPI + sse-starlette app (bare_sse_app.py)."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "bare_sse_app:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=os.path.dirname(__file__),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    subscribers: list[asyncio.Task[None]] = []
    try:
        wait_ready(f"http://127.0.0.1:{port}/docs", process)
        await asyncio.sleep(1)
        before = rss_kib(process.pid)
        readies = [asyncio.Event() for _ in range(count)]
        subscribers = [asyncio.create_task(subscriber(port, "x", ready, [])) for ready in readies]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), timeout=300)
        await asyncio.sleep(2)
        return (rss_kib(process.pid) - before) / count
    finally:
        for task in subscribers:
            task.cancel()
        await asyncio.gather(*subscribers, return_exceptions=True)
        process.terminate()
        process.wait(timeout=60)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--per-task", type=int, default=10)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="events per second")
    args = parser.parse_args()

    server = os.environ.get("TASKSERVICE_DATABASE_URL", DEFAULT_SERVER)
    url = await make_database(server)
    port = free_port()
    env = {
        "TASKSERVICE_DATABASE_URL": url,
        "TASKSERVICE_STREAM_POLL_SECONDS": "60",
        "TASKSERVICE_DB_POOL_SIZE": "20",
    }
    process = start_serve(port, env, "--no-workers")
    subscribers: list[asyncio.Task[None]] = []
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            tasks = [
                (await client.post("/v1/tasks", json={"input": f"t{i}"})).json()["id"]
                for i in range(args.tasks)
            ]
        await asyncio.sleep(1)
        before = rss_kib(process.pid)
        latencies: list[float] = []
        readies = []
        for task_id in tasks:
            for _ in range(args.per_task):
                ready = asyncio.Event()
                readies.append(ready)
                subscribers.append(asyncio.create_task(subscriber(port, task_id, ready, latencies)))
        opened = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), timeout=300)
        open_seconds = time.perf_counter() - opened
        await asyncio.sleep(2)  # idle
        during = rss_kib(process.pid)
        streams = len(subscribers)

        conn = await asyncpg.connect(url)
        rng = random.Random(1)
        started = time.perf_counter()
        for n in range(args.events):
            await asyncio.sleep(max(0.0, started + n / args.rate - time.perf_counter()))
            await conn.execute(APPEND, rng.choice(tasks), time.time())
        expected = args.events * args.per_task
        deadline = time.monotonic() + 30
        while len(latencies) < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await conn.close()
    finally:
        for task in subscribers:
            task.cancel()
        await asyncio.gather(*subscribers, return_exceptions=True)
        process.terminate()
        process.wait(timeout=60)
        await drop_database(server, url)

    bare = await bare_stream_kib(streams)
    latencies.sort()
    print(
        f"{os.cpu_count()} CPUs; {streams} SSE streams on one process "
        f"({args.tasks} tasks x {args.per_task}), opened in {open_seconds:.1f} s"
    )
    ours = (during - before) / streams
    print(
        f"memory per idle stream: {ours:.1f} KiB = {ours * 1.024:.1f} KB "
        f"(server RSS {before / 1024:.0f} -> {during / 1024:.0f} MiB; target <= 30 KB); "
        f"a bare FastAPI + sse-starlette stream: {bare:.1f} KiB, "
        f"ratio {ours / bare:.2f}"
    )
    print(
        f"commit to receipt, {len(latencies)}/{expected} deliveries at {args.rate:g} events/s: "
        f"p50 {statistics.median(latencies):.1f} ms, "
        f"p99 {latencies[int(0.99 * (len(latencies) - 1))]:.1f} ms (target p99 <= 50 ms)"
    )


if __name__ == "__main__":
    asyncio.run(main())
