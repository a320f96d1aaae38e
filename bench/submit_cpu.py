"""Server CPU per submit, by arrival rate and by client.

One `taskservice serve --no-workers` on a fresh database. 4,000 submits at a time
over 32 keep-alive connections: as fast as they are answered, then at fixed
rates; and through httpx. For each, the server's CPU per request (user + system,
so the loopback socket's share is in) and the client's.

    .venv/bin/python bench/submit_cpu.py [--requests 4000] [--rates 550,100]

Uses TASKSERVICE_DATABASE_URL's server, else the local one at 127.0.0.1:5432.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable

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
from workers import CONCURRENCY, submitters


async def drive(kind: str, port: int, count: int, rate: float | None) -> None:
    """`count` submits over CONCURRENCY connections, at `rate` per second or at once."""
    async with submitters(kind, port, CONCURRENCY) as submits:
        numbers = iter(range(count))
        start = time.perf_counter()

        async def one(submit: Callable[[], Awaitable[object]]) -> None:
            for n in numbers:
                if rate is not None:
                    await asyncio.sleep(max(0.0, start + n / rate - time.perf_counter()))
                await submit()

        await asyncio.gather(*(one(submit) for submit in submits))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rates", default="550,100", help="fixed rates to try, per second")
    args = parser.parse_args()
    rates = [float(rate) for rate in args.rates.split(",") if rate]

    server = os.environ.get("TASKSERVICE_DATABASE_URL", DEFAULT_SERVER)
    url = await make_database(server)
    port = free_port()
    process = start_serve(port, {"TASKSERVICE_DATABASE_URL": url}, "--no-workers")
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        await drive("raw", port, args.requests, None)  # warm up
        print(f"{args.requests} submits per line, {CONCURRENCY} connections, {os.cpu_count()} CPUs")
        print(
            f"{'client':8} {'offered':>11} {'req/s':>7} {'server us/req':>14} {'client us/req':>14}"
        )
        for kind, rate in [("raw", None), *(("raw", rate) for rate in rates), ("httpx", None)]:
            server_before, client_before = cpu_seconds(process.pid), time.process_time()
            started = time.perf_counter()
            await drive(kind, port, args.requests, rate)
            elapsed = time.perf_counter() - started
            server_us = (cpu_seconds(process.pid) - server_before) / args.requests * 1e6
            client_us = (time.process_time() - client_before) / args.requests * 1e6
            offered = "as answered" if rate is None else f"{rate:g}/s"
            print(
                f"{kind:8} {offered:>11} {args.requests / elapsed:7.0f} "
                f"{server_us:14.0f} {client_us:14.0f}"
            )
    finally:
        process.terminate()
        process.wait(timeout=60)
        await drop_database(server, url)


if __name__ == "__main__":
    asyncio.run(main())
