"""A database that refuses new connections: too many clients (`max_connections`, a
role's or a database's `CONNECTION LIMIT`, SQLSTATE 53300), as when other clients
took every slot. Real PostgreSQL: the service connects as a role of its own, whose
`CONNECTION LIMIT` the test sets to 0 before terminating its backends, so that every
reconnect is refused while the test's own connections (another role) go on.

Every transport answers the one 503 shape, and a run whose ledger write meets the
refusal waits for a connection and goes on: the task is neither failed nor redone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from pydantic_ai import RunContext
from pydantic_ai.messages import ToolCallPart
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.engine import asyncpg_dsn
from taskservice.db.outage import OUTAGE
from taskservice.domain.errors import DatabaseUnavailable
from tests.acceptance.test_mcp import _modern as mcp_call
from tests.conftest import ClientFactory, LiveFactory, wait_for
from tests.integration.test_agents import scripted
from tests.integration.test_database_blips import admin, assert_unavailable

A2A = {"A2A-Version": "1.0"}
MCP = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tasks/get",
}


async def _finished(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """The task once it completed or failed (polled through the refusal's 503s)."""

    async def ended() -> dict[str, Any] | None:
        answer = await client.get(f"/v1/tasks/{task_id}")
        if answer.status_code == 503:  # while refused
            return None
        got: dict[str, Any] = answer.json()
        return got if got["state"] in ("completed", "failed") else None

    done: dict[str, Any] = await wait_for(ended, timeout=20)
    return done


@pytest.fixture(scope="session")
async def limited_role(database_url: str) -> AsyncIterator[str]:
    """A login role with the service's privileges on the test database."""
    role = f"taskservice_limited_{secrets.token_hex(3)}"
    async with admin(database_url) as conn:
        await conn.execute(
            f'CREATE ROLE "{role}" LOGIN; GRANT USAGE ON SCHEMA public TO "{role}"; '
            f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"; '
            f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"'
        )
    try:
        yield role
    finally:
        async with admin(database_url) as conn:
            await conn.execute(f'DROP OWNED BY "{role}"; DROP ROLE "{role}"')


@pytest.fixture
async def refuse(database_url: str, limited_role: str) -> AsyncIterator[Any]:
    """`await refuse(True)`: the role's connections are refused from now on, and those
    it has are terminated (returning once they are gone, and their clients could
    see it); `await refuse(False)`: allowed again."""

    async def switch(on: bool) -> None:
        async with admin(database_url) as conn:
            # Committed first, so that no terminated backend gets back in.
            await conn.execute(f'ALTER ROLE "{limited_role}" CONNECTION LIMIT {0 if on else -1}')
            if on:
                await conn.execute(
                    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                    f"WHERE usename = '{limited_role}'"
                )
        if on:
            await asyncio.sleep(0.1)  # the closed sockets reach their clients

    try:
        yield switch
    finally:
        await switch(False)


@pytest.fixture
def limited_url(database_url: str, limited_role: str) -> str:
    return make_url(database_url).set(username=limited_role).render_as_string(hide_password=False)


def _requests(task_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """One request per transport and kind of read or write."""
    message = {"role": "ROLE_USER", "messageId": secrets.token_hex(4), "parts": [{"text": "hi"}]}
    return [
        ("POST", "/v1/tasks", {"json": {"input": "x"}}),
        ("GET", f"/v1/tasks/{task_id}", {}),
        ("GET", "/v1/tasks", {}),
        ("POST", f"/v1/tasks/{task_id}/cancel", {"json": {}}),
        ("GET", f"/v1/tasks/{task_id}/events", {"headers": {"Accept": "text/event-stream"}}),
        ("POST", "/a2a/rest/message:send", {"json": {"message": message}, "headers": A2A}),
        ("GET", f"/a2a/rest/tasks/{task_id}", {"headers": A2A}),
        ("GET", f"/a2a/rest/tasks/{task_id}:subscribe", {"headers": A2A}),
        ("POST", "/a2a/rest/message:stream", {"json": {"message": message}, "headers": A2A}),
        (
            "POST",
            "/a2a",
            {
                "json": {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "GetTask",
                    "params": {"id": task_id},
                },
                "headers": A2A,
            },
        ),
        (
            "POST",
            "/mcp",
            {"json": mcp_call("tasks/get", {"taskId": task_id}, tasks=True), "headers": MCP},
        ),
    ]


def assert_refused(path: str, answer: httpx.Response) -> None:
    """The database-unavailable answer of `path`'s transport: REST's 503; A2A
    HTTP+JSON's 503 `UNAVAILABLE` status; on JSON-RPC (A2A, MCP) an HTTP 503 when
    the caller could not be checked, else an error in a 200, marked retryable."""
    where = (path, answer.status_code, answer.text)
    if path.startswith("/v1/"):
        assert_unavailable(answer)
    elif path.startswith("/a2a/rest/"):
        assert answer.status_code == 503, where
        assert answer.json()["error"]["status"] == "UNAVAILABLE", where
    elif answer.status_code != 503:
        assert answer.status_code == 200, where
        error = answer.json()["error"]
        assert error["message"] == DatabaseUnavailable.DETAIL, where
        assert "retryable" in json.dumps(error), where


@pytest.mark.parametrize("auth_cache_seconds", [0, 3600], ids=["key-lookup", "routes"])
async def test_every_transport_answers_503_while_connections_are_refused(
    make_live: LiveFactory,
    limited_url: str,
    refuse: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    auth_cache_seconds: float,
) -> None:
    """With no cache, the open-mode check reads the keys first (SQLAlchemy's pool);
    with one, each route's own statements meet the refusal (the asyncpg pools)."""
    monkeypatch.setattr(OUTAGE, "_last_failure", -math.inf)  # a fault of its own
    async with (
        make_live(database_url=limited_url, auth_cache_seconds=auth_cache_seconds) as live,
        httpx.AsyncClient(base_url=live.url, timeout=20) as client,
    ):
        task = (await client.post("/v1/tasks", json={"input": "before"})).json()
        caplog.clear()
        await refuse(True)
        for method, path, kwargs in _requests(task["id"]):
            answer = await client.request(method, path, **kwargs)
            assert_refused(path, answer)
        # The firehose opens without the database once the caller is known (it follows
        # the event hub); its catch-up read ends the stream quietly, and the client
        # resumes by Last-Event-ID.
        firehose = await client.get("/v1/events", params={"after": 0})
        assert firehose.status_code == (503 if auth_cache_seconds == 0 else 200), firehose.text
        await refuse(False)
        # Served again once connections are allowed; nothing was written meanwhile.
        listed = (await client.get("/v1/tasks")).json()["tasks"]
        assert [t["id"] for t in listed] == [task["id"]]
        assert listed[0]["state"] == "pending"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert len([r for r in caplog.records if "database unavailable" in r.getMessage()]) == 1


async def test_a_run_whose_ledger_write_is_refused_waits_and_goes_on(
    make_client: ClientFactory,
    db: AsyncEngine,
    limited_url: str,
    refuse: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The tool's result cannot be recorded while connections are refused: the run
    waits for a connection (the statement never reached the database) and completes,
    on its first attempt, the tool run once, no worker having given the task up."""
    ran: list[str] = []
    restoring: list[asyncio.Task[None]] = []  # held: the loop keeps only a weak reference

    async def restore_later() -> None:
        await asyncio.sleep(1.5)
        await refuse(False)

    async def cut(ctx: RunContext[Any]) -> str:
        """Takes the database's connections away for a while."""
        ran.append(ctx.tool_call_id or "")
        await refuse(True)
        restoring.append(asyncio.create_task(restore_later()))
        return "cut"

    model = scripted([ToolCallPart("cut", {}, tool_call_id="c1")], "done: {results}")
    async with make_client(
        database_url=limited_url,
        models={"scripted": model},
        tools={"cut": cut},
        default_tools=["cut"],
        workers_enabled=True,
        auth_cache_seconds=3600,
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "scripted"})).json()
        done = await _finished(client, task["id"])
        await asyncio.gather(*restoring)
        events = (await client.get(f"/v1/tasks/{task['id']}/events")).json()["events"]
    assert done["state"] == "completed", done
    assert done["attempt"] == 1
    assert ran == ["c1"]
    types = [e["type"] for e in events]
    assert "released" not in types, types
    assert "recovered" not in types, types
    results = [e["data"] for e in events if e["type"] == "tool_result"]
    assert [(r["tool_call_id"], r["status"]) for r in results] == [("c1", "completed")]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_a_run_stopped_mid_statement_while_refused_gives_its_task_back_when_it_can(
    make_client: ClientFactory,
    database_url: str,
    limited_role: str,
    limited_url: str,
    refuse: Any,
) -> None:
    """The tool's result write is in flight (held by a lock) when its connection is
    terminated and new ones are refused: it may have committed, so it is not tried
    again; the run stops and gives its task back as soon as the database takes a
    connection again (a `released` event), and the next attempt resumes from the
    ledger, well before the 30 s lease would have expired."""
    dsn, kwargs = asyncpg_dsn(database_url)
    holder = await asyncpg.connect(dsn, **kwargs)
    held = holder.transaction()

    locked = asyncio.Event()

    async def lock_calls(ctx: RunContext[Any]) -> str:
        """Holds the ledger's tool calls, so that this call's result waits."""
        await held.start()
        await holder.execute("LOCK TABLE task_calls IN ACCESS EXCLUSIVE MODE")
        locked.set()
        return "locked"

    model = scripted([ToolCallPart("lock_calls", {}, tool_call_id="l1")], "done: {results}")
    try:
        async with make_client(
            database_url=limited_url,
            models={"scripted": model},
            tools={"lock_calls": lock_calls},
            default_tools=["lock_calls"],
            workers_enabled=True,
            auth_cache_seconds=3600,
            lease_seconds=30,
        ) as client:
            task = (
                await client.post("/v1/tasks", json={"input": "go", "model": "scripted"})
            ).json()
            waiting = (
                "SELECT count(*) FROM pg_stat_activity "
                f"WHERE usename = '{limited_role}' AND wait_event_type = 'Lock'"
            )
            await asyncio.wait_for(locked.wait(), timeout=10)

            async def write_waits() -> bool:
                async with admin(database_url) as conn:
                    return bool(await conn.fetchval(waiting))

            await wait_for(write_waits, timeout=10)
            began = asyncio.get_running_loop().time()
            await refuse(True)  # the write, waiting on the lock, is terminated mid-statement
            await held.rollback()
            await asyncio.sleep(1.5)
            await refuse(False)
            done = await _finished(client, task["id"])
            took = asyncio.get_running_loop().time() - began
            events = (await client.get(f"/v1/tasks/{task['id']}/events")).json()["events"]
    finally:
        await holder.close()
    history = "\n".join(f"{e['type']} {e['data']}" for e in events)
    assert done["state"] == "completed", history
    assert took < 15  # not after the lease
    assert "recovered" not in [e["type"] for e in events], history
    # Given back each time it stopped: once, or twice when an attempt claimed while
    # the backends were being terminated one by one met the next of them.
    released = [e["data"] for e in events if e["type"] == "released"]
    assert released, history
    assert {r["reason"] for r in released} == {"ledger_unwritten"}, history
    assert done["attempt"] == 1 + len(released), history
