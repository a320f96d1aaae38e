"""A2A peers side by side: tasks completed per second under the same load.

Each request sends one message that creates a new task and is answered once the
task completed, from `--connections` keep-alive connections for `--seconds`
(after a warm-up), the same echo agent on both servers (`bench/peer_agent.py`,
answering at once or after `--model-delay-ms`):

- taskservice: `taskservice serve` with default settings (a process per core;
  `--processes N` to choose), on a fresh database; A2A 1.0 `SendMessage` over
  JSON-RPC, which blocks until the task is done; every task durable in PostgreSQL.
- fasta2a: pydantic's A2A server (`agent_to_a2a`, in-memory storage and broker), one
  uvicorn process, in the bench's own environment (`bench/.peers-venv`, made on first
  use with fasta2a, pydantic-ai-slim and uvicorn from PyPI); its `message/send`
  never waits, so each request is a `message/stream`, read until the task's final
  status.

Rounds alternate between the servers; tasks/s of each round, then the ratio
taskservice / fasta2a over all rounds (issue 17's target: >= 1.2 with an instant
model; >= 400 tasks/s for taskservice with a 100 ms one). The client is `wrk` (as
issue 17 measured; `apt-get install wrk`), a Lua script giving every request its own
`messageId` and counting answers that are not a completed task; `--client python`
uses httpx instead, which takes a core's share from the servers. Both run on the
same cores as the servers: the ratio is what to read. With wrk it also prints
taskservice's CPU per task, its processes' and PostgreSQL's (`psutil`, over the
measured runs), and the rate those would allow on this machine's cores.

    .venv/bin/python bench/peers.py [--seconds 10] [--rounds 2] [--connections 64]
    .venv/bin/python bench/peers.py --model-delay-ms 100
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx
import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from submit import (  # noqa: E402
    DEFAULT_SERVER,
    cpu_seconds,
    drop_database,
    free_port,
    make_database,
    start_serve,
    wait_ready,
)

VENV = HERE / ".peers-venv"
PEERS = ["fasta2a==2.1.1", "pydantic-ai-slim==2.68.0", "uvicorn==0.54.0"]
V1 = {"A2A-Version": "1.0"}


def peers_python() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"making {VENV} ({', '.join(PEERS)}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEERS], check=True)
    return python


def start_fasta2a(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(peers_python()),
            "-m",
            "uvicorn",
            "peer_agent:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        cwd=HERE,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
    )


def message(text: str, role: str) -> dict[str, object]:
    return {"role": role, "messageId": str(uuid.uuid4()), "parts": [{"kind": "text", "text": text}]}


async def taskservice_once(client: httpx.AsyncClient) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {**message("ping", "ROLE_USER"), "parts": [{"text": "ping"}]}},
    }
    answer = (await client.post("/a2a", json=body, headers=V1)).json()
    state = answer["result"]["task"]["status"]["state"]
    assert state == "TASK_STATE_COMPLETED", answer


async def fasta2a_once(client: httpx.AsyncClient) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {"message": {**message("ping", "user"), "kind": "message"}},
    }
    async with client.stream("POST", "/", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            result = json.loads(line[5:])["result"]
            event = result.get("statusUpdate") or result.get("task") or result
            state = event.get("status", {}).get("state")
            if state in ("completed", "failed", "canceled"):
                assert state == "completed", event
                return
    raise AssertionError("the stream ended before the task")


async def load(url: str, once: object, connections: int, seconds: float) -> tuple[float, int]:
    """Tasks completed per second over `seconds`, after a second of warm-up, and the
    requests that got no answer (a connection dropped: counted, not fatal)."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        done = failed = 0
        counting = False
        stop = False

        async def loop() -> None:
            nonlocal done, failed
            while not stop:
                try:
                    await once(client)  # type: ignore[operator]
                except httpx.TransportError as exc:
                    failed += 1
                    print(f"  no answer: {type(exc).__name__} {exc}", flush=True)
                    continue
                if counting:
                    done += 1

        workers = [asyncio.create_task(loop()) for _ in range(connections)]
        await asyncio.sleep(1)  # warm-up: connections open, plans cached
        counting, started = True, time.monotonic()
        await asyncio.sleep(seconds)
        counting, elapsed = False, time.monotonic() - started
        stop = True
        await asyncio.gather(*workers)
    return done / elapsed, failed


# wrk's script: a request of its own each time (the `messageId`: thread, a random
# prefix, a counter), and a count of answers that are not a completed task.
_WRK_SCRIPT = r"""
local threads, next_id = {}, 1
function setup(thread)
  thread:set("id", next_id); next_id = next_id + 1
  table.insert(threads, thread)
end
function init(args)
  math.randomseed(os.time() + id)
  prefix = string.format("%d-%d-", id, math.random(1, 1000000000))
  counter, bad = 0, 0
end
function request()
  counter = counter + 1
  return wrk.format("POST", PATH, HEADERS, string.format(BODY, prefix .. counter))
end
function response(status, headers, body)
  if status ~= 200 or not string.find(body, DONE, 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("bad") end
  io.write(string.format("BAD %d\n", total))
end
"""


def _lua(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid Lua string literal here


def wrk_script(name: str, folder: Path) -> Path:
    """The wrk script of a server: its path, headers, body (`%s`: the message id) and
    what a completed task's answer contains."""
    if name == "taskservice":
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"role": "ROLE_USER", "messageId": "%s", "parts": [{"text": "ping"}]}
            },
        }
        path, headers, done = "/a2a", {**V1}, "TASK_STATE_COMPLETED"
    else:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/stream",
            "params": {
                "message": {
                    "role": "user",
                    "kind": "message",
                    "messageId": "%s",
                    "parts": [{"kind": "text", "text": "ping"}],
                }
            },
        }
        path, headers, done = "/", {}, '"state":"completed"'
    headers["Content-Type"] = "application/json"
    lua_headers = "{" + ", ".join(f"[{_lua(k)}] = {_lua(v)}" for k, v in headers.items()) + "}"
    script = folder / f"{name}.lua"
    script.write_text(
        f"PATH = {_lua(path)}\nHEADERS = {lua_headers}\n"
        f"BODY = {_lua(json.dumps(body, separators=(',', ':')))}\nDONE = {_lua(done)}\n"
        + _WRK_SCRIPT
    )
    return script


def wrk_load(
    url: str,
    script: Path,
    connections: int,
    seconds: float,
    cpu: Callable[[], tuple[float, float]] | None = None,
) -> tuple[float, int, tuple[float, float] | None]:
    """Tasks completed per second by wrk (after a second's warm-up run), the answers
    that were not a completed task (errors and timeouts included), and what `cpu`
    (CPU seconds so far) grew by over the measured run."""
    command = ["wrk", "-t2", f"-c{connections}", "--timeout", "60s", "-s", str(script), url]
    subprocess.run([*command[:1], "-d1s", *command[1:]], check=True, capture_output=True)
    before = cpu() if cpu is not None else None
    out = subprocess.run(
        [*command[:1], f"-d{seconds:g}s", *command[1:]], check=True, capture_output=True, text=True
    ).stdout
    used = None
    if cpu is not None and before is not None:
        after = cpu()
        used = (after[0] - before[0], after[1] - before[1])
    rate = float(out.split("Requests/sec:")[1].split()[0])
    bad = int(out.split("BAD ")[1].split()[0])
    errors = out.split("Socket errors:")[1].split("\n")[0] if "Socket errors:" in out else ""
    if errors:
        print(f"  socket errors:{errors}", flush=True)
    return rate * (1 - bad / max(1, int(out.split(" requests in ")[0].split()[-1]))), bad, used


def service_cpu(serve_pid: int, database: str | None = None) -> tuple[float, float]:
    """CPU seconds so far of taskservice's processes and of PostgreSQL's (`database`:
    only the backends connected to it)."""
    return cpu_seconds(serve_pid), postgres_cpu_seconds(database)


def postgres_cpu_seconds(database: str | None = None) -> float:
    """The CPU time so far of this machine's PostgreSQL processes (the bench's
    database server is local: the machine's own, or the embedded one); `database`:
    only the backends connected to it (their title names it), leaving out other
    databases' and the server's shared processes (WAL writer, checkpointer)."""
    total = 0.0
    for process in psutil.process_iter(["name", "cmdline"]):
        if not (process.info["name"] or "").startswith("postgres"):
            continue
        if database is not None and f" {database} " not in " ".join(process.info["cmdline"] or []):
            continue
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def taskservice_env(url: str, model_delay_ms: float) -> dict[str, str]:
    """The environment of taskservice serving the echo agent on database `url`."""
    return {
        "PYTHONPATH": str(HERE),
        "BENCH_MODEL_DELAY_MS": str(model_delay_ms),
        "TASKSERVICE_DATABASE_URL": url,
        "TASKSERVICE_PLUGINS": "peer_agent",
        "TASKSERVICE_DEFAULT_MODEL": "echo",
        "TASKSERVICE_ALLOWED_MODELS": "echo",
    }


async def run(args: argparse.Namespace) -> None:
    env = {"PYTHONPATH": str(HERE), "BENCH_MODEL_DELAY_MS": str(args.model_delay_ms)}
    url = await make_database(args.server)
    ours_port, theirs_port = free_port(), free_port()
    ours = start_serve(
        ours_port,
        taskservice_env(url, args.model_delay_ms),
        "--no-webhooks",
        processes=args.processes,
    )
    theirs = start_fasta2a(theirs_port, env)
    results: dict[str, list[float]] = {"taskservice": [], "fasta2a": []}
    costs: tuple[list[float], list[float]] = ([], [])  # taskservice's server, PostgreSQL
    folder = tempfile.mkdtemp(prefix="peers-")
    try:
        wait_ready(f"http://127.0.0.1:{ours_port}/readyz", ours)
        wait_ready(f"http://127.0.0.1:{theirs_port}/.well-known/agent-card.json", theirs)
        servers = {
            "taskservice": (f"http://127.0.0.1:{ours_port}", taskservice_once),
            "fasta2a": (f"http://127.0.0.1:{theirs_port}", fasta2a_once),
        }
        scripts = {name: wrk_script(name, Path(folder)) for name in servers}
        for round_ in range(args.rounds):
            order = list(servers) if round_ % 2 == 0 else list(reversed(servers))
            for name in order:
                base, once = servers[name]
                if args.client == "wrk":
                    cpu = partial(service_cpu, ours.pid) if name == "taskservice" else None
                    rate, failed, used = wrk_load(
                        base, scripts[name], args.connections, args.seconds, cpu
                    )
                    if used is not None and rate > 0:
                        tasks = rate * args.seconds
                        costs[0].append(used[0] / tasks * 1e6)
                        costs[1].append(used[1] / tasks * 1e6)
                else:
                    rate, failed = await load(base, once, args.connections, args.seconds)
                results[name].append(rate)
                dropped = f" ({failed} requests not completed tasks)" if failed else ""
                print(f"round {round_ + 1} {name:12} {rate:7.1f} tasks/s{dropped}", flush=True)
    finally:
        for process in (ours, theirs):
            process.terminate()
            process.wait(timeout=30)
        await drop_database(args.server, url)
        shutil.rmtree(folder, ignore_errors=True)
    ours_rate = sum(results["taskservice"]) / len(results["taskservice"])
    theirs_rate = sum(results["fasta2a"]) / len(results["fasta2a"])
    print(
        f"\nmodel delay {args.model_delay_ms} ms, {args.connections} connections "
        f"({args.client}), "
        f"taskservice processes {args.processes or 'default'}: "
        f"taskservice {ours_rate:.1f}/s, fasta2a {theirs_rate:.1f}/s, "
        f"ratio {ours_rate / theirs_rate:.2f}"
    )
    if costs[0]:
        server, postgres = (sum(c) / len(c) for c in costs)
        cores = os.cpu_count() or 1
        print(
            f"taskservice's CPU per task: its processes {server:.0f} us, "
            f"PostgreSQL {postgres:.0f} us, {server + postgres:.0f} us in all "
            f"(at most {cores * 1e6 / (server + postgres):.0f} tasks/s on {cores} cores "
            "with nothing else running)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("BENCH_DATABASE", DEFAULT_SERVER))
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--model-delay-ms", type=float, default=0)
    parser.add_argument("--client", choices=["wrk", "python"], default="wrk")
    parser.add_argument(
        "--processes", type=int, default=None, help="taskservice's (default: serve's, a core each)"
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
