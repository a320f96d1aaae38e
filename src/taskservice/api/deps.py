"""FastAPI dependencies: the runtime's objects and the caller's tenant.

Routes take one `Caller` (tenant + service) rather than several dependencies: each
dependency node costs FastAPI measurable CPU on every request. For the same reason the
bearer scheme is declared in the OpenAPI document (`declare_bearer_auth`), not
through a `Security()` sub-dependency that would run on every request only to be
ignored: `Authenticator` reads the header itself, and also rejects non-Bearer schemes
instead of treating them as anonymous.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Query, Request

from taskservice.common import logs
from taskservice.domain.errors import NotFound, Unauthorized
from taskservice.domain.ids import parse_uuid
from taskservice.following.hub import Watermark
from taskservice.runtime import Runtime
from taskservice.settings import Settings
from taskservice.usecases.auth import TenantKeys
from taskservice.usecases.inbox import TaskInbox
from taskservice.usecases.routing import MessageRouter
from taskservice.usecases.schedules import ScheduleService
from taskservice.usecases.spend import SpendControl
from taskservice.usecases.subscriptions import WebhookService
from taskservice.usecases.tasks import TaskService
from taskservice.usecases.tokens import StreamTokens

BEARER_SCHEME = {
    "HTTPBearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key from `taskservice keys create`.",
    }
}


def declare_bearer_auth(spec: dict[str, Any]) -> None:
    """Every `/v1` operation, and A2A's (`/a2a`, `/a2a/rest/…`), takes
    `Authorization: Bearer <API key>`."""
    spec.setdefault("components", {})["securitySchemes"] = BEARER_SCHEME
    for path, operations in spec.get("paths", {}).items():
        if path.startswith(("/v1/", "/a2a/")) or path == "/a2a":
            for operation in operations.values():
                operation["security"] = [{"HTTPBearer": []}]


@dataclass(frozen=True, slots=True)
class CallerContext:
    """Who calls, and what a route may use on their behalf: the use cases, and the
    few runtime objects a transport needs (stream tokens, the message router, the
    firehose's watermark). Routes never reach into the app state themselves."""

    tenant: str
    runtime: Runtime = field(repr=False)
    key_id: uuid.UUID | None = None  # the API key (or the stream token's minting key)
    via_token: bool = False  # a stream token: event streams only
    admin: bool = False  # an operator's key: the admin routes too (never open mode)

    @property
    def who(self) -> str:
        """Who acts, as a pause or a decision records it (`by`): the caller's API key
        (`key:<id>`), or open mode (`open`)."""
        return f"key:{self.key_id}" if self.key_id is not None else "open"

    @property
    def service(self) -> TaskService:
        return self.runtime.service

    @property
    def inbox(self) -> TaskInbox:
        return self.runtime.inbox

    @property
    def webhooks(self) -> WebhookService:
        return self.runtime.webhooks

    @property
    def schedules(self) -> ScheduleService:
        return self.runtime.schedules

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def spend(self) -> SpendControl:
        return self.runtime.spend

    @property
    def tokens(self) -> StreamTokens:
        return self.runtime.tokens

    @property
    def keys(self) -> TenantKeys:
        return TenantKeys(self.runtime.auth)

    async def open_mode(self) -> bool:
        """Whether requests without a key are served (open development mode)."""
        return await self.runtime.auth.is_open()

    @property
    def router(self) -> MessageRouter:
        return self.runtime.router

    @property
    def watermark(self) -> Watermark:
        return self.runtime.watermark

    async def authorized(self) -> bool:
        """Whether the caller's key still holds: streams outlive their request and
        ask again as they go, so revoking a key ends them."""
        return await self.runtime.auth.still_valid(self.key_id)


# Dependencies are `async def` on purpose: FastAPI runs plain `def` ones in a thread
# pool, a thread hop per request.
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def get_caller(request: Request) -> CallerContext:
    runtime: Runtime = request.app.state.runtime
    who = await runtime.auth.authenticate(request.headers.get("authorization"))
    _annotate(request, who.tenant)
    return CallerContext(tenant=who.tenant, runtime=runtime, key_id=who.key_id, admin=who.admin)


async def get_reader(
    request: Request,
    token: Annotated[
        str | None,
        Query(
            description="A stream token (POST /v1/stream-tokens), for clients that cannot "
            "send headers. API keys are never accepted here."
        ),
    ] = None,
) -> CallerContext:
    """Who may read a task's events: an API key, or a stream token for this task."""
    runtime: Runtime = request.app.state.runtime
    if request.headers.get("authorization") or token is None:
        return await get_caller(request)
    grant = runtime.tokens.verify(token)
    if not await runtime.auth.still_valid(grant.key_id):
        raise Unauthorized("the API key that minted this stream token was revoked")
    if "task_id" not in request.path_params:  # a tenant-wide stream
        if grant.task_id is not None:
            raise Unauthorized("this stream token is for one task only")
    elif not grant.allows(parse_uuid(request.path_params["task_id"])):
        raise NotFound(f"task {request.path_params.get('task_id')} not found")
    _annotate(request, grant.tenant)
    return CallerContext(tenant=grant.tenant, runtime=runtime, key_id=grant.key_id, via_token=True)


def _annotate(request: Request, tenant: str) -> None:
    """The request's log lines (its access line too) name its tenant and task."""
    logs.annotate(tenant=tenant, task_id=request.path_params.get("task_id"))


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
Reader = Annotated[CallerContext, Depends(get_reader)]
Caller = Annotated[CallerContext, Depends(get_caller)]
