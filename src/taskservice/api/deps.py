"""FastAPI dependencies: the runtime's objects and the caller's tenant.

Routes take one `Caller` (tenant + service) rather than several dependencies: each
dependency node costs FastAPI measurable CPU on every request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from taskservice.runtime import Runtime
from taskservice.service import TaskService

# Declares the scheme in OpenAPI; the header itself is checked by `Authenticator`, which
# also rejects non-Bearer schemes instead of treating them as anonymous.
_bearer = HTTPBearer(auto_error=False, description="An API key from `taskservice keys create`.")


@dataclass(frozen=True, slots=True)
class CallerContext:
    tenant: str
    service: TaskService


# Dependencies are `async def` on purpose: FastAPI runs plain `def` ones in a thread
# pool, a thread hop per request.
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def get_caller(
    request: Request,
    _declared: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> CallerContext:
    runtime: Runtime = request.app.state.runtime
    tenant = await runtime.auth.tenant_for(request.headers.get("authorization"))
    return CallerContext(tenant=tenant, service=runtime.service)


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
Caller = Annotated[CallerContext, Depends(get_caller)]
