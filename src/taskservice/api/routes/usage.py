"""`/v1/usage`: what the tenant's model requests spent (tokens, requests, cost), in
total and grouped by agent profile, model, day or context, over a range of UTC days;
answered from the rollup kept as usage is written (`db/usage.py`)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from taskservice.api.deps import Caller
from taskservice.api.errors import problem_responses
from taskservice.common.pricing import CURRENCY
from taskservice.db.usage import GROUPS, Counts

router = APIRouter(prefix="/v1/usage", tags=["usage"])

DEFAULT_DAYS = 30
MAX_GROUPS = 1000

GroupBy = Literal["agent", "model", "day", "context"]


class Spent(BaseModel):
    input_tokens: int
    output_tokens: int
    requests: int
    cost: str | None = Field(
        description="US dollars, an exact decimal string; null when requests were "
        'unpriced and nothing priced added to it (never a claimed `"0"`).'
    )
    unpriced_requests: int = Field(
        description="Requests nobody prices (a model neither genai-prices nor "
        "`TASKSERVICE_MODEL_PRICES` knows): while above 0, `cost` covers only the others."
    )

    @classmethod
    def of(cls, counts: Counts) -> Spent:
        shown = counts.shown()
        del shown["currency"]
        return cls(**shown)


class SpentGroup(Spent):
    day: date | None = Field(default=None, description="Grouped by day: the UTC day.")
    agent: str | None = Field(
        default=None, description="Grouped by agent: the profile (null: tasks without one)."
    )
    model: str | None = Field(default=None, description="Grouped by model: the task's model.")
    context: str | None = Field(
        default=None, description="Grouped by context: the context id (null: none)."
    )


class UsageReport(BaseModel):
    from_: date = Field(alias="from", description="The first UTC day counted.")
    to: date = Field(description="The last UTC day counted (included).")
    group_by: list[GroupBy]
    currency: str = Field(description="The currency of every `cost`: `USD`.")
    total: Spent = Field(description="Everything in the range (and filters).")
    groups: list[SpentGroup] = Field(
        description="By `group_by` (each group has the keys grouped by): in day order "
        "when grouped by day, then largest cost first (unpriced last), then most requests."
    )
    more: bool = Field(description="`limit` cut groups off (`total` still counts them).")


@router.get(
    "",
    operation_id="getUsage",
    response_model=UsageReport,
    response_model_by_alias=True,
    response_model_exclude_unset=True,
    responses=problem_responses(401, 422),
    summary="What the tenant's model requests spent: tokens, requests, cost",
    description="Counted as runs write their usage, on the UTC day it is written, by the "
    "task's agent profile, model and context; read from that rollup, never from the "
    "tasks (milliseconds whatever their number). A task's own figures are its `usage`; "
    "a deleted task's spend stays counted here.",
)
async def get_usage(
    caller: Caller,
    group_by: Annotated[
        list[GroupBy] | None,
        Query(description="Group by these (repeatable); none: the total only."),
    ] = None,
    since: Annotated[
        date | None,
        Query(
            alias="from",
            description=f"The first UTC day (YYYY-MM-DD); default {DEFAULT_DAYS - 1} days "
            "before `to`.",
        ),
    ] = None,
    until: Annotated[
        date | None,
        Query(alias="to", description="The last UTC day, included; default today (UTC)."),
    ] = None,
    agent: Annotated[str | None, Query(description="Only this agent profile.")] = None,
    model: Annotated[str | None, Query(description="Only this model.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_GROUPS, description="Groups at most.")] = 100,
) -> UsageReport:
    until = until or datetime.now(UTC).date()
    since = since or until - timedelta(days=DEFAULT_DAYS - 1)
    groups = tuple(g for g in GROUPS if g in set(group_by or ()))
    report = await caller.service.usage(
        tenant=caller.tenant,
        since=since,
        until=until,
        group_by=groups,
        agent=agent,
        model=model,
        limit=limit,
    )
    return UsageReport.model_validate(
        {
            "from": since,
            "to": until,
            "group_by": list(groups),
            "currency": CURRENCY,
            "total": Spent.of(report.total),
            "groups": [
                SpentGroup(**Spent.of(g.counts).model_dump(), **g.keys) for g in report.groups
            ],
            "more": report.more,
        }
    )
