"""FastAPI dependencies: the runtime's objects and the caller's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from taskservice.runtime import Runtime
from taskservice.service import TaskService


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def get_service(request: Request) -> TaskService:
    return get_runtime(request).service


# Declares the scheme in OpenAPI; the header itself is checked by `Authenticator`, which
# also rejects non-Bearer schemes instead of treating them as anonymous.
_bearer = HTTPBearer(auto_error=False, description="An API key from `taskservice keys create`.")


async def get_tenant(
    request: Request,
    _declared: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> str:
    return await get_runtime(request).auth.tenant_for(request.headers.get("authorization"))


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
Service = Annotated[TaskService, Depends(get_service)]
Tenant = Annotated[str, Depends(get_tenant)]
