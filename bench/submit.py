"""Submit throughput: taskservice `POST /v1/tasks` against a bare FastAPI + asyncpg
endpoint that inserts one equivalent row (bench/bare_app.py), in one run.

A third baseline, `bare-same-sql`, runs taskservice's own submit statement (task row,
event row, NOTIFY) from the bare app, separating the cost of the data the design
requires from the service's own overhead.

All run as one uvicorn process each on the same PostgreSQL; taskservice runs with
`--no-workers`, so only the API path is measured. `wrk` drives each with 64
connections, alternating rounds so drift hits both alike; the figures are the
medians over rounds.

    apt-get install wrk        # the load generator (C, light on CPU)
    .venv/bin/python bench/submit.py [--seconds 10] [--rounds 3]

Uses TASKSERVICE_DATABASE_URL, else the local server at 127.0.0.1:5432.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import httpx

HERE = Path(__file__).resolve().parent
CONNECTIONS = 64
THREADS = 2
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_serve(
    port: int, env: dict[str, str], *flags: str, processes: int | None = 1
) -> subprocess.Popen[bytes]:
    """`taskservice serve` on `port`, quiet, with `env` added to this environment; one
    process unless `processes` says otherwise (None: serve's default, one per core)."""
    if processes is not None:
        flags = (*flags, "--processes", str(processes))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "taskservice.cli",
            "--log-level",
            "warning",
            "serve",
            "--port",
            str(port),
            *flags,
        ],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"{url} not ready")


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far, user and system (the loopback socket's share
    included), with its live children's (`serve --processes N`)."""
    import psutil

    total = 0.0
    for process in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):  # gone meanwhile
            times = process.cpu_times()
            total += times.user + times.system
    return total


def parse_wrk(output: str) -> dict[str, float]:
    def ms(text: str) -> float:
        value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p50 = ms(re.search(r"\s50%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    p99 = ms(re.search(r"\s99%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    requests = float(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    return {
        "rps": rps,
        "p50": p50,
        "p99": p99,
        "non2xx": float(errors.group(1)) if errors else 0,
        "requests": requests,
    }


def run_wrk(url: str, seconds: int) -> dict[str, float]:
    out = subprocess.run(
        [
            "wrk",
            f"-t{THREADS}",
            f"-c{CONNECTIONS}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(HERE / "post.lua"),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return parse_wrk(out)


async def make_database(server: str) -> str:
    from sqlalchemy.engine import make_url

    name = f"taskservice_bench_{secrets.token_hex(3)}"
    conn = await asyncpg.connect(server)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    return make_url(server).set(database=name).render_as_string(hide_password=False)


async def drop_database(server: str, url: str) -> None:
    from sqlalchemy.engine import make_url

    conn = await asyncpg.connect(server)
    await conn.execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install wrk")

    server = os.environ.get("TASKSERVICE_DATABASE_URL", DEFAULT_SERVER)
    url = asyncio.run(make_database(server))
    subprocess.run(
        [sys.executable, "-m", "taskservice.cli", "--log-level", "warning", "migrate"],
        env={**os.environ, "TASKSERVICE_DATABASE_URL": url},
        check=True,
    )
    ts_port, bare_port = free_port(), free_port()
    env = {**os.environ, "TASKSERVICE_DATABASE_URL": url, "BENCH_DSN": url}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    servers = {
        "taskservice": start_serve(ts_port, env, "--no-workers"),
        "bare": subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "bare_app:app",
                "--port",
                str(bare_port),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            env=env,
            cwd=HERE,
            **quiet,
        ),
    }
    urls = {
        "taskservice": f"http://127.0.0.1:{ts_port}/v1/tasks",
        "bare": f"http://127.0.0.1:{bare_port}/v1/tasks",
        "bare-same-sql": f"http://127.0.0.1:{bare_port}/v1/tasks-same-sql",
    }
    try:
        wait_ready(f"http://127.0.0.1:{ts_port}/readyz", servers["taskservice"])
        wait_ready(f"http://127.0.0.1:{bare_port}/docs", servers["bare"])
        for name in urls:  # warm up
            run_wrk(urls[name], 2)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in urls}
        for _ in range(args.rounds):
            for name in urls:
                pid = servers["bare" if name.startswith("bare") else name].pid
                cpu_before = cpu_seconds(pid)
                result = run_wrk(urls[name], args.seconds)
                result["cpu_us"] = (cpu_seconds(pid) - cpu_before) / result["requests"] * 1e6
                results[name].append(result)
    finally:
        for process in servers.values():
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        asyncio.run(drop_database(server, url))

    print(
        f"POST /v1/tasks, {CONNECTIONS} connections, {args.rounds} x {args.seconds}s rounds "
        f"(medians), {os.cpu_count()} CPUs, PostgreSQL at {server.rsplit('@', 1)[-1]}"
    )
    print(f"{'':14} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8} {'CPU us/req':>11}")
    medians = {}
    for name, runs in results.items():
        medians[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        m = medians[name]
        print(
            f"{name:14} {m['rps']:9.0f} {m['p50']:8.2f} {m['p99']:8.2f} {m['non2xx']:8.0f} "
            f"{m['cpu_us']:11.0f}"
        )
    ratio = medians["taskservice"]["rps"] / medians["bare"]["rps"]
    same = medians["taskservice"]["rps"] / medians["bare-same-sql"]["rps"]
    print(f"ratio taskservice / bare:          {ratio:.2f} (target >= 0.80)")
    print(f"ratio taskservice / bare-same-sql: {same:.2f} (the service's own overhead)")


if __name__ == "__main__":
    main()
