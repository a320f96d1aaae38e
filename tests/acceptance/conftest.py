"""Acceptance tests drive the real `taskservice` command in subprocesses."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskservice import __version__

pytestmark = pytest.mark.slow

STARTUP_TIMEOUT = 60.0  # seconds
READY_SAID = f"taskservice {__version__} ready in "  # serve's start-up block begins so


def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """What `check` returns once it is truthy, polled for at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKSERVICE_")}
    env.update(extra)
    return env


def run_cli(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskservice.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Server:
    def __init__(self, process: subprocess.Popen[str], port: int, log: Path) -> None:
        self.process = process
        self.port = port
        self.log = log
        self.url = f"http://127.0.0.1:{port}"

    def output(self) -> str:
        return self.log.read_text()

    def crash(self) -> None:
        """SIGKILL, by PID, to `serve` and every process it runs (`--processes N`):
        nothing stops gracefully, as when the machine dies."""
        import psutil

        serving = psutil.Process(self.process.pid).children(recursive=True)  # the fork server's
        doomed = [self.process.pid, *(c.pid for c in serving)]
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


@contextmanager
def serve(env: dict[str, str], log: Path, *args: str, cwd: Path | None = None) -> Iterator[Server]:
    port = free_port()
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "taskservice.cli", "serve", "--port", str(port), *args],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
        )
    server = Server(process, port, log)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if process.poll() is not None:
                raise AssertionError(f"serve exited with {process.returncode}:\n{server.output()}")
            try:
                # Ready, and it said so: its start-up block comes once every process is.
                ready = httpx.get(f"{server.url}/readyz", timeout=1).status_code == 200
                if ready and READY_SAID in server.output():
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"serve did not become ready:\n{server.output()}")
            time.sleep(0.1)
        yield server
    finally:
        server.stop()
