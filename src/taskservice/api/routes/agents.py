"""`/v1/agents`: the agent profiles a task may name."""

from __future__ import annotations

from fastapi import APIRouter

from taskservice.api.deps import Caller
from taskservice.api.errors import problem_responses
from taskservice.api.schemas import ProfileList, ProfileOut

router = APIRouter(prefix="/v1/agents", tags=["agents"])


@router.get(
    "",
    operation_id="listAgents",
    response_model=ProfileList,
    responses=problem_responses(401),
    summary="List agent profiles",
)
async def list_agents(caller: Caller) -> ProfileList:
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
            )
            for p in caller.service.profiles()
        ]
    )
