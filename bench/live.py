"""Live output: N tasks streaming at once, model-to-client delta latency, CPU and memory.

One `taskservice serve` (as by default, a process per core; `--processes 1`: one) on
a fresh database runs N tasks at once (worker concurrency N) on the `ticker` model
(`bench/live_ticker.py`, loaded as a plugin), which streams T tokens over S seconds,
each token the time it was written. A client opens the SSE stream of every task
(plain asyncio sockets, to keep the load generator light) and, for every token in
every `delta` event written once its stream was open (each task's stream opens as
soon as its submit is answered), records now - written: the latency from the model
to the client, coalescing included. It also records, per delta, the latency of its
newest token (what the path adds beyond the coalescing wait).

The same load then runs twice more: streamed by pydantic-ai but with an interval no
response outlasts (so no delta is ever sent), and with `TASKSERVICE_DELTA_INTERVAL_MS=0`
(not streamed: the answer only when complete). The server's CPU per delta is the
difference from the first over the deltas sent (and, beside it, from the second:
pydantic-ai's streaming included); the memory per streaming task is the difference
of the peak RSS from the last, over N.

    .venv/bin/python bench/live.py [--tasks 100] [--tokens 100] [--seconds 5] [--replicas]
                                   [--processes 0]

With `--replicas`, the streams are read from a second `serve --no-workers` process:
the deltas cross processes through PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import threading
import time

import httpx
import psutil

sys.path.insert(0, os.path.dirname(__file__))
from submit import DEFAULT_SERVER, drop_database, free_port, make_database, start_serve, wait_ready

HERE = os.path.dirname(os.path.abspath(__file__))


async def follow(
    port: int, task_id: str, tokens: list[tuple[int, float]], newest: list[float]
) -> int:
    """Read one task's stream to its end; returns how many deltas it carried. Tokens
    written before the stream was open (it starts with their text so far) are not a
    live latency and are left out."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /v1/tasks/{task_id}/events?type=delta&type=state_change HTTP/1.1\r\n"
        "Host: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    deltas = 0
    event = b""
    opened = time.time_ns()  # until the snapshot arrives, when the stream is open
    try:
        while True:
            line = await reader.readline()
            if not line:
                return deltas
            if line.startswith(b"event: "):
                event = line[7:].strip()
                if event == b"snapshot":
                    opened = time.time_ns()
            elif line.startswith(b"data: ") and event == b"delta":
                now = time.time_ns()
                stamps = [int(t) for t in json.loads(line[6:])["text"].split()]
                tokens.extend((t, (now - t) / 1e6) for t in stamps if t > opened)
                if stamps and stamps[-1] > opened:
                    newest.append((now - stamps[-1]) / 1e6)
                deltas += 1
            elif (
                line.startswith(b"data: ")
                and event == b"state_change"
                and (b'"to":"completed"' in line or b'"to":"failed"' in line)
            ):
                return deltas
    finally:
        writer.close()


def family(process: psutil.Process) -> list[psutil.Process]:
    """A process and those it started (`serve --processes N`: the supervisor's)."""
    return [process, *process.children(recursive=True)]


class Sampler:
    """The peak RSS of a process (with its children), sampled every 50 ms from a
    thread."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.05)

    def rss(self) -> int:
        total = 0
        for process in family(self.process):
            with contextlib.suppress(psutil.NoSuchProcess):
                total += process.memory_info().rss
        return total

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def cpu(pids: list[int]) -> float:
    return sum(
        sum(process.cpu_times()[:2]) for pid in pids for process in family(psutil.Process(pid))
    )


async def one_run(args: argparse.Namespace, interval_ms: int) -> dict[str, float]:
    url = await make_database(args.server)
    env = {
        "TASKSERVICE_DATABASE_URL": url,
        "TASKSERVICE_PLUGINS": "live_ticker",
        "PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "TASKSERVICE_ALLOWED_MODELS": "offline,ticker",
        "TASKSERVICE_WORKER_CONCURRENCY": str(args.tasks),
        "TASKSERVICE_DB_POOL_SIZE": "40",
        "TASKSERVICE_DELTA_INTERVAL_MS": str(interval_ms),
    }
    port = free_port()
    processes = [start_serve(port, env, processes=args.processes or None)]
    read_port = port
    if args.replicas:
        read_port = free_port()
        processes.append(start_serve(read_port, env, "--no-workers"))
    try:
        for p, process in zip((port, read_port), processes, strict=False):
            wait_ready(f"http://127.0.0.1:{p}", process)
        pids = [process.pid for process in processes]
        tokens: list[tuple[int, float]] = []
        newest: list[float] = []
        body = {"model": "ticker", "input": f"tokens={args.tokens} seconds={args.seconds}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            with Sampler(pids[-1] if args.replicas else pids[0]) as memory:
                idle_rss = memory.rss()
                before = cpu(pids)
                started = time.monotonic()

                async def one() -> int:  # submitted, then followed at once
                    task = (await client.post("/v1/tasks", json=body)).json()
                    return await follow(read_port, task["id"], tokens, newest)

                deltas = await asyncio.gather(*(one() for _ in range(args.tasks)))
                elapsed = time.monotonic() - started
                spent = cpu(pids) - before
        latencies = [latency for _, latency in tokens]
        # Steady state: leaving out the tokens written in the first second, while a
        # hundred tasks are claimed and a hundred streams open at once.
        first = min((written for written, _ in tokens), default=0)
        steady = [latency for written, latency in tokens if written > first + 1e9]
        return {
            "deltas": float(sum(deltas)),
            "tokens": float(len(tokens)),
            "p50": statistics.median(latencies) if latencies else 0.0,
            "p99": statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else 0.0,
            "steady_p50": statistics.median(steady) if steady else 0.0,
            "steady_p99": statistics.quantiles(steady, n=100)[98] if len(steady) > 1 else 0.0,
            "newest_p50": statistics.median(newest) if newest else 0.0,
            "newest_p99": statistics.quantiles(newest, n=100)[98] if len(newest) > 1 else 0.0,
            "cpu": spent,
            "elapsed": elapsed,
            "peak_rss": float(memory.peak),
            "idle_rss": float(idle_rss),
        }
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        await drop_database(args.server, url)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--interval-ms", type=int, default=40)
    parser.add_argument("--replicas", action="store_true")
    parser.add_argument(
        "--processes",
        type=int,
        default=0,
        help="of the serve that runs the tasks (0, as serve's default: a core each)",
    )
    parser.add_argument("--server", default=os.environ.get("BENCH_DATABASE", DEFAULT_SERVER))
    args = parser.parse_args()
    live = await one_run(args, args.interval_ms)
    quiet = await one_run(args, 0)
    # Streamed through pydantic-ai, but no delta is ever due (the interval outlasts
    # every response): what streaming itself costs, without our delta path.
    streamed = await one_run(args, 10_000)  # the setting's most: keep --seconds below 10
    where = ", read on a second replica" if args.replicas else ""
    where += f", serve --processes {args.processes or 'one per core'}"
    print(
        f"{args.tasks} tasks x {args.tokens} tokens over {args.seconds:g} s, "
        f"delta interval {args.interval_ms} ms{where}"
    )
    print(f"deltas received            {live['deltas']:.0f} ({live['tokens']:.0f} tokens timed)")
    print(f"token, model to client     p50 {live['p50']:.1f} ms   p99 {live['p99']:.1f} ms")
    steady = f"p50 {live['steady_p50']:.1f} ms   p99 {live['steady_p99']:.1f} ms"
    print(f"  after the first second   {steady}")
    newest = f"p50 {live['newest_p50']:.1f} ms   p99 {live['newest_p99']:.1f} ms"
    print(f"newest token of a delta    {newest}")
    print(
        f"server CPU: {live['cpu']:.2f} s with deltas, {streamed['cpu']:.2f} s streaming "
        f"without deltas, {quiet['cpu']:.2f} s not streaming"
    )
    if live["deltas"]:
        ours = (live["cpu"] - streamed["cpu"]) / live["deltas"] * 1e6
        all_in = (live["cpu"] - quiet["cpu"]) / live["deltas"] * 1e6
        print(f"server CPU per delta       {ours:.0f} us")
        print(f"  with pydantic-ai's streaming   {all_in:.0f} us")
    mib = 2**20
    per_task = (live["peak_rss"] - quiet["peak_rss"]) / args.tasks / 1024
    print(
        f"peak RSS: {live['peak_rss'] / mib:.1f} MiB with deltas, "
        f"{quiet['peak_rss'] / mib:.1f} MiB without"
    )
    print(f"memory per streaming task  {per_task:.1f} KiB (beyond a running task's)")


if __name__ == "__main__":
    asyncio.run(main())
