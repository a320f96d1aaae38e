"""`/v1/overview`: a tenant's tasks at a glance, the dashboard's first page."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from taskservice.api.deps import Caller
from taskservice.api.errors import problem_responses

router = APIRouter(prefix="/v1/overview", tags=["overview"])


class FinishedMinute(BaseModel):
    minute: datetime = Field(description="The minute (UTC) the tasks finished in.")
    state: str = Field(description="`completed`, `failed` or `cancelled`.")
    tasks: int
    p50_seconds: float = Field(description="Median time from submit to the end.")
    p95_seconds: float


class WorkerLeases(BaseModel):
    worker: str = Field(description="The worker id (fresh per process start).")
    leases: int = Field(description="Running tasks of this tenant it holds.")
    next_expiry: datetime = Field(description="When the first of its leases lapses unless renewed.")


class WebhookBacklog(BaseModel):
    pending: int = Field(description="Deliveries waiting to be sent.")
    failing: int = Field(description="Of those, deliveries retried after a failed attempt.")
    oldest_due_at: datetime | None
    given_up: int = Field(description="Deliveries that failed for good in the window.")


class Overview(BaseModel):
    at: datetime = Field(description="The database's clock when this was read.")
    minutes: int = Field(description="The window of `finished` and `webhooks.given_up`.")
    live: dict[str, int] = Field(
        description="Tasks pending, running and waiting for input (`input_required`)."
    )
    scheduled: int = Field(
        default=0, description="Of the pending tasks, those waiting for their `run_at`."
    )
    throttled: int = Field(
        default=0,
        description="Of the running tasks, those waiting, without a worker, for their "
        "model's rate limit budget.",
    )
    needs_input: int = Field(
        default=0,
        description="Of the tasks waiting for input (`input_required`), those waiting for "
        "answers to their questions: for someone to act.",
    )
    waiting_for_subtasks: int = Field(
        default=0,
        description="Of the tasks waiting for input (`input_required`), the parents "
        "waiting for their subtasks to end: nobody need act.",
    )
    oldest_pending_at: datetime | None = Field(
        description="Since when the oldest pending task that may run has waited (its run_at)."
    )
    finished: list[FinishedMinute] = Field(description="Per minute and outcome, oldest first.")
    workers: list[WorkerLeases] = Field(description="Workers holding this tenant's tasks.")
    webhooks: WebhookBacklog


@router.get(
    "",
    operation_id="getOverview",
    response_model=Overview,
    responses=problem_responses(401, 422),
    summary="A tenant's tasks at a glance",
)
async def get_overview(
    caller: Caller,
    minutes: Annotated[
        int, Query(ge=1, le=1440, description="How many minutes of finished tasks to show.")
    ] = 15,
) -> Overview:
    read: dict[str, Any] = await caller.service.overview(tenant=caller.tenant, minutes=minutes)
    live = {state: 0 for state in ("pending", "running", "input_required")} | read["live"]
    return Overview(
        at=read["at"],
        minutes=minutes,
        live=live,
        scheduled=read["scheduled"],
        throttled=read["throttled"],
        needs_input=read["needs_input"],
        waiting_for_subtasks=read["waiting_for_subtasks"],
        oldest_pending_at=read["oldest_pending_at"],
        finished=[FinishedMinute.model_validate(m) for m in read["finished"]],
        workers=[WorkerLeases.model_validate(w) for w in read["workers"]],
        webhooks=WebhookBacklog(**read["webhooks"], given_up=read["webhooks_given_up"]),
    )
