"""`TASKSERVICE_OTEL`: FastAPI's OpenTelemetry, reporting to the global providers."""

from __future__ import annotations

import httpx
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai.models import override_allow_model_requests

from tests.conftest import LiveFactory, wait_for
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.webhook_receiver import Receiver

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


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{TRACE_ID}-00f067aa0ba902b7-01"  # the caller's own span, sampled
MODEL = "openai-chat:fake-gpt"


async def test_a_task_is_one_trace_from_its_submit_to_its_webhook(
    make_live: LiveFactory, receiver: Receiver
) -> None:
    """The caller's `traceparent` goes on through the submit, the claim, the run, the
    model request (its HTTP request carries the trace too), the tool call and the
    webhook attempt (whose request carries it on to the receiver)."""
    exporter = _global_provider()
    with FakeOpenAI() as fake, override_allow_model_requests(True):
        progress = {"percent": 50, "note": "halfway"}
        fake.queue(Reply(tool_calls=[("call_1", "report_progress", progress)]), Reply(text="done"))
        async with (
            make_live(
                otel=True,
                workers_enabled=True,
                openai_base_url=fake.base_url,
                openai_api_key="sk-test",
                allowed_models=["offline", MODEL],
                webhook_allow_http=True,
                webhook_allow_targets=["127.0.0.1/32"],
            ) as live,
            httpx.AsyncClient(base_url=live.url, timeout=10) as client,
        ):
            hook = {"url": receiver.url(), "states": ["completed"]}
            created = await client.post(
                "/v1/tasks",
                json={"input": "trace me", "model": MODEL, "webhooks": [hook]},
                headers={"traceparent": CALLER},
            )
            assert created.status_code == 201
            task_id = created.json()["id"]
            await wait_for(lambda: receiver.at("/hook"))
            await wait_for(lambda: _named(exporter, "webhook.attempt"))
        model_headers = fake.headers
    spans = [s for s in exporter.get_finished_spans() if s.context.trace_id == int(TRACE_ID, 16)]
    names = [span.name for span in spans]
    for expected in ("POST /v1/tasks", "task.queued", "task.run", "webhook.attempt"):
        assert expected in names, names
    assert any("fake-gpt" in name for name in names), names  # pydantic-ai's model request
    assert any("report_progress" in name for name in names), names  # and its tool call
    run = next(span for span in spans if span.name == "task.run")
    assert run.attributes is not None
    assert run.attributes["taskservice.task_id"] == task_id
    assert run.attributes["taskservice.outcome"] == "completed"
    # The trace goes out: to the model provider, and to the webhook's receiver,
    # each as a child of the span that made the request.
    assert all(TRACE_ID in headers["traceparent"] for headers in model_headers)
    attempt = next(span for span in spans if span.name == "webhook.attempt")
    sent = receiver.at("/hook")[0].headers["traceparent"]
    assert sent.split("-")[1:3] == [TRACE_ID, format(attempt.context.span_id, "016x")]


def _named(exporter: InMemorySpanExporter, name: str) -> bool:
    return any(span.name == name for span in exporter.get_finished_spans())
