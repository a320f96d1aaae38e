"""What a new task is made of, checked once for every way one arrives (REST, A2A,
MCP, a schedule's slot), each of which builds a `domain.requests.TaskRequest` (whose
constructor holds its scheduling in range): the agent it names resolved against the
catalog, its content within the limits (the lengths REST's schema states too: a
transport without such a schema, MCP's tool arguments, is held to them here), its
parent, and the hash an idempotency key is held to (`TaskRequest.fingerprint`)."""

from __future__ import annotations

from taskservice.agents.catalog import AgentCatalog
from taskservice.common.tracing import Tracing
from taskservice.db.tasks import TaskStore
from taskservice.domain.agent_options import AGENT, MODEL, SYSTEM_PROMPT, AgentOptions, effective
from taskservice.domain.content import (
    CONTEXT_ID_MAX_LENGTH,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    check_length,
    check_new_task,
)
from taskservice.domain.errors import BudgetExhausted, InvalidRequest
from taskservice.domain.models import NewTask
from taskservice.domain.requests import TaskRequest
from taskservice.settings import Settings
from taskservice.usecases.spend import SpendControl


class NewTasks:
    def __init__(
        self,
        *,
        store: TaskStore,
        catalog: AgentCatalog,
        settings: Settings,
        tracing: Tracing,
        spend: SpendControl | None = None,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.settings = settings
        self.tracing = tracing
        self.spend = spend

    async def prepare(self, request: TaskRequest) -> NewTask:
        """The task to insert, or the `InvalidRequest` (422) saying what is wrong (its
        priority and run_at were checked when it was built). `request.webhooks` only
        count in the request hash: the caller registers them."""
        tenant, metadata, parent_id = request.tenant, request.metadata, request.parent_id
        # The agent may be named by fields or by the original design's metadata keys.
        options = effective(
            AgentOptions(request.system_prompt, request.model, request.agent), metadata
        )
        system_prompt, model, agent = options.system_prompt, options.model, options.agent
        context_id, idempotency_key = request.context_id, request.idempotency_key
        check_length("system_prompt", system_prompt, most=SYSTEM_PROMPT.max_length)
        check_length("agent", agent, most=AGENT.max_length)
        check_length("model", model, most=MODEL.max_length)
        check_length("context_id", context_id, least=1, most=CONTEXT_ID_MAX_LENGTH)
        check_length("idempotency_key", idempotency_key, least=1, most=IDEMPOTENCY_KEY_MAX_LENGTH)
        texts = (system_prompt, agent, model, context_id, idempotency_key)
        input_json, metadata_json = check_new_task(request.input, metadata, texts, self.settings)
        spec = self.catalog.resolve(profile=agent, system_prompt=system_prompt, model=model)
        if parent_id is not None and await self.store.get(parent_id, tenant=tenant) is None:
            raise InvalidRequest(f"parent task {parent_id} does not exist", field="parent_id")
        if request.detached and parent_id is None:
            raise InvalidRequest("only a subtask (with a parent_id) is detached", field="detached")
        # The task's budget, else its profile's default.
        profile = self.catalog.profile(spec.profile)
        max_cost, max_tokens = request.max_cost, request.max_tokens
        if profile is not None:
            max_cost = profile.max_cost if max_cost is None else max_cost
            max_tokens = profile.max_tokens if max_tokens is None else max_tokens
        request_hash = None
        if idempotency_key:
            request_hash = request.fingerprint(
                options, input_json=input_json, metadata_json=metadata_json
            )
        if self.spend is not None:
            try:
                await self.spend.refuse_if_spent(tenant)
            except BudgetExhausted:
                # A retry of a submit that was taken gets its task, as ever.
                taken = idempotency_key and await self.store.by_idempotency_key(
                    tenant, idempotency_key
                )
                if not taken:
                    raise
        return NewTask(
            tenant=tenant,
            input=request.input,
            agent=spec,
            metadata=metadata,
            max_attempts=request.max_attempts or self.settings.default_max_attempts,
            timeout_seconds=request.timeout_seconds,
            parent_id=parent_id,
            context_id=context_id,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
            detached=request.detached,
            trace_context=self.tracing.carrier(),  # the submitting request's span
            priority=request.priority,
            run_at=request.run_at,
            quiet=request.quiet,
            fork=request.fork,
            max_cost=max_cost,
            max_tokens=max_tokens,
        )
