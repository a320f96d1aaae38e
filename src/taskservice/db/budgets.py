"""The model rate limit budgets' SQL (`common/rate_limits.py`, `worker/budget.py`).

Each budget is a row holding its GCRA state: `requests_tat` and `tokens_tat`, the
times up to which the budget is spent (a request costs `period / amount` seconds of
it per request or token), and `blocked_until`, set by a provider's 429. A request at
time `s` fits a budget when `tat + cost - period <= s`: the whole period's amount may
go at once, then it refills evenly.

`reserve` gives a request the earliest slot that fits every budget it draws from
and spends it there, in one statement: the rows are locked in key order (no
deadlocks between processes), so concurrent reservations queue one after another
and none is given a slot another took. The slot may be in the future: the caller
waits for it (`worker/budget.py`), already holding its place. A budget whose own
room came sooner than the slot (another budget of the request, or a 429's block,
decided it) is spent as of the slot, as GCRA must be: its room until then counts as
used. That errs on the side of the provider, by at most the wait's share of a period.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import Float, Text

from taskservice.common.rate_limits import RateLimit
from taskservice.db.sql import Database, text_statement

_KEYS = ARRAY(Text)

# The configured budgets (what every process was started with); their GCRA state is
# kept, so a restart neither forgets what was spent nor grants a second burst.
_CONFIGURE = text_statement(
    """
INSERT INTO rate_budgets (key, requests, requests_period, tokens, tokens_period)
SELECT * FROM unnest(CAST(:keys AS text[]), CAST(:requests AS float8[]),
                     CAST(:requests_period AS float8[]), CAST(:tokens AS float8[]),
                     CAST(:tokens_period AS float8[]))
ON CONFLICT (key) DO UPDATE SET
    requests = excluded.requests, requests_period = excluded.requests_period,
    tokens = excluded.tokens, tokens_period = excluded.tokens_period, updated_at = now()
""",
    keys=_KEYS,
    requests=ARRAY(Float),
    requests_period=ARRAY(Float),
    tokens=ARRAY(Float),
    tokens_period=ARRAY(Float),
)


def _cost(amount: str, period: str, units: str) -> str:
    """Seconds of the budget that `units` cost (at most one whole period)."""
    return f"make_interval(secs => least({units}, {amount}) * {period} / {amount})"


# cost_r/cost_t: the request's cost in each budget (NULL where it is not limited).
_RESERVE = text_statement(
    f"""
WITH b AS (
    SELECT key, requests_tat, tokens_tat, blocked_until,
           CASE WHEN requests IS NOT NULL
                THEN {_cost("requests", "requests_period", "1")} END AS cost_r,
           make_interval(secs => requests_period) AS period_r,
           CASE WHEN tokens IS NOT NULL
                THEN {_cost("tokens", "tokens_period", ":tokens")} END AS cost_t,
           make_interval(secs => tokens_period) AS period_t
    FROM rate_budgets WHERE key = ANY(:keys)
    ORDER BY key
    FOR UPDATE
),
s AS (
    -- The clock once the rows are locked (not now(), the statement's start: a
    -- reservation that queued behind others would be granted in the past).
    SELECT at, greatest(at, r, t, blocked) AS slot FROM (
        SELECT clock_timestamp() AS at, max(requests_tat + cost_r - period_r) AS r,
               max(tokens_tat + cost_t - period_t) AS t, max(blocked_until) AS blocked
        FROM b
    ) x
),
spent AS (
    UPDATE rate_budgets r SET
        requests_tat = coalesce(greatest(b.requests_tat, s.slot) + b.cost_r, r.requests_tat),
        tokens_tat = coalesce(greatest(b.tokens_tat, s.slot) + b.cost_t, r.tokens_tat),
        updated_at = now()
    FROM b, s WHERE r.key = b.key
    RETURNING r.key
)
-- (`spent` runs to completion unread, as every data-modifying CTE does.)
SELECT s.slot, extract(epoch FROM s.slot - s.at)::float8 AS wait FROM s
""",
    keys=_KEYS,
    tokens=Float,
)

# Tokens used beyond (or short of) what was reserved move the token budgets' time.
_SETTLE = text_statement(
    """
UPDATE rate_budgets SET
    tokens_tat = tokens_tat + make_interval(secs => :tokens * tokens_period / tokens),
    updated_at = now()
WHERE key = ANY(:keys) AND tokens IS NOT NULL
""",
    keys=_KEYS,
    tokens=Float,
)

_BLOCK = text_statement(
    """
UPDATE rate_budgets SET
    blocked_until = greatest(blocked_until, now() + make_interval(secs => :seconds)),
    updated_at = now()
WHERE key = ANY(:keys)
""",
    keys=_KEYS,
    seconds=Float,
)


@dataclass(frozen=True, slots=True)
class Slot:
    """When a reserved request may be sent: `at`, `wait` seconds from the database's
    clock when it was reserved (0: at once)."""

    at: datetime
    wait: float


class BudgetStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def configure(self, limits: Iterable[RateLimit]) -> None:
        """Make the configured budgets' rows (their amounts as configured here)."""
        limits = list(limits)
        if not limits:
            return
        await self.db.fetch(
            _CONFIGURE,
            {
                "keys": [limit.key for limit in limits],
                "requests": [limit.requests for limit in limits],
                "requests_period": [limit.requests_period for limit in limits],
                "tokens": [limit.tokens for limit in limits],
                "tokens_period": [limit.tokens_period for limit in limits],
            },
        )

    async def reserve(self, keys: Sequence[str], tokens: int) -> Slot:
        """Spend one request of about `tokens` tokens in every budget of `keys`, at
        the earliest time all of them have room for it."""
        row = await self.db.fetchrow(_RESERVE, {"keys": list(keys), "tokens": float(tokens)})
        assert row is not None
        return Slot(at=row["slot"], wait=float(row["wait"]))

    async def settle(self, keys: Sequence[str], tokens: int) -> None:
        """`tokens` more were used than reserved (fewer: negative)."""
        if tokens:
            await self.db.fetch(_SETTLE, {"keys": list(keys), "tokens": float(tokens)})

    async def block(self, keys: Sequence[str], seconds: float) -> None:
        """No request in `keys`' budgets for `seconds` (a provider's 429)."""
        await self.db.fetch(_BLOCK, {"keys": list(keys), "seconds": seconds})
