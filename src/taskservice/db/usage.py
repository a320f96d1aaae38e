"""What a tenant spent (`GET /v1/usage`), read from the rows a trigger keeps as tasks'
usage is written (migration 0025: `usage_daily` per tenant, UTC day, profile and
model; `usage_contexts` per context as well), never from a scan of `tasks`; and what a
task's subtree spent (the task and every task below it), summed from the tree.

A report is one statement: the total over the range, and the groups asked for,
largest cost first (by day in day order), at most `limit` of them. Grouped by
context it reads `usage_contexts`, otherwise the smaller `usage_daily`; either is an
index range of the tenant's days.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from functools import lru_cache
from typing import Any

from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.types import Date, Integer, Text

from taskservice.common.pricing import Spend
from taskservice.db.sql import Database, Statement, text_statement

# The ways a report can group, in the order their columns are shown.
GROUPS = ("day", "agent", "model", "context")
_COLUMN = {"day": "day", "agent": "agent", "model": "model", "context": "context_id"}
_SUMS = """sum(input_tokens)::bigint AS input_tokens, sum(output_tokens)::bigint AS output_tokens,
           sum(requests)::bigint AS requests, sum(cost) AS cost,
           sum(unpriced_requests)::bigint AS unpriced_requests"""


@dataclass(frozen=True, slots=True)
class Counts:
    """Tokens, requests and what they cost (USD; `unpriced_requests` not in it)."""

    input_tokens: int
    output_tokens: int
    requests: int
    cost: Decimal
    unpriced_requests: int

    @classmethod
    def of(cls, row: Any) -> Counts:
        return cls(
            input_tokens=int(row["input_tokens"] or 0),
            output_tokens=int(row["output_tokens"] or 0),
            requests=int(row["requests"] or 0),
            cost=Decimal(row["cost"] or 0),
            unpriced_requests=int(row["unpriced_requests"] or 0),
        )

    def shown(self) -> dict[str, Any]:
        """As a task's `usage` shows its own (`common/pricing.Spend.shown`: the cost
        null while requests were unpriced and nothing priced added to it)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "requests": self.requests,
            **Spend(self.cost, self.unpriced_requests).shown(),
        }


@dataclass(frozen=True, slots=True)
class Group:
    keys: dict[str, str | None]  # by what it is grouped: day (ISO), agent, model, context
    counts: Counts


@dataclass(frozen=True, slots=True)
class Report:
    total: Counts
    groups: list[Group]
    more: bool  # `limit` cut groups off


@lru_cache(maxsize=64)
def _report_statement(group_by: tuple[str, ...], agent: bool, model: bool) -> Statement:
    table = "usage_contexts" if "context" in group_by else "usage_daily"
    conditions = ["tenant = :tenant", "day >= :since", "day <= :until"]
    if agent:
        conditions.append("agent = :agent")
    if model:
        conditions.append("model = :model")
    columns = [_COLUMN[g] for g in group_by]
    keys = ", ".join(f"'{g}', {_COLUMN[g]}" for g in group_by)
    order = (["day"] if "day" in group_by else []) + [
        "cost DESC",
        "requests DESC",
        *[c for c in columns if c != "day"],
    ]
    grouped = (
        f"""(SELECT coalesce(jsonb_agg(jsonb_build_object({keys},
                'input_tokens', input_tokens, 'output_tokens', output_tokens,
                'requests', requests, 'cost', cost::text, 'unpriced_requests', unpriced_requests)
              ORDER BY {", ".join(order)}), '[]'::jsonb)
            FROM (SELECT {", ".join(columns)}, {_SUMS} FROM picked
                  GROUP BY {", ".join(columns)} ORDER BY {", ".join(order)}
                  LIMIT :limit + 1) g)"""
        if group_by
        else "'[]'::jsonb"
    )
    return text_statement(
        f"""
WITH picked AS MATERIALIZED (
    SELECT * FROM {table} WHERE {" AND ".join(conditions)}
)
SELECT t.*, {grouped} AS groups FROM (SELECT {_SUMS} FROM picked) t
""",
        **_binds(group=bool(group_by), agent=agent, model=model),
    )


def _binds(*, group: bool, agent: bool, model: bool) -> dict[str, Any]:
    """The parameters' types of a report's statement (only those it names)."""
    binds: dict[str, Any] = {"tenant": Text, "since": Date, "until": Date}
    if agent:
        binds["agent"] = Text
    if model:
        binds["model"] = Text
    if group:
        binds["limit"] = Integer
    return binds


# The task and its descendants (`parent_id`'s partial index), their usage summed as
# the rollup sums it (`taskservice_usage_parts`: usage from before costs were kept
# counts its requests as unpriced).
_SUBTREE = text_statement(
    f"""
WITH RECURSIVE tree AS (
    SELECT id, usage, agent FROM tasks WHERE id = :id AND tenant = :tenant
    UNION ALL
    SELECT t.id, t.usage, t.agent FROM tasks t JOIN tree ON t.parent_id = tree.id
)
SELECT count(DISTINCT tree.id)::int AS tasks, {_SUMS}
FROM tree, taskservice_usage_parts(tree.usage, tree.agent->>'model')
""",
    id=UUID(as_uuid=True),
    tenant=Text,
)


class UsageStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def report(
        self,
        *,
        tenant: str,
        since: date,
        until: date,
        group_by: tuple[str, ...],
        agent: str | None = None,
        model: str | None = None,
        limit: int = 100,
    ) -> Report:
        statement = _report_statement(group_by, agent is not None, model is not None)
        row = await self.db.fetchrow(
            statement,
            {
                "tenant": tenant,
                "since": since,
                "until": until,
                "agent": agent,
                "model": model,
                "limit": limit,
            },
        )
        assert row is not None
        rows = row["groups"]
        groups = [
            Group(
                keys={g: _key(item[g]) for g in group_by},
                counts=Counts.of(item),
            )
            for item in rows[:limit]
        ]
        return Report(total=Counts.of(row), groups=groups, more=len(rows) > limit)

    async def subtree(self, task_id: uuid.UUID, *, tenant: str) -> tuple[int, Counts]:
        """How many tasks the subtree of `task_id` holds (itself included), and what
        they spent together."""
        row = await self.db.fetchrow(_SUBTREE, {"id": task_id, "tenant": tenant})
        assert row is not None
        return int(row["tasks"]), Counts.of(row)


def _key(value: Any) -> str | None:
    """A group's key as shown: '' (a task without a context, or a profile) is null."""
    if value is None or value == "":
        return None
    return str(value)
