"""Reads at scale: the same requests on a database holding a few probe tasks and on
one that also holds --tasks finished tasks (default 1M) with --events-per-task events
each (default 10: 10M events), filled in bulk with SQL; p50 and p99 of each, and the
ratio of the p50s (issue 16's target: within 1.5x of empty).

Two `taskservice serve --no-workers`, one per database, answer the HTTP reads: get a
task, list (newest, by state, by agent, by context, a second page through the cursor,
by a profile and by a creation window whose tasks are the oldest of all), an event
page, a task stream resumed with `Last-Event-ID` (to its first event), the firehose
resumed with `after` (to its first event), the tenant's spend of the last 30 days
by profile, by day and model, and by context (`/v1/usage`, from the rollup the
filled tasks' usage is summed into). Measured in this process: a claim (one
pending task, `LeaseStore.claim`) and a retention batch (`db/retention`, dry run).
Each case runs on both databases in turn, round by round (ABAB…), so that whatever
else the machine does (a checkpoint, autovacuum after the fill) weighs on both alike.

The fill runs with `session_replication_role = replica`: no trigger fires (no
NOTIFY, no webhook outbox rows for ten million historical events, no spend rollup
row by row: it is summed once after, each task's on the day it was created), as a
restore would. The probe tasks belong to tenant `default`, like the requests; the filler to
20 other tenants and to `default` alike (a tenth), so that per-tenant indexes are
exercised with their neighbours.

    .venv/bin/python bench/scale.py                     # 1M tasks, 10M events
    .venv/bin/python bench/scale.py --tasks 100000      # a quicker look
    .venv/bin/python bench/scale.py --keep              # then --full URL: no new fill
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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
                   result, context_id, usage)
SELECT {_UUID7.format(ts="ts")},
       CASE WHEN n % 10 = 0 THEN 'default' ELSE 'tenant' || (n % 20) END,
       CASE WHEN n % 100 = 0 THEN 'failed' ELSE 'completed' END,
       to_jsonb('historical task ' || n), CAST($1 AS jsonb),
       jsonb_build_object('n', n), 3, 1, $2, ts, ts, ts, ts, ts + interval '2 seconds',
       to_jsonb('done'::text), 'ctx-' || (n % 5000),
       jsonb_build_object('input_tokens', 1000 + n % 500, 'output_tokens', 100 + n % 50,
                          'requests', 1 + n % 3, 'cost', (n % 97) / 100000.0,
                          'currency', 'USD', 'unpriced_requests', 0)
FROM (SELECT n, now() - interval '30 days' + n * interval '2 seconds' AS ts
      FROM generate_series(1, $3) AS n) AS s
"""
# Ten tasks older than any other, of a profile no other task has: a page of them (by
# agent, or by creation time) is the same ten rows on both databases, found behind a
# million newer tasks on the full one.
OLD_TASKS = f"""
INSERT INTO tasks (id, tenant, state, input, agent, metadata, max_attempts, attempt,
                   event_seq, created_at, updated_at, status_at, result)
SELECT {_UUID7.format(ts="ts")}, 'default', 'completed', to_jsonb('old task ' || n),
       CAST($1 AS jsonb), '{{}}'::jsonb, 3, 1, 0, ts, ts, ts, to_jsonb('done'::text)
FROM (SELECT n, now() - interval '40 days' + n * interval '1 minute' AS ts
      FROM generate_series(1, 10) AS n) AS s
"""
OLD_AGENT = '{"profile": "archived", "model": "offline", "system_prompt": "bench"}'
FILL_EVENTS = """
INSERT INTO task_events (task_id, tenant, seq, type, data, created_at)
SELECT t.id, t.tenant, s,
       CASE WHEN s IN (1, $1) THEN 'state_change' ELSE 'progress' END,
       jsonb_build_object('note', 'step ' || s), t.created_at
FROM tasks t CROSS JOIN generate_series(1, $1) AS s
WHERE t.metadata ? 'n'
"""


# The spend rollup the `tasks` trigger keeps (off during the fill, as in a restore):
# the filled tasks' usage, each on the day it was created.
_ROLLUP = """
INSERT INTO {table} (tenant, day, {context} agent, model, input_tokens, output_tokens,
                     requests, cost, unpriced_requests)
SELECT t.tenant, (t.created_at AT TIME ZONE 'UTC')::date, {context_of} t.agent->>'profile',
       p.model, sum(p.input_tokens), sum(p.output_tokens), sum(p.requests), sum(p.cost),
       sum(p.unpriced_requests)
FROM tasks t, taskservice_usage_parts(t.usage, t.agent->>'model') p
WHERE t.metadata ? 'n'
GROUP BY 1, 2, {groups}
"""
FILL_USAGE = [
    _ROLLUP.format(table="usage_daily", context="", context_of="", groups="3, 4"),
    _ROLLUP.format(
        table="usage_contexts",
        context="context_id,",
        context_of="coalesce(t.context_id, ''),",
        groups="3, 4, 5",
    ),
]


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


Action = Callable[[], Awaitable[object]]
# Cases measured on fewer rounds (a divisor of --rounds): they write, or are slow.
FEWER = {"claim": 4, "retention batch (dry)": 10}


async def first_event(client: httpx.AsyncClient, path: str, **options: object) -> None:
    async with client.stream("GET", path, **options) as response:  # type: ignore[arg-type]
        assert response.status_code == 200, response.status_code
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                return


@dataclass
class Side:
    """One database and the server in front of it."""

    name: str
    url: str
    server: subprocess.Popen[bytes]
    api: str
    db: Database
    probes: list[str]


async def cases_for(side: Side, client: httpx.AsyncClient) -> dict[str, Action]:
    async with side.db.connection() as conn:
        # The firehose resumed 20 events before the tenant's last: the same page.
        resume_after = await conn.fetchval(
            "SELECT id - 1 FROM task_events WHERE tenant = 'default'"
            " ORDER BY id DESC OFFSET 19 LIMIT 1"
        )
    probe = side.probes[len(side.probes) // 2]
    stream = {"headers": {"Accept": "text/event-stream", "Last-Event-ID": "1"}}
    page = (await client.get("/v1/tasks", params={"limit": 10})).json()
    cursor = page["next_cursor"]
    old_window = (datetime.now(UTC) - timedelta(days=35)).isoformat()

    async def ok(path: str, **params: object) -> None:
        response = await client.get(path, params=params)  # type: ignore[arg-type]
        assert response.status_code == 200, (path, response.text)

    leases = LeaseStore(side.db)

    async def claim() -> None:
        async with side.db.connection() as conn:
            await conn.execute(
                "INSERT INTO tasks (id, tenant, state, input, agent, max_attempts, event_seq)"
                " VALUES ($1, 'default', 'pending', '\"claim me\"', $2, 3, 0)",
                uuid.uuid4(),
                AGENT,
            )
        claimed = await leases.claim(owner="bench", limit=1, lease_seconds=60)
        assert len(claimed) == 1

    retention = RetentionStore(side.db)
    policy = Policy(days=7, by_tenant={})

    async def batch() -> None:
        # The oldest ten roots: the ten old tasks, on both databases.
        done = await retention.batch(policy, after=uuid.UUID(int=0), size=10, dry_run=True)
        assert done is not None

    return {
        "get": lambda: ok(f"/v1/tasks/{probe}"),
        # The probes are the newest tasks and the only pending ones: every list
        # returns the same 20 tasks, empty or full, so only finding them differs.
        "list, newest": lambda: ok("/v1/tasks", limit=PROBES),
        "list by state": lambda: ok("/v1/tasks", state="pending", limit=PROBES),
        "list by agent": lambda: ok("/v1/tasks", agent="default", limit=PROBES),
        "list by context": lambda: ok("/v1/tasks", context_id="probe", limit=PROBES),
        "list, old agent": lambda: ok("/v1/tasks", agent="archived", limit=PROBES),
        "list, old window": lambda: ok("/v1/tasks", created_before=old_window, limit=PROBES),
        "list, next page": lambda: ok("/v1/tasks", limit=10, cursor=cursor),
        "event page": lambda: ok(f"/v1/tasks/{probe}/events", limit=100),
        "task stream resume": lambda: first_event(client, f"/v1/tasks/{probe}/events", **stream),
        "firehose resume": lambda: first_event(
            client,
            "/v1/events",
            params={"after": resume_after},
            headers={"Accept": "text/event-stream"},
        ),
        # A tenant's spend over 30 days, from the rollup: by profile (usage_daily), by
        # day and model, and by context (usage_contexts: a row per context and day).
        "usage by agent": lambda: ok("/v1/usage", group_by="agent"),
        "usage by day, model": lambda: ok("/v1/usage", group_by=["day", "model"]),
        "usage by context": lambda: ok("/v1/usage", group_by="context"),
        "claim": claim,
        "retention batch (dry)": batch,
    }


async def measure(empty: Side, full: Side, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Each case on both sides, round by round in turn (ABAB…), so that whatever else
    the machine does meanwhile weighs on both alike."""
    results: dict[str, list[tuple[float, float]]] = {}
    async with (
        httpx.AsyncClient(base_url=empty.api, timeout=30) as a,
        httpx.AsyncClient(base_url=full.api, timeout=30) as b,
    ):
        sides = [await cases_for(empty, a), await cases_for(full, b)]
        for name in sides[0]:
            n = rounds if name not in FEWER else max(20, rounds // FEWER[name])
            samples: list[list[float]] = [[], []]
            for side in sides:
                for _ in range(3):
                    await side[name]()  # warm: plans cached, pages in memory
            for i in range(n):
                for k in (0, 1) if i % 2 == 0 else (1, 0):
                    started = time.perf_counter()
                    await sides[k][name]()
                    samples[k].append((time.perf_counter() - started) * 1000)
            results[name] = [quantiles(s) for s in samples]
    return results


async def open_side(name: str, url: str, *, probes: bool) -> Side:
    port = free_port()
    env = {"TASKSERVICE_DATABASE_URL": url, "TASKSERVICE_MAX_WAIT_SECONDS": "1"}
    server = start_serve(port, env, "--no-workers", "--no-webhooks")
    api = f"http://127.0.0.1:{port}"
    wait_ready(f"{api}/readyz", server)
    made = []
    db = await Database(url, pool_size=4).open()
    if probes:
        async with db.connection() as conn:
            await conn.execute(OLD_TASKS, OLD_AGENT)
    async with httpx.AsyncClient(base_url=api, timeout=30) as client:
        if probes:
            for i in range(PROBES):
                task = await client.post(
                    "/v1/tasks", json={"input": f"probe {i}", "context_id": "probe"}
                )
                made.append(task.json()["id"])
        else:  # a kept database: its probes are the tasks of context "probe"
            page = await client.get("/v1/tasks", params={"context_id": "probe", "limit": 100})
            made = [t["id"] for t in page.json()["tasks"]]
    return Side(name, url, server, api, db, made)


async def fill(url: str, tasks: int, events_per_task: int) -> None:
    print(f"filling {tasks} tasks x {events_per_task} events ...", flush=True)
    started = time.monotonic()
    raw = await asyncpg.connect(url)
    try:
        await raw.execute("SET session_replication_role = replica")
        await raw.execute(FILL_TASKS, AGENT, events_per_task, tasks)
        await raw.execute(FILL_EVENTS, events_per_task)
        for statement in FILL_USAGE:
            await raw.execute(statement)
        await raw.execute("SET session_replication_role = origin")
        await raw.execute("VACUUM ANALYZE tasks")
        await raw.execute("VACUUM ANALYZE task_events")
        await raw.execute("VACUUM ANALYZE usage_daily")
        await raw.execute("VACUUM ANALYZE usage_contexts")
        await raw.execute("CHECKPOINT")  # its writes are not measured with the reads
    finally:
        await raw.close()
    print(f"filled in {time.monotonic() - started:.0f} s", flush=True)


async def run(args: argparse.Namespace) -> None:
    empty_url = await make_database(args.server)
    full_url = args.full or await make_database(args.server)
    sides: list[Side] = []
    try:
        sides.append(await open_side("empty", empty_url, probes=True))
        sides.append(await open_side("full", full_url, probes=not args.full))
        if not args.full:
            await fill(full_url, args.tasks, args.events_per_task)
        results = await measure(sides[0], sides[1], args.rounds)
    finally:
        for side in sides:
            await side.db.close()
            side.server.terminate()
            side.server.wait(timeout=30)
        await drop_database(args.server, empty_url)
        if args.keep or args.full:
            print(f"kept: {full_url} (again: --full {full_url})")
        else:
            await drop_database(args.server, full_url)
    print(f"\n{'':24} {'empty p50':>10} {'p99':>8} {'full p50':>10} {'p99':>8} {'ratio':>6}")
    for name, ((p50, p99), (f50, f99)) in results.items():
        print(f"{name:24} {p50:9.2f}ms {p99:7.2f}ms {f50:9.2f}ms {f99:7.2f}ms {f50 / p50:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("BENCH_DATABASE", DEFAULT_SERVER))
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--events-per-task", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="keep the full database afterwards")
    parser.add_argument("--full", help="a database kept by --keep: measure it again, no fill")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
