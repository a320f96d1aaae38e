"""Prometheus metrics (`GET /metrics`, or `TASKSERVICE_METRICS_PORT`), with
prometheus-client's default registry (its process and GC metrics included).

Two kinds, so that several processes and replicas add up:

- what each process does, counted by that process: claims, runs, model requests,
  tokens and cost, interruptions, webhook attempts, open streams, HTTP requests. Every
  process is scraped (each replica, each `worker`, on its own port when it serves
  no API), and Prometheus sums them; no label names a tenant or a task. The
  processes of one `serve --processes N` are one target: each adds up all of them
  (prometheus-client's multiprocess mode);
- the queue as the database sees it (`QueueGauges`): tasks by live state, the
  oldest pending task's age, the webhook backlog and how overdue its oldest
  delivery is, the workers holding leases. Read by whichever process is scraped, at
  most once per `METRICS_CACHE_SECONDS` (concurrent scrapes share the read), from
  small partial indexes: the same figures from every replica, so take one, not
  the sum (`max by` the metric).

Two modules are named `metrics`: this one defines the metrics and what every layer
counts into; `api/routes/metrics.py` is the REST route that serves them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

_PREFIX = "taskservice_"

CLAIM_LATENCY = Histogram(
    _PREFIX + "claim_latency_seconds",
    "From a task becoming claimable (submitted, answered, recovered, released) to a "
    "worker claiming it.",
    ["agent"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800),
)
RUN_DURATION = Histogram(
    _PREFIX + "run_duration_seconds",
    "An attempt's run, from its claim to its outcome (or to its stop).",
    ["agent", "outcome"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
MODEL_REQUESTS = Counter(
    _PREFIX + "model_requests",
    "Model responses received, by agent profile and the task's model.",
    ["agent", "model"],
)
MODEL_TOKENS = Counter(
    _PREFIX + "model_tokens",
    "Tokens of model requests (`input`) and responses (`output`), by agent profile and "
    "the task's model.",
    ["agent", "model", "direction"],
)
MODEL_COST = Counter(
    _PREFIX + "model_cost_usd",
    "What priced model responses cost, in USD (genai-prices' or the operator's prices), "
    "by agent profile and the task's model.",
    ["agent", "model"],
)
MODEL_UNPRICED = Counter(
    _PREFIX + "model_unpriced_requests",
    "Model responses with no price (a model neither genai-prices nor "
    "TASKSERVICE_MODEL_PRICES knows, the built-in models), by agent profile and the "
    "task's model: their cost is not in model_cost_usd.",
    ["agent", "model"],
)
INTERRUPTIONS = Counter(
    _PREFIX + "task_interruptions",
    "Runs that did not end by themselves: `recovered` (a lease lapsed), `exhausted` "
    "(recovered on its last attempt: failed), `released` (a worker shutting down), "
    "`stalled` (quiet too long), `timed_out`.",
    ["kind"],
)
MODEL_THROTTLED = Counter(
    _PREFIX + "model_throttled",
    "Model requests that waited for their rate limit budget without a worker slot, by "
    "the task's model and why: `budget` (no room yet), `provider_429` (the provider "
    "refused one).",
    ["model", "reason"],
)
BUDGET_ALERTS = Counter(
    _PREFIX + "budget_alerts",
    "Spend budgets reaching a threshold (`80`, `100`: the limit, or a request refused "
    "for want of room), once each per budget and period, by whose budget: `tenant` or "
    "`agent` (a profile's). Each alert is counted by one process, the first to see it.",
    ["scope", "threshold"],
)
WEBHOOK_ATTEMPTS = Counter(
    _PREFIX + "webhook_attempts",
    "Webhook delivery attempts: `delivered`, `retrying` (failed, another attempt is "
    "due), `given_up` (failed, the schedule is spent), `gone` (410: disabled).",
    ["outcome"],
)
WEBHOOK_DURATION = Histogram(
    _PREFIX + "webhook_attempt_duration_seconds",
    "A webhook attempt, from the send to the receiver's answer (or the error).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
EVENT_STREAMS = Gauge(
    _PREFIX + "event_streams_open",
    "Event streams open on this process: `task` (REST), `firehose`, `a2a`.",
    ["kind"],
    multiprocess_mode="livesum",  # `serve --processes N`: the live processes' sum
)
HTTP_DURATION = Histogram(
    _PREFIX + "http_request_duration_seconds",
    "HTTP requests, by method, route template and status: until the last byte of the "
    "answer, or for an event stream until it starts.",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60),
)

# The queue's gauges: name → help.
QUEUE_GAUGES = {
    "tasks": "Tasks in a live state (`state`), across tenants.",
    "tasks_delayed": "Of the pending tasks, those submitted for later whose run_at has "
    "not come yet.",
    "tasks_throttled": "Of the running tasks, those waiting without a worker for their "
    "model's rate limit budget (`TASKSERVICE_RATE_LIMITS`).",
    "oldest_pending_age_seconds": "How long the oldest pending task that may run has "
    "waited since its run_at (0: none).",
    "webhook_backlog": "Webhook deliveries waiting for an attempt (due or scheduled).",
    "webhook_oldest_due_age_seconds": "How overdue the most overdue delivery is (0: none).",
    "workers_with_leases": "Worker processes holding a lease on a running task.",
}


class QueueGauges(Collector):
    """The queue as last read from the database (by `refresh`), collected with the
    process's own metrics."""

    def __init__(self) -> None:
        self.values: Mapping[str, Any] = {}
        self.read_at = -float("inf")  # monotonic
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    async def refresh(
        self, read: Callable[[], Awaitable[Mapping[str, Any]]], *, within: float
    ) -> None:
        """Read the queue unless a read is less than `within` seconds old; concurrent
        callers wait for one read."""
        if time.monotonic() - self.read_at < within:
            return
        lock = self._locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            if time.monotonic() - self.read_at < within:
                return
            self.values = await read()
            self.read_at = time.monotonic()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        values = self.values
        if not values:
            return
        tasks = GaugeMetricFamily(_PREFIX + "tasks", QUEUE_GAUGES["tasks"], labels=["state"])
        for state in ("pending", "running", "input_required"):
            tasks.add_metric([state], float(values.get(state) or 0))
        yield tasks
        for name in list(QUEUE_GAUGES)[1:]:
            yield GaugeMetricFamily(_PREFIX + name, QUEUE_GAUGES[name], value=float(values[name]))


QUEUE = QueueGauges()
REGISTRY.register(QUEUE)
MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def _registry() -> CollectorRegistry:
    """What a scrape reads. Under `serve --processes N` (prometheus-client's
    multiprocess mode, `PROMETHEUS_MULTIPROC_DIR` set by the supervisor) every
    process writes its counters to files there, and whichever process is scraped adds
    up all of them, so one port shows the whole server. That mode has no process or
    GC metrics (they describe one process)."""
    if not MULTIPROCESS:
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    registry.register(QUEUE)
    return registry


_SCRAPED = _registry()


def http_metrics(app: Any) -> Any:
    """ASGI middleware timing each HTTP request into `HTTP_DURATION`, labelled with
    the route's template (`/v1/tasks/{task_id}`), never the path itself."""

    async def timed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        done = False

        def observe() -> None:
            nonlocal done
            done = True
            route = scope.get("route")
            HTTP_DURATION.labels(
                scope["method"], getattr(route, "path", "unmatched"), str(status)
            ).observe(time.perf_counter() - started)

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                await send(message)
                if any(
                    k == b"content-type" and v.startswith(b"text/event-stream")
                    for k, v in message.get("headers", ())
                ):
                    observe()  # a stream: how long it took to start
                return
            await send(message)
            if (
                not done
                and message["type"] == "http.response.body"
                and not message.get("more_body")
            ):
                observe()

        try:
            await app(scope, receive, sending)
        finally:
            if not done:
                observe()  # failed or disconnected before its last byte

    return timed


def exposition(accept: str | None) -> tuple[bytes, str]:
    """This process's metrics, in the format `accept` asks for (Prometheus text, or
    OpenMetrics), with its content type."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(_SCRAPED), content_type


@contextlib.asynccontextmanager
async def serving(
    host: str, port: int, read: Callable[[], Awaitable[Mapping[str, Any]]], *, within: float
) -> AsyncIterator[None]:
    """`GET /metrics` on a port of its own, without authentication (for a scraper on
    a private network, and for `worker` processes, which serve no API), while the
    block runs."""
    import uvicorn

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            await _answer(send, 404, b"only /metrics here\n", "text/plain; charset=utf-8")
            return
        await QUEUE.refresh(read, within=within)
        headers = dict(scope["headers"])
        body, content_type = exposition(headers.get(b"accept", b"").decode("latin-1"))
        await _answer(send, 200, body, content_type)

    config = uvicorn.Config(app, host=host, port=port, lifespan="off", log_level="warning")
    server = _quiet_server(config)
    # The processes of one `serve --processes N` share the port (each answers with
    # the sum of all of them); a lone process keeps it to itself.
    sockets = [_shared_socket(host, port)] if MULTIPROCESS else None
    running = asyncio.create_task(server.serve(sockets), name="metrics-server")
    try:
        while not server.started:
            if running.done():
                running.result()  # it could not start: raise why
                raise RuntimeError(f"the metrics server on {host}:{port} stopped")
            await asyncio.sleep(0.01)
        yield
    finally:
        server.should_exit = True
        await asyncio.gather(running, return_exceptions=True)


def _shared_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _quiet_server(config: Any) -> Any:
    """uvicorn's server, leaving signals to the process's own server or runner."""
    import uvicorn

    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    return server


async def _answer(send: Any, status: int, body: bytes, content_type: str) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
