"""What spend budgets and pricing cost per model request (issue 41's target: under 5%
of the service's CPU per task at the 100 ms peers load).

Two parts (`--part`):

- `load`: `bench/peers.py`'s taskservice side (wrk, A2A `SendMessage`, the echo
  agent answering after `--model-delay-ms`), in rounds alternating between two
  configurations of the same code: `off` (no budget, no price: the echo model is
  unpriced) and `on` (`TASKSERVICE_TENANT_BUDGET` far above what the load spends,
  `TASKSERVICE_MODEL_PRICES` pricing `echo`, so that each model request is priced
  for its estimate and its answer, and reserves and settles in the tenant's budget
  row). Each configuration has its own database (a budget row that `on` made would
  be reserved in by `off` too); one server runs at a time, started afresh for each
  run. CPU per task: the server's processes and the PostgreSQL backends of its
  database (`psutil`; the machine's PostgreSQL serves other work too, whose
  backends, like the server's shared processes, are left out). After the rounds, the
  `on` database's budget rows beside its tasks' usage: the tokens the runs reserved
  and settled.
- `pairs`: `db/spend_budgets.SpendBudgetStore.reserve` then `settle`, as one model
  request makes them, against one budget row, from one client then from
  `--clients` at once; then the whole gate a run calls around each model request
  (`worker/spend.RunSpend` over the same row: the estimate priced, the two
  statements, the answer priced). Per request: wall time, this process's CPU, the
  PostgreSQL backends'. And pricing alone (`bench/pricing.py`'s timing), for the
  echo model's price.

    .venv/bin/python bench/spend.py [--seconds 10] [--rounds 2] [--pairs 2000] [--clients 8]
    .venv/bin/python bench/spend.py --part pairs
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from decimal import Decimal
from functools import partial
from pathlib import Path

import asyncpg
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.usage import RequestUsage
from sqlalchemy.engine import make_url

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peers import postgres_cpu_seconds, service_cpu, taskservice_env, wrk_load, wrk_script  # noqa: E402
from pricing import per_call_us  # noqa: E402
from submit import (  # noqa: E402
    DEFAULT_SERVER,
    drop_database,
    free_port,
    make_database,
    start_serve,
    wait_ready,
)
from taskservice.agents.tools import LogLevel  # noqa: E402
from taskservice.common.pricing import Pricing, SpendLimit, parse_model_prices  # noqa: E402
from taskservice.common.spending import ModelCall  # noqa: E402
from taskservice.db.spend_budgets import Reserved, SpendBudgetStore, tenant_key  # noqa: E402
from taskservice.db.sql import Database  # noqa: E402
from taskservice.usecases.spend import SpendControl  # noqa: E402
from taskservice.worker.spend import RunSpend, SharedBudgets  # noqa: E402

# Far more than the load can spend in a day: every request fits.
BUDGET = '{"period": "day", "max_cost": "1000000"}'
# The echo model priced as gpt-4o-mini is (USD per million tokens).
PRICES = '{"echo": {"input": 0.15, "output": 0.6}}'
MODES = {
    "off": {},
    "on": {"TASKSERVICE_TENANT_BUDGET": BUDGET, "TASKSERVICE_MODEL_PRICES": PRICES},
}
# The echo agent's requests as the run's gate sees them: its model as the task names
# it, as the FunctionModel names itself, its estimate (input, then the output bound,
# TASKSERVICE_BUDGET_OUTPUT_TOKENS' default) and its answer's usage.
ECHO = ModelCall(model="echo", model_name="function:echo:echo_stream", provider="function")
ESTIMATE = {"input_tokens": 2, "output_tokens": 1024}
ANSWER = RequestUsage(input_tokens=51, output_tokens=1)


def database_name(url: str) -> str:
    name = make_url(url).database
    assert name is not None
    return name


# -- load -----------------------------------------------------------------------------


@contextmanager
def serving(args: argparse.Namespace, url: str, env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """A fresh server on database `url` with `env`: its address and process id."""
    port = free_port()
    server = start_serve(
        port,
        {**taskservice_env(url, args.model_delay_ms), **env},
        "--no-webhooks",
        processes=args.processes,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(f"{base}/readyz", server)
        yield base, server.pid
    finally:
        server.terminate()
        server.wait(timeout=30)


def measure(
    args: argparse.Namespace, served: tuple[str, int], url: str, script: Path
) -> tuple[float, float, float]:
    """`args.seconds` of load on a server: tasks/s, and the CPU per task (µs) of the
    server's processes and of its database's backends."""
    base, pid = served
    wrk_load(base, script, args.connections, 2)  # warm: a fresh server's first tasks
    cpu = partial(service_cpu, pid, database_name(url))
    rate, bad, used = wrk_load(base, script, args.connections, args.seconds, cpu)
    if bad:
        print(f"  {base}: {bad} answers were not a completed task", flush=True)
    assert used is not None
    assert rate > 0
    tasks = rate * args.seconds
    return rate, used[0] / tasks * 1e6, used[1] / tasks * 1e6


async def one_round(
    args: argparse.Namespace, order: list[str], urls: dict[str, str], script: Path
) -> dict[str, tuple[float, float, float]]:
    """Each mode's figures: one after the other in `order`, or both at once
    (`--together`: each with its own wrk, so that whatever else loads the machine
    loads both alike)."""
    if not args.together:
        figures = {}
        for mode in order:
            with serving(args, urls[mode], MODES[mode]) as served:
                figures[mode] = await asyncio.to_thread(measure, args, served, urls[mode], script)
        return figures
    with ExitStack() as stack:
        served = {
            mode: stack.enter_context(serving(args, urls[mode], MODES[mode])) for mode in order
        }
        measured = await asyncio.gather(
            *(asyncio.to_thread(measure, args, served[m], urls[m], script) for m in order)
        )
    return dict(zip(order, measured, strict=True))


async def spent(url: str) -> str:
    """The budget rows of `url` beside its tasks' usage."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT key, spent_cost, spent_tokens FROM spend_budgets ORDER BY key"
        )
        tasks = await conn.fetchrow(
            """SELECT count(*) AS tasks,
                      coalesce(sum((usage->>'requests')::bigint), 0) AS requests,
                      coalesce(sum((usage->>'input_tokens')::bigint
                                   + (usage->>'output_tokens')::bigint), 0) AS tokens,
                      coalesce(sum((usage->>'cost')::numeric), 0) AS cost
               FROM tasks WHERE state = 'completed'"""
        )
    finally:
        await conn.close()
    assert tasks is not None
    budgets = "; ".join(
        f"{r['key']}: spent_tokens {r['spent_tokens']}, spent_cost {r['spent_cost']}" for r in rows
    )
    return (
        f"{budgets or 'no budget rows'} | its tasks: {tasks['tasks']} completed, "
        f"{tasks['requests']} model requests, {tasks['tokens']} tokens, cost {tasks['cost']}"
    )


async def run_load(args: argparse.Namespace) -> None:
    urls = {mode: await make_database(args.server) for mode in MODES}
    folder = Path(tempfile.mkdtemp(prefix="spend-"))
    figures: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in MODES}
    try:
        script = wrk_script("taskservice", folder)
        for round_ in range(args.rounds):
            order = list(MODES) if round_ % 2 == 0 else list(reversed(MODES))
            measured = await one_round(args, order, urls, script)
            for mode in order:
                rate, server, postgres = measured[mode]
                figures[mode].append(measured[mode])
                print(
                    f"round {round_ + 1} {mode:3}  {rate:6.1f} tasks/s  CPU per task: server "
                    f"{server:5.0f} us, PostgreSQL {postgres:5.0f} us, {server + postgres:5.0f} us",
                    flush=True,
                )
        for mode, url in urls.items():
            print(f"{mode} database: {await spent(url)}")
    finally:
        for url in urls.values():
            await drop_database(args.server, url)
        shutil.rmtree(folder, ignore_errors=True)
    means = {
        mode: tuple(sum(column) / len(column) for column in zip(*rows, strict=True))
        for mode, rows in figures.items()
    }
    print(
        f"\nmodel delay {args.model_delay_ms} ms, {args.connections} connections, "
        f"{args.rounds} rounds x {args.seconds:g} s"
        f"{', both servers at once' if args.together else ''}, means:"
    )
    for mode, (rate, server, postgres) in means.items():
        print(
            f"{mode:3}  {rate:6.1f} tasks/s  CPU per task: server {server:5.0f} us, "
            f"PostgreSQL {postgres:5.0f} us, {server + postgres:5.0f} us"
        )
    off, on = (means[m][1] + means[m][2] for m in ("off", "on"))
    server, postgres = (means["on"][i] - means["off"][i] for i in (1, 2))
    print(
        f"spend on - off: {on - off:+.0f} us per task (server {server:+.0f}, "
        f"PostgreSQL {postgres:+.0f}) = {(on - off) / off:+.1%} "
        "of the service's CPU per task (target < 5%)"
    )


# -- pairs ----------------------------------------------------------------------------


async def _noop_log(level: LogLevel, text: str) -> None:
    del level, text


async def timed(
    name: str, database: str, pair: Callable[[], Awaitable[None]], pairs: int, clients: int
) -> None:
    """`pairs` calls of `pair` from `clients` at once: per pair, wall time (elapsed
    over pairs; and each one's own, as its client waited), this process's CPU, the
    database's backends'."""
    for _ in range(50):  # warm: connections open, statements prepared
        await pair()
    each = pairs // clients

    async def client() -> None:
        for _ in range(each):
            await pair()

    postgres = postgres_cpu_seconds(database)
    cpu, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    postgres = postgres_cpu_seconds(database) - postgres
    done = each * clients
    print(
        f"{name:<44} {elapsed / done * 1e6:7.0f} {elapsed * clients / done * 1e6:8.0f} "
        f"{cpu / done * 1e6:8.0f} {postgres / done * 1e6:8.0f}",
        flush=True,
    )


async def run_pairs(args: argparse.Namespace) -> None:
    url = await make_database(args.server)
    try:
        subprocess.run(
            [sys.executable, "-m", "taskservice.cli", "--log-level", "warning", "migrate"],
            env={**os.environ, "TASKSERVICE_DATABASE_URL": url},
            check=True,
            stdout=subprocess.DEVNULL,
        )
        async with Database(url) as db:
            await pairs_against(db, database_name(url), args)
    finally:
        await drop_database(args.server, url)


async def pairs_against(db: Database, database: str, args: argparse.Namespace) -> None:
    limit = SpendLimit.model_validate_json(BUDGET)
    store = SpendBudgetStore(db)
    await store.default_tenant("bench", limit)
    keys = [tenant_key("bench")]
    pricing = Pricing(parse_model_prices(PRICES))
    answer = ModelResponse(parts=[TextPart("ping")], usage=ANSWER, model_name=ECHO.model_name)

    async def store_pair() -> None:
        reserved = await store.reserve(keys, cost=Decimal("0.00062"), tokens=1026)
        assert isinstance(reserved, Reserved)
        await store.settle(reserved, cost=Decimal("-0.00061"), tokens=-974)

    control = SpendControl(store, default=limit)

    async def gate_pair() -> None:
        gate = RunSpend([SharedBudgets(control, keys)], pricing=pricing, log=_noop_log)
        charge = await gate.reserve(ECHO, **ESTIMATE)
        await gate.settle(ECHO, charge, answer)

    print(f"{'per model request':<44} {'wall us':>7} {'waited':>8} {'CPU us':>8} {'PG us':>8}")
    for clients in (1, args.clients):
        await timed(
            f"store reserve + settle, {clients} client(s)",
            database,
            store_pair,
            args.pairs,
            clients,
        )
        await timed(
            f"RunSpend reserve + settle, {clients} client(s)",
            database,
            gate_pair,
            args.pairs,
            clients,
        )
    row = await store.read(keys[0])
    assert row is not None
    print(f"the row after: spent_tokens {row.spent_tokens}, spent_cost {row.spent_cost}")
    price = partial(
        pricing.price, ANSWER, model=ECHO.model, model_name=ECHO.model_name, provider=ECHO.provider
    )
    unpriced = Pricing()
    no_price = partial(
        unpriced.price, ANSWER, model=ECHO.model, model_name=ECHO.model_name, provider=ECHO.provider
    )
    print(
        f"pricing alone (bench/pricing.py's timing): echo at the operator's price "
        f"{per_call_us(price, 20_000):.1f} us, echo unpriced {per_call_us(no_price, 2_000):.1f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("BENCH_DATABASE", DEFAULT_SERVER))
    parser.add_argument("--part", choices=["load", "pairs", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--model-delay-ms", type=float, default=100)
    parser.add_argument(
        "--processes", type=int, default=None, help="taskservice's (default: serve's, a core each)"
    )
    parser.add_argument(
        "--together", action="store_true", help="load both servers at once, each with its own wrk"
    )
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    if args.part in ("pairs", "both"):
        asyncio.run(run_pairs(args))
    if args.part in ("load", "both"):
        if shutil.which("wrk") is None:
            raise SystemExit("wrk not found: apt-get install wrk (the load part measures with it)")
        asyncio.run(run_load(args))


if __name__ == "__main__":
    main()
