"""A budget alert as a webhook's body tells it (`domain/webhooks.BudgetAlert`): its
period's end, whose budget, money as exact decimal strings."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from taskservice.domain.webhooks import BudgetAlert, BudgetEvent


def alert(**fields: object) -> BudgetAlert:
    noted = {
        "id": 1,
        "key": "tenant:acme",
        "tenant": "acme",
        "period": "month",
        "period_start": datetime(2026, 12, 1, tzinfo=UTC),
        "threshold": 80,
        "spent_cost": Decimal("8.0200"),
        "spent_tokens": 12,
        "max_cost": Decimal("10.00"),
        "max_tokens": None,
        "at": datetime(2026, 12, 20, 9, tzinfo=UTC),
    }
    return BudgetAlert(**(noted | fields))  # type: ignore[arg-type]


def test_a_month_ends_at_the_next_months_start_and_december_at_januarys() -> None:
    assert alert().period_end == datetime(2027, 1, 1, tzinfo=UTC)
    november = alert(period_start=datetime(2026, 11, 1, tzinfo=UTC))
    assert november.period_end == datetime(2026, 12, 1, tzinfo=UTC)
    day = alert(period="day", period_start=datetime(2026, 12, 31, tzinfo=UTC))
    assert day.period_end == datetime(2027, 1, 1, tzinfo=UTC)
    assert alert(period_start=None).period_end is None


def test_the_body_names_whose_budget_and_keeps_money_exact() -> None:
    tenant = alert()
    assert (tenant.scope, tenant.event) == ("tenant", BudgetEvent.REACHED_80)
    assert tenant.budget() == {
        "scope": "tenant",
        "tenant": "acme",
        "period": "month",
        "period_start": "2026-12-01T00:00:00+00:00",
        "period_end": "2027-01-01T00:00:00+00:00",
        "currency": "USD",
        "max_cost": "10",
        "max_tokens": None,
        "spent_cost": "8.02",
        "spent_tokens": 12,
    }
    profile = alert(key="agent:writer", tenant=None, threshold=100, max_cost=None, max_tokens=9)
    shown = profile.budget()
    assert (profile.scope, profile.event) == ("agent", BudgetEvent.REACHED_100)
    assert (shown["scope"], shown["agent"], "tenant" in shown) == ("agent", "writer", False)
    assert (shown["max_cost"], shown["max_tokens"]) == (None, 9)
