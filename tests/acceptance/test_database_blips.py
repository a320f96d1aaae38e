"""Database blips under load: every backend of the service's database terminated
three times while clients submit ~50 tasks/s and the workers of `serve`'s two
processes run them.

Every request gets an HTTP answer (keep-alive connections survive), each failure is
the one 503 shape, no acknowledged submit is lost, no model runs twice because an
outcome write hit the blip, and each fault costs each process one warning line,
not a screen of tracebacks. Bounded in time; the server is ours, stopped by PID.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.engine import asyncpg_dsn
from taskservice.domain.errors import DatabaseUnavailable
from tests.acceptance.conftest import cli_env, serve

pytestmark = pytest.mark.slow

FAULTS = 3
CLIENTS = 5
RATE = 50  # submits per second, all clients together
DURATION = 9.0  # seconds of load; the faults fall at 2, 4.5 and 7 s
UNAVAILABLE = "https://taskservice.dev/problems/database-unavailable"


async def fetch(database_url: str, sql: str) -> list[asyncpg.Record]:
    dsn, kwargs = asyncpg_dsn(database_url)
    conn = await asyncpg.connect(dsn, **kwargs)
    try:
        return await conn.fetch(sql)
    finally:
        await conn.close()


async def submitter(url: str, stop_at: float, answers: list[Any]) -> None:
    """One keep-alive connection, submitting at RATE / CLIENTS per second."""
    interval = CLIENTS / RATE
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=url, timeout=15, limits=limits) as client:
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            try:
                answers.append(await client.post("/v1/tasks", json={"input": f"blip {n}"}))
            except httpx.TransportError as exc:  # no HTTP answer at all
                answers.append(exc)
            await asyncio.sleep(interval)


async def test_backend_terminations_under_load_are_answered_and_lose_nothing(
    database_url: str, db: AsyncEngine, tmp_path: Path
) -> None:
    await db.dispose()  # the test's own pooled connections would die too
    env = cli_env(
        TASKSERVICE_DATABASE_URL=database_url,
        TASKSERVICE_ALLOWED_MODELS="offline:0.02",
        TASKSERVICE_DEFAULT_MODEL="offline:0.02",
        TASKSERVICE_WORKER_CONCURRENCY="8",
        TASKSERVICE_AUTH_CACHE_SECONDS="0.5",  # the open-mode check reads often
        TASKSERVICE_LEASE_SECONDS="30",
        TASKSERVICE_LOG_LEVEL="INFO",
    )
    answers: list[Any] = []
    with serve(env, tmp_path / "serve.log", "--processes", "2") as server:
        start = time.monotonic()
        load = [
            asyncio.create_task(submitter(server.url, start + DURATION, answers))
            for _ in range(CLIENTS)
        ]
        for at in (2.0, 4.5, 7.0)[:FAULTS]:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            await fetch(
                database_url,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
        await asyncio.gather(*load)

        accepted = [
            a.json()["id"] for a in answers if isinstance(a, httpx.Response) and a.is_success
        ]

        async def all_done() -> bool:
            rows = await fetch(
                database_url, "SELECT state, count(*) AS n FROM tasks GROUP BY state"
            )
            return {r["state"]: r["n"] for r in rows} == {"completed": len(accepted)}

        deadline = time.monotonic() + 20  # well inside the 30 s lease
        while not await all_done():
            assert time.monotonic() < deadline, (
                await fetch(database_url, "SELECT state, count(*) AS n FROM tasks GROUP BY state"),
                server.output()[-4000:],
            )
            await asyncio.sleep(0.2)
        log = server.output()

    failures = [a for a in answers if not isinstance(a, httpx.Response)]
    assert failures == [], failures  # every request got an HTTP answer
    statuses = Counter(a.status_code for a in answers)
    print(f"\n{len(answers)} submits through {FAULTS} faults: {dict(statuses)}")
    assert set(statuses) <= {201, 503}, statuses
    assert statuses[201] > len(answers) * 0.8
    for refused in (a for a in answers if a.status_code == 503):
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["retry-after"] == "1"
        body = refused.json()
        assert body["type"] == UNAVAILABLE, body
        assert body["detail"] == DatabaseUnavailable.DETAIL, body  # no driver text

    # Nothing acknowledged was lost, nothing ran twice.
    rows = await fetch(database_url, "SELECT id::text, attempt FROM tasks")
    assert {r["id"] for r in rows} == set(accepted)
    assert {r["attempt"] for r in rows} == {1}
    runs = await fetch(
        database_url,
        "SELECT count(*) AS n FROM task_events WHERE type IN ('recovered', 'claimed')",
    )
    assert runs[0]["n"] == 0

    # One warning per fault and process (each line names its process), no tracebacks.
    assert "Traceback" not in log, log[-6000:]
    outages = Counter(
        re.search(r"\[(\d+)\]", line).group(1)  # type: ignore[union-attr]
        for line in log.splitlines()
        if "database unavailable" in line
    )
    assert len(outages) == 2, log[-6000:]
    assert all(1 <= n <= FAULTS for n in outages.values()), log[-6000:]
