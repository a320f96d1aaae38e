"""Spend budgets shared by every process (migration 0026): a tenant's per UTC day or
month, an agent profile's total per day or month. A budget is a rate limit that does
not refill until its period ends.

`reserve` is one statement: the budgets' rows locked in key order (as the rate
limits' are: no deadlock between processes), a period that ended started afresh,
and the request's most it may cost added to every one of them if it fits all of
them, else to none, the first that refused it marked `exhausted` (its tenant's
submits are refused until the period ends). Concurrent reservations queue on the
rows, so no two are given the same room: a budget is overrun only by what a request
cost beyond what was reserved for it, one request per process at most. `settle`
puts the real figure in place of the reservation, in the period it was made in (a
request that straddled the period's end leaves its reservation in the old one).

A trigger on the rows notes each budget reaching 80% and 100% (or exhausted), once
per period, in `spend_alerts` (see the migration).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy.dialects.postgresql import ARRAY, TIMESTAMP
from sqlalchemy.types import BigInteger, Boolean, Numeric, Text

from taskservice.common.pricing import SpendLimit as Limit
from taskservice.common.pricing import decimal_text
from taskservice.db.sql import Database, Row, text_statement

_KEYS = ARRAY(Text)
_TZ = TIMESTAMP(timezone=True)


def tenant_key(tenant: str) -> str:
    return f"tenant:{tenant}"


def profile_key(profile: str) -> str:
    return f"agent:{profile}"


@dataclass(frozen=True, slots=True)
class BudgetState:
    key: str
    tenant: str | None
    limit: Limit
    period_start: datetime | None  # None: nothing spent yet
    period_end: datetime | None
    spent_cost: Decimal
    spent_tokens: int
    exhausted: bool
    source: str
    set_by: str | None

    @property
    def over(self) -> bool:
        """Nothing more may be spent this period."""
        limit = self.limit
        return (
            self.exhausted
            or (limit.max_cost is not None and self.spent_cost >= limit.max_cost)
            or (limit.max_tokens is not None and self.spent_tokens >= limit.max_tokens)
        )


@dataclass(frozen=True, slots=True)
class Reserved:
    """The reservation's period per budget (settled there)."""

    periods: dict[str, datetime]


@dataclass(frozen=True, slots=True)
class Refused:
    """No room: `budget` refused the request (as it stands after the refusal)."""

    budget: BudgetState


# A budget's row is every request's of its tenant (or profile): the two statements a
# request makes commit without waiting for the WAL's flush (the transaction's own
# setting, made by the statement itself), so that the row is locked for the
# statement and not also for a disk write. Should PostgreSQL crash, the budget may
# miss what the last moments before it reserved and settled (never more than
# `wal_writer_delay`, 200 ms by default, of them), and a request may be let through
# that that would have been counted against; the tasks' own usage and the spend
# rollup are written by the ledger's statements, which wait for the flush.
_ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true)"

# The row's current period: its start, and its end (a new period once passed).
_PERIOD_START = "(date_trunc({p}, now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')"
_STATE = f"""key, tenant, period, max_cost, max_tokens, spent_cost, spent_tokens, exhausted,
    source, set_by,
    CASE WHEN period_start = '-infinity' THEN NULL ELSE period_start END AS period_start,
    CASE WHEN period_start = '-infinity' THEN NULL
         ELSE period_start + make_interval(days => CASE period WHEN 'day' THEN 1 ELSE 0 END,
                                           months => CASE period WHEN 'month' THEN 1 ELSE 0 END)
    END AS period_end,
    period_start < {_PERIOD_START.format(p="period")} AS stale"""

_RESERVE = text_statement(
    f"""
WITH b AS (
    SELECT key, max_cost, max_tokens, period_start,
           {_PERIOD_START.format(p="period")} AS current_start, spent_cost, spent_tokens,
           exhausted
    FROM spend_budgets WHERE key = ANY(:keys)
    ORDER BY key
    FOR UPDATE
),
c AS (
    SELECT key, max_cost, max_tokens, current_start, period_start < current_start AS fresh,
           CASE WHEN period_start < current_start THEN 0 ELSE spent_cost END AS cost0,
           CASE WHEN period_start < current_start THEN 0 ELSE spent_tokens END AS tokens0
    FROM b
),
refused AS (
    SELECT key FROM c
    WHERE (max_cost IS NOT NULL AND cost0 + :cost > max_cost)
       OR (max_tokens IS NOT NULL AND tokens0 + :tokens > max_tokens)
    ORDER BY key LIMIT 1
),
spent AS (
    UPDATE spend_budgets s SET
        period_start = c.current_start,
        spent_cost = c.cost0 + CASE WHEN NOT EXISTS (SELECT 1 FROM refused) THEN :cost ELSE 0 END,
        spent_tokens = c.tokens0
            + CASE WHEN NOT EXISTS (SELECT 1 FROM refused) THEN :tokens ELSE 0 END,
        exhausted = (NOT c.fresh AND s.exhausted) OR s.key IN (SELECT key FROM refused),
        updated_at = now()
    FROM c WHERE s.key = c.key
    RETURNING s.key, s.period_start
)
SELECT (SELECT key FROM refused) AS refused, {_ASYNC_COMMIT} AS async_commit,
       coalesce(array_agg(key ORDER BY key), '{{}}') AS keys,
       coalesce(array_agg(period_start ORDER BY key), '{{}}') AS starts
FROM spent
""",
    keys=_KEYS,
    cost=Numeric,
    tokens=BigInteger,
)

# The real figure in place of what was reserved, in the period it was reserved in.
_SETTLE = text_statement(
    f"""
UPDATE spend_budgets s SET
    spent_cost = greatest(s.spent_cost + :cost, 0),
    spent_tokens = greatest(s.spent_tokens + :tokens, 0),
    updated_at = now()
FROM unnest(CAST(:keys AS text[]), CAST(:starts AS timestamptz[])) AS r(key, start)
WHERE s.key = r.key AND s.period_start = r.start
RETURNING {_ASYNC_COMMIT}
""",
    keys=_KEYS,
    starts=ARRAY(_TZ),
    cost=Numeric,
    tokens=BigInteger,
)

_READ = text_statement(f"SELECT {_STATE} FROM spend_budgets WHERE key = :key", key=Text)

# A budget's limits as configured: a profile's from the settings of every process; a
# tenant's default, unless an admin set the tenant's own (`only_settings`).
_CONFIGURE = text_statement(
    """
INSERT INTO spend_budgets (key, tenant, period, max_cost, max_tokens, source, set_by)
VALUES (:key, :tenant, :period, :max_cost, :max_tokens, :source, :set_by)
ON CONFLICT (key) DO UPDATE SET
    period = excluded.period, max_cost = excluded.max_cost, max_tokens = excluded.max_tokens,
    source = excluded.source, set_by = excluded.set_by,
    -- a new kind of period starts afresh; new limits may have room again
    period_start = CASE WHEN spend_budgets.period = excluded.period
                        THEN spend_budgets.period_start ELSE '-infinity' END,
    spent_cost = CASE WHEN spend_budgets.period = excluded.period
                      THEN spend_budgets.spent_cost ELSE 0 END,
    spent_tokens = CASE WHEN spend_budgets.period = excluded.period
                        THEN spend_budgets.spent_tokens ELSE 0 END,
    exhausted = spend_budgets.exhausted AND spend_budgets.period = excluded.period
        AND spend_budgets.max_cost IS NOT DISTINCT FROM excluded.max_cost
        AND spend_budgets.max_tokens IS NOT DISTINCT FROM excluded.max_tokens,
    updated_at = now()
WHERE NOT :only_settings OR spend_budgets.source = 'settings'
""",
    key=Text,
    tenant=Text,
    period=Text,
    max_cost=Numeric,
    max_tokens=BigInteger,
    source=Text,
    set_by=Text,
    only_settings=Boolean,
)
_FORGET_PROFILES = text_statement(
    "DELETE FROM spend_budgets WHERE key LIKE 'agent:%' AND NOT key = ANY(:keys)", keys=_KEYS
)
_KEYS_THERE = text_statement("SELECT key FROM spend_budgets")
_CLEAR = text_statement(
    "DELETE FROM spend_budgets WHERE key = :key AND source = 'admin' RETURNING key", key=Text
)


def _state(row: Row) -> BudgetState:
    fresh = bool(row["stale"]) or row["period_start"] is None
    return BudgetState(
        key=row["key"],
        tenant=row["tenant"],
        limit=Limit.model_construct(
            period=row["period"],
            max_cost=row["max_cost"],
            max_tokens=row["max_tokens"],
        ),
        # A period that ended counts as the new one, with nothing spent in it yet.
        period_start=None if fresh else row["period_start"],
        period_end=None if fresh else row["period_end"],
        spent_cost=Decimal(0) if fresh else Decimal(row["spent_cost"]),
        spent_tokens=0 if fresh else int(row["spent_tokens"]),
        exhausted=False if fresh else bool(row["exhausted"]),
        source=row["source"],
        set_by=row["set_by"],
    )


class SpendBudgetStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def configure_profiles(self, limits: Mapping[str, Limit]) -> None:
        """The profiles' budgets as configured (a profile no longer budgeted has its
        row removed)."""
        for profile, limit in limits.items():
            await self._configure(profile_key(profile), None, limit, "settings", None, False)
        await self.db.fetch(_FORGET_PROFILES, {"keys": [profile_key(p) for p in limits]})

    async def default_tenant(self, tenant: str, limit: Limit, *, replace: bool = False) -> None:
        """The operator's default budget for `tenant`, unless an admin set its own
        (`replace`: in place of the admin's; what was spent this period still
        counts)."""
        await self._configure(tenant_key(tenant), tenant, limit, "settings", None, not replace)

    async def set_tenant(self, tenant: str, limit: Limit, *, by: str) -> BudgetState:
        """An admin's budget for `tenant`, in place of the default."""
        await self._configure(tenant_key(tenant), tenant, limit, "admin", by, False)
        state = await self.read(tenant_key(tenant))
        assert state is not None
        return state

    async def clear_tenant(self, tenant: str) -> bool:
        """Drop the admin's budget of `tenant` (the default applies again)."""
        return await self.db.fetchrow(_CLEAR, {"key": tenant_key(tenant)}) is not None

    async def keys(self) -> list[str]:
        """The budgets there are."""
        return [row["key"] for row in await self.db.fetch(_KEYS_THERE, {})]

    async def read(self, key: str) -> BudgetState | None:
        row = await self.db.fetchrow(_READ, {"key": key})
        return _state(row) if row is not None else None

    async def reserve(
        self, keys: Iterable[str], *, cost: Decimal, tokens: int
    ) -> Reserved | Refused:
        """Add what a request may cost at most to every budget of `keys`, if it fits
        all of them; else to none (`Refused`, naming the first that refused it)."""
        keys = sorted(set(keys))
        row = await self.db.fetchrow(_RESERVE, {"keys": keys, "cost": cost, "tokens": tokens})
        assert row is not None
        if row["refused"] is not None:
            state = await self.read(row["refused"])
            assert state is not None
            return Refused(state)
        return Reserved(dict(zip(row["keys"], row["starts"], strict=True)))

    async def settle(self, reserved: Reserved, *, cost: Decimal, tokens: int) -> None:
        """`cost` and `tokens` more were used than reserved (fewer: negative)."""
        if not reserved.periods or (not cost and not tokens):
            return
        await self.db.fetch(
            _SETTLE,
            {
                "keys": list(reserved.periods),
                "starts": list(reserved.periods.values()),
                "cost": cost,
                "tokens": tokens,
            },
        )

    async def _configure(
        self,
        key: str,
        tenant: str | None,
        limit: Limit,
        source: str,
        by: str | None,
        only_settings: bool,
    ) -> None:
        await self.db.fetch(
            _CONFIGURE,
            {
                "key": key,
                "tenant": tenant,
                "period": limit.period,
                "max_cost": limit.max_cost,
                "max_tokens": limit.max_tokens,
                "source": source,
                "set_by": by,
                "only_settings": only_settings,
            },
        )


def shown(state: BudgetState) -> dict[str, Any]:
    """A budget as the API shows it (money as exact decimal strings)."""
    limit = state.limit
    return {
        "period": limit.period,
        "max_cost": decimal_text(limit.max_cost) if limit.max_cost is not None else None,
        "max_tokens": limit.max_tokens,
        "period_start": state.period_start,
        "period_end": state.period_end,
        "spent_cost": decimal_text(state.spent_cost),
        "spent_tokens": state.spent_tokens,
        "exhausted": state.over,
        "source": state.source,
        "set_by": state.set_by,
    }
