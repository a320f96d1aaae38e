"""A new task as it is asked for, whichever way it arrives: a REST body, an A2A
message, an MCP tool call, a schedule's template at a slot. Every transport builds a
`TaskRequest`; the use case (`usecases.submission.NewTasks.prepare`) checks what needs
the settings, the catalog or the store, and makes the task. A field a new feature
adds to a submit is added here, once.

Built, a request holds its scheduling as its types say: `priority` an integer in
range, `run_at` an aware time in UTC (ISO 8601 text, as JSON carries it, is parsed);
else the constructor raises the `InvalidRequest` naming the field. Pure.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from taskservice.domain.agent_options import AgentOptions
from taskservice.domain.budgets import check_max_cost, check_max_tokens
from taskservice.domain.content import canonical
from taskservice.domain.forks import Fork
from taskservice.domain.schedules import check_priority, check_run_at
from taskservice.domain.webhooks import WebhookRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRequest:
    """What a submit asks for. `metadata` is stored as given (its agent keys count as
    the agent fields: `agent_options`); `webhooks` become the task's own, committed
    with it; `quiet`: the caller waits for the outcome without a stream, so the task's
    model responses are not streamed until a stream asks for them (`Task.quiet`)."""

    tenant: str
    input: Any
    system_prompt: str | None = None
    agent: str | None = None
    model: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    parent_id: uuid.UUID | None = None
    context_id: str | None = None
    max_attempts: int | None = None
    timeout_seconds: float | None = None
    idempotency_key: str | None = None
    webhooks: Sequence[WebhookRequest] = ()
    detached: bool = False
    priority: int = 0
    run_at: datetime | None = None
    quiet: bool = False
    # A fork of another task (`domain/forks.py`): its ledger begins as a copy of the
    # source's; `input` is then the source's (at 0: the fork's prompt).
    fork: Fork | None = None
    # Its budget (`domain/budgets.py`); None: its agent profile's default, if any.
    max_cost: Decimal | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        # Values from JSON (A2A metadata, a schedule's template) arrive unchecked.
        object.__setattr__(self, "priority", check_priority(self.priority))
        object.__setattr__(self, "max_cost", check_max_cost(self.max_cost))
        object.__setattr__(self, "max_tokens", check_max_tokens(self.max_tokens))
        if self.run_at is not None:
            object.__setattr__(self, "run_at", check_run_at(self.run_at))
        if self.metadata is None:
            object.__setattr__(self, "metadata", {})
        object.__setattr__(self, "webhooks", tuple(self.webhooks))

    def fingerprint(self, options: AgentOptions, *, input_json: str, metadata_json: str) -> str:
        """The hash an idempotency key is held to: the same key with another request is
        a conflict. `options`: the agent options in force (`agent_options.effective`);
        `input_json`, `metadata_json`: the input and metadata canonically encoded.

        Stored with the task: a request that hashed to a value once must hash to it
        after every upgrade, or an idempotent retry across it would conflict. A new
        field counts only when set, which keeps the hash of every other request."""
        request: dict[str, Any] = {
            "input": input_json,
            "system_prompt": options.system_prompt,
            "agent": options.agent,
            "model": options.model,
            "metadata": metadata_json,
            "parent_id": str(self.parent_id) if self.parent_id else None,
            "context_id": self.context_id,
            "max_attempts": self.max_attempts,
            "timeout_seconds": self.timeout_seconds,
        }
        if self.detached:
            request["detached"] = True
        if self.priority:
            request["priority"] = self.priority
        if self.run_at is not None:
            request["run_at"] = self.run_at.isoformat()
        if self.fork is not None:
            request["fork"] = self.fork.fingerprint()
        if self.max_cost is not None:
            request["max_cost"] = str(self.max_cost.normalize())
        if self.max_tokens is not None:
            request["max_tokens"] = self.max_tokens
        if self.webhooks:
            request["webhooks"] = [
                {"url": w.url, "states": sorted(w.states), "secret": w.secret}
                for w in self.webhooks
            ]
        return hashlib.sha256(canonical(request).encode()).hexdigest()
