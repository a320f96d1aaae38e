"""How a run ended, as the executor (and the delegator) say it and the pool writes it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from taskservice.common.rate_limits import Throttled


@dataclass(frozen=True, slots=True)
class Completed:
    result: Any
    usage: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Failed:
    error: dict[str, Any]
    usage: dict[str, Any]
    result: Any = None  # what it wrote before it failed, kept (a budget run out)


@dataclass(frozen=True, slots=True)
class NeedsInput:
    """The agent asked questions, or a tool call waits for approval; the task waits
    in `input_required` (until `deadline`, when one applies: `wake_at`)."""

    request: dict[str, Any]
    usage: dict[str, Any]
    deadline: datetime | None = None


@dataclass(frozen=True, slots=True)
class WaitsForBudget:
    """A model request's rate limit budget has no room yet (`worker/budget.py`): the
    task waits without a worker until `throttled.until` (nothing is written but that:
    the run resumes from the ledger)."""

    throttled: Throttled


Ended = Completed | Failed | NeedsInput  # what the pool writes as the run's outcome
Outcome = Ended | WaitsForBudget
