"""One tenant's spend budget shared by two worker processes (issue 41 §2): each model
request reserves what it may cost in PostgreSQL before it is sent, so the two
together pass the budget by at most what their last requests cost beyond their
reservations (one request in flight each), the budget's figure ends equal to what
the tasks spent, and every task that found it spent failed `budget_exhausted`
naming the tenant's budget."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.tasks import TaskStore
from tests.acceptance.test_workers import fetch, states, wait_until, workers
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.helpers import SPEC, new_task

pytestmark = pytest.mark.slow

MODEL = "openai-chat:fake-gpt"
TASKS = 20
BUDGET = Decimal(1)
# $1,000 per million tokens: a tenth of a cent a token. Each answer takes 11 + 200
# tokens, $0.211, far beyond what its reservation estimates (its prompt's characters
# and an output bound of 1 token): the worst case for a budget.
PRICES = {MODEL: {"input": 1000, "output": 1000}}
REQUEST_COST = Decimal("0.211")


async def test_two_worker_processes_overspend_one_tenant_budget_by_one_request_each(
    database_url: str, db: AsyncEngine, store: TaskStore, tmp_path: Path
) -> None:
    with FakeOpenAI() as provider:
        provider.queue(*[Reply(text=f"answer {i}", completion_tokens=200) for i in range(TASKS)])
        async with workers(
            database_url,
            tmp_path,
            2,
            worker_concurrency=1,  # one request in flight per process
            openai_base_url=provider.base_url,
            openai_api_key="sk-test",
            model_prices=json.dumps(PRICES),
            tenant_budget=json.dumps({"period": "day", "max_cost": str(BUDGET)}),
            budget_output_tokens=1,
        ):
            for i in range(TASKS):
                await new_task(store, input=f"task {i}", agent=replace(SPEC, model=MODEL))

            async def all_done() -> bool:
                done = await states(database_url)
                return done["completed"] + done["failed"] == TASKS

            await wait_until(all_done, 90, f"{TASKS} finished tasks")
    rows = await fetch(
        database_url,
        "SELECT state, usage->>'cost' AS cost, error FROM tasks ORDER BY id",
    )
    spent = sum(Decimal(row["cost"]) for row in rows if row["cost"])
    completed = [row for row in rows if row["state"] == "completed"]
    failed = [row for row in rows if row["state"] == "failed"]
    print(f"\n{len(completed)} completed, {len(failed)} refused; ${spent} of ${BUDGET}")
    assert len(provider.requests) == len(completed)  # no request past the budget was sent
    assert all(Decimal(row["cost"]) == REQUEST_COST for row in completed)
    # Passed by at most one request per process beyond what it reserved.
    assert BUDGET - REQUEST_COST < spent <= BUDGET + 2 * REQUEST_COST
    assert failed
    for row in failed:
        error = json.loads(row["error"]) if isinstance(row["error"], str) else row["error"]
        assert error["code"] == "budget_exhausted"
        assert (error["budget"]["scope"], error["budget"]["period"]) == ("tenant", "day")
    [budget] = await fetch(
        database_url,
        "SELECT spent_cost, exhausted FROM spend_budgets WHERE key = 'tenant:default'",
    )
    assert budget["spent_cost"] == spent  # every reservation settled to what it cost
    assert budget["exhausted"]
