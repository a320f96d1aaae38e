"""`/v1/messages`: send free text; it reaches the task it is for (answering its
question, or queued for its run), or starts one."""

from __future__ import annotations

from fastapi import APIRouter, status

from taskservice.api.deps import Caller
from taskservice.api.errors import problem_responses
from taskservice.api.message_schemas import MessageIn, MessageSent, RoutedOut
from taskservice.domain.views import TaskOut

router = APIRouter(prefix="/v1/messages", tags=["messages"])


@router.post(
    "",
    operation_id="sendMessage",
    response_model=RoutedOut,
    status_code=status.HTTP_200_OK,
    responses=problem_responses(400, 401, 404, 409, 413, 415, 422),
    summary="Route a message to the task it is for, or to a new task",
)
async def send_message(body: MessageIn, caller: Caller) -> RoutedOut:
    routed = await caller.router.route(
        tenant=caller.tenant, text=body.text, context_id=body.context_id
    )
    sent = MessageSent.of(TaskOut.of(routed.task), routed.followup, new=routed.new)
    return RoutedOut(
        task=sent.task,
        delivery=sent.delivery,
        followup=sent.followup,
        decision=routed.decision,
        confidence=routed.confidence,
        reason=routed.reason,
    )
