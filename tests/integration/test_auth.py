"""API keys, tenant isolation, and the open loopback mode."""

from __future__ import annotations

import asyncio
import hashlib

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.keys import ApiKeyStore
from taskservice.db.tables import api_keys
from taskservice.usecases.auth import StartupRefused
from tests.conftest import ClientFactory


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_keys_are_stored_only_as_hashes(db: AsyncEngine) -> None:
    key, record = await ApiKeyStore(db).create(tenant="acme", name="ci")
    async with db.connect() as conn:
        row = (await conn.execute(select(api_keys))).mappings().one()
    assert key not in {str(v) for v in row.values()}
    assert row["key_hash"] == hashlib.sha256(key.encode()).hexdigest()
    assert key.startswith(record.prefix)
    assert len(record.prefix) < len(key) // 3


async def test_without_keys_the_service_is_open_as_tenant_default(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post("/v1/tasks", json={"input": "x"})
    assert response.status_code == 201


async def test_once_a_key_exists_requests_need_one(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    key, _ = await ApiKeyStore(db).create(tenant="acme")
    async with make_client() as client:
        anonymous = await client.post("/v1/tasks", json={"input": "x"})
        assert anonymous.status_code == 401
        assert anonymous.headers["content-type"] == "application/problem+json"
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert (await client.get("/v1/tasks")).status_code == 401
        assert (
            await client.post("/v1/tasks", json={"input": "x"}, headers=bearer(key))
        ).status_code == 201


@pytest.mark.parametrize(
    "header", ["Bearer nope", "Basic dXNlcjpwYXNz", "Bearer", "tsk_raw_key_without_scheme"]
)
async def test_unknown_or_malformed_credentials_are_401(
    client: httpx.AsyncClient, db: AsyncEngine, header: str
) -> None:
    response = await client.get("/v1/tasks", headers={"Authorization": header})
    assert response.status_code == 401


async def test_a_revoked_key_stops_working(make_client: ClientFactory, db: AsyncEngine) -> None:
    keys = ApiKeyStore(db)
    key, record = await keys.create(tenant="acme")
    async with make_client() as client:
        assert (await client.get("/v1/tasks", headers=bearer(key))).status_code == 200
        await keys.revoke(record.id)
        assert (await client.get("/v1/tasks", headers=bearer(key))).status_code == 401


async def test_keys_created_or_revoked_elsewhere_hold_at_once_despite_the_cache(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    """Key lookups are cached (here for a minute), but creating or revoking a key
    notifies every process, which looks again: the first key ends open mode, and a
    revocation holds, as soon as the notice arrives."""
    keys = ApiKeyStore(db)  # as `taskservice keys` does, from another process
    async with make_client(auth_cache_seconds=60) as client:
        assert (await client.get("/v1/tasks")).status_code == 200  # open, and cached
        key, record = await keys.create(tenant="acme")
        await wait_for_status(client, 401)
        assert (await client.get("/v1/tasks", headers=bearer(key))).status_code == 200
        await keys.revoke(record.id)
        await wait_for_status(client, 401, headers=bearer(key))


async def wait_for_status(
    client: httpx.AsyncClient, status: int, headers: dict[str, str] | None = None
) -> None:
    async def answered() -> bool:
        return (await client.get("/v1/tasks", headers=headers)).status_code == status

    for _ in range(50):
        if await answered():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"still not {status} after 5 s")


async def test_another_tenants_task_is_404_on_every_route(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    keys = ApiKeyStore(db)
    alice, _ = await keys.create(tenant="alice")
    bob, _ = await keys.create(tenant="bob")
    async with make_client() as client:
        task = (
            await client.post("/v1/tasks", json={"input": "mine"}, headers=bearer(alice))
        ).json()
        for method, path in [
            ("GET", f"/v1/tasks/{task['id']}"),
            ("POST", f"/v1/tasks/{task['id']}/cancel"),
            ("POST", f"/v1/tasks/{task['id']}/fork"),
            ("GET", f"/v1/tasks/{task['id']}/events"),
        ]:
            response = await client.request(method, path, headers=bearer(bob))
            assert response.status_code == 404, (method, path)
        assert (await client.get("/v1/tasks", headers=bearer(bob))).json()["tasks"] == []
        # Bob cannot attach a child to Alice's task either.
        child = await client.post(
            "/v1/tasks", json={"input": "x", "parent_id": task["id"]}, headers=bearer(bob)
        )
        assert child.status_code == 422
        # And the task is untouched for its owner.
        mine = await client.get(f"/v1/tasks/{task['id']}", headers=bearer(alice))
        assert mine.json()["state"] == "pending"
        # Schedules are the tenant's too; names are per tenant.
        body = {"name": "nightly", "cron": "0 3 * * *", "task": {"input": "x"}}
        made = (await client.post("/v1/schedules", json=body, headers=bearer(alice))).json()
        for method, path in [
            ("GET", f"/v1/schedules/{made['id']}"),
            ("PATCH", f"/v1/schedules/{made['id']}"),
            ("DELETE", f"/v1/schedules/{made['id']}"),
        ]:
            response = await client.request(method, path, headers=bearer(bob), json={})
            assert response.status_code == 404, (method, path)
        assert (await client.get("/v1/schedules", headers=bearer(bob))).json()["schedules"] == []
        theirs = await client.post("/v1/schedules", json=body, headers=bearer(bob))
        assert theirs.status_code == 201


async def test_idempotency_keys_are_per_tenant(make_client: ClientFactory, db: AsyncEngine) -> None:
    keys = ApiKeyStore(db)
    alice, _ = await keys.create(tenant="alice")
    bob, _ = await keys.create(tenant="bob")
    async with make_client() as client:
        same = {"Idempotency-Key": "shared"}
        a = await client.post("/v1/tasks", json={"input": "a"}, headers=bearer(alice) | same)
        b = await client.post("/v1/tasks", json={"input": "b"}, headers=bearer(bob) | same)
        assert (a.status_code, b.status_code) == (201, 201)
        assert a.json()["id"] != b.json()["id"]


async def test_binding_beyond_loopback_without_keys_refuses_to_start(
    make_client: ClientFactory,
) -> None:
    with pytest.raises(StartupRefused, match="no API key exists"):
        async with make_client(host="0.0.0.0"):
            pass


async def test_binding_beyond_loopback_with_a_key_starts_and_requires_it(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    key, _ = await ApiKeyStore(db).create(tenant="acme")
    async with make_client(host="0.0.0.0") as client:
        assert (await client.get("/v1/tasks")).status_code == 401
        assert (await client.get("/v1/tasks", headers=bearer(key))).status_code == 200


async def test_required_mode_rejects_anonymous_requests_even_without_keys(
    make_client: ClientFactory,
) -> None:
    async with make_client(auth_mode="required") as client:
        assert (await client.get("/v1/tasks")).status_code == 401


async def test_revoking_every_key_does_not_reopen_the_server(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    keys = ApiKeyStore(db)
    _, record = await keys.create(tenant="acme")
    await keys.revoke(record.id)
    async with make_client() as client:  # a restart after the revocation
        assert (await client.get("/v1/tasks")).status_code == 401
        assert (await client.post("/v1/tasks", json={"input": "x"})).status_code == 401


async def test_a_running_open_server_closes_for_good_at_the_first_key(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    keys = ApiKeyStore(db)
    async with make_client(auth_cache_seconds=0) as client:
        assert (await client.get("/v1/tasks")).status_code == 200
        _, record = await keys.create(tenant="acme")
        assert (await client.get("/v1/tasks")).status_code == 401
        await keys.revoke(record.id)
        assert (await client.get("/v1/tasks")).status_code == 401


async def test_open_mode_can_be_turned_on_explicitly_on_loopback(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    keys = ApiKeyStore(db)
    key, _ = await keys.create(tenant="acme")
    async with make_client(auth_mode="open") as client:
        anonymous = await client.post("/v1/tasks", json={"input": "x"})
        assert anonymous.status_code == 201
        assert (await client.get("/v1/tasks", headers=bearer(key))).json()["tasks"] == []
        assert len((await client.get("/v1/tasks")).json()["tasks"]) == 1
    with pytest.raises(StartupRefused, match="loopback only"):
        async with make_client(auth_mode="open", host="0.0.0.0"):
            pass
