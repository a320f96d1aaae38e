"""Budget alerts (`spend_alerts`, migrations 0026 and 0027): a budget reaching 80%
and 100% of a limit, noted once per period by the `spend_budgets` trigger, which
NOTIFYs `taskservice_spend` (`SPEND_CHANNEL`).

A tenant's alerts reach its webhooks through the outbox (the `spend_alerts` trigger
of migration 0028 writes the deliveries; `db/webhook_outbox.py` reads the alert to
render the body). Here: `take_uncounted`, by which the first process to look takes
the alerts nobody counted yet (`counted_at`, set in the same statement, `SKIP
LOCKED`), so that each alert is counted in the metrics and logged by one process,
once.
"""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import Integer

from taskservice.db.sql import Database, Row
from taskservice.db.sql import text_statement as _stmt
from taskservice.domain.webhooks import BudgetAlert

SPEND_CHANNEL = "taskservice_spend"

# What `alert_from_row` reads, from `spend_alerts a`.
ALERT_COLUMNS = """a.id, a.key, a.tenant, a.period, a.threshold, a.spent_cost, a.spent_tokens,
       a.max_cost, a.max_tokens, a.at,
       CASE WHEN a.period_start = '-infinity' THEN NULL ELSE a.period_start END AS period_start"""

_TAKE_UNCOUNTED = _stmt(
    f"""
WITH taken AS (
    SELECT id FROM spend_alerts WHERE counted_at IS NULL
    ORDER BY id LIMIT :p_limit
    FOR UPDATE SKIP LOCKED
)
UPDATE spend_alerts a SET counted_at = now()
FROM taken WHERE a.id = taken.id
RETURNING {ALERT_COLUMNS}
""",
    p_limit=Integer,
)


def alert_from_row(row: Row) -> BudgetAlert:
    return BudgetAlert(
        id=row["id"],
        key=row["key"],
        tenant=row["tenant"],
        period=row["period"],
        period_start=row["period_start"],
        threshold=row["threshold"],
        spent_cost=Decimal(row["spent_cost"]),
        spent_tokens=int(row["spent_tokens"]),
        max_cost=Decimal(row["max_cost"]) if row["max_cost"] is not None else None,
        max_tokens=row["max_tokens"],
        at=row["at"],
    )


class SpendAlertStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def take_uncounted(self, *, limit: int = 100) -> list[BudgetAlert]:
        """Alerts no process counted yet, now counted by the caller (oldest first)."""
        rows = await self.db.fetch(_TAKE_UNCOUNTED, {"p_limit": limit})
        return sorted((alert_from_row(row) for row in rows), key=lambda a: a.id)
