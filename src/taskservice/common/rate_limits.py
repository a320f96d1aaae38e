"""Model rate limits: budgets of requests and tokens per period, shared by every
process through PostgreSQL (`db/budgets.py`), that model requests draw from.

A budget is named after a model (`openai:gpt-4o`, as tasks name it) or a provider
(`openai`: all of that provider's models together). A model request draws from every
budget that names its model or its provider, before it is sent:

```
TASKSERVICE_RATE_LIMITS="openai:gpt-4o=500rpm,30000tpm; anthropic=50rpm"
```

Units: `rpm`/`rps` requests per minute/second, `tpm`/`tps` tokens per minute/second.
A budget is a GCRA (a token bucket kept as a "theoretical arrival time"): the whole
period's amount may go at once, then it refills evenly. A request that does not
fit is not refused but given the next slot that fits (its place in the queue is
reserved at once, so waiting tasks go in the order they asked, none woken for
nothing); a run whose slot is further than `INLINE_WAIT` away gives its worker slot
back and waits, `throttled`, until then (`worker/budget.py`). Tokens are reserved as
estimated from the request's text (a quarter of its characters) and settled with the
usage the provider reports. A provider's 429 with `Retry-After` blocks the budget
until then, for every process.

This module is pure: the parsing, the keys, and what a run's model requests call
(`ModelGate`, reached through the context of the run).
"""

from __future__ import annotations

import contextvars
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

INLINE_WAIT = 0.05  # seconds: a shorter wait for a slot is slept, not parked

_UNITS = {
    "rpm": ("requests", 60.0),
    "rps": ("requests", 1.0),
    "tpm": ("tokens", 60.0),
    "tps": ("tokens", 1.0),
}
_ITEM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(rpm|rps|tpm|tps)\s*$", re.IGNORECASE)
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]*$")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """One budget: up to `requests` per `requests_period` seconds and `tokens` per
    `tokens_period` seconds (None: that dimension is not limited)."""

    key: str
    requests: float | None = None
    requests_period: float = 60.0
    tokens: float | None = None
    tokens_period: float = 60.0

    def describe(self) -> str:
        parts = []
        if self.requests is not None:
            parts.append(f"{self.requests:g} requests per {self.requests_period:g} s")
        if self.tokens is not None:
            parts.append(f"{self.tokens:g} tokens per {self.tokens_period:g} s")
        return f"{self.key}: " + ", ".join(parts)


def parse_rate_limits(text: str) -> dict[str, RateLimit]:
    """`key=500rpm,30000tpm; other=5rps` as budgets by key; ValueError saying what is
    wrong."""
    limits: dict[str, RateLimit] = {}
    for entry in text.split(";"):
        if not entry.strip():
            continue
        key, sep, spec = entry.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise ValueError(
                f"rate limit {entry.strip()!r}: expected <model or provider>=<amount><unit>, "
                "e.g. openai:gpt-4o=500rpm,30000tpm"
            )
        if key in limits:
            raise ValueError(f"rate limit {key!r} is given twice")
        values: dict[str, Any] = {}
        for item in spec.split(","):
            match = _ITEM.match(item)
            if match is None:
                raise ValueError(
                    f"rate limit {key!r}: {item.strip()!r} is not <amount><unit> "
                    "(units: rpm, rps, tpm, tps)"
                )
            amount, unit = float(match[1]), match[2].lower()
            dimension, period = _UNITS[unit]
            if dimension in values:
                raise ValueError(f"rate limit {key!r} limits {dimension} twice")
            if not amount > 0 or not math.isfinite(amount):
                raise ValueError(f"rate limit {key!r}: {item.strip()!r} must be above 0")
            values[dimension] = amount
            values[f"{dimension}_period"] = period
        limits[key] = RateLimit(key, **values)
    return limits


def budget_keys(model: str, limits: Mapping[str, RateLimit]) -> tuple[str, ...]:
    """The budgets a request to `model` (a task's model name) draws from: the
    model's own and its provider's, those that are configured, sorted (the order
    rows are locked in)."""
    provider = model.partition(":")[0]
    return tuple(sorted({key for key in (model, provider) if key in limits}))


def estimate_tokens(characters: int) -> int:
    """A request's tokens, before the provider counts them: about 4 characters each."""
    return max(1, characters // 4)


class Throttled(Exception):
    """A model request's budget has no room until `until`: the run stops here and
    the task waits, without a worker slot, then resumes with that slot reserved
    (`tokens` of it)."""

    def __init__(
        self, keys: tuple[str, ...], *, until: datetime, wait: float, tokens: int, reason: str
    ) -> None:
        super().__init__(f"no budget for {', '.join(keys)} for {wait:.2f} s ({reason})")
        self.keys = keys
        self.until = until
        self.wait = wait  # seconds from when it was found
        self.tokens = tokens
        self.reason = reason  # "budget" | "provider_429"


class ModelGate(Protocol):
    """What a budgeted model request calls (the worker's `RunGate`, one per run)."""

    async def acquire(self, keys: tuple[str, ...], tokens: int) -> int:
        """Take a slot in `keys`' budgets for a request of about `tokens` tokens:
        return when it may be sent (the tokens reserved for it), or raise
        `Throttled`."""

    async def settle(self, keys: tuple[str, ...], reserved: int, used: int) -> None:
        """The request used `used` tokens where `reserved` were taken."""

    async def refused(self, keys: tuple[str, ...], retry_after: float | None) -> None:
        """The provider answered 429: block the budgets for `retry_after` seconds (or
        a default), and raise `Throttled` to wait for a new slot."""


# The gate of the run in this context (set by the executor around a run).
CURRENT_GATE: contextvars.ContextVar[ModelGate | None] = contextvars.ContextVar(
    "taskservice_model_gate", default=None
)
# Inside a budgeted model request: where the model client's hooks put a 429's
# Retry-After (seconds), and mark the 429 as not to be retried by the SDK itself.
REQUEST_BUDGETED: contextvars.ContextVar[list[float | None] | None] = contextvars.ContextVar(
    "taskservice_request_budgeted", default=None
)


@contextmanager
def gated(gate: ModelGate | None) -> Iterator[None]:
    """Model requests made in this context take their slots through `gate`."""
    token = CURRENT_GATE.set(gate)
    try:
        yield
    finally:
        CURRENT_GATE.reset(token)
