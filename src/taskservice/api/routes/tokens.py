"""`/v1/stream-tokens`: short-lived read-only tokens for EventSource clients."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, status

from taskservice.api.deps import Caller
from taskservice.api.errors import problem_responses
from taskservice.api.schemas import StreamToken, StreamTokenRequest

router = APIRouter(prefix="/v1/stream-tokens", tags=["streams"])


@router.post(
    "",
    operation_id="createStreamToken",
    status_code=status.HTTP_201_CREATED,
    response_model=StreamToken,
    responses=problem_responses(400, 401, 404, 415, 422),
    summary="Mint a read-only token for a browser's EventSource",
)
async def create_stream_token(body: StreamTokenRequest, caller: Caller) -> StreamToken:
    if body.task_id is not None:
        await caller.service.get(tenant=caller.tenant, task_id=body.task_id)  # 404 if not ours
    token, expires_at = caller.tokens.mint(
        tenant=caller.tenant,
        task_id=body.task_id,
        key_id=caller.key_id,
        ttl_seconds=body.ttl_seconds,
    )
    return StreamToken(
        token=token, expires_at=datetime.fromtimestamp(expires_at, UTC), task_id=body.task_id
    )
