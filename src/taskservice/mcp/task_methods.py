"""The task methods of both revisions, over an `MCPHandler`: the 2026-07-28 Tasks
extension (`Tasks`, an SDK `Extension`) and the 2025-11-25 core tasks
(`Tasks2025`). `server` binds them to the revisions they belong to."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request

from taskservice.domain.errors import BudgetExhausted, DatabaseUnavailable, ServiceError
from taskservice.mcp import tasks as mcp_tasks
from taskservice.mcp.handler import MCPHandler, requested_ttl
from taskservice.mcp.tasks import EXTENSION

HandlerFor = Callable[[Request], MCPHandler]  # the caller's handler, by request


def handler_of(handler_for: HandlerFor, ctx: ServerRequestContext[Any]) -> MCPHandler:
    """The handler of the caller of the request `ctx` is for."""
    assert isinstance(ctx.request, Request)  # the HTTP transport passes its request
    return handler_for(ctx.request)


LEGACY = "2025-11-25"  # the revision of the core protocol's tasks


def refusal(exc: ServiceError) -> MCPError:
    if isinstance(exc, DatabaseUnavailable):
        return MCPError(types.INTERNAL_ERROR, exc.detail, {"retryable": True})
    if isinstance(exc, BudgetExhausted):
        data = {"type": exc.type, "retryable": True, **exc.extensions}
        return MCPError(types.INTERNAL_ERROR, exc.detail, data)
    return MCPError(types.INVALID_PARAMS, exc.detail, exc.extensions or None)


class TaskIdParams(types.RequestParams):
    task_id: str


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any] = {}


def _opted_in(ctx: ServerRequestContext[Any]) -> bool:
    """Whether this request declares the Tasks extension (2026-07-28: each request
    carries its client's capabilities)."""
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and EXTENSION in capabilities.extensions)


class Tasks(Extension):
    """The 2026-07-28 Tasks extension: a call from a client that declares it becomes
    a task (committed before the handle is answered), which `tasks/get` follows,
    `tasks/update` answers and `tasks/cancel` cancels. Agent runs take minutes and
    outlive connections: every such call is made a task."""

    identifier = EXTENSION

    def __init__(self, handler_for: HandlerFor) -> None:
        self.handler_for = handler_for

    def handler(self, ctx: ServerRequestContext[Any]) -> MCPHandler:
        return handler_of(self.handler_for, ctx)

    def methods(self) -> Sequence[MethodBinding]:
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=modern),
            MethodBinding("tasks/update", UpdateParams, self._update, protocol_versions=modern),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=modern),
        ]

    async def intercept_tool_call(
        self,
        params: types.CallToolRequestParams,
        ctx: ServerRequestContext[Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS or not _opted_in(ctx):
            return await call_next(ctx)
        async with refusals():
            task = await self.handler(ctx).start(params.name, params.arguments)
        return mcp_tasks.handle(task)

    def _require(self, ctx: ServerRequestContext[Any], task_id: str) -> None:
        """The extension declared, and an `Mcp-Name` header, if sent, naming the task
        (the extension's routing header for `tasks/*`)."""
        if not _opted_in(ctx):
            raise MCPError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                "declare the tasks extension in this request's client capabilities",
                {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
            )
        assert isinstance(ctx.request, Request)
        named = ctx.request.headers.get("mcp-name")
        if named is not None and named != task_id:
            raise MCPError(HEADER_MISMATCH, "Mcp-Name header does not match params.taskId")

    async def _get(self, ctx: ServerRequestContext[Any], params: TaskIdParams) -> dict[str, Any]:
        self._require(ctx, params.task_id)
        async with refusals():
            return mcp_tasks.detailed(await self.handler(ctx).task(params.task_id))

    async def _update(self, ctx: ServerRequestContext[Any], params: UpdateParams) -> dict[str, Any]:
        self._require(ctx, params.task_id)
        async with refusals():
            await self.handler(ctx).update(params.task_id, params.input_responses)
        return {"resultType": "complete"}

    async def _cancel(self, ctx: ServerRequestContext[Any], params: TaskIdParams) -> dict[str, Any]:
        self._require(ctx, params.task_id)
        async with refusals():
            await self.handler(ctx).cancel(params.task_id)
        return {"resultType": "complete"}


@asynccontextmanager
async def refusals() -> AsyncIterator[None]:
    try:
        yield
    except ServiceError as exc:
        raise refusal(exc) from None


class Tasks2025:
    """The 2025-11-25 core tasks: a `tools/call` with `params.task` becomes a task
    (nested handle), followed by `tasks/get`, `tasks/result` (which waits for it to
    end), `tasks/list` and `tasks/cancel`. A question of the agent, or a tool call
    waiting for a person's approval, shows as `input_required` with the question (the
    call, and how to decide) as `statusMessage`: a stateless server cannot put it to
    the client on the `tasks/result` stream, so it is answered on REST (or by a
    client of the 2026-07-28 extension)."""

    def __init__(self, handler_for: HandlerFor) -> None:
        self.handler_for = handler_for

    def handler(self, ctx: ServerRequestContext[Any]) -> MCPHandler:
        return handler_of(self.handler_for, ctx)

    def methods(self) -> Sequence[MethodBinding]:
        legacy = frozenset({LEGACY})
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=legacy),
            MethodBinding("tasks/result", TaskIdParams, self._result, protocol_versions=legacy),
            MethodBinding(
                "tasks/list", types.PaginatedRequestParams, self._list, protocol_versions=legacy
            ),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=legacy),
        ]

    async def augmented_call(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> Any:
        """Middleware: a `tools/call` with `params.task` at 2025-11-25 is answered with
        the task it made (as middleware: the SDK checks a handler's answer to
        `tools/call` against CallToolResult)."""
        raw = ctx.params
        if ctx.method != "tools/call" or ctx.protocol_version != LEGACY or not raw:
            return await call_next(ctx)
        if raw.get("task") is None:
            return await call_next(ctx)
        async with refusals():
            # First, and as kept: the SDK's model says less, and no more than 64 bits.
            ttl = requested_ttl(raw["task"])
            params = types.CallToolRequestParams.model_validate(
                {**raw, "task": {**raw["task"], "ttl": ttl}}
            )
            task = await self.handler(ctx).start(params.name, params.arguments, ttl_ms=ttl)
        return mcp_tasks.created_2025(task)

    async def _get(self, ctx: ServerRequestContext[Any], params: TaskIdParams) -> dict[str, Any]:
        async with refusals():
            return mcp_tasks.task_2025(await self.handler(ctx).task(params.task_id))

    async def _result(self, ctx: ServerRequestContext[Any], params: TaskIdParams) -> dict[str, Any]:
        async with refusals():
            task = await self.handler(ctx).finished(params.task_id)
        if not task.state.is_terminal:
            waiting = mcp_tasks.task_2025(task)
            message = f"task {task.id} has not ended ({waiting['status']}): ask again"
            if waiting["status"] == "input_required":
                message += f"; it waits for an answer or a decision: POST /v1/tasks/{task.id}/input"
            raise MCPError(types.INTERNAL_ERROR, message, waiting)
        return mcp_tasks.result_2025(task)

    async def _list(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        async with refusals():
            page, cursor = await self.handler(ctx).tasks(params.cursor)
        out: dict[str, Any] = {"tasks": [mcp_tasks.task_2025(t) for t in page]}
        if cursor:
            out["nextCursor"] = cursor
        return out

    async def _cancel(self, ctx: ServerRequestContext[Any], params: TaskIdParams) -> dict[str, Any]:
        async with refusals():
            handler = self.handler(ctx)
            task = await handler.task(params.task_id)
            if task.state.is_terminal:
                raise MCPError(
                    types.INVALID_PARAMS,
                    f"Cannot cancel task: already in terminal status {mcp_tasks.status(task)!r}",
                )
            task = await handler.cancel(params.task_id)
        return mcp_tasks.task_2025(task)
