"""`/v1/agents`: the agent profiles a task may name, and the operators' brake on one
(pause and resume every task of a profile, for the caller's tenant)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from taskservice.api.deps import Caller
from taskservice.api.errors import problem_responses
from taskservice.api.schemas import (
    ApprovalsOut,
    BrakeChange,
    BrakeOut,
    PauseRequest,
    ProfileList,
    ProfileOut,
)
from taskservice.usecases.tasks import Brake

router = APIRouter(prefix="/v1/agents", tags=["agents"])


def _brake_out(brake: Brake | None) -> BrakeOut | None:
    if brake is None:
        return None
    return BrakeOut(by=brake.by, at=brake.at, reason=brake.reason)


@router.get(
    "",
    operation_id="listAgents",
    response_model=ProfileList,
    responses=problem_responses(401),
    summary="List agent profiles",
)
async def list_agents(caller: Caller) -> ProfileList:
    brakes = await caller.service.brakes(tenant=caller.tenant)
    return ProfileList(
        agents=[
            ProfileOut(
                name=p.name,
                description=p.description,
                model=p.model,
                system_prompt=p.system_prompt,
                tools=list(p.tools),
                request_limit=p.request_limit,
                output=p.output,
                paused=_brake_out(brakes.get(p.name)),
                approvals=ApprovalsOut(
                    tools=list(p.approvals.tools),
                    note=p.approvals.note,
                    timeout_seconds=p.approvals.timeout_seconds,
                    on_timeout=p.approvals.on_timeout,
                )
                if p.approvals.tools
                else None,
            )
            for p in caller.service.profiles()
        ]
    )


@router.post(
    "/{name}/pause",
    operation_id="pauseAgent",
    response_model=BrakeChange,
    responses=problem_responses(400, 401, 403, 404, 413, 415, 422, 503),
    summary="Pull the brake on an agent profile: pause all its tasks",
    description="Every live task of the profile, for the caller's tenant, is paused at "
    "once (running ones give their worker back, as `POST /v1/tasks/{id}/pause` does), "
    "and tasks submitted to the profile from now on are accepted and created paused, "
    "until the brake is released. Pulling a pulled brake changes nothing (`tasks`: 0).",
)
async def pause_agent(
    name: str, caller: Caller, body: Annotated[PauseRequest | None, Body()] = None
) -> BrakeChange:
    brake = await caller.service.pause_agent(
        tenant=caller.tenant,
        profile=name,
        by=caller.who,
        reason=body.reason if body else None,
    )
    return BrakeChange(name=name, paused=_brake_out(brake), tasks=brake.tasks)


@router.post(
    "/{name}/resume",
    operation_id="resumeAgent",
    response_model=BrakeChange,
    responses=problem_responses(401, 403, 404, 503),
    summary="Release the brake on an agent profile: resume the tasks it paused",
    description="Every task the brake paused is resumed; a task paused on its own "
    "(`POST /v1/tasks/{id}/pause`) stays paused. Releasing a released brake changes "
    "nothing (`tasks`: 0).",
)
async def resume_agent(name: str, caller: Caller) -> BrakeChange:
    brake = await caller.service.resume_agent(tenant=caller.tenant, profile=name, by=caller.who)
    return BrakeChange(name=name, paused=None, tasks=brake.tasks if brake else 0)
