"""What runs cost, in the console (issue 41 §3) in a real browser, against a live
server with workers: each run's cost in its head (live, from its `usage` events) and
in the runs list, a parent's with its subtasks, and the tenant's spend view
(#/spend) beside what `GET /v1/usage` answers. Priced runs are answered by the fake
OpenAI-compatible server at the operator's prices; the built-in models are unpriced."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.async_api import Locator, Page, expect
from pydantic_ai.models import override_allow_model_requests

from taskservice.common.pricing import parse_model_prices
from tests.browser.conftest import Console, screenshot, serving, submit
from tests.conftest import LiveFactory
from tests.fakes.openai_server import FakeOpenAI, Reply

PRICED = "openai-chat:fake-gpt"  # priced by the operator (genai-prices knows it not)
CHEAP = "openai-chat:fake-mini"
# USD per million tokens: 1,000 in and 100 out on PRICED cost $0.0000525.
PRICES = {PRICED: {"input": 0.05, "output": 0.025}, CHEAP: {"input": 0.01, "output": 0.01}}


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server, override_allow_model_requests(True):
        yield server


def priced(fake: FakeOpenAI, **more: Any) -> dict[str, Any]:
    """A live server's settings: the fake's models at the operator's prices."""
    return {
        "openai_base_url": fake.base_url,
        "openai_api_key": "sk-test",
        "allowed_models": ["offline", PRICED, CHEAP],
        "model_prices": parse_model_prices(json.dumps(PRICES)),
        **more,
    }


def cost(scope: Page | Locator) -> Locator:
    """The task's own cost in the run's head (not its subtree's)."""
    return scope.locator("#run-cost > .cost")


async def test_a_priced_run_shows_its_cost_growing_in_its_head_and_then_in_the_list(
    make_live: LiveFactory, page: Page, console: Console, fake: FakeOpenAI
) -> None:
    fake.queue(
        Reply(
            tool_calls=[("call_1", "report_progress", {"percent": 50, "note": "half"})],
            prompt_tokens=1_000,
            completion_tokens=100,
        ),
        # Time to see the first response's cost before the second's.
        Reply(text="Done.", prompt_tokens=2_000, completion_tokens=200, delay=3.0),
    )
    async with serving(make_live, page, **priced(fake)) as live:
        task = await submit(live.url, {"input": "What is it?", "model": PRICED})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        # The first response's cost, live from its `usage` event, while the run goes on:
        # $0.0000525 to two significant digits, the exact figure in the title.
        await expect(cost(page)).to_have_text("$0.000053", timeout=10_000)
        await expect(cost(page)).to_have_attribute("title", "0.0000525 USD")
        await expect(page.locator("#run-head .state")).to_have_text("running")
        # With the second (2,000 in and 200 out: $0.000105).
        await expect(page.locator("#run-head .state")).to_have_text("completed", timeout=15_000)
        await expect(cost(page)).to_have_text("$0.00016")
        await expect(cost(page)).to_have_attribute("title", "0.0001575 USD")
        await expect(cost(page)).to_have_attribute("data-cost", "0.0001575")
        await expect(page.locator("#subtree-cost")).to_have_count(0)  # no subtasks
        await screenshot(page, "console-run-cost", full_page=False)
        assert await page.evaluate("performance.getEntriesByType('navigation').length") == 1

        await page.goto(f"{live.url}/ui/#/runs")
        cell = page.locator(f'tr[data-task="{task["id"]}"] td.cost-cell .cost')
        await expect(cell).to_have_text("$0.00016")
        await expect(cell).to_have_attribute("title", "0.0001575 USD")
        await screenshot(page, "console-runs-cost", full_page=False)
        assert console.errors == []


async def test_an_unpriced_run_reads_unpriced_never_free(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        parent = await submit(live.url, {"agent": "demo", "input": "spawn 2, take 0.2s"})
        await page.goto(f"{live.url}/ui/#/runs/{parent['id']}")
        await expect(page.locator("#run-head .state")).to_have_text("completed", timeout=20_000)
        async with httpx.AsyncClient(base_url=live.url) as client:
            usage = (await client.get(f"/v1/tasks/{parent['id']}")).json()["usage"]
        assert usage["cost"] is None, usage  # the demo's model has no price
        assert usage["unpriced_requests"] >= 1, usage
        own = cost(page)
        await expect(own).to_have_text("unpriced")
        await expect(own).to_have_attribute(
            "title", re.compile(rf"^{usage['unpriced_requests']} requests? with no known price")
        )
        # The subtask tree and the list say so too: no $0 anywhere.
        await expect(page.locator("#subtasks li .cost.unpriced")).to_have_count(2)
        await page.goto(f"{live.url}/ui/#/runs")
        row = page.locator(f'tr[data-task="{parent["id"]}"]')
        await expect(row.locator("td.cost-cell")).to_have_text("unpriced")
        await expect(page.locator("#tasks td.cost-cell", has_text="$")).to_have_count(0)
        assert console.errors == []
