"""`GET /metrics`, read as Prometheus reads it (prometheus-client's text parser), on a
real server: what a task's life adds, the queue's gauges against the database, the
protection, and the port of its own."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.keys import ApiKeyStore
from taskservice.db.leases import LeaseStore
from taskservice.db.steps import LedgerStore
from taskservice.db.tasks import TaskStore
from taskservice.settings import Settings
from taskservice.worker.reaper import Reaper
from tests.conftest import ClientFactory, LiveFactory, wait_for
from tests.fakes.webhook_receiver import Receiver
from tests.integration.helpers import expire, new_task
from tests.sse import read_events

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample: (name, labels) → value."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def scrape(client: httpx.AsyncClient, **headers: str) -> Samples:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


async def test_a_tasks_life_counts_its_claim_run_model_request_and_http_requests(
    make_client: ClientFactory,
) -> None:
    async with make_client(workers_enabled=True, metrics_cache_seconds=0) as client:
        before = await scrape(client)
        submitted = await client.post("/v1/tasks", json={"input": "hello"})
        assert submitted.status_code == 201
        task_id = submitted.json()["id"]
        done = await client.get(f"/v1/tasks/{task_id}", params={"wait": 10})
        assert done.json()["state"] == "completed"
        await wait_for(lambda: _ran(client, before))
        after = await scrape(client)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("taskservice_claim_latency_seconds_count", agent="default") == 1
    assert grew("taskservice_run_duration_seconds_count", agent="default", outcome="completed") == 1
    offline = {"agent": "default", "model": "offline"}
    assert grew("taskservice_model_requests_total", **offline) == 1
    assert grew("taskservice_model_tokens_total", **offline, direction="input") > 0
    assert grew("taskservice_model_tokens_total", **offline, direction="output") > 0
    route = {"method": "POST", "route": "/v1/tasks", "status": "201"}
    assert grew("taskservice_http_request_duration_seconds_count", **route) == 1
    waited = {"method": "GET", "route": "/v1/tasks/{task_id}", "status": "200"}
    assert grew("taskservice_http_request_duration_seconds_count", **waited) >= 1
    # The process's own metrics come along.
    assert value(after, "process_cpu_seconds_total") > 0


async def _ran(client: httpx.AsyncClient, before: Samples) -> bool:
    # The run's duration is observed as the run ends, a moment after its outcome.
    labels = {"agent": "default", "outcome": "completed"}
    name = "taskservice_run_duration_seconds_count"
    return value(await scrape(client), name, **labels) > value(before, name, **labels)


async def test_the_queue_gauges_are_the_databases_read_at_most_once_a_period(
    make_client: ClientFactory, store: TaskStore
) -> None:
    for _ in range(3):
        await new_task(store)  # pending: no workers run here
    await new_task(store, run_at=datetime.now(UTC) + timedelta(days=1))  # and for later
    async with make_client(metrics_cache_seconds=0) as client:
        first = await scrape(client)
        assert value(first, "taskservice_tasks", state="pending") == 4
        assert value(first, "taskservice_tasks_delayed") == 1
        assert value(first, "taskservice_tasks", state="running") == 0
        # Of the tasks that may run: not the one for tomorrow (a negative age).
        assert 0 < value(first, "taskservice_oldest_pending_age_seconds") < 60
        assert value(first, "taskservice_webhook_backlog") == 0
    async with make_client(metrics_cache_seconds=60) as client:
        assert value(await scrape(client), "taskservice_tasks", state="pending") == 4
        await new_task(store)
        # Within the period: the figures of the last read, not a new read.
        assert value(await scrape(client), "taskservice_tasks", state="pending") == 4


async def test_interruptions_and_webhook_attempts_are_counted(
    make_client: ClientFactory,
    store: TaskStore,
    db: AsyncEngine,
    settings: Settings,
    receiver: Receiver,
) -> None:
    hooks = {"webhook_allow_http": True, "webhook_allow_targets": ["127.0.0.1/32"]}
    async with make_client(metrics_cache_seconds=0, **hooks) as client:
        before = await scrape(client)
        task = await new_task(store)
        leases = LeaseStore(store.db)
        await leases.claim(owner="dead-worker", limit=1, lease_seconds=30)
        await expire(db, task.id)
        ledger = LedgerStore(store.db, log_cap=10, log_chars=settings.max_log_chars)
        await Reaper(leases=leases, ledger=ledger, tasks=store, settings=settings).pass_once()
        hook = {"url": receiver.url(), "states": ["pending", "completed"]}
        submitted = await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})
        assert submitted.status_code == 201
        await wait_for(lambda: receiver.at("/hook"))
        await wait_for(lambda: _delivered(client, before))
        after = await scrape(client)
    recovered = {"kind": "recovered"}
    name = "taskservice_task_interruptions_total"
    assert value(after, name, **recovered) - value(before, name, **recovered) == 1


async def _delivered(client: httpx.AsyncClient, before: Samples) -> bool:
    name, labels = "taskservice_webhook_attempts_total", {"outcome": "delivered"}
    return value(await scrape(client), name, **labels) > value(before, name, **labels)


async def test_open_event_streams_are_a_gauge(make_live: LiveFactory, store: TaskStore) -> None:
    task = await new_task(store)
    async with (
        make_live() as api,
        httpx.AsyncClient(base_url=api.url, timeout=30) as client,
    ):
        before = value(await scrape(client), "taskservice_event_streams_open", kind="task")
        async with client.stream(
            "GET", f"/v1/tasks/{task.id}/events", headers={"Accept": "text/event-stream"}
        ) as response:
            events = read_events(response)  # kept open (not broken out of) while scraping
            assert (await anext(events)).event == "snapshot"
            during = value(await scrape(client), "taskservice_event_streams_open", kind="task")
            await events.aclose()
        assert during == before + 1

        async def closed() -> bool:
            samples = await scrape(client)
            return value(samples, "taskservice_event_streams_open", kind="task") == before

        await wait_for(closed)


async def test_protected_like_the_api_once_keys_exist(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    key, _ = await ApiKeyStore(db).create(tenant="acme")
    async with make_client() as client:
        refused = await client.get("/metrics")
        assert refused.status_code == 401
        assert refused.headers["content-type"] == "application/problem+json"
        await scrape(client, Authorization=f"Bearer {key}")


async def test_a_port_of_its_own_without_authentication(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    await ApiKeyStore(db).create(tenant="acme")  # the API wants a key; that port does not
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with (
        make_client(metrics_port=port) as _,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as scraper,
    ):
        samples = await scrape(scraper)
        assert ("taskservice_tasks", frozenset({("state", "pending")})) in samples
        openmetrics = await scraper.get(
            "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
        assert openmetrics.text.endswith("# EOF\n")
        assert (await scraper.get("/")).status_code == 404
