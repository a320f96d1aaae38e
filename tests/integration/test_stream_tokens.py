"""Stream tokens for EventSource clients, and CORS."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.keys import ApiKeyStore
from taskservice.domain.errors import Unauthorized
from taskservice.usecases.tokens import StreamTokens
from tests.conftest import LiveFactory
from tests.sse import read_events


@pytest.fixture
async def setup(make_live: LiveFactory, db: AsyncEngine) -> AsyncIterator[dict[str, Any]]:
    keys = ApiKeyStore(db)
    alice, _ = await keys.create(tenant="alice")
    bob, _ = await keys.create(tenant="bob")
    # Revocation reaches cached lookups and open streams within these.
    timing = {"auth_cache_seconds": 0.2, "stream_poll_seconds": 0.2}
    async with (
        make_live(**timing) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as client,
    ):
        as_alice = {"Authorization": f"Bearer {alice}"}
        tasks = [
            (await client.post("/v1/tasks", json={"input": n}, headers=as_alice)).json()["id"]
            for n in ("one", "two")
        ]
        for task_id in tasks:
            await client.post(f"/v1/tasks/{task_id}/cancel", headers=as_alice)
        yield {
            "client": client,
            "alice": as_alice,
            "bob": {"Authorization": f"Bearer {bob}"},
            "tasks": tasks,
            "key": alice,
            "keys": keys,
        }


async def stream(client: httpx.AsyncClient, task_id: str, token: str) -> httpx.Response:
    return await client.get(
        f"/v1/tasks/{task_id}/events",
        params={"token": token},
        headers={"Accept": "text/event-stream"},
    )


async def mint(setup: dict[str, Any], who: str, **body: Any) -> str:
    response = await setup["client"].post("/v1/stream-tokens", json=body, headers=setup[who])
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


async def test_a_task_token_opens_that_task_s_stream_without_headers(setup: dict[str, Any]) -> None:
    one, two = setup["tasks"]
    token = await mint(setup, "alice", task_id=one)
    async with setup["client"].stream(
        "GET",
        f"/v1/tasks/{one}/events",
        params={"token": token},
        headers={"Accept": "text/event-stream"},
    ) as response:
        assert response.status_code == 200
        events = [e async for e in read_events(response)]
    assert [e.event for e in events] == ["snapshot", "state_change", "state_change"]
    assert (await stream(setup["client"], two, token)).status_code == 404


async def test_a_tenant_token_reads_its_tenant_only(setup: dict[str, Any]) -> None:
    one, two = setup["tasks"]
    alice_token = await mint(setup, "alice")
    assert (await stream(setup["client"], two, alice_token)).status_code == 200
    bob_token = await mint(setup, "bob")
    assert (await stream(setup["client"], one, bob_token)).status_code == 404


async def test_another_tenant_cannot_mint_a_token_for_a_task(setup: dict[str, Any]) -> None:
    one, _ = setup["tasks"]
    response = await setup["client"].post(
        "/v1/stream-tokens", json={"task_id": one}, headers=setup["bob"]
    )
    assert response.status_code == 404


async def test_an_api_key_is_never_accepted_in_a_url(setup: dict[str, Any]) -> None:
    one, _ = setup["tasks"]
    response = await stream(setup["client"], one, setup["key"])
    assert response.status_code == 401
    assert "never accepted in a URL" in response.json()["detail"]


async def test_a_token_opens_streams_only(setup: dict[str, Any]) -> None:
    one, _ = setup["tasks"]
    token = await mint(setup, "alice", task_id=one)
    client = setup["client"]
    assert (await client.get(f"/v1/tasks/{one}", params={"token": token})).status_code == 401
    cancel = await client.post(f"/v1/tasks/{one}/cancel", params={"token": token})
    assert cancel.status_code == 401
    # The same route's JSON pages are not a stream: the token does not read them.
    page = await client.get(f"/v1/tasks/{one}/events", params={"token": token})
    assert page.status_code == 403
    assert page.headers["content-type"] == "application/problem+json"
    assert "event streams only" in page.json()["detail"]


async def test_revoking_the_minting_key_ends_its_tokens_and_their_streams(
    setup: dict[str, Any],
) -> None:
    client: httpx.AsyncClient = setup["client"]
    keys: ApiKeyStore = setup["keys"]
    second, record = await keys.create(tenant="alice", name="ui")
    as_second = {"Authorization": f"Bearer {second}"}
    task = (await client.post("/v1/tasks", json={"input": "open"}, headers=as_second)).json()
    minted = await client.post("/v1/stream-tokens", json={}, headers=as_second)
    token = minted.json()["token"]
    other = await mint(setup, "alice")  # minted by alice's first key: unaffected
    async with client.stream(
        "GET",
        f"/v1/tasks/{task['id']}/events",
        params={"token": token},
        headers={"Accept": "text/event-stream"},
    ) as response:
        assert response.status_code == 200
        events = read_events(response)
        assert [(await anext(events)).event for _ in range(2)] == ["snapshot", "state_change"]
        await keys.revoke(record.id)
        # The task is pending for good (no workers): only the revocation ends this stream.
        assert await asyncio.wait_for(_drain(events), timeout=10) == []
    refused = await stream(client, task["id"], token)
    assert refused.status_code == 401
    assert "revoked" in refused.json()["detail"]
    assert (await stream(client, setup["tasks"][0], other)).status_code == 200


async def test_revoking_a_key_ends_the_streams_it_opened(setup: dict[str, Any]) -> None:
    client: httpx.AsyncClient = setup["client"]
    keys: ApiKeyStore = setup["keys"]
    task = (await client.post("/v1/tasks", json={"input": "open"}, headers=setup["alice"])).json()
    for path in (f"/v1/tasks/{task['id']}/events", "/v1/events"):
        key, record = await keys.create(tenant="alice", name="watcher")
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        async with client.stream("GET", path, headers=headers) as response:
            assert response.status_code == 200
            events = read_events(response)
            if path != "/v1/events":  # the firehose starts with what happens next
                first = [(await anext(events)).event for _ in range(2)]
                assert first == ["snapshot", "state_change"]
            await keys.revoke(record.id)
            assert await asyncio.wait_for(_drain(events), timeout=10) == []


async def _drain(events: AsyncIterator[Any]) -> list[Any]:
    return [e async for e in events]


def test_tampered_and_expired_tokens_are_refused() -> None:
    tokens = StreamTokens("secret")
    key_id = uuid.uuid4()
    token, _ = tokens.mint(tenant="alice", task_id=None, key_id=key_id, ttl_seconds=60)
    grant = tokens.verify(token)
    assert (grant.tenant, grant.key_id) == ("alice", key_id)
    body, signature = token.split(".")
    forged = body[:-2] + ("AA" if body[-2:] != "AA" else "BB") + "." + signature
    for bad in (
        forged,
        token + "x",
        "tst_garbage",
        StreamTokens("other").mint(tenant="alice", task_id=None, key_id=None, ttl_seconds=60)[0],
    ):
        with pytest.raises(Unauthorized):
            tokens.verify(bad)
    expired, _ = tokens.mint(tenant="alice", task_id=None, key_id=None, ttl_seconds=-1)
    with pytest.raises(Unauthorized, match="expired"):
        tokens.verify(expired)


async def test_cors_origins_are_a_setting(make_live: LiveFactory) -> None:
    async with (
        make_live(cors_origins=["https://ui.example"]) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as client,
    ):
        preflight = await client.options(
            "/v1/tasks",
            headers={
                "Origin": "https://ui.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert preflight.headers["access-control-allow-origin"] == "https://ui.example"
        other = await client.options(
            "/v1/tasks",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in other.headers
        # An EventSource from the UI's origin: the stream carries the CORS header too
        # (it is sent after the app returned, through the middleware's `send`).
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        headers = {"Origin": "https://ui.example", "Accept": "text/event-stream"}
        async with client.stream("GET", f"/v1/tasks/{task['id']}/events", headers=headers) as r:
            assert r.status_code == 200
            assert r.headers["access-control-allow-origin"] == "https://ui.example"
            assert "Location" in r.headers.get("access-control-expose-headers", "")
