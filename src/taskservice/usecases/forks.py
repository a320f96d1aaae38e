"""Forks: a new task whose ledger begins as a copy of another's up to a position
(`domain/forks.py` says which positions and what is copied; `db/forks.py` writes
it). The fork is then submitted as any task is (`TaskService.submit`: the same
checks, idempotency key and webhooks), and its run continues from the copied
ledger as a run resumed after a crash does: no tool call recorded before the
position runs again. The source is only read, whatever its state.

What a fork keeps of its source unless told otherwise: its agent (profile, model,
system prompt), metadata, context, limits (attempts, timeout, budget: `max_cost`,
`max_tokens`) and priority. A subtask's fork is not a subtask: nothing waits on it.
A task that failed `budget_exhausted` goes on as its fork with a larger budget: its
spend starts at zero (its usage does), the copied messages being its source's.
"""

from __future__ import annotations

from taskservice.agents.catalog import AgentCatalog
from taskservice.domain.content import check_message
from taskservice.domain.forks import ForkRequest, check_at
from taskservice.domain.models import Task
from taskservice.domain.requests import TaskRequest
from taskservice.settings import Settings
from taskservice.usecases.inbox import preview


def fork_submit(
    request: ForkRequest,
    source: Task,
    messages: list[dict[str, object]],
    *,
    catalog: AgentCatalog,
    settings: Settings,
) -> TaskRequest:
    """The submit that makes `request`'s fork of `source`, whose ledger holds
    `messages`; the 422 when the position or the message is not right."""
    message = request.input
    if message is not None:
        check_message(message, settings)
    fork = check_at(
        source.id,
        messages,
        request.at,
        message,
        preview=preview(message) if message is not None else "",
        key=request.message_key,
    )
    agent = request.agent or source.agent.profile
    same = agent == source.agent.profile
    model = request.model
    if model is None and same and catalog.allowed(source.agent.model):
        model = source.agent.model  # else the profile's model now
    return TaskRequest(
        tenant=source.tenant,
        input=source.input if fork.followup or message is None else message,
        system_prompt=request.system_prompt or (source.agent.system_prompt if same else None),
        agent=agent,
        model=model,
        metadata=source.metadata if request.metadata is None else request.metadata,
        context_id=source.context_id,
        max_attempts=request.max_attempts or source.max_attempts,
        timeout_seconds=request.timeout_seconds or source.timeout_seconds,
        idempotency_key=request.idempotency_key,
        webhooks=request.webhooks,
        priority=source.priority,
        fork=fork,
        max_cost=request.max_cost if request.max_cost is not None else source.max_cost,
        max_tokens=request.max_tokens if request.max_tokens is not None else source.max_tokens,
    )
