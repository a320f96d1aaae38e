"""Cost (issue 41 §1): each model response's usage priced by genai-prices (or the
operator's `TASKSERVICE_MODEL_PRICES`), against the fake OpenAI-compatible server
reporting real usage figures; the expected figures are genai-prices' own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from genai_prices import calc_price
from pydantic_ai import RunContext
from pydantic_ai.models import override_allow_model_requests
from pydantic_ai.usage import RequestUsage

from taskservice.common.pricing import parse_model_prices
from tests.conftest import ClientFactory, wait_for
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.helpers import QUICK_RECOVERY, until_state, worker_dies
from tests.integration.test_metrics import Samples, scrape, value

PRICED = "openai-chat:gpt-4o-mini"  # genai-prices knows OpenAI's gpt-4o-mini
UNKNOWN = "openai-chat:fake-gpt"  # and not this one


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server, override_allow_model_requests(True):
        yield server


def _settings(fake: FakeOpenAI, **overrides: Any) -> dict[str, Any]:
    return {
        "workers_enabled": True,
        "openai_base_url": fake.base_url,
        "openai_api_key": "sk-test",
        "allowed_models": ["offline", PRICED, UNKNOWN],
        "metrics_cache_seconds": 0,
        **overrides,
    }


def genai_price(reply: Reply, model: str = "gpt-4o-mini") -> Decimal:
    """What genai-prices says a reply's usage costs (as pydantic-ai reads OpenAI's usage:
    cached tokens are part of the input tokens)."""
    usage = RequestUsage(
        input_tokens=reply.prompt_tokens,
        output_tokens=reply.completion_tokens,
        cache_read_tokens=reply.cached_tokens or 0,
    )
    return calc_price(usage, model, provider_id="openai").total_price


async def _usage_events(client: httpx.AsyncClient, task_id: str) -> list[dict[str, Any]]:
    events = (await client.get(f"/v1/tasks/{task_id}/events")).json()["events"]
    return [event["data"] for event in events if event["type"] == "usage"]


async def _run(client: httpx.AsyncClient, model: str) -> dict[str, Any]:
    task = (await client.post("/v1/tasks", json={"input": "What is it?", "model": model})).json()
    done = await until_state(client, task["id"], "completed", "failed")
    assert done["state"] == "completed", done
    return done


async def _metrics_after(client: httpx.AsyncClient, before: Samples, name: str) -> Samples:
    """A scrape once the run's counters moved (they are counted as responses arrive)."""
    labels = {"agent": "default"}

    async def moved() -> bool:
        total = sum(
            v - before.get(key, 0.0)
            for key, v in (await scrape(client)).items()
            if key[0] == name and ("agent", labels["agent"]) in key[1]
        )
        return total > 0

    await wait_for(moved)
    return await scrape(client)


async def test_each_request_is_priced_at_genai_prices_figure_cached_tokens_included(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    replies = [
        Reply(
            tool_calls=[("call_1", "report_progress", {"percent": 50, "note": "half"})],
            prompt_tokens=1_200,
            completion_tokens=80,
        ),
        Reply(text="It is done.", prompt_tokens=1_400, completion_tokens=300, cached_tokens=1_024),
    ]
    fake.queue(*replies)
    async with make_client(**_settings(fake)) as client:
        before = await scrape(client)
        done = await _run(client, PRICED)
        events = await _usage_events(client, done["id"])
        after = await _metrics_after(client, before, "taskservice_model_cost_usd_total")

    assert all(request.get("stream") for request in fake.requests)  # usage from the last chunk
    first, second = (genai_price(reply) for reply in replies)
    assert second < genai_price(Reply(prompt_tokens=1_400, completion_tokens=300))  # cache read
    assert done["usage"] == {
        "input_tokens": 2_600,
        "output_tokens": 380,
        "requests": 2,
        "cost": str(first + second).rstrip("0"),
        "currency": "USD",
        "unpriced_requests": 0,
    }
    assert Decimal(done["usage"]["cost"]) == first + second  # exact: no float on the way
    # Each `usage` event carries the cost so far: the first response's, then both.
    assert [Decimal(e["cost"]) for e in events] == [first, first + second]
    assert {(e["currency"], e["unpriced_requests"]) for e in events} == {("USD", 0)}
    labels = {"agent": "default", "model": PRICED}
    grew = value(after, "taskservice_model_cost_usd_total", **labels) - value(
        before, "taskservice_model_cost_usd_total", **labels
    )
    assert grew == pytest.approx(float(first + second), rel=1e-9)
    assert value(after, "taskservice_model_unpriced_requests_total", **labels) == value(
        before, "taskservice_model_unpriced_requests_total", **labels
    )


async def test_a_model_with_no_price_is_unpriced_not_free(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    fake.queue(Reply(text="Sure."))
    async with make_client(**_settings(fake)) as client:
        before = await scrape(client)
        done = await _run(client, UNKNOWN)
        offline = await _run(client, "offline")  # the built-in models have no price either
        after = await _metrics_after(client, before, "taskservice_model_unpriced_requests_total")
        events = await _usage_events(client, done["id"])

    for task in (done, offline):
        assert task["usage"]["requests"] == 1
        assert task["usage"]["cost"] is None  # never claimed as 0
        assert task["usage"]["unpriced_requests"] == 1
        assert task["usage"]["currency"] == "USD"
    assert events[-1]["cost"] is None
    assert events[-1]["unpriced_requests"] == 1
    for model in (UNKNOWN, "offline"):
        labels = {"agent": "default", "model": model}
        name = "taskservice_model_unpriced_requests_total"
        assert value(after, name, **labels) - value(before, name, **labels) == 1
        cost = "taskservice_model_cost_usd_total"  # earlier tests may have priced `offline`
        assert value(after, cost, **labels) == value(before, cost, **labels)


async def test_an_operators_price_prices_a_model_genai_prices_does_not_know(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    prices = parse_model_prices(
        f'{{"{UNKNOWN}": {{"input": 2, "output": 6, "cached_input": 0.5}}}}'
    )
    fake.queue(Reply(text="Sure.", prompt_tokens=1_000, completion_tokens=100, cached_tokens=400))
    async with make_client(**_settings(fake, model_prices=prices)) as client:
        done = await _run(client, UNKNOWN)
    # 600 uncached input tokens at $2/M, 400 cached at $0.5/M, 100 output at $6/M.
    expected = (600 * Decimal(2) + 400 * Decimal("0.5") + 100 * Decimal(6)) / 1_000_000
    assert Decimal(done["usage"]["cost"]) == expected == Decimal("0.002")
    assert done["usage"]["unpriced_requests"] == 0


async def test_an_operators_price_overrides_genai_prices(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    fake.queue(Reply(text="Sure.", prompt_tokens=1_000, completion_tokens=100))
    # By the name the provider answers with.
    prices = parse_model_prices('{"gpt-4o-mini": {"input": 1, "output": 1}}')
    async with make_client(**_settings(fake, model_prices=prices)) as client:
        done = await _run(client, PRICED)
    assert done["usage"]["cost"] == "0.0011"


async def test_a_run_resumed_after_input_adds_its_cost_once(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    replies = [
        Reply(
            tool_calls=[("q1", "ask_user", {"question": "Which colour?"})],
            prompt_tokens=500,
            completion_tokens=20,
        ),
        Reply(text="Red it is.", prompt_tokens=700, completion_tokens=40, cached_tokens=256),
    ]
    fake.queue(*replies)
    async with make_client(**_settings(fake)) as client:
        task = (await client.post("/v1/tasks", json={"input": "paint", "model": PRICED})).json()
        waiting = await until_state(client, task["id"], "input_required")
        first = genai_price(replies[0])
        assert Decimal(waiting["usage"]["cost"]) == first
        answered = await client.post(f"/v1/tasks/{task['id']}/input", json={"answer": "red"})
        assert answered.status_code == 200, answered.text
        done = await until_state(client, task["id"], "completed", "failed")
        events = await _usage_events(client, task["id"])
    assert done["state"] == "completed", done
    assert done["usage"]["requests"] == 2
    # The first response is in the ledger the resumed run reads: priced once.
    assert Decimal(done["usage"]["cost"]) == first + genai_price(replies[1])
    assert [Decimal(e["cost"]) for e in events] == [first, first + genai_price(replies[1])]


async def test_a_fork_costs_only_its_own_requests(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    source_replies = [
        Reply(
            tool_calls=[("call_1", "report_progress", {"percent": 50, "note": "half"})],
            prompt_tokens=900,
            completion_tokens=50,
        ),
        Reply(text="Done.", prompt_tokens=1_000, completion_tokens=60),
    ]
    fake.queue(*source_replies)
    async with make_client(**_settings(fake)) as client:
        source = await _run(client, PRICED)
        fork_reply = Reply(text="Done again.", prompt_tokens=1_100, completion_tokens=70)
        fake.queue(fork_reply)
        # Position 3: the prompt, the call and its result; the model is asked again.
        forked = await client.post(f"/v1/tasks/{source['id']}/fork", json={"at": 3})
        assert forked.status_code == 201, forked.text
        assert forked.json()["usage"] == {}
        done = await until_state(client, forked.json()["id"], "completed", "failed")
        again = (await client.get(f"/v1/tasks/{source['id']}")).json()
    assert done["state"] == "completed", done
    assert Decimal(source["usage"]["cost"]) == sum(genai_price(r) for r in source_replies)
    assert Decimal(done["usage"]["cost"]) == genai_price(fork_reply)  # the copy was paid for
    assert done["usage"]["requests"] == 1
    assert again["usage"] == source["usage"]  # the source is never written


async def test_a_run_recovered_after_its_worker_died_prices_each_response_once(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    hanging = asyncio.Event()

    async def hang(ctx: RunContext[Any]) -> str:
        """Never returns."""
        hanging.set()
        await asyncio.sleep(3600)
        return "unreachable"

    replies = [
        Reply(tool_calls=[("c1", "hang", {})], prompt_tokens=800, completion_tokens=30),
        Reply(text="Gave up on it.", prompt_tokens=900, completion_tokens=40),
    ]
    fake.queue(*replies)
    settings = _settings(fake, default_tools=["hang"], **QUICK_RECOVERY)
    async with make_client(tools={"hang": hang}, **settings) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": PRICED})).json()
        await asyncio.wait_for(hanging.wait(), 10)
        worker_dies(client, task["id"])
        done = await until_state(client, task["id"], "completed", "failed")
    assert done["state"] == "completed", done
    assert done["attempt"] == 2
    assert done["usage"]["requests"] == 2
    # The first response was recorded (with its cost) before the worker died; the
    # recovered run reads it from the ledger and prices only its own.
    assert Decimal(done["usage"]["cost"]) == genai_price(replies[0]) + genai_price(replies[1])


async def test_a_subtask_has_its_own_cost(make_client: ClientFactory, fake: FakeOpenAI) -> None:
    replies = [
        Reply(
            tool_calls=[
                ("s1", "spawn_subtask", {"input": "part one"}),
                ("w1", "wait_for_subtasks", {}),
            ],
            prompt_tokens=600,
            completion_tokens=40,
        ),
        Reply(text="Part one done.", prompt_tokens=300, completion_tokens=20),  # the child's
        Reply(text="All done.", prompt_tokens=1_000, completion_tokens=50),
    ]
    fake.queue(*replies)
    tools = ["spawn_subtask", "wait_for_subtasks"]
    async with make_client(**_settings(fake, default_tools=tools)) as client:
        parent = await _run(client, PRICED)
        children = (await client.get("/v1/tasks", params={"parent_id": parent["id"]})).json()
    [child] = children["tasks"]
    assert child["state"] == "completed", child
    assert Decimal(child["usage"]["cost"]) == genai_price(replies[1])
    # The parent's own requests; with its subtree's, the three.
    assert Decimal(parent["usage"]["cost"]) == genai_price(replies[0]) + genai_price(replies[2])
    subtree = parent["usage"]["subtree"]
    assert Decimal(subtree["cost"]) == sum(genai_price(reply) for reply in replies)
    assert (subtree["tasks"], subtree["requests"], subtree["unpriced_requests"]) == (2, 3, 0)


async def test_a_request_the_provider_refused_is_neither_priced_nor_unpriced(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    """pydantic-ai records the refused request's response as `interrupted`, without
    usage: it is no request the task counts, so not an unpriced one either."""
    fake.queue(Reply(status=400, text="bad request"))
    async with make_client(**_settings(fake)) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "model": PRICED})).json()
        failed = await until_state(client, task["id"], "failed")
    assert failed["usage"]["requests"] == 0
    assert failed["usage"]["unpriced_requests"] == 0
    assert failed["usage"]["cost"] == "0"
