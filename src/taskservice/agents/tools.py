"""The built-in tools, and `RunHooks`: the port through which a running agent reports
to its worker (the run's `deps`; the worker's adapter is `worker.ledger.RunLedger`).

Every tool call, built-in or a plugin's, is recorded in the step ledger around the
tool itself (`ledgered`), so a resumed run never executes a completed call again.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, Literal, Protocol

from pydantic_ai import RunContext
from pydantic_ai.exceptions import CallDeferred, ModelRetry, ToolFailed

from taskservice.domain.errors import DatabaseUnavailable, ServiceError
from taskservice.domain.models import Task

ASK_USER = "ask_user"
SPAWN_SUBTASK = "spawn_subtask"
WAIT_FOR_SUBTASKS = "wait_for_subtasks"
ASK_AGENT = "ask_agent"
WAITS_FOR_SUBTASKS = frozenset({WAIT_FOR_SUBTASKS, ASK_AGENT})  # park the run until they end
LogLevel = Literal["debug", "info", "warning", "error"]


class RunHooks(Protocol):
    """What a running agent reports to its worker (the run's `deps`), and the task
    it runs."""

    task: Task

    async def tool_started(self, call_id: str, name: str, arguments: Any) -> None: ...

    async def tool_finished(
        self,
        call_id: str,
        name: str,
        arguments: Any,
        *,
        result: Any = None,
        error: str | None = None,
    ) -> None: ...

    async def tool_deferred(self, call_id: str, name: str, arguments: Any) -> None: ...

    async def progress(self, percent: float, note: str) -> None: ...

    async def log(self, level: LogLevel, message: str) -> None:
        """A `log` event on the task (cut to the line length; past the task's cap,
        dropped)."""
        ...

    async def spawn(
        self,
        call_id: str,
        input: str,
        system_prompt: str | None,
        detached: bool,
        profile: str | None = None,
    ) -> str:
        """A subtask (of this task's agent, or of agent profile `profile`); its id."""
        ...

    async def subtasks(self) -> list[dict[str, Any]] | None:
        """The subtasks' outcomes when all have finished; None while some run."""
        ...


# The run this asyncio task is executing, for what happens below the agent and has no
# `deps` to report to (the model client's retries, `model_client.ModelRequestLog`).
CURRENT_RUN: ContextVar[RunHooks | None] = ContextVar("taskservice_current_run", default=None)


@contextlib.contextmanager
def current_run(run: RunHooks) -> Iterator[None]:
    token = CURRENT_RUN.set(run)
    try:
        yield
    finally:
        CURRENT_RUN.reset(token)


# -- built-in tools ----------------------------------------------------------------


async def report_progress(ctx: RunContext[RunHooks], percent: float, note: str = "") -> str:
    """Report how far along the task is, from 0 to 100, with a short note."""
    if not 0 <= percent <= 100:
        raise ModelRetry("percent must be between 0 and 100")
    await ctx.deps.progress(percent, note)
    return "progress recorded"


async def log_line(ctx: RunContext[RunHooks], message: str, level: LogLevel = "info") -> str:
    """Write a line to the task's log, for the people watching it: what you are
    doing, what you found, what went wrong. Level: debug, info, warning or error."""
    await ctx.deps.log(level, message)
    return "logged"


async def ask_user(ctx: RunContext[RunHooks], question: str) -> str:
    """Ask the person who submitted the task a question. The task waits for the answer."""
    raise CallDeferred(metadata={"question": question}, kind="question")


async def spawn_subtask(
    ctx: RunContext[RunHooks], input: str, system_prompt: str | None = None, detached: bool = False
) -> str:
    """Start a subtask that works on `input` in parallel; returns its task id. Use
    wait_for_subtasks to collect the results. A subtask is cancelled if this task fails
    or is cancelled, unless `detached` (it then runs to its own end regardless)."""
    try:
        return await ctx.deps.spawn(ctx.tool_call_id or "", input, system_prompt, detached)
    except ServiceError as exc:  # refused as any submit would be: the model can fix it
        if isinstance(exc, DatabaseUnavailable):
            raise
        raise ModelRetry(f"the subtask was refused: {exc.detail}") from None


async def wait_for_subtasks(ctx: RunContext[RunHooks]) -> list[dict[str, Any]]:
    """Wait until every subtask has finished; returns each one's state and result."""
    outcomes = await ctx.deps.subtasks()
    if outcomes is None:
        # Park: the run ends here and frees its worker; it resumes with the
        # outcomes as this call's result when the last subtask finishes.
        raise CallDeferred(metadata={"waiting_for": "subtasks"}, kind="external")
    return outcomes


async def ask_agent(ctx: RunContext[RunHooks], agent: str, input: str) -> dict[str, Any]:
    """Ask another agent (an agent profile of this service, such as a remote A2A
    agent) to work on `input`, and wait for its answer: returns its state, result and
    error. The task waits without holding a worker."""
    call_id = ctx.tool_call_id or ""
    try:
        await ctx.deps.spawn(call_id, input, None, False, profile=agent)
    except ServiceError as exc:
        if isinstance(exc, DatabaseUnavailable):
            raise
        raise ModelRetry(f"the agent could not be asked: {exc.detail}") from None
    outcomes = await ctx.deps.subtasks()
    if outcomes is None:
        # Park as wait_for_subtasks does: the run resumes with the outcome.
        raise CallDeferred(metadata={"waiting_for": "subtasks"}, kind="external")
    return asked_outcome(outcomes, call=call_id)


def asked_outcome(outcomes: list[dict[str, Any]], *, call: str) -> dict[str, Any]:
    """What `ask_agent` returns, from the outcomes of the task's subtasks: the state,
    result and error of the one its call `call` spawned."""
    outcome = next(o for o in outcomes if o.get("call") == call)
    return {key: outcome[key] for key in ("state", "result", "error")}


ToolFunction = Callable[..., Awaitable[Any]]
BUILTIN_TOOLS: dict[str, ToolFunction] = {
    "report_progress": report_progress,
    "log": log_line,
    ASK_USER: ask_user,
    "spawn_subtask": spawn_subtask,
    WAIT_FOR_SUBTASKS: wait_for_subtasks,
    ASK_AGENT: ask_agent,
}


async def recorded(
    ctx: RunContext[RunHooks], name: str, arguments: dict[str, Any], call: Awaitable[Any]
) -> Any:
    """Await `call`, the tool call `name(arguments)`, with its start and end recorded
    in the ledger: a call that was in progress when its worker died is failed on
    resume (never silently repeated), a finished one is answered from the ledger."""
    call_id = ctx.tool_call_id or ""
    await ctx.deps.tool_started(call_id, name, arguments)
    try:
        result = await call
    except CallDeferred:
        await ctx.deps.tool_deferred(call_id, name, arguments)
        raise  # answered from outside (input)
    except (ModelRetry, ToolFailed) as exc:
        await ctx.deps.tool_finished(call_id, name, arguments, error=str(exc))
        raise
    except Exception as exc:
        await ctx.deps.tool_finished(call_id, name, arguments, error=f"{type(exc).__name__}: {exc}")
        raise
    await ctx.deps.tool_finished(call_id, name, arguments, result=result)
    return result


def ledgered(name: str, function: ToolFunction) -> ToolFunction:
    """Record a tool call's start and end in the ledger around the tool itself."""

    @functools.wraps(function)
    async def run(ctx: RunContext[RunHooks], **arguments: Any) -> Any:
        return await recorded(ctx, name, arguments, function(ctx, **arguments))

    return run
