"""Server CPU per task: an A2A blocking send against REST submit + `?wait=`.

One `taskservice serve` (API and workers, the offline model) on a fresh database.
Rounds alternate between two ways of getting a task done and its answer back, each
`--tasks` tasks over `--connections` keep-alive connections:

- `rest`: `POST /v1/tasks`, then `GET /v1/tasks/{id}?wait=30` until it is completed;
- `a2a`: one A2A 1.0 `SendMessage` over JSON-RPC (`/a2a`, `A2A-Version: 1.0`), which
  waits by default and is answered once the task completed.

For each round: tasks per second and the server's CPU per task (user + system, from
/proc), then the ratio a2a / rest over all rounds.

    .venv/bin/python bench/a2a_send.py [--tasks 1000] [--connections 32] [--rounds 2]

Uses TASKSERVICE_DATABASE_URL's server, else the local one at 127.0.0.1:5432.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

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

PROMPT = "Summarise the A2A protocol in one sentence."
V1 = {"A2A-Version": "1.0"}


def rest(client: httpx.AsyncClient) -> Callable[[], Awaitable[None]]:
    async def one() -> None:
        created = await client.post("/v1/tasks", json={"input": PROMPT})
        created.raise_for_status()
        task = created.json()
        while task["state"] != "completed":
            got = await client.get(f"/v1/tasks/{task['id']}", params={"wait": 30})
            got.raise_for_status()
            task = got.json()
            if task["state"] in ("failed", "cancelled"):
                raise RuntimeError(f"task {task['id']} {task['state']}")

    return one


def a2a(client: httpx.AsyncClient) -> Callable[[], Awaitable[None]]:
    async def one() -> None:
        message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": PROMPT}]}
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        answer = await client.post("/a2a", json=body, headers=V1)
        answer.raise_for_status()
        state = answer.json()["result"]["task"]["status"]["state"]
        if state != "TASK_STATE_COMPLETED":
            raise RuntimeError(f"answered in {state}")

    return one


async def drive(one: Callable[[], Awaitable[None]], tasks: int, connections: int) -> None:
    numbers = iter(range(tasks))

    async def worker() -> None:
        for _ in numbers:
            await one()

    await asyncio.gather(*(worker() for _ in range(connections)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    server = os.environ.get("TASKSERVICE_DATABASE_URL", DEFAULT_SERVER)
    url = await make_database(server)
    port = free_port()
    process = start_serve(port, {"TASKSERVICE_DATABASE_URL": url})
    limits = httpx.Limits(max_connections=args.connections)
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=60
        ) as client:
            ways = {"rest": rest(client), "a2a": a2a(client)}
            for one in ways.values():  # warm up
                await drive(one, 100, args.connections)
            print(
                f"{args.tasks} tasks a round, {args.connections} connections, {os.cpu_count()} CPUs"
            )
            print(f"{'way':6} {'tasks/s':>8} {'server us/task':>15}")
            spent = dict.fromkeys(ways, 0.0)
            for _ in range(args.rounds):
                for name, one in ways.items():
                    before = cpu_seconds(process.pid)
                    started = time.perf_counter()
                    await drive(one, args.tasks, args.connections)
                    elapsed = time.perf_counter() - started
                    used = cpu_seconds(process.pid) - before
                    spent[name] += used
                    print(f"{name:6} {args.tasks / elapsed:8.0f} {used / args.tasks * 1e6:15.0f}")
            print(f"ratio a2a / rest, server CPU per task: {spent['a2a'] / spent['rest']:.2f}")
    finally:
        process.terminate()
        process.wait(timeout=30)
        await drop_database(server, url)


if __name__ == "__main__":
    asyncio.run(main())
