"""A database that refuses new connections under load: the service's role gets
`CONNECTION LIMIT 0` and its connections are terminated (every reconnect is then
refused with SQLSTATE 53300, as when `max_connections` is reached), for three
seconds, while clients submit over REST and A2A and read over REST, A2A and MCP and
`serve`'s two processes run tasks.

Every request is answered 2xx or 503 (JSON-RPC: its error), no task fails, nothing
acknowledged is lost, the log holds one warning per process and no traceback, and
the service works again once connections are allowed. Before the fault, the
connections the processes hold stay within what `db.connections` (the README's
table) says. Bounded in time; the server is ours, stopped by PID.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from taskservice.db import connections
from tests.acceptance.conftest import cli_env, serve
from tests.acceptance.test_database_blips import fetch
from tests.acceptance.test_mcp import _modern as mcp_call
from tests.conftest import fresh_database
from tests.integration.test_database_blips import admin

pytestmark = pytest.mark.slow

A2A = {"A2A-Version": "1.0"}
MCP = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tasks/get",
}
POOL = 4  # DB_POOL_SIZE: small, so that load fills the pools before the fault
FAULT_AT, FAULT_SECONDS, LOAD_SECONDS = 2.5, 3.0, 7.5


@pytest.fixture
async def role_url(server_url: str) -> AsyncIterator[tuple[str, str, str]]:
    """A database of its own, and a role with the service's privileges on it (not a
    superuser: `CONNECTION LIMIT` binds it): the database's URL, the role's URL to it,
    and the role."""
    role = f"taskservice_refused_{secrets.token_hex(3)}"
    await fetch(server_url, f'CREATE ROLE "{role}" LOGIN')
    try:
        async with fresh_database(server_url, "taskservice_refusals") as url:
            async with admin(url) as conn:
                await conn.execute(
                    f'GRANT USAGE ON SCHEMA public TO "{role}"; '
                    f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"; '
                    f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"',
                )
            as_role = make_url(url).set(username=role).render_as_string(hide_password=False)
            yield url, as_role, role
    finally:
        await fetch(server_url, f'DROP ROLE IF EXISTS "{role}"')


def _sends(n: int) -> list[tuple[str, str, dict[str, Any]]]:
    message = {"role": "ROLE_USER", "messageId": f"m-{n}", "parts": [{"text": f"a2a {n}"}]}
    return [
        ("POST", "/v1/tasks", {"json": {"input": f"rest {n}"}}),
        (
            "POST",
            "/a2a/rest/message:send",
            {
                "json": {"message": message, "configuration": {"returnImmediately": True}},
                "headers": A2A,
            },
        ),
    ]


def _reads(task_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        ("GET", f"/v1/tasks/{task_id}", {}),
        ("GET", "/v1/tasks", {"params": {"limit": 5}}),
        ("GET", f"/a2a/rest/tasks/{task_id}", {"headers": A2A}),
        (
            "POST",
            "/mcp",
            {"json": mcp_call("tasks/get", {"taskId": task_id}, tasks=True), "headers": MCP},
        ),
    ]


def _created(answer: httpx.Response) -> str | None:
    """The id of the task a successful send created."""
    if not answer.is_success:
        return None
    body = answer.json()
    return str(body["id"] if "id" in body else body["task"]["id"])


def _refused_properly(path: str, answer: httpx.Response) -> bool:
    """2xx, or the transport's database-unavailable answer."""
    if answer.status_code == 503:
        return True
    if path == "/mcp" and answer.status_code == 200:
        body = answer.json()
        return "result" in body or "retryable" in str(body.get("error"))
    return answer.is_success


async def client_loop(
    url: str, stop_at: float, answers: list[tuple[str, Any]], created: list[str]
) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=15) as client:
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            calls = _sends(n) + (_reads(created[-1]) if created else [])
            for method, path, kwargs in calls:
                try:
                    answer = await client.request(method, path, **kwargs)
                except httpx.TransportError as exc:  # no HTTP answer at all
                    answers.append((path, exc))
                    continue
                answers.append((path, answer))
                if method == "POST" and path != "/mcp" and (task := _created(answer)):
                    created.append(task)
            await asyncio.sleep(0.1)


async def test_refused_connections_under_load_are_503s_and_fail_no_task(
    role_url: tuple[str, str, str], tmp_path: Path
) -> None:
    url, as_role, role = role_url
    env = cli_env(
        TASKSERVICE_DATABASE_URL=as_role,
        TASKSERVICE_ALLOWED_MODELS="offline:0.3",
        TASKSERVICE_DEFAULT_MODEL="offline:0.3",
        TASKSERVICE_DB_POOL_SIZE=str(POOL),
        TASKSERVICE_AUTH_CACHE_SECONDS="0.5",  # the open-mode check reads often
        TASKSERVICE_LEASE_SECONDS="30",
        TASKSERVICE_LOG_LEVEL="INFO",
    )
    answers: list[tuple[str, Any]] = []
    created: list[str] = []
    held: list[int] = []
    with serve(env, tmp_path / "serve.log", "--processes", "2") as server:
        start = time.monotonic()
        load = [
            asyncio.create_task(client_loop(server.url, start + LOAD_SECONDS, answers, created))
            for _ in range(4)
        ]
        count = f"SELECT count(*) AS n FROM pg_stat_activity WHERE usename = '{role}'"
        while time.monotonic() < start + FAULT_AT:
            held.append((await fetch(url, count))[0]["n"])
            await asyncio.sleep(0.1)
        # Committed before the backends go, so that none of them gets back in.
        async with admin(url) as conn:
            await conn.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT 0')
        await fetch(
            url,
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'",
        )
        await asyncio.sleep(FAULT_SECONDS)
        await fetch(url, f'ALTER ROLE "{role}" CONNECTION LIMIT -1')
        await asyncio.gather(*load)

        async def states() -> dict[str, int]:
            rows = await fetch(url, "SELECT state, count(*) AS n FROM tasks GROUP BY state")
            return {r["state"]: r["n"] for r in rows}

        deadline = time.monotonic() + 25  # inside the 30 s lease: no task waits one out
        while set(await states()) != {"completed"}:
            assert time.monotonic() < deadline, (await states(), server.output()[-4000:])
            await asyncio.sleep(0.2)
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            again = await client.get("/v1/tasks")
        log = server.output()

    bound = 2 * sum(connections(POOL, workers=True, live_output=True).values())
    print(f"\nconnections held before the fault: at most {max(held)} (bound {bound})")
    assert 0 < max(held) <= bound
    statuses = Counter(
        (path.split("/")[1], a.status_code if isinstance(a, httpx.Response) else repr(a))
        for path, a in answers
    )
    print(f"{len(answers)} requests through the refusal: {dict(statuses)}")
    improper = [
        (p, a)
        for p, a in answers
        if not isinstance(a, httpx.Response) or not _refused_properly(p, a)
    ]
    assert improper == [], improper[:5]
    assert any(a.status_code == 503 for _, a in answers if isinstance(a, httpx.Response))
    assert again.status_code == 200

    # Nothing acknowledged was lost, and every task completed.
    rows = await fetch(url, "SELECT id::text, state FROM tasks")
    assert set(created) <= {r["id"] for r in rows}
    assert {r["state"] for r in rows} == {"completed"}

    # One warning per process for the fault; no traceback, no error line.
    assert "Traceback" not in log, log[-6000:]
    assert not re.search(r" ERROR\s+\[", log), log[-6000:]
    outages = Counter(
        re.search(r"\[(\d+)\]", line).group(1)  # type: ignore[union-attr]
        for line in log.splitlines()
        if "database unavailable" in line
    )
    assert len(outages) == 2, log[-6000:]
    assert all(n <= 3 for n in outages.values()), log[-6000:]
