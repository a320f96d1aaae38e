"""Spend budgets in PostgreSQL (`db/spend_budgets.py`, migration 0026): a reservation
fits every budget or none, concurrent reservations never share room, a period that
ended starts afresh, and each budget's 80% and 100% are noted once per period."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.spend_budgets import (
    Limit,
    Refused,
    Reserved,
    SpendBudgetStore,
    profile_key,
    tenant_key,
)
from taskservice.db.tasks import TaskStore

ACME = tenant_key("acme")
WRITER = profile_key("writer")


async def test_a_reservation_fits_every_budget_or_none(store: TaskStore) -> None:
    budgets = SpendBudgetStore(store.db)
    await budgets.default_tenant("acme", Limit(period="month", max_cost=Decimal("1.00")))
    await budgets.configure_profiles({"writer": Limit(period="day", max_tokens=1000)})

    first = await budgets.reserve([ACME, WRITER], cost=Decimal("0.40"), tokens=600)
    assert isinstance(first, Reserved)
    assert set(first.periods) == {ACME, WRITER}
    # The tokens no longer fit the profile's day: nothing is added anywhere.
    second = await budgets.reserve([ACME, WRITER], cost=Decimal("0.10"), tokens=500)
    assert isinstance(second, Refused)
    assert second.budget.key == WRITER
    assert second.budget.exhausted
    tenant = await budgets.read(ACME)
    assert tenant is not None
    assert (tenant.spent_cost, tenant.over) == (Decimal("0.40"), False)
    # The real figure in place of the reservation: 0.25 of the 0.40.
    await budgets.settle(first, cost=Decimal("-0.15"), tokens=-100)
    tenant = await budgets.read(ACME)
    profile = await budgets.read(WRITER)
    assert tenant is not None
    assert profile is not None
    assert tenant.spent_cost == Decimal("0.25")
    assert profile.spent_tokens == 500
    assert tenant.period_end is not None
    assert tenant.period_start is not None
    assert tenant.period_start.day == 1  # a month, in UTC
    assert tenant.period_end.day == 1
    # A budget's own tenant alone is not over for what its profile refused.
    assert not tenant.over


async def test_concurrent_reservations_never_share_room(store: TaskStore) -> None:
    budgets = SpendBudgetStore(store.db)
    await budgets.default_tenant("acme", Limit(period="day", max_cost=Decimal("1")))

    async def spend() -> int:
        granted = 0
        while True:
            reserved = await budgets.reserve([ACME], cost=Decimal("0.03"), tokens=10)
            if isinstance(reserved, Refused):
                return granted
            granted += 1

    grants = await asyncio.gather(*(spend() for _ in range(8)))
    state = await budgets.read(ACME)
    assert state is not None
    assert sum(grants) == 33  # 33 times 0.03 = 0.99; a 34th would pass 1
    assert state.spent_cost == Decimal("0.99")
    assert state.over  # exhausted: a request was refused


async def test_a_period_that_ended_starts_afresh(store: TaskStore, db: AsyncEngine) -> None:
    budgets = SpendBudgetStore(store.db)
    await budgets.default_tenant("acme", Limit(period="day", max_cost=Decimal("1")))
    assert isinstance(await budgets.reserve([ACME], cost=Decimal("1"), tokens=1), Reserved)
    assert isinstance(await budgets.reserve([ACME], cost=Decimal("0.01"), tokens=1), Refused)
    async with db.begin() as conn:  # yesterday's
        await conn.execute(
            text("UPDATE spend_budgets SET period_start = period_start - interval '1 day'")
        )
    yesterday = await budgets.read(ACME)
    assert yesterday is not None
    assert (yesterday.spent_cost, yesterday.over, yesterday.period_start) == (0, False, None)
    reserved = await budgets.reserve([ACME], cost=Decimal("0.5"), tokens=1)
    assert isinstance(reserved, Reserved)
    today = await budgets.read(ACME)
    assert today is not None
    assert (today.spent_cost, today.over) == (Decimal("0.5"), False)


async def test_each_threshold_is_noted_once_per_period(store: TaskStore, db: AsyncEngine) -> None:
    budgets = SpendBudgetStore(store.db)
    await budgets.default_tenant("acme", Limit(period="day", max_cost=Decimal("1")))
    for cost in ("0.5", "0.3", "0.1", "0.05"):  # 50%, 80%, 90%, 95%
        assert isinstance(await budgets.reserve([ACME], cost=Decimal(cost), tokens=1), Reserved)
    assert isinstance(await budgets.reserve([ACME], cost=Decimal("0.1"), tokens=1), Refused)
    assert isinstance(await budgets.reserve([ACME], cost=Decimal("0.1"), tokens=1), Refused)
    async with db.connect() as conn:
        alerts = (
            await conn.execute(
                text("SELECT threshold, spent_cost, tenant FROM spend_alerts ORDER BY id")
            )
        ).all()
    assert [tuple(a) for a in alerts] == [
        (80, Decimal("0.8"), "acme"),
        (100, Decimal("0.95"), "acme"),  # exhausted: the next request did not fit
    ]


async def test_an_admins_budget_outlives_the_default_and_profiles_follow_the_settings(
    store: TaskStore,
) -> None:
    budgets = SpendBudgetStore(store.db)
    await budgets.default_tenant("acme", Limit(period="month", max_cost=Decimal("10")))
    await budgets.set_tenant("acme", Limit(period="day", max_tokens=5000), by="key:admin")
    await budgets.default_tenant("acme", Limit(period="month", max_cost=Decimal("10")))
    own = await budgets.read(ACME)
    assert own is not None
    assert (own.limit, own.source, own.set_by) == (
        Limit(period="day", max_tokens=5000),
        "admin",
        "key:admin",
    )
    assert await budgets.clear_tenant("acme")
    assert not await budgets.clear_tenant("acme")  # no admin's budget left
    await budgets.configure_profiles({"writer": Limit(period="day", max_cost=Decimal(1))})
    await budgets.configure_profiles({})
    assert await budgets.read(WRITER) is None


async def test_a_new_kind_of_period_starts_afresh_and_alerts_nothing_of_the_old(
    store: TaskStore, db: AsyncEngine
) -> None:
    budgets = SpendBudgetStore(store.db)
    await budgets.default_tenant("acme", Limit(period="month", max_cost=Decimal("10")))
    assert isinstance(await budgets.reserve([ACME], cost=Decimal("5"), tokens=1), Reserved)
    # Per day, a lower limit: the month's spend is no day's.
    await budgets.set_tenant("acme", Limit(period="day", max_cost=Decimal("6")), by="key:ops")
    state = await budgets.read(ACME)
    assert state is not None
    assert (state.spent_cost, state.over) == (Decimal(0), False)
    async with db.connect() as conn:
        alerts = (await conn.execute(text("SELECT count(*) FROM spend_alerts"))).scalar_one()
    assert alerts == 0
