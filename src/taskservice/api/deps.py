"""FastAPI dependencies: the runtime's objects and the caller's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from taskservice.runtime import Runtime
from taskservice.service import TaskService


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def get_service(request: Request) -> TaskService:
    return get_runtime(request).service


async def get_tenant(
    request: Request,
    authorization: Annotated[
        str | None, Header(description="`Bearer <API key>`", include_in_schema=False)
    ] = None,
) -> str:
    return await get_runtime(request).auth.tenant_for(authorization)


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
Service = Annotated[TaskService, Depends(get_service)]
Tenant = Annotated[str, Depends(get_tenant)]
