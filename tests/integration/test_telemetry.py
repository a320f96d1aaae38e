"""`TASKSERVICE_OTEL`: FastAPI's OpenTelemetry, reporting to the global providers."""

from __future__ import annotations

import httpx
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conftest import LiveFactory

_EXPORTER = InMemorySpanExporter()


def _global_provider() -> InMemorySpanExporter:
    """The process's tracer provider can be set once; every test here shares it."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    return _EXPORTER


def request_spans(exporter: InMemorySpanExporter) -> list[str]:
    return [span.name for span in exporter.get_finished_spans() if span.kind.name == "SERVER"]


async def test_requests_are_traced_when_otel_is_on(make_live: LiveFactory) -> None:
    exporter = _global_provider()
    async with (
        make_live(otel=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as client,
    ):
        created = await client.post("/v1/tasks", json={"input": "traced"})
        assert created.status_code == 201
        task = created.json()
        assert (await client.get(f"/v1/tasks/{task['id']}")).status_code == 200
        async with client.stream(
            "GET", f"/v1/tasks/{task['id']}/events", headers={"Accept": "text/event-stream"}
        ) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("event: snapshot"):
                    break
    names = request_spans(exporter)
    assert "POST /v1/tasks" in names, names
    assert "GET /v1/tasks/{task_id}" in names, names
    assert "GET /v1/tasks/{task_id}/events" in names, names


async def test_nothing_is_traced_when_otel_is_off(make_live: LiveFactory) -> None:
    exporter = _global_provider()
    async with (
        make_live() as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as client,
    ):
        assert (await client.post("/v1/tasks", json={"input": "untraced"})).status_code == 201
    assert request_spans(exporter) == []
