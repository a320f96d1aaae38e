"""A tenant's spend budget (issue 41 §2): set by the operator's default or by an admin
key only; once spent, the tenant's submits are refused with a 429 and `Retry-After`
at the period's end on REST, A2A and MCP alike (a retry of a submit that was taken
still gets its task), its schedules wait for the next period, and other tenants go
on."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.common.pricing import SpendLimit
from taskservice.db.keys import ApiKeyStore
from taskservice.db.spend_budgets import Refused, SpendBudgetStore, tenant_key
from taskservice.db.tables import schedules, tasks
from taskservice.db.tasks import TaskStore
from taskservice.usecases.spend import CACHE_SECONDS
from tests.conftest import ClientFactory, wait_for
from tests.integration.helpers import count
from tests.integration.test_mcp_limits import HEADERS, answer, call

BUDGET = "https://taskservice.dev/problems/budget-exhausted"


async def spend_it_all(store: TaskStore, tenant: str) -> None:
    """Spend the tenant's budget until a request no longer fits."""
    budgets = SpendBudgetStore(store.db)
    while not isinstance(
        await budgets.reserve([tenant_key(tenant)], cost=Decimal("0.3"), tokens=100), Refused
    ):
        pass


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_an_admin_key_sets_reads_and_drops_a_tenants_budget(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    keys = ApiKeyStore(db)
    admin, made = await keys.create(tenant="ops", admin=True)
    plain, _ = await keys.create(tenant="acme")
    default = SpendLimit(period="month", max_cost=Decimal(50))
    async with make_client(tenant_budget=default) as client:
        before = (await client.get("/v1/budget", headers=auth(plain))).json()
        path = "/v1/admin/tenants/acme/budget"
        refused = await client.put(path, json={"period": "day", "max_cost": 1}, headers=auth(plain))
        set_ = await client.put(
            path, json={"period": "day", "max_cost": 0.1, "max_tokens": 900}, headers=auth(admin)
        )
        after = (await client.get("/v1/budget", headers=auth(plain))).json()
        read = (await client.get(path, headers=auth(admin))).json()
        bad = [
            await client.put(path, json=body, headers=auth(admin))
            for body in ({"period": "day"}, {"period": "week", "max_cost": 1}, {"max_cost": -1})
        ]
        bad_tenant = await client.get("/v1/admin/tenants/no%20such/budget", headers=auth(admin))
        dropped = (await client.delete(path, headers=auth(admin))).json()
        listed = (await client.get("/v1/keys", headers=auth(admin))).json()["keys"]
    assert made.admin
    assert listed[0]["admin"] is True
    assert before["budget"]["source"] == "settings"
    assert before["budget"]["max_cost"] == "50"
    assert before["budget"]["spent_cost"] == "0"
    assert refused.status_code == 403
    assert refused.headers["content-type"] == "application/problem+json"
    assert set_.status_code == 200, set_.text
    own = set_.json()["budget"]
    assert (own["period"], own["max_cost"], own["max_tokens"]) == ("day", "0.1", 900)
    assert (own["source"], own["set_by"]) == ("admin", f"key:{made.id}")
    assert after["budget"] == read["budget"] == own
    for response in [*bad, bad_tenant]:
        assert response.status_code == 422, response.text
    assert dropped["budget"]["source"] == "settings"
    assert dropped["budget"]["max_cost"] == "50"


async def test_a_spent_budget_refuses_the_tenants_submits_everywhere(
    make_client: ClientFactory, db: AsyncEngine, store: TaskStore
) -> None:
    keys = ApiKeyStore(db)
    acme, _ = await keys.create(tenant="acme")
    other, _ = await keys.create(tenant="other")
    default = SpendLimit(period="day", max_cost=Decimal(1))
    async with make_client(tenant_budget=default) as client:
        taken = await client.post(
            "/v1/tasks",
            json={"input": "before"},
            headers={**auth(acme), "Idempotency-Key": "first"},
        )
        assert taken.status_code == 201, taken.text
        budgets = SpendBudgetStore(store.db)
        await budgets.default_tenant("acme", default)
        await spend_it_all(store, "acme")
        # What each process read of it is kept for a second.
        await asyncio.sleep(CACHE_SECONDS + 0.1)
        refused = await client.post("/v1/tasks", json={"input": "after"}, headers=auth(acme))
        assert refused.status_code == 429, refused.text
        again = await client.post(
            "/v1/tasks",
            json={"input": "before"},
            headers={**auth(acme), "Idempotency-Key": "first"},
        )
        message = {
            "kind": "message",
            "messageId": "m1",
            "role": "user",
            "parts": [{"kind": "text", "text": "hi"}],
        }
        a2a = (
            await client.post(
                "/a2a",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "message/send",
                    "params": {"message": message},
                },
                headers=auth(acme),
            )
        ).json()
        mcp = answer(
            await client.post("/mcp", json=call({"input": "hi"}), headers={**HEADERS, **auth(acme)})
        )
        elsewhere = await client.post("/v1/tasks", json={"input": "x"}, headers=auth(other))
        budget = (await client.get("/v1/budget", headers=auth(acme))).json()["budget"]
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["type"] == BUDGET
    assert problem["budget"] == "tenant:acme"
    assert "tenant acme's daily budget ($1;" in problem["detail"]
    wait = int(refused.headers["Retry-After"])
    assert abs((datetime.now(UTC) + timedelta(seconds=wait) - tomorrow).total_seconds()) < 5
    assert again.status_code == 200  # the retry of a submit that was taken: its task
    assert again.json()["id"] == taken.json()["id"]
    assert a2a["error"]["code"] == -32603
    assert "daily budget" in a2a["error"]["message"]
    assert a2a["error"]["data"]["type"] == BUDGET
    assert mcp["error"]["code"] == -32603
    assert mcp["error"]["data"]["type"] == BUDGET
    assert abs(mcp["error"]["data"]["retry_after"] - problem["retry_after"]) <= 2
    assert elsewhere.status_code == 201  # another tenant goes on
    assert budget["exhausted"] is True
    assert budget["spent_cost"] == "0.9"
    assert await count(db, tasks) == 2  # acme's first and the other tenant's: nothing else


async def test_a_spent_tenants_schedule_waits_and_others_fire(
    make_client: ClientFactory, db: AsyncEngine, store: TaskStore
) -> None:
    keys = ApiKeyStore(db)
    acme, _ = await keys.create(tenant="acme")
    other, _ = await keys.create(tenant="other")
    default = SpendLimit(period="day", max_cost=Decimal(1))
    body: dict[str, Any] = {"cron": "0 9 * * *", "task": {"input": "digest"}}
    async with make_client(tenant_budget=default) as client:
        mine = (await client.post("/v1/schedules", json=body, headers=auth(acme))).json()
        theirs = (await client.post("/v1/schedules", json=body, headers=auth(other))).json()
        await SpendBudgetStore(store.db).default_tenant("acme", default)
        await spend_it_all(store, "acme")
        await asyncio.sleep(CACHE_SECONDS + 0.1)  # what was read of it before, forgotten
        slot = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
        async with db.begin() as conn:  # both due now
            await conn.execute(update(schedules).values(next_run_at=slot))
        await wait_for(lambda: _started(db, theirs["id"]), timeout=10)
        await wait_for(lambda: _held(db, mine["id"]), timeout=10)
        shown = (await client.get(f"/v1/schedules/{mine['id']}", headers=auth(acme))).json()
    async with db.connect() as conn:
        row = (
            await conn.execute(
                select(schedules.c.next_run_at, schedules.c.held_until).where(
                    schedules.c.id == mine["id"]
                )
            )
        ).one()
    assert row.next_run_at == slot  # the slot waits, to fire as `missed` says
    assert row.held_until > datetime.now(UTC) + timedelta(seconds=1)
    assert "daily budget" in shown["last_error"]["detail"]
    assert not await _started(db, mine["id"])


async def _started(db: AsyncEngine, schedule_id: str) -> bool:
    query = select(tasks.c.id).where(
        tasks.c.metadata["scheduled_by"]["schedule_id"].astext == schedule_id
    )
    async with db.connect() as conn:
        return (await conn.execute(query)).first() is not None


async def _held(db: AsyncEngine, schedule_id: str) -> bool:
    query = select(schedules.c.held_until).where(schedules.c.id == schedule_id)
    async with db.connect() as conn:
        return (await conn.execute(query)).scalar_one() is not None
