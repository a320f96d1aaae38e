"""One warning per database fault per process, not a traceback per component.

A blip (a restart, `pg_terminate_backend`, a failover) fails everything that was
using a connection at that moment: requests, claims, heartbeats, the listener, the
dispatcher. Each reports here; the first failure after a quiet spell logs one
warning line, the rest of the burst (and every traceback) goes to debug.
"""

from __future__ import annotations

import logging
import time

import asyncpg

log = logging.getLogger("taskservice.database")

QUIET_SECONDS = 1.0  # failures closer together than this are one fault

# What a loop on a bare asyncpg connection of its own (the listener, the heartbeat)
# takes as "the connection failed": reconnect. `InternalClientError` is a connection
# the server closed under a pending operation.
DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)

# The server would not take a connection, or ended the session: too many clients
# (`max_connections`, a role's or a database's `CONNECTION LIMIT`: SQLSTATE 53300),
# starting up (57P03), shutting down (57P01, 57P02), or a connection-class failure
# (class 08). A database fault like a killed connection: retry later. On a bare
# connect they arrive as server errors, not as connection errors.
REFUSED: tuple[type[BaseException], ...] = (
    asyncpg.TooManyConnectionsError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.PostgresConnectionError,
)


def refused(exc: BaseException) -> bool:
    """Whether `exc`, or what it was raised from (SQLAlchemy's `DBAPIError` keeps the
    driver's error as the cause of its `orig`), is the server refusing a connection.
    Not what it was raised while handling: a bug in an `except` stays a bug."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, REFUSED):
            return True
        todo += [current.__cause__, getattr(current, "orig", None)]
    return False


class Outage:
    def __init__(self) -> None:
        self._last_failure = -float("inf")
        self.faults = 0

    def failed(self, where: str, exc: BaseException) -> None:
        now = time.monotonic()
        first = now - self._last_failure > QUIET_SECONDS
        self._last_failure = now
        if first:
            self.faults += 1
            log.warning("database unavailable (first seen by %s: %s); retrying", where, _brief(exc))
        log.debug("database failure in %s", where, exc_info=exc)


def _brief(exc: BaseException) -> str:
    """The exception's class and first line; the cause's if it wraps one."""
    cause = exc.__cause__ or exc
    first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return f"{type(cause).__name__}: {first}" if first else type(cause).__name__


OUTAGE = Outage()  # per process: every component reports to the same one
