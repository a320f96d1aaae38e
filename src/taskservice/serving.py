"""How `taskservice serve` runs: one process, or a supervisor and N processes on one
port (`--processes`, default one per core).

One Python process uses one core, so `serve` on a machine with several runs several
copies of the same program. Each is a whole replica (API, workers, dispatcher,
reaper, scheduler, its own pools and LISTEN connection); PostgreSQL coordinates them
as it does replicas on other machines. The supervisor:

- resolves the database once (starting the embedded PostgreSQL if none is
  configured, and migrating it), so the children share one server and never race
  to initialise it;
- binds the listening socket once and hands it to every child, which accept from it
  in turn (the kernel spreads the connections);
- restarts a child that dies, unless it failed before serving (a broken
  configuration would fail the same way again: the supervisor stops with it);
- on SIGTERM or SIGINT, asks every child to stop (SIGTERM: each stops claiming, lets
  its runs finish within the grace period and releases the rest) and waits for them.

Each child stops (SIGTERM to itself) when the supervisor dies without stopping it
(`kill -9`): it watches a pipe only the supervisor writes to. No child outlives it
and keeps the port.

Start-up time: the children are forked from multiprocessing's fork server, which
imports the app once, while the supervisor opens and migrates the database (on two
cores, `serve` answered in 2.1-2.4 s where spawning N fresh interpreters, each
importing everything, took 3.5-4 s: `bench/startup.py`).

What `serve` says at start is one block, from the supervisor once every process is
ready (where to browse, the database, the model, the access mode, the processes):
each process tells it what it found through a pipe, and does not say it itself
(`common.logs.quiet_startup`). One process (`--processes 1`) says the same block.

Why not uvicorn's own `--workers` supervisor: it builds a plain `uvicorn.Server` in
each child from an import string, so the settings would have to travel through the
environment, a child could not report a failed start by its exit status nor freeze
its start-up heap, and nothing stops its children when it is killed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

import uvicorn
from prometheus_client import multiprocess

from taskservice import STARTED, __version__
from taskservice.common.logs import configure, quiet_startup
from taskservice.settings import Settings

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from taskservice.runtime import Startup

log = logging.getLogger("taskservice.serve")

STARTUP_FAILED = 3  # exit status when the app could not start (as uvicorn's)
# Longer than any child's own shutdown: the API's graceful shutdown (a lease) and the
# workers' grace for runs to finish, with a margin; then the rest are killed.
_STOP_MARGIN = 15.0
# A child dying sooner than this after its start, over and over, is not restarted
# at once: the supervisor waits this long between such restarts.
_RESTART_BACKOFF = 1.0


def cores() -> int:
    """The cores this process may run on (its CPU affinity, else every core)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def serve(settings: Settings, *, processes: int, access_log: bool) -> int:
    """Serve until stopped; the exit status."""
    if processes <= 1:
        quiet_startup()

        def ready(startup: Startup) -> None:
            log.info("%s", ready_block(settings, startup, processes=[os.getpid()]))

        return _serve_here(settings, sockets=None, access_log=access_log, on_ready=ready)
    return Supervisor(settings, processes=processes, access_log=access_log).run()


def ready_block(settings: Settings, startup: Startup, *, processes: list[int]) -> str:
    """What `serve` says once it answers: where to browse, and what it runs on."""
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    base = f"http://{host}:{settings.port}"
    took = time.monotonic() - STARTED
    runs = f"{startup.workers} workers" if startup.workers else "no workers"
    each = f"the API, {runs}" + (" and a webhook dispatcher" if startup.webhooks else "")
    if len(processes) == 1:
        how = f"1 (pid {processes[0]}): {each}"
    else:
        pids = ", ".join(str(pid) for pid in processes)
        how = f"{len(processes)} (supervisor {os.getpid()}; {pids}), each with {each}"
    database = startup.database + (f", {startup.schema}" if startup.schema else "")
    lines = [
        f"taskservice {__version__} ready in {took:.1f} s on {base}",
        f"  console    {base}/ui/",
        f"  API        {base}/docs (reference), {base}/redoc; A2A at /a2a, MCP at /mcp",
        f"  database   {database}",
        f"  model      {startup.model}",
        f"  access     {startup.open_mode or 'API keys required (Authorization: Bearer)'}",
        f"  processes  {how}",
    ]
    lines += [f"  limit      {limit}" for limit in startup.rate_limits]
    return "\n".join(lines)


class _Server(uvicorn.Server):
    """uvicorn's server, as `serve` runs it: SIGTERM and SIGINT ask for a graceful
    stop, after which the process exits 0 (uvicorn would re-raise the signal
    afterwards and die by it), the start-up heap is frozen once serving, and
    `on_ready` is told what the start found."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started and self._on_ready is not None:
            self._on_ready()
        freeze_heap()

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()


# The collector's first threshold: tracked objects allocated (net of those freed)
# before a young collection. Python's 700 is crossed by what the requests and runs
# in flight hold for a moment, not by garbage: one process of `bench/peers.py`'s
# load made 1,700 young and 13 full collections per 3,000 tasks, 190 µs of CPU a
# task; at 20,000, 8 young ones and 10 µs per task, the longest pause 5-9 ms. What
# only a collection frees (reference cycles) waits longer: a few MB at most.
YOUNG_COLLECTION_THRESHOLD = 20_000


def freeze_heap() -> None:
    """What start-up built (every module, the app, the runtime) lives as long as the
    process: keep it out of the collector's full passes, which otherwise walk all of it
    each time (pauses of 100-250 ms every few seconds under load, every stream and run
    of the process waiting: bench/live.py). And collect the young generation when it
    has grown by garbage, not by the work in flight (`YOUNG_COLLECTION_THRESHOLD`)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)


def _serve_here(
    settings: Settings,
    *,
    sockets: list[socket.socket] | None,
    access_log: bool,
    on_ready: Callable[[Startup], None] | None = None,
) -> int:
    """Serve in this process; under a supervisor (`sockets` given), which migrated the
    database already, without migrating it again. `on_ready(startup)` once serving."""
    from taskservice.api.app import create_app

    app = create_app(settings, migrate_schema=sockets is None)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        # Its loggers go through ours (`common/logs.configure`): one format.
        log_config=None,
        log_level=None,  # its loggers' levels are ours (`common.logs`)
        access_log=access_log,
        timeout_graceful_shutdown=int(settings.lease_seconds),
    )
    server = _Server(
        config, None if on_ready is None else lambda: on_ready(app.state.runtime.startup)
    )
    server.run(sockets=sockets)
    return 0 if server.started else STARTUP_FAILED


def _child(
    settings: Settings,
    sockets: list[socket.socket],
    access_log: bool,
    ready: Connection,
    lifeline: Connection,
) -> None:
    """A child's whole life (forked from the fork server, the app imported)."""
    _stop_with_supervisor(lifeline)
    configure(settings.log_level, settings.log_format, pid=True)
    quiet_startup()

    def said(startup: Startup) -> None:
        with contextlib.suppress(OSError):  # the supervisor is gone: we stop anyway
            ready.send(startup)
        ready.close()

    sys.exit(_serve_here(settings, sockets=sockets, access_log=access_log, on_ready=said))


def _stop_with_supervisor(lifeline: Connection) -> None:
    """SIGTERM to this process when the supervisor ends, however it ends: the
    supervisor holds the only writing end of `lifeline`, which the kernel closes
    when it dies. (Not the kernel's parent-death signal: a child's parent is the fork
    server, which lives as long as any child does, since each holds its "alive"
    pipe.)"""

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            lifeline.recv_bytes()  # nothing is ever sent: this returns at its end
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="taskservice-lifeline", daemon=True).start()


class Supervisor:
    def __init__(self, settings: Settings, *, processes: int, access_log: bool) -> None:
        self.settings = settings
        self.processes = processes
        self.access_log = access_log
        self._stopping = False
        self._context = multiprocessing.get_context("forkserver")
        self._children: list[Any] = []
        self._started_at: dict[int, float] = {}
        self._readers: dict[Any, Any] = {}  # a starting child's pipe: the child
        # Each child holds the reading end; the writing end is this process's only.
        self._lifeline, self._lifeline_held = self._context.Pipe(duplex=False)
        self._ready: list[int] = []  # the first children, as they become ready
        self._found: Startup | None = None  # what the first child's start found
        self._database_said: str | None = None  # as the supervisor resolved it

    def run(self) -> int:
        with tempfile.TemporaryDirectory(prefix="taskservice-metrics-") as metrics_dir:
            # prometheus-client's multiprocess mode: each child writes its counters to
            # files here, and any child's /metrics adds up all of them. Set before the
            # fork server starts: the children have its environment.
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
            self._preload()
            try:
                url = self._database()
            except Exception as exc:  # noqa: BLE001  any reason: said, and the start failed
                log.error("could not open the database: %s", exc)
                return STARTUP_FAILED
            # The children's settings: the database resolved, so none starts its own.
            settings = self.settings.model_copy(update={"database_url": url})
            try:
                sock = self._listen()
            except OSError as exc:
                log.error(
                    "could not listen on %s:%d: %s", self.settings.host, self.settings.port, exc
                )
                return STARTUP_FAILED
            with sock:
                return self._supervise(settings, sock)

    def _preload(self) -> None:
        """Start the fork server now, importing the app (seconds of CPU), while this
        process opens the database; each child is then a fork of it."""
        from multiprocessing import forkserver

        self._context.set_forkserver_preload(["taskservice._preload"])
        forkserver.ensure_running()

    def _database(self) -> str:
        import asyncio

        from taskservice.db import migrate
        from taskservice.db.embedded import describe_database, resolve_database_url

        async def database() -> str:
            url = await resolve_database_url(self.settings)
            schema = (await migrate.upgrade(url)).describe()
            self._database_said = f"{describe_database(self.settings, url)}, {schema}"
            await self._check_connections(url)
            return url

        return asyncio.run(database())

    async def _check_connections(self, url: str) -> None:
        """Say so when the processes could together open more connections than the
        server allows (a pool grows with load, so the failure would come later)."""
        from taskservice.db import connections, notify

        conn = await notify.connect(url)
        try:
            allowed = int(await conn.fetchval("SHOW max_connections")) - int(
                await conn.fetchval("SHOW superuser_reserved_connections")
            )
        finally:
            await conn.close()
        held = connections(
            self.settings.db_pool_size,
            workers=self.settings.workers_enabled,
            live_output=self.settings.delta_interval_ms > 0,
        )
        each = sum(held.values())
        if self.processes * each > allowed:
            log.warning(
                "%d processes may open up to %d database connections each (%s), %d in "
                "all; the server allows %d: lower TASKSERVICE_DB_POOL_SIZE or --processes, "
                "or raise max_connections",
                self.processes,
                each,
                ", ".join(f"{n} {holder}" for holder, n in held.items()),
                self.processes * each,
                allowed,
            )

    def _listen(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.settings.host, self.settings.port))
            sock.listen(2048)  # uvicorn's backlog
        except OSError:
            sock.close()
            raise
        return sock

    def _supervise(self, settings: Settings, sock: socket.socket) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        for _ in range(self.processes):
            self._children.append(self._start(settings, sock))
        status = 0
        while not self._stopping:
            sentinels = [child.sentinel for child in self._children]
            woke = wait([*sentinels, *self._readers], timeout=0.5)
            for reader in woke:
                if reader in self._readers:
                    self._heard(reader)
            for index, child in enumerate(self._children):
                if child.is_alive() or self._stopping:
                    continue
                child.join()
                lived = time.monotonic() - self._started_at.get(child.pid or 0, 0.0)
                self._forget(child)
                if child.exitcode == STARTUP_FAILED:
                    log.error("process %d could not start; stopping", child.pid)
                    self._stopping = True
                    status = STARTUP_FAILED
                    break
                log.warning("process %d exited (%s); starting another", child.pid, child.exitcode)
                if lived < _RESTART_BACKOFF:  # dying at once, over and over: not a hot loop
                    time.sleep(_RESTART_BACKOFF)
                self._children[index] = self._start(settings, sock)
        self._stop_children()
        return status

    def _start(self, settings: Settings, sock: socket.socket) -> Any:
        reader, writer = self._context.Pipe(duplex=False)
        child = self._context.Process(
            target=_child,
            args=(settings, [sock], self.access_log, writer, self._lifeline),
            name="taskservice-serve",
        )
        child.start()
        writer.close()  # the child's end
        self._readers[reader] = child
        self._started_at[child.pid or 0] = time.monotonic()
        return child

    def _heard(self, reader: Any) -> None:
        """A child is ready (or died first: end of file). Once all the first ones are,
        the start-up block; a replacement, one line."""
        child = self._readers.pop(reader)
        try:
            startup = reader.recv()
        except (EOFError, OSError):
            return
        finally:
            reader.close()
        if self._found is not None:
            log.info("process %d ready", child.pid)
            return
        self._ready.append(child.pid)
        if len(self._ready) < self.processes:
            return
        self._found = startup
        # The children were given the database the supervisor resolved and migrated.
        found = dataclasses.replace(startup, database=self._database_said, schema=None)
        log.info("%s", ready_block(self.settings, found, processes=self._ready))

    def _forget(self, child: Any) -> None:
        """A dead child's live gauges (its open streams) no longer count."""
        self._started_at.pop(child.pid, None)
        with contextlib.suppress(OSError):
            multiprocess.mark_process_dead(child.pid)  # type: ignore[no-untyped-call]

    def _stop(self, sig: int, frame: Any) -> None:
        if self._stopping and sig == signal.SIGINT:
            # A second Ctrl-C: stop now, releasing nothing (the leases lapse).
            for child in self._children:
                if child.is_alive():
                    child.kill()
        self._stopping = True

    def _stop_children(self) -> None:
        live = [child for child in self._children if child.is_alive()]
        log.info("stopping %d processes", len(live))
        for child in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_within()
        for child in live:
            child.join(max(0.0, deadline - time.monotonic()))
            if child.is_alive():
                log.warning("process %d did not stop in time; killing it", child.pid)
                child.kill()
                child.join()
            self._forget(child)

    def _stop_within(self) -> float:
        return self.settings.lease_seconds + self.settings.shutdown_grace_seconds + _STOP_MARGIN
