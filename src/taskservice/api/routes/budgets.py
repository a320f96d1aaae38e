"""Spend budgets (`usecases/spend.py`): `GET /v1/budget`, the caller's tenant's own
budget and what it spent this period; `/v1/admin/tenants/{tenant}/budget`, an
operator's: set, read or drop any tenant's budget, with an admin key only
(`taskservice keys create --admin`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from taskservice.api.deps import Caller, CallerContext
from taskservice.api.errors import problem_responses
from taskservice.common.pricing import SpendLimit, decimal_text
from taskservice.db.spend_budgets import BudgetState
from taskservice.domain.errors import Forbidden, InvalidRequest
from taskservice.usecases.auth import valid_tenant

router = APIRouter(tags=["budgets"])


class BudgetOut(BaseModel):
    period: Literal["day", "month"] = Field(description="A UTC day or calendar month.")
    max_cost: str | None = Field(description="USD per period (a decimal string); null: none.")
    max_tokens: int | None = Field(description="Tokens (input and output) per period.")
    period_start: datetime | None = Field(
        description="The period being counted (null: nothing spent in the current one)."
    )
    period_end: datetime | None = Field(description="When it ends and the budget starts afresh.")
    spent_cost: str = Field(description="USD spent this period (reserved, then settled).")
    spent_tokens: int
    exhausted: bool = Field(
        description="Nothing more may be spent this period (a limit reached, or a request "
        "refused for want of room): the tenant's submits are refused with a 429 until "
        "`period_end`."
    )
    source: Literal["settings", "admin"] = Field(
        description="`settings`: the operator's default (`TASKSERVICE_TENANT_BUDGET`); "
        "`admin`: set for this tenant by an admin."
    )
    set_by: str | None = Field(description="The admin key that set it (`key:<id>`).")

    @classmethod
    def of(cls, state: BudgetState) -> BudgetOut:
        limit = state.limit
        return cls(
            period=limit.period,
            max_cost=decimal_text(limit.max_cost) if limit.max_cost is not None else None,
            max_tokens=limit.max_tokens,
            period_start=state.period_start,
            period_end=state.period_end,
            spent_cost=decimal_text(state.spent_cost),
            spent_tokens=state.spent_tokens,
            exhausted=state.over,
            source="admin" if state.source == "admin" else "settings",
            set_by=state.set_by,
        )


class TenantBudget(BaseModel):
    tenant: str
    budget: BudgetOut | None = Field(description="Null: the tenant has no budget.")


@router.get(
    "/v1/budget",
    operation_id="getBudget",
    response_model=TenantBudget,
    responses=problem_responses(401),
    summary="The tenant's spend budget and what it spent this period",
)
async def get_budget(caller: Caller) -> TenantBudget:
    state = await caller.spend.of_tenant(caller.tenant)
    return TenantBudget(tenant=caller.tenant, budget=BudgetOut.of(state) if state else None)


def _admin(caller: CallerContext, tenant: str) -> None:
    if not caller.admin:
        raise Forbidden(
            "an admin key is required (`taskservice keys create --tenant NAME --admin`)"
        )
    if not valid_tenant(tenant):
        raise InvalidRequest(f"not a tenant name: {tenant!r}", field="tenant")


@router.get(
    "/v1/admin/tenants/{tenant}/budget",
    operation_id="getTenantBudget",
    response_model=TenantBudget,
    responses=problem_responses(401, 403, 422),
    summary="A tenant's spend budget (admin key)",
)
async def get_tenant_budget(tenant: str, caller: Caller) -> TenantBudget:
    _admin(caller, tenant)
    state = await caller.spend.of_tenant(tenant)
    return TenantBudget(tenant=tenant, budget=BudgetOut.of(state) if state else None)


@router.put(
    "/v1/admin/tenants/{tenant}/budget",
    operation_id="setTenantBudget",
    response_model=TenantBudget,
    responses=problem_responses(400, 401, 403, 415, 422),
    summary="Set a tenant's spend budget, in place of the default (admin key)",
    description="`period` `day` or `month` (UTC), `max_cost` (USD, a decimal string or "
    "number) and/or `max_tokens`. What the tenant spent in the current period still "
    "counts, unless the period's kind changes. Every process sees it within a second.",
)
async def set_tenant_budget(tenant: str, body: SpendLimit, caller: Caller) -> TenantBudget:
    _admin(caller, tenant)
    state = await caller.spend.set_tenant(tenant, body, by=caller.who)
    return TenantBudget(tenant=tenant, budget=BudgetOut.of(state))


@router.delete(
    "/v1/admin/tenants/{tenant}/budget",
    operation_id="clearTenantBudget",
    response_model=TenantBudget,
    responses=problem_responses(401, 403, 422),
    summary="Drop a tenant's own spend budget: the default applies again (admin key)",
)
async def clear_tenant_budget(tenant: str, caller: Caller) -> TenantBudget:
    _admin(caller, tenant)
    state = await caller.spend.clear_tenant(tenant)
    return TenantBudget(tenant=tenant, budget=BudgetOut.of(state) if state else None)
