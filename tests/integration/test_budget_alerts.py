"""Budget alerts reach webhooks and metrics (issue 41 §2; migration 0028): a tenant's
budget reaching 80% and 100% is delivered once per alert to that tenant's tenant-wide
webhooks asking for `budget.80` / `budget.100`, signed, through the outbox, whatever
races; a profile's budget goes to no tenant; each alert is counted once in
`taskservice_budget_alerts_total` however many processes run. Real PostgreSQL, the
real app (twice: two processes' dispatchers and counters), a real receiver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from decimal import Decimal
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.keys import ApiKeyStore
from taskservice.db.spend_budgets import (
    Limit,
    Refused,
    Reserved,
    SpendBudgetStore,
    profile_key,
    tenant_key,
)
from taskservice.db.tasks import TaskStore
from taskservice.domain.errors import InvalidRequest
from taskservice.domain.webhooks import BudgetEvent, WebhookRequest
from taskservice.usecases.subscriptions import WebhookService
from tests.conftest import ClientFactory, wait_for
from tests.fakes.webhook_receiver import Receiver, Reply
from tests.integration.test_webhooks import FAST, verify

ACME = tenant_key("acme")


@pytest.fixture
async def keys(db: AsyncEngine) -> dict[str, dict[str, str]]:
    """Authorization headers of the tenants acme and bob."""
    store = ApiKeyStore(db)
    made = {}
    for tenant in ("acme", "bob"):
        key, _ = await store.create(tenant=tenant)
        made[tenant] = {"Authorization": f"Bearer {key}"}
    return made


@pytest.fixture
async def budgets(store: TaskStore) -> SpendBudgetStore:
    budgets = SpendBudgetStore(store.db)
    await budgets.default_tenant("acme", Limit(period="day", max_cost=Decimal("1")))
    return budgets


async def subscribe(
    client: httpx.AsyncClient, headers: dict[str, str], url: str, states: Sequence[str]
) -> dict[str, Any]:
    made = await client.post(
        "/v1/webhooks", json={"url": url, "states": list(states)}, headers=headers
    )
    assert made.status_code == 201, made.text
    sub: dict[str, Any] = made.json()
    return sub


async def spend(budgets: SpendBudgetStore, *costs: str) -> list[Reserved | Refused]:
    return [await budgets.reserve([ACME], cost=Decimal(c), tokens=10) for c in costs]


async def deliveries(
    client: httpx.AsyncClient, headers: dict[str, str], sub: dict[str, Any], n: int
) -> list[dict[str, Any]]:
    """The webhook's n deliveries once none is pending, oldest first."""

    async def check() -> list[dict[str, Any]] | None:
        page = await client.get(f"/v1/webhooks/{sub['id']}/deliveries", headers=headers)
        found = page.json()["deliveries"]
        done = len(found) == n and all(d["status"] != "pending" for d in found)
        return list(reversed(found)) if done else None

    result: list[dict[str, Any]] = await wait_for(check, timeout=15)
    return result


def counted(scope: str, threshold: int) -> float:
    labels = {"scope": scope, "threshold": str(threshold)}
    return REGISTRY.get_sample_value("taskservice_budget_alerts_total", labels) or 0.0


@pytest.fixture
async def two_processes(
    make_client: ClientFactory,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Two apps on one database: two dispatchers, two alert counters."""
    async with make_client(**FAST) as first, make_client(**FAST) as second:
        yield first, second


async def test_each_threshold_is_delivered_once_signed_to_the_tenants_own_webhooks(
    two_processes: tuple[httpx.AsyncClient, httpx.AsyncClient],
    budgets: SpendBudgetStore,
    keys: dict[str, dict[str, str]],
    receiver: Receiver,
) -> None:
    client, other = two_processes
    acme, bob = keys["acme"], keys["bob"]
    at_80 = await subscribe(client, acme, receiver.url("/80"), ["budget.80"])
    at_100 = await subscribe(other, acme, receiver.url("/100"), ["completed", "budget.100"])
    bobs = await subscribe(client, bob, receiver.url("/bob"), ["budget.80", "budget.100"])
    before = {t: counted("tenant", t) for t in (80, 100)}

    # 50%, then 85% (80 reached), then requests racing for the last 0.15: one fits
    # (0.95), the rest are refused (exhausted: 100 reached), noted once whoever races.
    await spend(budgets, "0.5", "0.35")
    raced = await asyncio.gather(*(spend(budgets, "0.1") for _ in range(8)))
    assert sum(isinstance(r, Reserved) for (r,) in raced) == 1
    (first,) = await deliveries(client, acme, at_80, 1)
    (last,) = await deliveries(other, acme, at_100, 1)
    await asyncio.sleep(0.5)  # anything sent twice would have come by now

    assert at_100["states"] == ["completed", "budget.100"]
    got_80, got_100 = receiver.at("/80"), receiver.at("/100")
    assert [r.webhook_id for r in got_80] == [first["id"]]
    assert [r.webhook_id for r in got_100] == [last["id"]]
    assert receiver.at("/bob") == []  # another tenant's webhook hears nothing
    body = verify(at_80["secret"], got_80[0])
    assert body["type"] == "budget.80"
    data = body["data"]
    assert data["delivery_id"] == first["id"]
    assert data["subscription_id"] == at_80["id"]
    assert data["threshold"] == 80
    budget = data["budget"]
    assert budget["period_start"].endswith("T00:00:00+00:00")
    assert budget == {
        "scope": "tenant",
        "tenant": "acme",
        "period": "day",
        "period_start": budget["period_start"],
        "period_end": budget["period_end"],
        "currency": "USD",
        "max_cost": "1",
        "max_tokens": None,
        "spent_cost": "0.85",
        "spent_tokens": 20,
    }
    full = verify(at_100["secret"], got_100[0])
    assert full["type"] == "budget.100"
    assert full["data"]["budget"]["spent_cost"] == "0.95"  # the next did not fit
    # The delivery log shows them: no task, the alert and its event.
    assert (first["task_id"], first["event_seq"], first["state"]) == (None, None, "budget.80")
    assert first["alert_id"] == data["alert_id"]
    assert first["status"] == "succeeded"
    assert [a["status_code"] for a in first["attempt_log"]] == [200]
    assert (await client.get(f"/v1/deliveries/{last['id']}", headers=bob)).status_code == 404
    assert (await client.get(f"/v1/webhooks/{bobs['id']}/deliveries", headers=bob)).json()[
        "deliveries"
    ] == []
    # Counted once each, by one of the two processes.
    await wait_for(lambda: counted("tenant", 100) == before[100] + 1)
    assert {t: counted("tenant", t) - before[t] for t in (80, 100)} == {80: 1, 100: 1}


async def test_80_goes_out_before_100_and_a_retry_sends_the_same_body(
    make_client: ClientFactory,
    budgets: SpendBudgetStore,
    keys: dict[str, dict[str, str]],
    receiver: Receiver,
) -> None:
    """One request from nothing to the whole budget notes both thresholds at once;
    80's first attempt fails, and 100 waits until 80 went through."""
    receiver.script("/hook", Reply(500))
    async with make_client(**{**FAST, "webhook_retry_schedule": [0, 0.4, 0.4]}) as client:
        sub = await subscribe(client, keys["acme"], receiver.url(), [e.value for e in BudgetEvent])
        await spend(budgets, "1")
        first, second = await deliveries(client, keys["acme"], sub, 2)

    got = [(r.json["type"], r.webhook_id) for r in receiver.at("/hook")]
    assert got == [
        ("budget.80", first["id"]),
        ("budget.80", first["id"]),
        ("budget.100", second["id"]),
    ]
    retried = receiver.at("/hook")[:2]
    assert retried[0].body == retried[1].body
    assert [a["status_code"] for a in first["attempt_log"]] == [500, 200]


async def test_a_new_period_alerts_again(
    make_client: ClientFactory,
    db: AsyncEngine,
    budgets: SpendBudgetStore,
    keys: dict[str, dict[str, str]],
    receiver: Receiver,
) -> None:
    async with make_client(**FAST) as client:
        sub = await subscribe(client, keys["acme"], receiver.url(), ["budget.80"])
        await spend(budgets, "0.9")
        await deliveries(client, keys["acme"], sub, 1)
        async with db.begin() as conn:  # that was yesterday (the alert first: its latch)
            for table in ("spend_alerts", "spend_budgets"):
                await conn.execute(
                    text(f"UPDATE {table} SET period_start = period_start - interval '1 day'")
                )
        await spend(budgets, "0.5", "0.3")
        yesterday, today = await deliveries(client, keys["acme"], sub, 2)

    old, new = (r.json["data"] for r in receiver.at("/hook"))
    assert yesterday["id"] != today["id"]
    assert (old["budget"]["spent_cost"], new["budget"]["spent_cost"]) == ("0.9", "0.8")
    assert old["alert_id"] != new["alert_id"]
    # The first body was frozen before its period was moved back: it still says today.
    assert new["budget"]["period_start"] == old["budget"]["period_start"]


async def test_a_profiles_budget_reaches_no_tenant_and_is_counted(
    two_processes: tuple[httpx.AsyncClient, httpx.AsyncClient],
    budgets: SpendBudgetStore,
    db: AsyncEngine,
    keys: dict[str, dict[str, str]],
    receiver: Receiver,
) -> None:
    client, _ = two_processes
    await subscribe(client, keys["acme"], receiver.url(), ["budget.80", "budget.100"])
    await budgets.configure_profiles({"writer": Limit(period="month", max_tokens=100)})
    before = counted("agent", 100)
    assert isinstance(
        await budgets.reserve([profile_key("writer")], cost=Decimal(0), tokens=100), Reserved
    )
    await wait_for(lambda: counted("agent", 100) == before + 1)
    await asyncio.sleep(0.5)
    assert counted("agent", 100) == before + 1
    assert receiver.received == []
    async with db.connect() as conn:
        rows = (await conn.execute(text("SELECT count(*) FROM webhook_deliveries"))).scalar()
        noted = (await conn.execute(text("SELECT period, counted_at FROM spend_alerts"))).all()
    assert rows == 0
    assert [p for p, _ in noted] == ["month", "month"]  # 80 and 100 at once
    assert all(at is not None for _, at in noted)


async def test_budget_events_are_for_tenant_wide_webhooks_only(
    make_client: ClientFactory, store: TaskStore, receiver: Receiver
) -> None:
    async with make_client(**FAST) as client:
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        own = await client.post(
            f"/v1/tasks/{task['id']}/webhooks", json={"url": receiver.url(), "states": ["failed"]}
        )
        budget = {"url": receiver.url(), "states": ["budget.80"]}
        refused = [
            await client.post(f"/v1/tasks/{task['id']}/webhooks", json=budget),
            await client.post("/v1/tasks", json={"input": "x", "webhooks": [budget]}),
            await client.patch(
                f"/v1/webhooks/{own.json()['id']}", json={"states": ["failed", "budget.100"]}
            ),
            await client.post("/v1/webhooks", json={**budget, "states": ["budget.50"]}),
        ]
        for response in refused:
            assert response.status_code == 422, response.text
            assert response.headers["content-type"] == "application/problem+json"
        assert "tenant-wide" in refused[2].json()["detail"]
        unchanged = (await client.get(f"/v1/webhooks/{own.json()['id']}")).json()
        assert unchanged["states"] == ["failed"]
        tenant_wide = await client.post("/v1/webhooks", json=budget)
        assert tenant_wide.status_code == 201
        patched = await client.patch(
            f"/v1/webhooks/{tenant_wide.json()['id']}",
            json={"states": ["budget.100", "cancelled", "budget.80"]},
        )
        assert patched.json()["states"] == ["cancelled", "budget.80", "budget.100"]
        webhooks: WebhookService = client.app.state.runtime.webhooks  # type: ignore[attr-defined]
    # The use case refuses it too, whatever transport asks.
    with pytest.raises(InvalidRequest, match="tenant-wide"):
        await webhooks.subscribe_task(
            tenant="default",
            task_id=task["id"],
            request=WebhookRequest(url=receiver.url(), states=(BudgetEvent.REACHED_80,)),
        )
