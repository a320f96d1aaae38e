"""How long `taskservice serve` takes to answer, from the command to its first 200.

Starts `serve` (default: one process per core) again and again on a free loopback
port and times it from `Popen` to the first `GET /healthz` that answers 200, then
stops it (SIGINT, by its PID) and waits for it. The first start of a new data folder
(initdb, every migration) is timed apart from the starts after it (the database
there, the schema at head): the one an operator restarts into.

Several checkouts can be compared in one run (`--checkout DIR`, repeated): the
starts alternate between them (A, B, A, B, ...) so that the machine's drift touches
each alike; each runs with its own `src` first on `PYTHONPATH`. With `--importtime`,
the ten slowest imports of the app (`python -X importtime`), cumulative.

    .venv/bin/python bench/startup.py                       # this checkout, 7 starts
    .venv/bin/python bench/startup.py --checkout /tmp/old --checkout . --starts 9
    TASKSERVICE_DATABASE_URL=postgresql://... .venv/bin/python bench/startup.py

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answered(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def one_start(checkout: Path, data: Path, processes: int | None, log: Path) -> float:
    """Seconds from the command to the first 200; the server is stopped after."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{checkout / 'src'}:{checkout}"}
    env.setdefault("TASKSERVICE_DATA_DIR", str(data))
    command = [sys.executable, "-m", "taskservice.cli", "serve", "--port", str(port)]
    if processes:
        command += ["--processes", str(processes)]
    with log.open("w") as sink:
        began = time.monotonic()
        server = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = began + 120
        while not answered(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"serve did not answer: see {log}")
            time.sleep(0.02)
        return time.monotonic() - began
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def import_times(checkout: Path) -> list[tuple[int, str]]:
    env = {**os.environ, "PYTHONPATH": f"{checkout / 'src'}:{checkout}"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import taskservice.api.app"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = line.removeprefix("import time:").split("|")
        rows.append((int(cumulative), name.strip()))
    return sorted(rows, reverse=True)[:10]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", action="append", type=Path, help="default: this one")
    parser.add_argument("--starts", type=int, default=7, help="restarts per checkout")
    parser.add_argument("--processes", type=int, help="serve's --processes (default: cores)")
    parser.add_argument("--importtime", action="store_true")
    args = parser.parse_args()
    checkouts = [c.resolve() for c in (args.checkout or [HERE])]
    work = Path(tempfile.mkdtemp(prefix="taskservice-startup-"))
    try:
        first: dict[Path, float] = {}
        again: dict[Path, list[float]] = {c: [] for c in checkouts}
        for index, checkout in enumerate(checkouts):
            first[checkout] = one_start(
                checkout, work / f"data{index}", args.processes, work / "log"
            )
        for _ in range(args.starts):
            for index, checkout in enumerate(checkouts):
                took = one_start(checkout, work / f"data{index}", args.processes, work / "log")
                again[checkout].append(took)
        base = statistics.median(again[checkouts[0]])
        print(f"serve --processes {args.processes or 'cores'}: seconds to the first 200")
        for checkout in checkouts:
            times = again[checkout]
            median = statistics.median(times)
            print(
                f"  {checkout}: first start {first[checkout]:.2f}; restarts median "
                f"{median:.2f} (min {min(times):.2f}, max {max(times):.2f}, n={len(times)}); "
                f"{median / base:.2f} x the first checkout's"
            )
        if args.importtime:
            for checkout in checkouts:
                print(f"slowest imports of taskservice.api.app, cumulative ms ({checkout}):")
                for micros, name in import_times(checkout):
                    print(f"  {micros / 1000:8.0f}  {name}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
