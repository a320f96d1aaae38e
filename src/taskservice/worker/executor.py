"""Runs one task as a pydantic-ai agent and says how it ended.

The executor does no bookkeeping of its own: the pool writes the outcome, fenced by
the task's lease.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from pydantic_ai.exceptions import AgentRunError, UsageLimitExceeded, UserError

from taskservice.agents import AgentCatalog
from taskservice.models import Task

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Completed:
    result: Any
    usage: dict[str, int]
    model: str


@dataclass(frozen=True, slots=True)
class Failed:
    error: dict[str, str]
    usage: dict[str, int]


Outcome = Completed | Failed


def prompt_of(task: Task) -> str:
    return task.input if isinstance(task.input, str) else json.dumps(task.input)


def _usage(run_usage: Any) -> dict[str, int]:
    return {
        "input_tokens": int(run_usage.input_tokens or 0),
        "output_tokens": int(run_usage.output_tokens or 0),
        "requests": int(run_usage.requests or 0),
    }


class Executor:
    def __init__(self, catalog: AgentCatalog) -> None:
        self.catalog = catalog

    async def run(self, task: Task) -> Outcome:
        try:
            agent = self.catalog.build(task.agent)
        except UserError as exc:  # e.g. an unknown provider or a missing API key
            return Failed({"type": "configuration_error", "message": str(exc)}, {})
        try:
            result = await agent.run(prompt_of(task))
        except UsageLimitExceeded as exc:
            return Failed({"type": "limit_exceeded", "message": str(exc)}, {})
        except AgentRunError as exc:
            return Failed({"type": type(exc).__name__, "message": str(exc)}, {})
        except UserError as exc:
            return Failed({"type": "configuration_error", "message": str(exc)}, {})
        return Completed(result.output, _usage(result.usage), task.agent.model)
