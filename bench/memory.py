"""Memory of one process holding many runs that wait on their model.

One `taskservice serve --processes 1` on a fresh database, `WORKER_CONCURRENCY` at
`--runs`, the echo agent of `bench/peer_agent.py` answering after `--model-delay-s`
(a model that takes its time, as LLM calls do). The script submits `--runs` tasks,
waits until all of them are running, and reads the process's memory (RSS, and USS:
what it alone holds) idle and then with every run waiting; then stops the server
(SIGTERM, which releases the runs).

    .venv/bin/python bench/memory.py [--runs 1000] [--model-delay-s 120]

Issue 17's target: 1,000 running tasks in one process in at most ~300 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import asyncpg
import httpx
import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from submit import (  # noqa: E402
    DEFAULT_SERVER,
    drop_database,
    free_port,
    make_database,
    start_serve,
    wait_ready,
)


def memory(pid: int) -> tuple[float, float]:
    """RSS and USS of `pid`, in MiB."""
    info = psutil.Process(pid).memory_full_info()
    return info.rss / 2**20, info.uss / 2**20


async def running(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM tasks WHERE state = 'running'"))
    finally:
        await conn.close()


async def run(args: argparse.Namespace) -> None:
    url = await make_database(args.server)
    port = free_port()
    server = start_serve(
        port,
        {
            "PYTHONPATH": HERE,
            "BENCH_MODEL_DELAY_MS": str(args.model_delay_s * 1000),
            "TASKSERVICE_DATABASE_URL": url,
            "TASKSERVICE_PLUGINS": "peer_agent",
            "TASKSERVICE_DEFAULT_MODEL": "echo",
            "TASKSERVICE_ALLOWED_MODELS": "echo",
            "TASKSERVICE_WORKER_CONCURRENCY": str(args.runs),
            "TASKSERVICE_SHUTDOWN_GRACE_SECONDS": "0",
            "TASKSERVICE_TASK_TIMEOUT_SECONDS": str(args.model_delay_s * 2),
        },
        "--no-webhooks",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{base}/readyz", server)
        await asyncio.sleep(2)  # settled after start-up
        idle = memory(server.pid)
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            gate = asyncio.Semaphore(32)

            async def submit(n: int) -> None:
                async with gate:
                    answer = await client.post("/v1/tasks", json={"input": f"wait {n}"})
                    answer.raise_for_status()

            await asyncio.gather(*(submit(n) for n in range(args.runs)))
        while (count := await running(url)) < args.runs:
            if time.monotonic() - started > args.model_delay_s / 2:
                raise SystemExit(f"only {count} of {args.runs} running")
            await asyncio.sleep(0.5)
        await asyncio.sleep(2)
        busy = memory(server.pid)
        print(f"{args.runs} runs waiting on their model, one process:")
        print(f"  idle:      RSS {idle[0]:7.1f} MiB   USS {idle[1]:7.1f} MiB")
        print(f"  {args.runs} runs: RSS {busy[0]:7.1f} MiB   USS {busy[1]:7.1f} MiB")
        per_run = (busy[0] - idle[0]) * 1024 / args.runs
        print(f"  per run:   {per_run:.1f} KiB (RSS growth / runs)")
    finally:
        server.terminate()
        server.wait(timeout=60)
        await drop_database(args.server, url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("BENCH_DATABASE", DEFAULT_SERVER))
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--model-delay-s", type=float, default=120)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
