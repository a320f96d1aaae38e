"""`GET /metrics`: Prometheus metrics (`taskservice.common.metrics`), protected like the API
(open only in open development mode); `TASKSERVICE_METRICS_PORT` serves them on a
port of their own instead."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Response

from taskservice.api.deps import Caller
from taskservice.api.errors import problem_responses
from taskservice.common.metrics import QUEUE, exposition

router = APIRouter(tags=["operations"])


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics",
    description="This process's counters and histograms, and the queue's gauges read "
    "from the database (at most once per `METRICS_CACHE_SECONDS`). Any API key may read "
    "them: they are service-wide and name no tenant or task.",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **problem_responses(401),
    },
)
async def metrics(
    caller: Caller, accept: Annotated[str | None, Header(include_in_schema=False)] = None
) -> Response:
    service = caller.service
    await QUEUE.refresh(service.queue, within=caller.settings.metrics_cache_seconds)
    body, content_type = exposition(accept)
    return Response(body, media_type=content_type)
