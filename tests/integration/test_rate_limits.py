"""Model rate limits: the budgets in PostgreSQL (a GCRA per budget, concurrent
reservations queued without overlap), and the worker around them: a request
without room waits `throttled`, without a worker slot, and resumes on the slot it
reserved; a provider's 429 blocks the budget and is not retried in place."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models import override_allow_model_requests
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.common.rate_limits import RateLimit, parse_rate_limits
from taskservice.db.budgets import BudgetStore
from taskservice.db.leases import LeaseStore
from taskservice.db.schedules import ScheduleStore
from taskservice.db.tables import tasks
from taskservice.db.tasks import TaskStore
from tests.conftest import ClientFactory, wait_for
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.helpers import event_types, log_lines, until_state
from tests.integration.test_metrics import scrape, value

EPSILON = 0.002  # seconds: the database's clock against itself, across statements


def conforms(slots: Sequence[float], amount: float, period: float) -> bool:
    """Whether requests at `slots` (seconds) fit a token bucket of `amount` per
    `period` that starts full: the rule every budget keeps."""
    level, at = amount, min(slots, default=0.0)
    for slot in sorted(slots):
        level = min(amount, level + (slot - at) * amount / period)
        at = slot
        if level < 1 - 1e-6:
            return False
        level -= 1
    return True


def test_the_conformance_check_can_fail() -> None:
    assert conforms([0, 0, 0, 0.5], amount=3, period=1.5)
    assert not conforms([0, 0, 0, 0.4], amount=3, period=1.5)


@pytest.fixture
async def budgets(store: TaskStore) -> BudgetStore:
    budgets = BudgetStore(store.db)
    await budgets.configure(parse_rate_limits("fast=10rps; slow=2rps; tok=100tps").values())
    return budgets


def seconds(slots: Sequence[datetime]) -> list[float]:
    first = min(slots)
    return [(slot - first).total_seconds() for slot in slots]


async def test_a_budget_goes_at_once_then_refills_evenly(budgets: BudgetStore) -> None:
    slots = [await budgets.reserve(["slow"], 1) for _ in range(5)]
    assert [slot.wait <= EPSILON for slot in slots] == [True, True, False, False, False]
    offsets = seconds([slot.at for slot in slots])
    assert offsets[2:] == pytest.approx([0.5, 1.0, 1.5], abs=0.05)
    assert conforms(offsets, amount=2, period=1)


async def test_concurrent_reservations_queue_without_overlap(budgets: BudgetStore) -> None:
    """40 requests at once from 40 connections: the first 10 at once, the rest a
    tenth of a second apart, none sharing a slot another took."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    slots = await asyncio.gather(*(budgets.reserve(["fast"], 1) for _ in range(40)))
    arriving = loop.time() - started  # the requests reached the database within this
    offsets = sorted(seconds([slot.at for slot in slots]))
    assert conforms(offsets, amount=10, period=1)
    # No room left unused: the last as early as the bucket allows, given when the
    # requests came (all at once, 3 s after the first; a busy machine spreads them).
    assert 3.0 - EPSILON <= offsets[-1] <= 3.0 + arriving + EPSILON
    queued = sorted(slot.at for slot in slots if slot.wait > EPSILON)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(queued)]
    assert all(gap >= 0.1 - EPSILON for gap in gaps)


async def test_a_request_drawing_on_two_budgets_waits_for_both(budgets: BudgetStore) -> None:
    for _ in range(2):
        await budgets.reserve(["slow"], 1)
    both = await budgets.reserve(["fast", "slow"], 1)
    assert both.wait == pytest.approx(0.5, abs=0.05)  # slow's room, though fast has some
    # fast is spent as of that slot (conservatively: as if its budget until then was
    # used too), so four more fit now, not nine, and the fifth waits.
    later = [await budgets.reserve(["fast"], 1) for _ in range(5)]
    assert [slot.wait <= EPSILON for slot in later] == [True] * 4 + [False]


async def test_tokens_are_reserved_then_settled_with_what_was_used(
    budgets: BudgetStore,
) -> None:
    first = await budgets.reserve(["tok"], 60)
    assert first.wait <= EPSILON
    second = await budgets.reserve(["tok"], 60)  # 120 of 100: until 20 came back
    assert second.wait == pytest.approx(0.2, abs=0.05)
    await budgets.settle(["tok"], 100)  # the first used 160, not 60
    third = await budgets.reserve(["tok"], 10)
    assert third.wait == pytest.approx(1.3, abs=0.05)
    await budgets.settle(["tok"], -200)  # fewer than reserved: given back
    assert (await budgets.reserve(["tok"], 10)).wait == pytest.approx(0.0, abs=0.05)


async def test_a_429_blocks_the_budget_for_its_retry_after(budgets: BudgetStore) -> None:
    await budgets.block(["fast"], 0.75)
    await budgets.block(["fast"], 0.1)  # a shorter block does not shorten it
    assert (await budgets.reserve(["fast"], 1)).wait == pytest.approx(0.75, abs=0.05)
    assert (await budgets.reserve(["slow"], 1)).wait <= EPSILON


async def test_configuring_again_keeps_what_was_spent(budgets: BudgetStore) -> None:
    for _ in range(2):
        await budgets.reserve(["slow"], 1)
    await budgets.configure([RateLimit("slow", requests=2, requests_period=1)])
    assert (await budgets.reserve(["slow"], 1)).wait == pytest.approx(0.5, abs=0.05)


# -- the worker ------------------------------------------------------------------


def recorder(calls: dict[str, datetime]) -> FunctionModel:
    """A model that answers at once, noting when each task's request reached it (by
    the task's input)."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = next(p.content for m in messages for p in m.parts if p.part_kind == "user-prompt")
        calls[str(prompt)] = datetime.now(UTC)
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(answer)


async def sent_on_their_slots(
    db: AsyncEngine, made: list[dict[str, Any]], calls: dict[str, datetime]
) -> list[float]:
    """Each throttled task's request was sent no sooner than the slot it waited for;
    the slots, in seconds from the first request (whatever its own delay between
    its grant and its sending)."""
    slots = []
    for task in made:
        for event in await throttles(db, task["id"]):
            until = datetime.fromisoformat(event["until"])
            assert calls[task["input"]] >= until - timedelta(milliseconds=5), (event, calls)
            slots.append(until)
    first = min(calls.values())
    return sorted((slot - first).total_seconds() for slot in slots)


async def throttles(db: AsyncEngine, task_id: str) -> list[dict[str, Any]]:
    return [data for _, kind, data in await event_types(db, task_id) if kind == "throttled"]


async def test_tasks_beyond_the_budget_wait_throttled_then_complete_on_their_slot(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    calls: dict[str, datetime] = {}
    async with make_client(
        models={"rec": recorder(calls)},
        workers_enabled=True,
        rate_limits=parse_rate_limits("rec=2rps"),
    ) as client:
        made = [
            (await client.post("/v1/tasks", json={"input": f"t{i}", "model": "rec"})).json()
            for i in range(6)
        ]
        done = [await until_state(client, t["id"], "completed", "failed") for t in made]
        lines = [await log_lines(client, t["id"]) for t in made]
    assert [t["state"] for t in done] == ["completed"] * 6
    assert len(calls) == 6
    # Two at once, then one every half second: each waiting task on its own slot.
    slots = await sent_on_their_slots(db, made, calls)
    assert len(slots) >= 3
    assert all(b - a >= 0.5 - EPSILON for a, b in itertools.pairwise(slots)), slots
    throttled = {t["id"]: await throttles(db, t["id"]) for t in made}
    event = next(events[0] for events in throttled.values() if events)
    assert event["model"] == "rec"
    assert event["budgets"] == ["rec"]
    assert event["reason"] == "budget"
    assert event["wait_seconds"] > 0
    assert datetime.fromisoformat(event["until"])
    assert event["worker"]
    assert event["attempt"] == 1
    # Resumed on its slot, saying so; a throttle costs no attempt.
    resumed = [
        message
        for events, task_lines in zip(throttled.values(), lines, strict=True)
        if events
        for _, message in task_lines
    ]
    assert any("rate limit slot has come" in message for message in resumed), resumed
    async with db.connect() as conn:
        lost = (await conn.execute(select(tasks.c.lost_attempts, tasks.c.paid_slot))).all()
    assert {row.lost_attempts for row in lost} == {0}
    assert {row.paid_slot is None for row in lost} == {True}  # each slot was used


async def test_a_throttled_task_holds_no_worker_slot(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    """One worker slot, a budget of one request a second: while two tasks wait for
    their slots, a task on another model runs and completes."""
    calls: dict[str, datetime] = {}
    async with make_client(
        models={"rec": recorder(calls), "free": recorder({})},
        workers_enabled=True,
        worker_concurrency=1,
        rate_limits=parse_rate_limits("rec=1rps"),
    ) as client:
        limited = [
            (await client.post("/v1/tasks", json={"input": f"t{i}", "model": "rec"})).json()
            for i in range(3)
        ]
        await asyncio.sleep(0.2)  # claimed, the last two throttled
        free = (await client.post("/v1/tasks", json={"input": "f", "model": "free"})).json()
        free_done = await until_state(client, free["id"], "completed", timeout=5)
        waiting = [(await client.get(f"/v1/tasks/{t['id']}")).json() for t in limited]
        assert [t["state"] for t in waiting].count("running") >= 1, waiting
        finished = [await until_state(client, t["id"], "completed") for t in limited]
    last = max(datetime.fromisoformat(t["finished_at"]) for t in finished)
    assert datetime.fromisoformat(free_done["finished_at"]) < last
    slots = await sent_on_their_slots(db, limited, calls)
    assert slots == pytest.approx([1, 2], abs=0.35), slots  # the first went at once
    assert slots[1] - slots[0] >= 1 - EPSILON


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server, override_allow_model_requests(True):
        yield server


MODEL = "openai-chat:fake-gpt"


async def test_a_provider_429_blocks_the_budget_and_the_task_waits_without_a_worker(
    make_client: ClientFactory, fake: FakeOpenAI, db: AsyncEngine
) -> None:
    """The SDK does not retry the 429 in place: the budget is blocked for its
    Retry-After, the task waits `throttled`, and its request goes again after it."""
    fake.queue(Reply(status=429, retry_after_ms=400), Reply(text="made it"))
    async with make_client(
        workers_enabled=True,
        openai_base_url=fake.base_url,
        openai_api_key="sk-test",
        allowed_models=["offline", MODEL],
        rate_limits=parse_rate_limits(f"{MODEL}=100rps"),
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "model": MODEL})).json()
        done = await until_state(client, task["id"], "completed", "failed")
    assert done["state"] == "completed", done
    assert done["result"] == "made it"
    assert len(fake.requests) == 2  # not retried by the SDK meanwhile
    assert fake.arrivals[1] - fake.arrivals[0] >= 0.4 - 0.01
    [event] = await throttles(db, task["id"])
    assert event["reason"] == "provider_429"
    assert event["budgets"] == [MODEL]
    assert event["wait_seconds"] == pytest.approx(0.4, abs=0.1)


async def test_a_throttled_task_is_counted_and_can_be_cancelled_while_it_waits(
    make_client: ClientFactory, db: AsyncEngine, store: TaskStore
) -> None:
    """One request a minute: the second task waits, shown in the overview and the
    gauges; cancelled meanwhile, it stays cancelled when its slot comes."""
    async with make_client(
        models={"rec": recorder({})},
        workers_enabled=True,
        metrics_cache_seconds=0,
        rate_limits=parse_rate_limits("rec=1rpm"),
    ) as client:
        first = (await client.post("/v1/tasks", json={"input": "a", "model": "rec"})).json()
        await until_state(client, first["id"], "completed")
        before = value(
            await scrape(client), "taskservice_model_throttled_total", model="rec", reason="budget"
        )
        second = (await client.post("/v1/tasks", json={"input": "b", "model": "rec"})).json()
        [event] = await wait_for(lambda: throttles(db, second["id"]))
        assert event["wait_seconds"] == pytest.approx(60, abs=2)
        overview = (await client.get("/v1/overview")).json()
        assert (overview["live"]["running"], overview["throttled"]) == (1, 1)
        assert value(await scrape(client), "taskservice_tasks_throttled") == 1
        throttled = value(
            await scrape(client), "taskservice_model_throttled_total", model="rec", reason="budget"
        )
        assert throttled - before == 1
        cancelled = await client.post(f"/v1/tasks/{second['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["state"] == "cancelled"
    async with db.begin() as conn:  # its slot comes
        await conn.execute(tasks.update().values(wake_at=func.now() - timedelta(seconds=1)))
    assert (await ScheduleStore(store.db).tick()).promoted == 0
    assert [
        t.state for t in await LeaseStore(store.db).claim(owner="w", limit=5, lease_seconds=30)
    ] == []
