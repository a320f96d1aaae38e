"""What a new task is made of, checked once for every way one arrives (REST, A2A,
MCP, a running agent's subtask, a schedule's slot): the agent it names resolved
against the catalog, its content within the limits (the lengths REST's schema states
too: a transport without such a schema, MCP's tool arguments, is held to them
here), its scheduling in range, and the hash an idempotency key is held to."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from taskservice.agents.catalog import AgentCatalog
from taskservice.common.tracing import Tracing
from taskservice.db.tasks import TaskStore
from taskservice.domain.agent_options import AGENT, MODEL, SYSTEM_PROMPT, AgentOptions, effective
from taskservice.domain.content import (
    CONTEXT_ID_MAX_LENGTH,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    canonical,
    check_length,
    check_new_task,
)
from taskservice.domain.errors import InvalidRequest
from taskservice.domain.models import NewTask
from taskservice.domain.schedules import check_priority, check_run_at
from taskservice.settings import Settings


class Webhook(Protocol):
    """What of a task's webhook its request hash holds (`WebhookRequest`)."""

    @property
    def url(self) -> str: ...
    @property
    def states(self) -> Collection[str]: ...
    @property
    def secret(self) -> str | None: ...


class NewTasks:
    def __init__(
        self, *, store: TaskStore, catalog: AgentCatalog, settings: Settings, tracing: Tracing
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.settings = settings
        self.tracing = tracing

    async def prepare(
        self,
        *,
        tenant: str,
        input: Any,
        system_prompt: str | None = None,
        agent: str | None = None,
        model: str | None = None,
        metadata: dict[str, Any] | None = None,
        parent_id: uuid.UUID | None = None,
        context_id: str | None = None,
        max_attempts: int | None = None,
        timeout_seconds: float | None = None,
        idempotency_key: str | None = None,
        webhooks: Sequence[Webhook] = (),
        detached: bool = False,
        priority: Any = 0,
        run_at: Any = None,
        quiet: bool = False,
    ) -> NewTask:
        """The task to insert, or the `InvalidRequest` (422) saying what is wrong.
        `webhooks` only count in the request hash: the caller registers them."""
        metadata = metadata or {}
        priority = check_priority(priority)
        run_at = check_run_at(run_at) if run_at is not None else None
        # The agent may be named by fields or by the original design's metadata keys.
        options = effective(AgentOptions(system_prompt, model, agent), metadata)
        system_prompt, model, agent = options.system_prompt, options.model, options.agent
        check_length("system_prompt", system_prompt, most=SYSTEM_PROMPT.max_length)
        check_length("agent", agent, most=AGENT.max_length)
        check_length("model", model, most=MODEL.max_length)
        check_length("context_id", context_id, least=1, most=CONTEXT_ID_MAX_LENGTH)
        check_length("idempotency_key", idempotency_key, least=1, most=IDEMPOTENCY_KEY_MAX_LENGTH)
        texts = (system_prompt, agent, model, context_id, idempotency_key)
        input_json, metadata_json = check_new_task(input, metadata, texts, self.settings)
        spec = self.catalog.resolve(profile=agent, system_prompt=system_prompt, model=model)
        if parent_id is not None and await self.store.get(parent_id, tenant=tenant) is None:
            raise InvalidRequest(f"parent task {parent_id} does not exist", field="parent_id")
        if detached and parent_id is None:
            raise InvalidRequest("only a subtask (with a parent_id) is detached", field="detached")

        request_hash = None
        if idempotency_key:
            request: dict[str, Any] = {
                "input": input_json,
                "system_prompt": system_prompt,
                "agent": agent,
                "model": model,
                "metadata": metadata_json,
                "parent_id": str(parent_id) if parent_id else None,
                "context_id": context_id,
                "max_attempts": max_attempts,
                "timeout_seconds": timeout_seconds,
            }
            # Each only when set: keeps the hash of other requests as it was.
            if detached:
                request["detached"] = True
            if priority:
                request["priority"] = priority
            if run_at is not None:
                request["run_at"] = run_at.isoformat()
            if webhooks:
                request["webhooks"] = [
                    {"url": w.url, "states": sorted(w.states), "secret": w.secret} for w in webhooks
                ]
            request_hash = hashlib.sha256(canonical(request).encode()).hexdigest()
        return NewTask(
            tenant=tenant,
            input=input,
            agent=spec,
            metadata=metadata,
            max_attempts=max_attempts or self.settings.default_max_attempts,
            timeout_seconds=timeout_seconds,
            parent_id=parent_id,
            context_id=context_id,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
            detached=detached,
            trace_context=self.tracing.carrier(),  # the submitting request's span
            priority=priority,
            run_at=run_at,
            quiet=quiet,
        )
