"""Runs one task as a pydantic-ai agent, step by step, and says how it ended.

Each step's complete messages, tool calls and events go to the ledger as they
happen (fenced by the lease), and between steps the run is handed the follow-ups
queued for the task; the outcome itself is written by the pool, which runs the
agent again on the same conversation when follow-ups arrived as it completed.
A model that can stream is streamed, its deltas handed to the process's live writer
(`worker/live_output.py`), which sends them to every replica's streams; a quiet
task's are not, until a stream asks for them.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic_ai import Agent
from pydantic_ai.exceptions import (
    AgentRunError,
    ModelAPIError,
    ModelHTTPError,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
    UserError,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.run import AgentRun
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import UsageLimits

from taskservice.agents.approvals import Approvals
from taskservice.agents.catalog import AgentCatalog, streams
from taskservice.agents.mcp_servers import McpServerError
from taskservice.agents.tools import ASK_USER, WAITS_FOR_SUBTASKS, current_run
from taskservice.common.rate_limits import Throttled, gated
from taskservice.common.spending import Budget, BudgetExhausted, spending
from taskservice.db.budgets import BudgetStore
from taskservice.domain.content import as_text
from taskservice.domain.models import Task
from taskservice.usecases.spend import SpendControl
from taskservice.worker.budget import RunGate
from taskservice.worker.ledger import RunLedger
from taskservice.worker.live_output import LiveOutput, LiveWriter
from taskservice.worker.outcomes import (
    Completed,
    Failed,
    NeedsInput,
    Outcome,
    WaitsForBudget,
)
from taskservice.worker.resume import ApprovalTimedOut
from taskservice.worker.spend import RunSpend, SharedBudgets, task_budget

if TYPE_CHECKING:  # the runtime loads it only where a profile delegates
    from taskservice.worker.delegation import Delegator

log = logging.getLogger(__name__)


def prompt_of(task: Task) -> str:
    return as_text(task.input)


def failure_of(exc: Exception) -> dict[str, Any]:
    """A clear error type and message for the ways a run can fail."""
    if isinstance(exc, UsageLimitExceeded):
        return {"type": "max_iterations", "message": f"maximum iterations reached: {exc}"}
    if isinstance(exc, ModelHTTPError):
        return {
            "type": "model_http_error",
            "status_code": exc.status_code,
            "message": f"the model provider answered HTTP {exc.status_code} "
            f"(after retries): {exc.message}",
        }
    if isinstance(exc, ModelAPIError):
        return {"type": "model_unavailable", "message": f"the model provider failed: {exc}"}
    if isinstance(exc, UnexpectedModelBehavior):
        return {"type": "model_error", "message": str(exc)}
    if isinstance(exc, UserError):
        return {"type": "configuration_error", "message": str(exc)}
    return {"type": type(exc).__name__, "message": str(exc)}


def waiting_for(
    requests: DeferredToolRequests, approvals: Approvals | None = None
) -> tuple[dict[str, Any], datetime | None]:
    """The task's `input_request`: tool calls for a person to approve (and the
    questions asked with them), else questions for a person, else its subtasks; and
    when nobody answering decides (the profile's approval deadline, or None)."""
    questions = [
        {
            "id": call.tool_call_id,
            "tool": call.tool_name,
            "question": requests.metadata.get(call.tool_call_id, {}).get("question"),
        }
        for call in requests.calls
        if call.tool_name == ASK_USER
    ]
    if requests.approvals:
        approvals = approvals or Approvals()
        asked: dict[str, Any] = {
            "kind": "approvals",
            "approvals": [
                {
                    "id": call.tool_call_id,
                    "tool": call.tool_name,
                    "arguments": call.args_as_dict(),
                    "schema": requests.metadata.get(call.tool_call_id, {}).get("schema"),
                    "note": approvals.note,
                }
                for call in requests.approvals
            ],
        }
        if questions:
            asked["questions"] = questions
        deadline = None
        if approvals.timeout_seconds is not None:
            deadline = datetime.now(UTC) + timedelta(seconds=approvals.timeout_seconds)
            asked["deadline"] = deadline.isoformat()
            asked["on_timeout"] = approvals.on_timeout
        return asked, deadline
    if questions:
        return {"kind": "questions", "questions": questions}, None
    # The call the subtasks' outcomes complete (another waiting call of the same
    # response runs again on resume: `ask_agent` finds its subtask, ended).
    wait = next(c for c in requests.calls if c.tool_name in WAITS_FOR_SUBTASKS)
    return {"kind": "subtasks", "call_id": wait.tool_call_id}, None


class BudgetRunOut(Exception):
    """The run stopped before a model request that would pass a budget: `refused`,
    the task's model's refusal (and its fallback's, when it has one), `partial` the
    text it wrote before."""

    def __init__(self, refused: list[BudgetExhausted], partial: str | None) -> None:
        super().__init__(str(refused[0]))
        self.refused = refused
        self.partial = partial

    def error(self) -> dict[str, Any]:
        """The task's error: `code` budget_exhausted, the budget in `budget`."""
        first = self.refused[0]
        message = f"budget exhausted: {first}"
        for other in self.refused[1:]:
            message += f"; on the fallback model too: {other}"
        message += "; fork the task with a larger budget to go on"
        return {
            "type": "budget_exhausted",
            "code": "budget_exhausted",
            "message": message,
            "model": first.model,
            "budget": first.exhausted.shown(),
        }


def exhausted_in(exc: BaseException) -> list[BudgetExhausted] | None:
    """The budget refusals a model request ended with: its own, or every model's of a
    fallback chain (a group of nothing else); None: it ended otherwise."""
    if isinstance(exc, BudgetExhausted):
        return [exc]
    if isinstance(exc, BaseExceptionGroup):
        found: list[BudgetExhausted] = []
        for inner in exc.exceptions:
            refused = exhausted_in(inner)
            if refused is None:
                return None
            found += refused
        return found or None
    return None


def unsent(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The conversation of a run stopped before its model request: without the
    `interrupted` response pydantic-ai adds for the request that was not sent."""
    last = messages[-1] if messages else None
    if isinstance(last, ModelResponse) and last.state == "interrupted" and not last.parts:
        return messages[:-1]
    return messages


def written_text(messages: list[ModelMessage]) -> str | None:
    """The text the model's responses wrote so far (None: none)."""
    texts = [
        part.content
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, TextPart) and part.content
    ]
    return "\n\n".join(texts) if texts else None


async def _streamed(node: Any, run: AgentRun[Any, Any], live: LiveOutput) -> None:
    """Run a model request node by streaming it, its deltas going to `live`; the
    rest of its text is sent before the node's response can be persisted."""
    async with node.stream(run.ctx) as stream:
        live.begin(len(run.all_messages()))  # the response's position: after its request
        async for event in stream:
            live.feed(event)
    await live.end()


class Executor:
    """`live`: the process's writer of streamed deltas (None: model requests are not
    streamed)."""

    def __init__(
        self,
        catalog: AgentCatalog,
        *,
        live: LiveWriter | None = None,
        budgets: BudgetStore | None = None,
        delegator: Delegator | None = None,
        spend: SpendControl | None = None,
    ) -> None:
        """`budgets`: where rate limited model requests take their slots (None: as
        if no rate limits were configured); `delegator`: runs the tasks of `a2a`
        profiles (None: they fail, saying delegation is not available here)."""
        self.catalog = catalog
        self.live = live
        self.budgets = budgets
        self.delegator = delegator
        self.spend = spend  # the tenants' and profiles' budgets (None: not checked)

    def delegates(self, task: Task) -> bool:
        """Whether the task's run is a delegation (a remote agent's work: it waits
        on the network, holding no model and little memory)."""
        profile = self.catalog.profile(task.agent.profile)
        return self.delegator is not None and profile is not None and profile.remote is not None

    async def run(self, task: Task, ledger: RunLedger) -> Outcome:
        profile = self.catalog.profile(task.agent.profile)
        if profile is None:
            message = f"agent profile {task.agent.profile!r} no longer exists"
            return Failed({"type": "configuration_error", "message": message}, ledger.usage)
        if profile.remote is not None:  # delegated to a remote A2A agent
            if self.delegator is None:
                message = "delegation to remote A2A agents is not available in this worker"
                return Failed({"type": "configuration_error", "message": message}, ledger.usage)
            live = self._live_output(task, ledger)
            try:
                return await self.delegator.run(task, ledger, profile.remote, live)
            finally:
                if live is not None:
                    live.close()
        try:
            agent = self.catalog.build(task.agent)
        except UserError as exc:  # e.g. an unknown provider or a missing API key
            return Failed(failure_of(exc), ledger.usage)
        try:
            history, settled = await ledger.resume_state()
        except ApprovalTimedOut as exc:
            error = {"type": "approval_timeout", "code": "approval_timeout", "message": str(exc)}
            return Failed(error, ledger.usage)
        live = self._live_output(task, ledger) if streams(agent) else None
        gate = None
        if self.budgets is not None:
            gate = RunGate(self.budgets, model=task.agent.model, paid=task.paid_slot)
        ledger.fallback = self.catalog.fallback_of(task.agent)
        stopped: BudgetRunOut | None = None  # before a request past a budget
        try:
            spend = await self._spend(task, ledger)
            with current_run(ledger), gated(gate), spending(spend):
                async with agent.iter(
                    None if history else prompt_of(task),
                    message_history=history or None,
                    deferred_tool_results=settled,
                    deps=ledger,
                    usage_limits=UsageLimits(request_limit=profile.request_limit),
                ) as run:
                    try:
                        await ledger.deliver(run)  # follow-ups queued before it started
                        async for node in run:
                            await ledger.sync(run.all_messages(), run.usage)
                            await ledger.deliver(run)
                            if (
                                live is not None
                                and not live.quiet  # a quiet task's: nobody to stream to
                                and Agent.is_model_request_node(node)
                            ):
                                await _streamed(node, run, live)
                    except (AgentRunError, UserError):
                        # What the run said before it failed is recorded too. (Not
                        # when cancelled or the lease is lost: then nothing may be
                        # written.)
                        await ledger.sync(run.all_messages(), run.usage, final=True)
                        raise
                    except Exception as exc:
                        refused = exhausted_in(exc)
                        if refused is None:
                            raise
                        # Stopped before the request: all it did so far is kept, not
                        # the empty response pydantic-ai notes for the request.
                        kept = unsent(run.all_messages())
                        await ledger.sync(kept, run.usage, final=True)
                        # (pydantic-ai's run raises the error it ended with again.)
                        stopped = BudgetRunOut(refused, written_text(kept))
                        raise
                    await ledger.sync(run.all_messages(), run.usage, final=True)
                    result = run.result
                    ledger.conversation = run.all_messages()  # should the run go on
        except Throttled as throttled:
            return WaitsForBudget(throttled)
        except McpServerError as exc:  # refused, or not reached: said, no traceback
            log.info("task %s: %s", task.id, exc)
            return Failed({"type": "mcp_server_unavailable", "message": str(exc)}, ledger.usage)
        except (AgentRunError, UserError) as exc:
            if isinstance(exc, UsageLimitExceeded):
                limit = profile.request_limit
                ledger.stage_log("error", f"the run reached its limit of {limit} model requests")
            return Failed(failure_of(exc), ledger.usage)
        except Exception:
            if stopped is None:
                raise
            log.info("task %s: %s", task.id, stopped)
            ledger.stage_log("error", stopped.error()["message"])
            return Failed(stopped.error(), ledger.usage, result=stopped.partial)
        finally:
            if live is not None:
                live.close()
        assert result is not None
        output = result.output
        if isinstance(output, DeferredToolRequests):
            request, deadline = waiting_for(output, profile.approvals)
            return NeedsInput(request, ledger.usage, deadline)
        return Completed(output, ledger.usage)

    async def _spend(self, task: Task, ledger: RunLedger) -> RunSpend | None:
        """The run's spend gate (None: no budget applies): the task's own budget, its
        spend so far the ledger's, then its tenant's and profile's shared ones."""
        budgets: list[Budget] = []
        own = task_budget(task, cost=ledger.spend.cost, usage=ledger.usage)
        if own is not None:
            budgets.append(own)
        if self.spend is not None:
            keys = await self.spend.budgets_of(task.tenant, task.agent.profile)
            if keys:
                budgets.append(SharedBudgets(self.spend, keys))
        if not budgets:
            return None
        return RunSpend(budgets, pricing=ledger.pricing, log=ledger.log)

    def _live_output(self, task: Task, ledger: RunLedger) -> LiveOutput | None:
        if self.live is None:
            return None
        return self.live.output(task_id=task.id, attempt=ledger.lease.attempt, quiet=task.quiet)
