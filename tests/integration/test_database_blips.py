"""Database blips: a connection lost mid-request, idle connections killed, an outcome
write that fails. Real PostgreSQL; the faults are real terminated backends, except
where a failing outcome write is injected to make its timing exact."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db import notify
from taskservice.db.engine import asyncpg_dsn
from taskservice.db.keys import ApiKeyStore
from taskservice.db.outage import OUTAGE
from taskservice.db.steps import LedgerStore
from taskservice.domain.errors import DatabaseUnavailable
from tests.conftest import ClientFactory, LiveFactory, wait_for
from tests.integration.helpers import event_types
from tests.integration.test_pool import until_state

UNAVAILABLE = "https://taskservice.dev/problems/database-unavailable"


@asynccontextmanager
async def admin(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    dsn, kwargs = asyncpg_dsn(database_url)
    conn = await asyncpg.connect(dsn, **kwargs)
    try:
        yield conn
    finally:
        await conn.close()


async def terminate_waiting(conn: asyncpg.Connection) -> None:
    """Kill the backends queued behind our lock: their requests lose the connection
    in the middle of a statement."""
    query = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )
    await wait_for(lambda: conn.fetch(query), timeout=10)
    await conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "1"
    body = response.json()
    assert body["type"] == UNAVAILABLE
    assert body["detail"] == DatabaseUnavailable.DETAIL  # no driver text


@pytest.mark.parametrize(
    ("table", "method", "path"),
    [
        ("tasks", "POST", "/v1/tasks"),  # the compiled statements' asyncpg pool
        ("api_keys", "GET", "/v1/tasks"),  # the key lookup, on SQLAlchemy's pool
    ],
)
async def test_a_connection_lost_mid_request_is_a_503_and_the_connection_serves_on(
    make_live: LiveFactory,
    db: AsyncEngine,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    table: str,
    method: str,
    path: str,
) -> None:
    monkeypatch.setattr(OUTAGE, "_last_failure", -math.inf)  # a fault of its own
    key, _ = await ApiKeyStore(db).create(tenant="acme")
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    server_log = logging.getLogger("uvicorn")  # does not propagate to the root
    async with (
        make_live() as live,
        httpx.AsyncClient(base_url=live.url, headers=headers, limits=limits, timeout=20) as client,
        admin(database_url) as conn,
    ):
        server_log.addHandler(caplog.handler)  # after uvicorn configured its logging
        assert (await client.get("/v1/tasks")).status_code == 200  # warm, keep-alive
        caplog.clear()
        async with conn.transaction():
            await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            pending = asyncio.create_task(client.request(method, path, json={"input": "x"}))
            await terminate_waiting(conn)
        assert_unavailable(await pending)
        # The same keep-alive connection answers the next request.
        again = await client.request(method, path, json={"input": "x"})
        assert again.status_code in (200, 201), again.text
    server_log.removeHandler(caplog.handler)
    # Nothing reached the server ("Exception in ASGI application", keep-alive closed).
    assert not [r for r in caplog.records if r.name.startswith("uvicorn")], caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.exc_info]
    assert len([r for r in caplog.records if "database unavailable" in r.getMessage()]) == 1


async def test_connections_killed_while_idle_are_replaced_not_used(
    make_client: ClientFactory, db: AsyncEngine, database_url: str
) -> None:
    key, _ = await ApiKeyStore(db).create(tenant="acme")
    headers = {"Authorization": f"Bearer {key}"}
    async with make_client() as client, admin(database_url) as conn:
        # Fill both pools with idle connections, then kill every one of them.
        await asyncio.gather(*(client.get("/v1/tasks", headers=headers) for _ in range(8)))
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        time.sleep(0.05)  # noqa: ASYNC251  the server closed them; the loop has not looked
        answers = await asyncio.gather(
            *(client.get("/v1/tasks", headers=headers) for _ in range(8)),
            *(client.post("/v1/tasks", json={"input": "x"}, headers=headers) for _ in range(8)),
        )
    assert [a.status_code for a in answers] == [200] * 8 + [201] * 8


async def test_a_listen_cancelled_while_it_sets_up_leaves_no_connection_open(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The event hub stopped while it re-LISTENs (after a blip) cancels `listen`
    between its connect and its last LISTEN: the new connection must be closed, not
    left to the garbage collector (CI saw asyncpg's "unclosed connection")."""
    channels = {f"taskservice_test_{n}": lambda *_: None for n in range(8)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for steps in range(40):  # cancelled at each await along the way
            listening = asyncio.create_task(notify.listen(database_url, channels, lambda: None))
            for _ in range(steps):
                await asyncio.sleep(0)
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await (await listening).close()
        await asyncio.sleep(0.05)
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    # Nor a handshake's failure left unseen ("Future exception was never retrieved").
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def answers_once(calls: list[str]) -> FunctionModel:
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append("run")
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(answer)


@pytest.fixture
def failing_outcome_writes(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The first `failures` outcome writes of attempt 1 fail as a lost connection does."""
    state: dict[str, Any] = {"failures": 0, "seen": []}
    real = LedgerStore.finish

    async def finish(self: LedgerStore, task_id: Any, *, lease: Any, **kwargs: Any) -> bool:
        state["seen"].append(lease.attempt)
        if lease.attempt == 1 and state["failures"] > 0:
            state["failures"] -= 1
            raise DatabaseUnavailable("lost the database connection: injected")
        return await real(self, task_id, lease=lease, **kwargs)

    monkeypatch.setattr(LedgerStore, "finish", finish)
    return state


async def test_an_outcome_write_that_hits_a_blip_is_retried_and_the_model_runs_once(
    make_client: ClientFactory, db: AsyncEngine, failing_outcome_writes: dict[str, Any]
) -> None:
    failing_outcome_writes["failures"] = 3
    calls: list[str] = []
    async with make_client(models={"once": answers_once(calls)}, workers_enabled=True) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "model": "once"})).json()
        done = await until_state(client, task["id"], "completed", "failed")
    assert (done["state"], done["attempt"]) == ("completed", 1)  # not after the 30 s lease
    assert calls == ["run"]
    assert failing_outcome_writes["seen"] == [1, 1, 1, 1]


async def test_an_outcome_write_that_keeps_failing_releases_the_task_at_once(
    make_client: ClientFactory, db: AsyncEngine, failing_outcome_writes: dict[str, Any]
) -> None:
    failing_outcome_writes["failures"] = 1000
    calls: list[str] = []
    async with make_client(
        models={"once": answers_once(calls)}, workers_enabled=True, outcome_retry_seconds=0.5
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "model": "once"})).json()
        done = await until_state(client, task["id"], "completed", "failed")
    assert (done["state"], done["attempt"]) == ("completed", 2)  # released, not expired
    released = [d for _, t, d in await event_types(db, done["id"]) if t == "released"]
    assert [r["reason"] for r in released] == ["outcome_unwritten"]
    assert len(calls) == 2
