"""The model client's retries, told: the event hooks of the HTTP client that
OpenAI-compatible providers get (`catalog.AgentCatalog.model_for`), through which
each retry of a model request becomes a `log` line of the run that made it
(`ModelRequestLog`), and a 429 on a request that draws from rate limit budgets is
left to `budgeted.BudgetedModel` instead of retried in place.
"""

from __future__ import annotations

import logging
import weakref

import httpx2

from taskservice.agents.tools import CURRENT_RUN, LogLevel, RunHooks
from taskservice.common.rate_limits import REQUEST_BUDGETED

log = logging.getLogger(__name__)

MODEL_RETRIES = 2  # the OpenAI SDK's own default, made explicit
# What the OpenAI SDK (and other Stainless-made SDKs) retry, unless told not to.
_RETRIED_STATUSES = frozenset({408, 409, 429})


def _retries_taken(request: httpx2.Request) -> int:
    try:
        return int(request.headers.get("x-stainless-retry-count", "0"))
    except ValueError:
        return 0


class ModelRequestLog:
    """Event hooks of the model client: each retry of a model request becomes a
    `log` line of the run that made it (`tools.CURRENT_RUN`). A retried answer is
    told when it arrives, before the SDK's backoff; a request that got no answer
    (connection error, timeout) when it is sent again."""

    def __init__(self, max_retries: int) -> None:
        self.max_retries = max_retries
        self._told: weakref.WeakKeyDictionary[RunHooks, int] = weakref.WeakKeyDictionary()

    async def on_response(self, response: httpx2.Response) -> None:
        run = CURRENT_RUN.get()
        status = response.status_code
        budgeted = REQUEST_BUDGETED.get()
        if status == 429 and budgeted is not None:
            # The request's budgets are blocked and it waits for a new slot without
            # a worker (`BudgetedModel`): not retried by the SDK in the meantime.
            budgeted.append(_retry_after(response))
            response.headers["x-should-retry"] = "false"
            return
        if run is None or not (status in _RETRIED_STATUSES or status >= 500):
            return
        retry = _retries_taken(response.request) + 1
        if retry > self.max_retries or response.headers.get("x-should-retry") == "false":
            return  # the SDK gives up: the run fails and says why
        after = response.headers.get("retry-after")
        wait = f" (Retry-After: {after})" if after else ""
        self._told[run] = retry
        await _tell(
            run,
            "warning",
            f"the model provider answered HTTP {status} {response.reason_phrase}{wait}; "
            f"retry {retry} of {self.max_retries}",
        )

    async def on_request(self, request: httpx2.Request) -> None:
        run = CURRENT_RUN.get()
        retry = _retries_taken(request)
        if run is None or retry == 0 or self._told.get(run) == retry:
            return
        self._told[run] = retry
        await _tell(
            run,
            "warning",
            "the model request got no answer (connection error or timeout); "
            f"retry {retry} of {self.max_retries}",
        )


def _retry_after(response: httpx2.Response) -> float | None:
    """A 429's wait, in seconds (`retry-after-ms`, else `retry-after` in seconds)."""
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(response.headers[header]) * scale
        except (KeyError, ValueError):
            continue
    return None


async def _tell(run: RunHooks, level: LogLevel, message: str) -> None:
    """A line from below the agent: never fails the model request. (A lost lease is
    found by the run's next write; a database error costs the line only.)"""
    try:
        await run.log(level, message)
    except Exception:
        log.info("could not write a log line of the run: %s", message, exc_info=True)
