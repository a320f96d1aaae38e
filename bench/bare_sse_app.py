"""The baseline for bench/streams.py: the cheapest FastAPI + sse-starlette stream —
one event, then idle, with the same keep-alive and send timeout as taskservice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi import FastAPI
from sse_starlette import EventSourceResponse, ServerSentEvent

app = FastAPI()


@app.get("/v1/tasks/{task_id}/events")
async def events(task_id: str) -> EventSourceResponse:
    async def stream() -> AsyncIterator[ServerSentEvent]:
        yield ServerSentEvent(data="{}", event="snapshot")
        while True:
            await asyncio.sleep(3600)

    return EventSourceResponse(stream(), ping=15, send_timeout=30)
