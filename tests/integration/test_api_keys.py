"""`/v1/keys`: a tenant's own API keys over HTTP (issue 43 §1)."""

from __future__ import annotations

import uuid

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.keys import ApiKeyStore
from tests.conftest import ClientFactory
from tests.integration.test_auth import wait_for_status


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_key_is_created_for_the_callers_tenant_and_shown_once(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    admin, _ = await ApiKeyStore(db).create(tenant="acme", name="admin")
    async with make_client() as client:
        created = await client.post("/v1/keys", json={"name": "ci"}, headers=bearer(admin))
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["key"].startswith(body["prefix"])
        assert body["name"] == "ci"
        assert body["revoked_at"] is None
        assert body["current"] is False
        assert body["ended_open_mode"] is False
        assert created.headers["location"] == f"/v1/keys/{body['id']}"
        found = await client.get(created.headers["location"], headers=bearer(admin))
        assert found.status_code == 200
        assert found.json() == {k: body[k] for k in found.json()}
        assert "key" not in found.json()
        # The new key is the tenant's: its tasks are acme's.
        task = await client.post("/v1/tasks", json={"input": "x"}, headers=bearer(admin))
        mine = await client.get(f"/v1/tasks/{task.json()['id']}", headers=bearer(body["key"]))
        assert mine.status_code == 200

        listed = await client.get("/v1/keys", headers=bearer(body["key"]))
        assert listed.status_code == 200
        page = listed.json()
        assert [k["name"] for k in page["keys"]] == ["admin", "ci"]
        assert [k["current"] for k in page["keys"]] == [False, True]
        assert page["open_mode"] is False
        # Never the key again, nor its hash.
        assert body["key"] not in listed.text
        assert set(page["keys"][1]) == {
            "id",
            "name",
            "prefix",
            "created_at",
            "revoked_at",
            "current",
            "admin",
        }
        assert [k["admin"] for k in page["keys"]] == [False, False]  # made over HTTP: never


async def test_keys_are_the_tenants_own(make_client: ClientFactory, db: AsyncEngine) -> None:
    store = ApiKeyStore(db)
    acme, _ = await store.create(tenant="acme")
    other, other_record = await store.create(tenant="globex", name="theirs")
    async with make_client() as client:
        listed = (await client.get("/v1/keys", headers=bearer(acme))).json()["keys"]
        assert [k["name"] for k in listed] == [None]
        assert "theirs" not in str(listed)
        for key_id in (str(other_record.id), str(uuid.uuid4()), "not-a-uuid"):
            for response in (
                await client.post(f"/v1/keys/{key_id}/revoke", headers=bearer(acme)),
                await client.get(f"/v1/keys/{key_id}", headers=bearer(acme)),
            ):
                assert response.status_code == 404, key_id
                assert response.headers["content-type"] == "application/problem+json"
        # Globex's key still works.
        assert (await client.get("/v1/tasks", headers=bearer(other))).status_code == 200


async def test_a_revoked_key_is_401_afterwards(make_client: ClientFactory, db: AsyncEngine) -> None:
    admin, _ = await ApiKeyStore(db).create(tenant="acme")
    async with make_client() as client:
        created = (await client.post("/v1/keys", json={"name": "ci"}, headers=bearer(admin))).json()
        assert (await client.get("/v1/tasks", headers=bearer(created["key"]))).status_code == 200
        revoked = await client.post(f"/v1/keys/{created['id']}/revoke", headers=bearer(admin))
        assert revoked.status_code == 200
        assert revoked.json()["revoked_at"] is not None
        assert revoked.json()["current"] is False
        assert (await client.get("/v1/tasks", headers=bearer(created["key"]))).status_code == 401
        # Again: the first revocation stands.
        again = await client.post(f"/v1/keys/{created['id']}/revoke", headers=bearer(admin))
        assert again.json()["revoked_at"] == revoked.json()["revoked_at"]
        listed = (await client.get("/v1/keys", headers=bearer(admin))).json()["keys"]
        assert listed[1]["revoked_at"] == revoked.json()["revoked_at"]


async def test_revoking_the_key_in_use_is_allowed_and_says_so(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    key, record = await ApiKeyStore(db).create(tenant="acme")
    async with make_client() as client:
        response = await client.post(f"/v1/keys/{record.id}/revoke", headers=bearer(key))
        assert response.status_code == 200
        assert response.json()["current"] is True
        assert (await client.get("/v1/keys", headers=bearer(key))).status_code == 401


async def test_the_first_key_ends_open_mode(make_client: ClientFactory, db: AsyncEngine) -> None:
    async with make_client(auth_cache_seconds=60) as client:
        before = await client.get("/v1/keys")
        assert before.status_code == 200
        assert before.json() == {"keys": [], "open_mode": True, "first_key_ends_open_mode": True}
        created = await client.post("/v1/keys", json={"name": "first"})
        assert created.status_code == 201
        assert created.json()["ended_open_mode"] is True
        # At once, despite the cache: requests without a key are refused.
        assert (await client.get("/v1/tasks")).status_code == 401
        assert (await client.post("/v1/keys", json={})).status_code == 401
        key = created.json()["key"]
        listed = await client.get("/v1/keys", headers=bearer(key))
        assert listed.json()["open_mode"] is False
        assert [k["name"] for k in listed.json()["keys"]] == ["first"]
    # It was tenant default's, as open mode is.
    (record,) = await ApiKeyStore(db).list_keys()
    assert record.tenant == "default"


async def test_in_explicit_open_mode_a_key_does_not_end_it(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    async with make_client(auth_mode="open") as client:
        listed = (await client.get("/v1/keys")).json()
        assert listed["open_mode"] is True
        assert listed["first_key_ends_open_mode"] is False
        created = await client.post("/v1/keys", json={"name": "x"})
        assert created.json()["ended_open_mode"] is False
        assert (await client.get("/v1/tasks")).status_code == 200


async def test_bad_key_requests_are_problems(client: httpx.AsyncClient) -> None:
    for body in ({"name": ""}, {"name": "x", "tenant": "other"}, {"name": 3}):
        response = await client.post("/v1/keys", json=body)
        assert response.status_code == 422, body
        assert response.headers["content-type"] == "application/problem+json"


async def test_the_first_key_ends_open_mode_on_every_replica(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    """Made over HTTP on one replica, the first key ends open mode on another too,
    through the notice the store sends, despite that one's cache."""
    async with (
        make_client(auth_cache_seconds=60) as one,
        make_client(auth_cache_seconds=60) as other,
    ):
        assert (await other.get("/v1/tasks")).status_code == 200  # open, and cached
        created = await one.post("/v1/keys", json={"name": "first"})
        assert created.json()["ended_open_mode"] is True
        await wait_for_status(other, 401)
        key = created.json()["key"]
        assert (await other.get("/v1/tasks", headers=bearer(key))).status_code == 200
        # And a revocation on one holds on the other.
        revoked = await one.post(f"/v1/keys/{created.json()['id']}/revoke", headers=bearer(key))
        assert revoked.json()["current"] is True
        await wait_for_status(other, 401, headers=bearer(key))
