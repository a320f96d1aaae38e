"""`/v1/events`: the tenant's firehose as Server-Sent Events."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse

from taskservice.api import streams
from taskservice.api.deps import Reader
from taskservice.api.errors import problem_responses
from taskservice.api.params import INT64_MAX
from taskservice.api.sse import SSE_CONTENT
from taskservice.domain.models import EventFilter, EventType
from taskservice.domain.states import TaskState

router = APIRouter(prefix="/v1/events", tags=["streams"])


@router.get(
    "",
    operation_id="streamEvents",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "Every event of the tenant, in global order; the SSE `id` is the "
            "global event id, so `Last-Event-ID` resumes exactly. Without it (or `after`) "
            "the stream starts with what happens next. Resumed from before events that "
            'retention deleted, it starts with a `pruned` event, `{"before": N}`: events '
            "below id N may be missing.",
            "content": SSE_CONTENT,
        },
        **problem_responses(401, 422),
    },
    summary="Stream the tenant's events (firehose)",
)
async def stream_events(
    caller: Reader,
    type: Annotated[list[EventType], Query(description="Event types (repeatable).")] = [],  # noqa: B006
    state: Annotated[
        list[TaskState], Query(description="Only state changes into these states.")
    ] = [],  # noqa: B006
    context_id: str | None = None,
    parent_id: uuid.UUID | None = None,
    agent: Annotated[str | None, Query(description="Agent profile.")] = None,
    after: Annotated[
        int | None, Query(ge=0, le=INT64_MAX, description="Events with id > after.")
    ] = None,
    last_event_id: Annotated[int | None, Header(ge=0, le=INT64_MAX)] = None,
) -> EventSourceResponse:
    return streams.event_stream(
        streams.tenant_events(
            service=caller.service,
            settings=caller.settings,
            watermark=caller.watermark,
            tenant=caller.tenant,
            after=last_event_id if last_event_id is not None else after,
            filter=EventFilter(
                types=frozenset(t.value for t in type),
                states=frozenset(s.value for s in state),
                context_id=context_id,
                parent_id=parent_id,
                agent=agent,
            ),
            authorized=caller.authorized,
        ),
        caller.settings,
    )
