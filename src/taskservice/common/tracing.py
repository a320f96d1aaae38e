"""OpenTelemetry traces (`TASKSERVICE_OTEL`), to the globally configured providers,
one trace per task, from the request that submitted it to the last webhook attempt:

```
POST /v1/tasks (FastAPI's server span; an incoming `traceparent` continues)
  └ the task keeps that span's context (`tasks.trace_context`, W3C headers)
      ├ task.queued     from claimable to claimed (one per attempt)
      ├ task.run        the attempt, on whichever worker claimed it
      │   └ pydantic-ai's spans: the agent run, each model request (its HTTP request
      │     carries `traceparent`), each tool call; a subtask spawned here keeps
      │     this context, so its own spans join the trace
      └ webhook.attempt each delivery attempt (its request carries `traceparent`)
```

Off (the default), nothing here creates a span or keeps a context: `Tracing(False)`
hands out nothing at no cost.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

Carrier = dict[str, str]  # W3C trace context headers: traceparent (and tracestate)


class Tracing:
    """The service's spans, or none (`enabled` False)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._tracer = trace.get_tracer("taskservice") if enabled else None

    def carrier(self) -> Carrier | None:
        """The current span's context as headers, to keep with a task (None: off, or
        no span)."""
        if not self.enabled or not trace.get_current_span().get_span_context().is_valid:
            return None
        headers: Carrier = {}
        propagate.inject(headers)
        return headers or None

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        parent: Mapping[str, str] | None,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        started_ago: float = 0.0,
    ) -> Iterator[Span | None]:
        """A span under the context `parent` carries (a task's), current while the
        block runs; `started_ago` seconds before now (a wait that is over). None when
        off. An exception escaping the block marks it as an error."""
        if self._tracer is None:
            yield None
            return
        context = propagate.extract(parent) if parent else None
        start = time.time_ns() - int(started_ago * 1e9)
        with self._tracer.start_as_current_span(
            name,
            context=context,
            kind=kind,
            attributes=dict(attributes or {}),
            start_time=start,
            record_exception=True,
            set_status_on_exception=True,
        ) as span:
            yield span

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """Add the current span's `traceparent` to outgoing request headers."""
        if self.enabled and trace.get_current_span().get_span_context().is_valid:
            propagate.inject(headers)


def failed(span: Span | None, description: str) -> None:
    """Mark `span` as failed (an outcome that raised nothing)."""
    if span is not None:
        span.set_status(Status(StatusCode.ERROR, description))
