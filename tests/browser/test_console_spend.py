"""What runs cost, in the console (issue 41 §3) in a real browser, against a live
server with workers: each run's cost in its head (live, from its `usage` events) and
in the runs list, a parent's with its subtasks, and the tenant's spend view
(#/spend) beside what `GET /v1/usage` answers. Priced runs are answered by the fake
OpenAI-compatible server at the operator's prices; the built-in models are unpriced."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Locator, Page, expect
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models import override_allow_model_requests
from pydantic_ai.models.function import AgentInfo, FunctionModel

from taskservice.common.pricing import parse_model_prices
from tests.browser.conftest import XSS, Console, screenshot, serving, submit
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


async def test_an_unpriced_run_reads_unpriced_never_free_and_so_does_its_subtree(
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
        # With its subtasks: itself and both of them, all unpriced.
        subtree = page.locator("#subtree-cost")
        assert usage["subtree"]["tasks"] == 3, usage
        await expect(subtree).to_have_text("· with subtasks: unpriced (3 tasks)")
        # The subtask tree and the list say so too: no $0 anywhere.
        await expect(page.locator("#subtasks li .cost.unpriced")).to_have_count(2)
        await page.goto(f"{live.url}/ui/#/runs")
        row = page.locator(f'tr[data-task="{parent["id"]}"]')
        await expect(row.locator("td.cost-cell")).to_have_text("unpriced")
        await expect(page.locator("#tasks td.cost-cell", has_text="$")).to_have_count(0)
        assert console.errors == []


def _days(n: int) -> tuple[str, str]:
    today = datetime.now(UTC).date()
    return str(today - timedelta(days=n - 1)), str(today)


async def _usage(url: str, **params: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/v1/usage", params=params)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def _run(url: str, body: dict[str, Any]) -> None:
    """A task run to its end."""
    task = await submit(url, body)
    async with httpx.AsyncClient(base_url=url) as client:
        done = await client.get(f"/v1/tasks/{task['id']}", params={"wait": 20})
    assert done.json()["state"] == "completed", done.text


async def rows_are_the_answer(page: Page, table: str, answer: dict[str, Any], key: str) -> None:
    """Each group of `answer` a row of `table` in its order, with its figures; the
    footer its total."""
    rows = page.locator(f"{table} tbody tr")
    await expect(rows).to_have_count(len(answer["groups"]))
    for i, group in enumerate(answer["groups"]):
        row = rows.nth(i)
        await expect(row).to_have_attribute("data-group", group[key])
        await expect(row.locator("td.name")).to_have_text(group[key])
        await expect(row.locator("td.requests")).to_have_text(f"{group['requests']:,}")
        await expect(row.locator("td.input")).to_have_text(f"{group['input_tokens']:,}")
        await expect(row.locator("td.output")).to_have_text(f"{group['output_tokens']:,}")
        figure = row.locator(".cost")
        if group["cost"] is None:
            await expect(figure).to_have_text("unpriced")
        else:
            await expect(figure).to_have_attribute("data-cost", group["cost"])
    total = answer["total"]
    footer = page.locator(f"{table} tfoot tr.total")
    await expect(footer.locator("td.requests")).to_have_text(f"{total['requests']:,}")
    await expect(footer.locator("td.input")).to_have_text(f"{total['input_tokens']:,}")
    await expect(footer.locator("td.output")).to_have_text(f"{total['output_tokens']:,}")


async def test_the_spend_view_shows_what_the_usage_route_answers(
    make_live: LiveFactory, page: Page, console: Console, fake: FakeOpenAI
) -> None:
    fake.queue(
        Reply(text="one", prompt_tokens=1_000, completion_tokens=100),  # $0.0000525
        Reply(text="two", prompt_tokens=3_000, completion_tokens=300),  # $0.0001575
        Reply(text="three", prompt_tokens=10_000, completion_tokens=1_000),  # $0.00011
    )
    async with serving(make_live, page, **priced(fake)) as live:
        await _run(live.url, {"input": "one", "model": PRICED})
        await _run(live.url, {"input": "two", "model": PRICED})
        await _run(live.url, {"input": "three", "model": CHEAP})
        await _run(live.url, {"agent": "demo", "input": "take 0.1s"})  # unpriced
        start, end = _days(7)
        by_agent = await _usage(live.url, group_by="agent", **{"from": start, "to": end})
        by_model = await _usage(live.url, group_by="model", **{"from": start, "to": end})
        total = by_agent["total"]
        assert total["cost"] == "0.00032", total
        assert total["unpriced_requests"] >= 1, total

        await page.goto(f"{live.url}/ui/#/runs")
        await page.locator("header.top nav").get_by_role("link", name="Spend").click()
        await expect(page).to_have_url(f"{live.url}/ui/#/spend")
        await page.locator('select[name="range"]').select_option("7d")
        await expect(page).to_have_url(f"{live.url}/ui/#/spend?range=7d")
        await expect(page.locator("#spend-range")).to_have_text(f"{start} to {end} (UTC)")
        tiles = page.locator("#spend-totals")
        # Some requests unpriced: the cost is a lower bound, and says so.
        unpriced = total["unpriced_requests"]
        await expect(tiles.locator('[data-total="cost"] .cost')).to_have_text("≥ $0.00032")
        await expect(tiles.locator('[data-total="requests"] .n')).to_have_text(
            f"{total['requests']:,}"
        )
        await expect(tiles.locator('[data-total="unpriced"] .n')).to_have_text(str(unpriced))
        await expect(page.locator("#unpriced-note")).to_contain_text("had no known price")
        await rows_are_the_answer(page, "#by-agent", by_agent, "agent")
        await rows_are_the_answer(page, "#by-model", by_model, "model")
        await expect(page.locator('#by-model tr[data-group="demo"] .cost')).to_have_text("unpriced")
        # The chart: a bar per day of the range, split by agent profile, with axes.
        chart = page.locator("#spend-chart")
        await expect(chart.locator('.u-axis[data-axis="x"]')).to_have_attribute(
            "data-ticks", re.compile(r"\d")
        )
        await expect(chart.locator(".u-legend .u-series")).to_have_count(
            1 + len(by_agent["groups"])
        )
        await screenshot(page, "console-spend", full_page=False, docs=True)

        # A row is the view filtered to it; the filter and the split are in the URL.
        await page.locator('#by-model tr[data-group="openai-chat:fake-gpt"] td.name a').click()
        await expect(page).to_have_url(
            re.compile(r"#/spend\?range=7d&model=openai-chat%3Afake-gpt$")
        )
        await page.locator('select[name="by"]').select_option("model")
        await page.reload()
        await expect(page.locator('select[name="by"]')).to_have_value("model")
        only = await _usage(live.url, group_by="agent", model=PRICED, **{"from": start, "to": end})
        assert only["total"]["cost"] == "0.00021", only
        assert only["total"]["requests"] == 2, only
        await expect(page.locator('#spend-totals [data-total="cost"] .cost')).to_have_text(
            "$0.00021"
        )
        await expect(page.locator("#unpriced-note")).to_have_count(0)
        await rows_are_the_answer(page, "#by-agent", only, "agent")
        await expect(page.locator('[data-filter="model"]')).to_contain_text(PRICED)
        # Dates of one's own.
        await page.locator('select[name="range"]').select_option("custom")
        await page.locator('input[name="from"]').fill(end)
        await expect(page).to_have_url(re.compile(rf"range=custom&.*from={end}&to={end}$"))
        await expect(page.locator("#spend-range")).to_have_text(f"{end} to {end} (UTC)")
        assert console.errors == []


def _answers() -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("ok")])

    return FunctionModel(respond)


async def test_no_agent_or_model_name_runs_as_script_in_the_spend_view(
    make_live: LiveFactory, page: Page, console: Console, tmp_path: Path
) -> None:
    model = f"m{XSS}"
    agents = tmp_path / "agents.json"
    agents.write_text(json.dumps({"agents": {XSS: {"model": model}}}))
    async with serving(
        make_live, page, models={model: _answers()}, agents_file=str(agents)
    ) as live:
        await _run(live.url, {"agent": XSS, "input": "hi"})
        await page.goto(f"{live.url}/ui/#/spend?range=7d")
        await expect(page.locator("#by-agent tbody td.name")).to_have_text(XSS)
        await expect(page.locator("#by-agent tbody tr")).to_have_attribute("data-group", XSS)
        await expect(page.locator("#by-model td.name")).to_have_text(model)
        legend = page.locator("#spend-chart .u-legend .u-series .u-label", has_text="<img src=x")
        await expect(legend).to_have_count(1)
        await page.locator("#by-agent td.name a").click()
        await expect(page.locator('[data-filter="agent"]')).to_contain_text(XSS)
        # At a phone's width the long names wrap, the tables scroll in their box.
        await page.set_viewport_size({"width": 375, "height": 800})
        await expect(page.locator("#by-model td.name")).to_have_text(model)
        assert await page.evaluate("document.documentElement.scrollWidth") <= 375
        await screenshot(page, "console-phone-spend")
        assert await page.evaluate("window.__xss") is None
        assert await page.locator(".spend img, .spend script").count() == 0
        assert not [e for e in console.errors if "Content Security Policy" in e]
        assert console.errors == []
