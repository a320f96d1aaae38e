"""A task's budget: `max_cost` (US dollars, an exact `Decimal`) and `max_tokens`
(input + output tokens of its own model requests), beside `max_attempts`. Checked as
a request is built, whichever way it arrives (a REST body, A2A metadata, a
schedule's template read back from JSON): a value out of range is the 422 naming
its field. Pure.

How a run keeps to them is `common/spending.py` (the port, the task's own budget)
and `worker/spend.py` (the run's gate).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from taskservice.domain.errors import InvalidRequest

MAX_COST_LIMIT = Decimal(1_000_000)  # US dollars: a higher budget is a typo
MAX_TOKENS_LIMIT = 10**12


def check_max_cost(value: Any, *, field: str = "max_cost") -> Decimal | None:
    """US dollars above 0 given as a decimal string or a number (a float is taken by
    its shortest text, `0.1` as `Decimal("0.1")`); None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise InvalidRequest(f"{field} must be a decimal number of US dollars", field=field)
    try:
        cost = Decimal(str(value).strip()) if not isinstance(value, Decimal) else value
    except InvalidOperation:
        raise InvalidRequest(
            f'{field} must be a decimal number of US dollars, e.g. "0.50"', field=field
        ) from None
    if not cost.is_finite() or not 0 < cost <= MAX_COST_LIMIT:
        raise InvalidRequest(
            f"{field} must be above 0 and at most {MAX_COST_LIMIT} (US dollars)", field=field
        )
    return cost


def check_max_tokens(value: Any, *, field: str = "max_tokens") -> int | None:
    """A whole number of tokens above 0 (bool is not one); None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{field} must be an integer number of tokens", field=field)
    if not 0 < value <= MAX_TOKENS_LIMIT:
        raise InvalidRequest(f"{field} must be above 0 and at most {MAX_TOKENS_LIMIT}", field=field)
    return value
