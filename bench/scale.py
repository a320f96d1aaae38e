"""Reads at scale: the same requests on a database holding a few probe tasks, then
again once it also holds --tasks finished tasks (default 1M) with --events-per-task
events each (default 10: 10M events), filled in bulk with SQL; p50 and p99 of each,
and the ratio of the p50s (issue 16's target: within 1.5x of empty).

One `taskservice serve --no-workers` on a fresh database answers the HTTP reads: get
a task, list (by state, by agent, by context, a second page through the cursor), an
event page, a task stream resumed with `Last-Event-ID` (to its first event), the
firehose resumed with `after` (to its first event). Measured in this process on the
same database: a claim (one pending task, `LeaseStore.claim`) and a retention batch
(`db/retention`, dry run, 100 roots).

The fill runs with `session_replication_role = replica`: no trigger fires (no
NOTIFY, no webhook outbox rows for ten million historical events), as a restore
would. The probe tasks belong to tenant `default`, like the requests; the filler to
20 other tenants and to `default` alike (a tenth), so that per-tenant indexes are
exercised with their neighbours.

    .venv/bin/python bench/scale.py                     # 1M tasks, 10M events
    .venv/bin/python bench/scale.py --tasks 100000      # a quicker look
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from submit import (  # noqa: E402
    DEFAULT_SERVER,
    drop_database,
    free_port,
    make_database,
    start_serve,
    wait_ready,
)
from taskservice.db.leases import LeaseStore  # noqa: E402
from taskservice.db.retention import Policy, RetentionStore  # noqa: E402
from taskservice.db.sql import Database  # noqa: E402

PROBES = 20
AGENT = '{"profile": "default", "model": "offline", "system_prompt": "bench"}'

# uuid7 from a timestamp: ids keep time order, as the service's own do.
_UUID7 = """(lpad(to_hex((extract(epoch FROM {ts}) * 1000)::bigint), 12, '0')
             || '7' || substr(md5(random()::text), 1, 3)
             || '8' || substr(md5(random()::text), 1, 15))::uuid"""

FILL_TASKS = f"""
INSERT INTO tasks (id, tenant, state, input, agent, metadata, max_attempts, attempt,
                   event_seq, created_at, updated_at, status_at, started_at, finished_at,
                   result, context_id)
SELECT {_UUID7.format(ts="ts")},
       CASE WHEN n % 10 = 0 THEN 'default' ELSE 'tenant' || (n % 20) END,
       CASE WHEN n % 100 = 0 THEN 'failed' ELSE 'completed' END,
       to_jsonb('historical task ' || n), CAST($1 AS jsonb),
       jsonb_build_object('n', n), 3, 1, $2, ts, ts, ts, ts, ts + interval '2 seconds',
       to_jsonb('done'::text), 'ctx-' || (n % 5000)
FROM (SELECT n, now() - interval '30 days' + n * interval '2 seconds' AS ts
      FROM generate_series(1, $3) AS n) AS s
"""
FILL_EVENTS = """
INSERT INTO task_events (task_id, tenant, seq, type, data, created_at)
SELECT t.id, t.tenant, s,
       CASE WHEN s IN (1, $1) THEN 'state_change' ELSE 'progress' END,
       jsonb_build_object('note', 'step ' || s), t.created_at
FROM tasks t CROSS JOIN generate_series(1, $1) AS s
WHERE t.metadata ? 'n'
"""


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def timed(action: Callable[[], Awaitable[object]], rounds: int) -> tuple[float, float]:
    for _ in range(3):
        await action()  # warm: plans cached, pages in memory
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await action()
        samples.append((time.perf_counter() - started) * 1000)
    return quantiles(samples)


async def first_event(client: httpx.AsyncClient, path: str, **options: object) -> None:
    async with client.stream("GET", path, **options) as response:  # type: ignore[arg-type]
        assert response.status_code == 200, response.status_code
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                return


async def measure(
    api: str, db: Database, probes: list[str], rounds: int
) -> dict[str, tuple[float, float]]:
    results: dict[str, tuple[float, float]] = {}
    async with db.connection() as conn:
        # The firehose resumed 20 events before the tenant's last: the same page.
        resume_after = await conn.fetchval(
            "SELECT id - 1 FROM task_events WHERE tenant = 'default'"
            " ORDER BY id DESC OFFSET 19 LIMIT 1"
        )
    probe = probes[len(probes) // 2]
    stream = {"headers": {"Accept": "text/event-stream", "Last-Event-ID": "1"}}
    async with httpx.AsyncClient(base_url=api, timeout=30) as client:
        page = (await client.get("/v1/tasks", params={"limit": 10})).json()
        cursor = page["next_cursor"]

        async def ok(path: str, **params: object) -> None:
            response = await client.get(path, params=params)  # type: ignore[arg-type]
            assert response.status_code == 200, (path, response.text)

        cases: dict[str, Callable[[], Awaitable[object]]] = {
            "get": lambda: ok(f"/v1/tasks/{probe}"),
            # The probes are the newest tasks and the only pending ones: every list
            # returns the same 20 tasks, empty or full, so only finding them differs.
            "list, newest": lambda: ok("/v1/tasks", limit=PROBES),
            "list by state": lambda: ok("/v1/tasks", state="pending", limit=PROBES),
            "list by agent": lambda: ok("/v1/tasks", agent="default", limit=PROBES),
            "list by context": lambda: ok("/v1/tasks", context_id="probe", limit=PROBES),
            "list, next page": lambda: ok("/v1/tasks", limit=10, cursor=cursor),
            "event page": lambda: ok(f"/v1/tasks/{probe}/events", limit=100),
            "task stream resume": lambda: first_event(
                client, f"/v1/tasks/{probe}/events", **stream
            ),
            "firehose resume": lambda: first_event(
                client,
                "/v1/events",
                params={"after": resume_after},
                headers={"Accept": "text/event-stream"},
            ),
        }
        for name, action in cases.items():
            results[name] = await timed(action, rounds)
    leases = LeaseStore(db)

    async def claim() -> None:
        async with db.connection() as conn:
            await conn.execute(
                "INSERT INTO tasks (id, tenant, state, input, agent, max_attempts, event_seq)"
                " VALUES ($1, 'default', 'pending', '\"claim me\"', $2, 3, 0)",
                uuid.uuid4(),
                AGENT,
            )
        claimed = await leases.claim(owner="bench", limit=1, lease_seconds=60)
        assert len(claimed) == 1

    results["claim"] = await timed(claim, max(20, rounds // 4))
    retention = RetentionStore(db)
    policy = Policy(days=7, by_tenant={})

    async def batch() -> None:
        assert await retention.batch(policy, after=uuid.UUID(int=0), dry_run=True) is not None

    # Not a like-for-like ratio: empty, no root is finished; full, 100 are.
    results["retention batch (dry)"] = await timed(batch, max(10, rounds // 10))
    return results


async def run(args: argparse.Namespace) -> None:
    url = await make_database(args.server)
    port = free_port()
    env = {"TASKSERVICE_DATABASE_URL": url, "TASKSERVICE_MAX_WAIT_SECONDS": "1"}
    server = start_serve(port, env, "--no-workers", "--no-webhooks")
    api = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{api}/readyz", server)
        async with httpx.AsyncClient(base_url=api, timeout=30) as client:
            probes = []
            for i in range(PROBES):
                made = await client.post(
                    "/v1/tasks", json={"input": f"probe {i}", "context_id": "probe"}
                )
                probes.append(made.json()["id"])
        async with Database(url, pool_size=4) as db:
            empty = await measure(api, db, probes, args.rounds)
            print(f"filling {args.tasks} tasks x {args.events_per_task} events ...", flush=True)
            started = time.monotonic()
            raw = await asyncpg.connect(url)
            try:
                await raw.execute("SET session_replication_role = replica")
                await raw.execute(FILL_TASKS, AGENT, args.events_per_task, args.tasks)
                await raw.execute(FILL_EVENTS, args.events_per_task)
                await raw.execute("SET session_replication_role = origin")
                await raw.execute("VACUUM ANALYZE tasks")
                await raw.execute("VACUUM ANALYZE task_events")
            finally:
                await raw.close()
            print(f"filled in {time.monotonic() - started:.0f} s", flush=True)
            full = await measure(api, db, probes, args.rounds)
    finally:
        server.terminate()
        server.wait(timeout=30)
        if not args.keep:
            await drop_database(args.server, url)
    print(f"\n{'':24} {'empty p50':>10} {'p99':>8} {'full p50':>10} {'p99':>8} {'ratio':>6}")
    for name, (p50, p99) in empty.items():
        f50, f99 = full[name]
        print(f"{name:24} {p50:9.2f}ms {p99:7.2f}ms {f50:9.2f}ms {f99:7.2f}ms {f50 / p50:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("BENCH_DATABASE", DEFAULT_SERVER))
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--events-per-task", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
