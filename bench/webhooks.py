"""Webhook dispatch: deliveries per second, and state commit to first attempt.

Two phases against one `taskservice serve --no-workers` and a bare receiver
(`bare_receiver.py`, its own uvicorn process on 127.0.0.1, admitted by the operator
allow-list):

1. drain: N deliveries are queued while no dispatcher runs (a tenant-wide webhook on
   `pending`, so every submit writes one), then a server with the dispatcher starts
   and delivers them all. Rate = N / (end of the last attempt - start of the first).
2. latency: with the dispatcher running, tasks are submitted at a light, steady rate;
   for each delivery, the time from the state change's commit (its event's
   timestamp) to the start of its first attempt, p50/p99.

Times come from the delivery log (`webhook_attempts`), all on this machine's clock.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import httpx

from submit import (
    DEFAULT_SERVER,
    drop_database,
    free_port,
    make_database,
    start_serve,
    wait_ready,
)

HERE = Path(__file__).resolve().parent


def start_receiver(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            str(HERE),
            "bare_receiver:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


async def submit(url: str, count: int, *, rate: float | None, concurrency: int = 32) -> None:
    """`count` tasks, as fast as `concurrency` allows, or paced at `rate` per second."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        if rate is None:
            queue = iter(range(count))

            async def runner() -> None:
                for n in queue:
                    response = await client.post("/v1/tasks", json={"input": f"t{n}"})
                    response.raise_for_status()

            await asyncio.gather(*(runner() for _ in range(concurrency)))
            return
        started = time.monotonic()
        pending = []
        for n in range(count):
            await asyncio.sleep(max(0.0, started + n / rate - time.monotonic()))
            pending.append(asyncio.create_task(client.post("/v1/tasks", json={"input": f"t{n}"})))
        for response in await asyncio.gather(*pending):
            response.raise_for_status()


async def query(database_url: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetch(sql)
    finally:
        await conn.close()


async def wait_delivered(database_url: str, count: int, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rows = await query(
            database_url, "SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'succeeded'"
        )
        if rows[0]["n"] >= count:
            return
        await asyncio.sleep(0.2)
    raise SystemExit(f"not all {count} deliveries succeeded within {seconds}s")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> None:
    database_url = await make_database(args.server)
    receiver_port, port = free_port(), free_port()
    receiver = start_receiver(receiver_port)
    env = {
        "TASKSERVICE_DATABASE_URL": database_url,
        "TASKSERVICE_WEBHOOK_ALLOW_HTTP": "true",
        "TASKSERVICE_WEBHOOK_ALLOW_TARGETS": "127.0.0.1/32",
    }
    url = f"http://127.0.0.1:{port}"
    try:
        # Phase 1: queue N deliveries with no dispatcher running.
        server = start_serve(port, env, "--no-workers", "--no-webhooks")
        try:
            wait_ready(f"{url}/healthz", server)
            async with httpx.AsyncClient(base_url=url) as client:
                hook = {"url": f"http://127.0.0.1:{receiver_port}/hook", "states": ["pending"]}
                (await client.post("/v1/webhooks", json=hook)).raise_for_status()
            await submit(url, args.deliveries, rate=None)
        finally:
            stop(server)
        server = start_serve(port, env, "--no-workers")
        try:
            wait_ready(f"{url}/healthz", server)
            await wait_delivered(database_url, args.deliveries)
            span = await query(
                database_url,
                "SELECT extract(epoch FROM max(started_at + duration_ms * interval '1 ms')"
                " - min(started_at)) AS seconds, count(*) AS n FROM webhook_attempts",
            )
            seconds, attempts = float(span[0]["seconds"]), int(span[0]["n"])
            # Phase 2: light load, dispatcher running.
            await submit(url, args.light_count, rate=args.light_rate)
            await wait_delivered(database_url, args.deliveries + args.light_count)
            rows = await query(
                database_url,
                "SELECT extract(epoch FROM a.started_at - d.occurred_at) * 1000 AS ms "
                "FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id "
                f"WHERE a.attempt = 1 ORDER BY d.id DESC LIMIT {args.light_count}",
            )
        finally:
            stop(server)
        latencies = [float(r["ms"]) for r in rows]
        print(f"drain: {args.deliveries} deliveries ({attempts} attempts) in {seconds:.2f} s")
        print(f"  deliveries/s: {args.deliveries / seconds:.0f} (target >= 300)")
        print(f"latency, state commit to first attempt, {args.light_rate:g} tasks/s:")
        print(
            f"  p50 {statistics.median(latencies):.1f} ms  "
            f"p99 {percentile(latencies, 0.99):.1f} ms  (target p50 <= 50 ms)"
        )
    finally:
        stop(receiver)
        await drop_database(args.server, database_url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument("--light-rate", type=float, default=50.0, help="tasks per second")
    parser.add_argument("--light-count", type=int, default=500)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
