"""Budgets in the console (issue 41 §2 and §3) in a real browser, against a live server
with workers: the tenant's budget on the Spend page (what it spent of its limit, when
it starts afresh, and once spent that new tasks are refused until then), a refused
submit on the new task page saying when to try again, a task's own budget in its
run's head, and a run its budget stopped: which budget, and a fork with a larger one
that completes."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page, expect
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.common.pricing import SpendLimit
from taskservice.db.spend_budgets import Refused, SpendBudgetStore, tenant_key
from taskservice.db.tasks import TaskStore
from taskservice.usecases.spend import CACHE_SECONDS
from tests.browser.conftest import XSS, Console, screenshot, serving, submit
from tests.conftest import LiveFactory

TENANT = "default"  # open development mode's


async def _task(url: str, task_id: str, wait: int = 20) -> dict[str, Any]:
    """The task, once it has finished (or `wait` seconds went by)."""
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.get(f"/v1/tasks/{task_id}", params={"wait": wait})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def _budget(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/v1/budget")
    assert response.status_code == 200, response.text
    return response.json()["budget"]  # type: ignore[no-any-return]


def _tomorrow() -> datetime:
    return (datetime.now(UTC) + timedelta(days=1)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )


async def test_the_spend_page_shows_the_tenants_budget_and_new_tasks_refused_once_spent(
    make_live: LiveFactory, page: Page, console: Console, db: AsyncEngine, store: TaskStore
) -> None:
    limit = SpendLimit(period="day", max_cost=Decimal("1"), max_tokens=50_000)
    async with serving(make_live, page, tenant_budget=limit) as live:
        # A task with a budget of its own, from the new task page.
        await page.goto(f"{live.url}/ui/#/new")
        form = page.locator("#new-task")
        await form.locator('textarea[name="input"]').fill("hi")
        await form.locator('input[name="max_cost"]').fill("0.25")
        await form.locator('input[name="max_tokens"]').fill("12000")
        await form.get_by_role("button", name="Submit").click()
        await expect(page).to_have_url(re.compile(r"#/runs/[0-9a-f-]{36}$"))
        task_id = page.url.rsplit("/", 1)[1]
        done = await _task(live.url, task_id)
        assert (done["state"], done["max_cost"], done["max_tokens"]) == ("completed", "0.25", 12000)
        used = done["usage"]["input_tokens"] + done["usage"]["output_tokens"]
        head = page.locator("#run-budget")
        await expect(head.locator(".budget-text")).to_have_text("$0.25 · 12,000 tokens")
        # The offline model is priced by nobody: it costs the budget's dollars nothing.
        await expect(head.locator('[data-budget="max_cost"] .budget-figures')).to_have_text(
            "$0.00 of $0.25 (0%)"
        )
        tokens = head.locator('[data-budget="max_tokens"] .budget-figures')
        await expect(tokens).to_have_text(
            f"{used:,} of 12,000 tokens ({used * 100 // 12000}%)", timeout=10_000
        )

        # The tenant spends 30 cents and 2,000 tokens of its day.
        budgets = SpendBudgetStore(store.db)
        await budgets.default_tenant(TENANT, limit)
        assert not isinstance(
            await budgets.reserve([tenant_key(TENANT)], cost=Decimal("0.3"), tokens=2_000), Refused
        )
        await asyncio.sleep(CACHE_SECONDS + 0.1)  # what the server read of it, forgotten
        shown = await _budget(live.url)
        assert shown["spent_cost"] == "0.3", shown
        assert shown["exhausted"] is False
        spent_tokens = shown["spent_tokens"]  # 2,000 and the task's own
        await page.goto(f"{live.url}/ui/#/spend?range=7d")
        card = page.locator("#budget")
        await expect(card.locator("h2")).to_have_text("Daily budget")
        await expect(card.locator('[data-budget="max_cost"] .budget-figures')).to_have_text(
            "$0.30 of $1.00 (30%)"
        )
        await expect(card.locator('[data-budget="max_cost"] meter')).to_have_attribute(
            "value", "0.3"
        )
        await expect(card.locator('[data-budget="max_tokens"] .budget-figures')).to_have_text(
            f"{spent_tokens:,} of 50,000 tokens ({spent_tokens * 100 // 50_000}%)"
        )
        period = card.locator("#budget-period")
        await expect(period).to_contain_text("Spent this day (UTC); it starts afresh at")
        await expect(period.locator("time")).to_have_attribute(
            "datetime", _tomorrow().isoformat().replace("+00:00", ".000Z")
        )
        await expect(card.locator("#budget-exhausted")).to_have_count(0)
        await expect(card.locator(".source")).to_have_text(
            "The service's default budget for every tenant."
        )

        # Spent: the page says new tasks are refused, and until when.
        while not isinstance(
            await budgets.reserve([tenant_key(TENANT)], cost=Decimal("0.3"), tokens=100), Refused
        ):
            pass
        await asyncio.sleep(CACHE_SECONDS + 0.1)
        assert (await _budget(live.url))["exhausted"] is True
        await page.reload()
        exhausted = page.locator("#budget-exhausted")
        await expect(exhausted).to_contain_text("Exhausted: new tasks are refused until")
        await expect(exhausted.locator("time")).to_have_attribute(
            "datetime", _tomorrow().isoformat().replace("+00:00", ".000Z")
        )
        await expect(card).to_have_attribute("data-exhausted", "true")
        await expect(card.locator('[data-budget="max_cost"] .budget-figures')).to_have_text(
            "$0.90 of $1.00 (90%)"
        )
        await screenshot(page, "console-spend-budget", full_page=False, docs=True)

        # A submit now is refused with a 429: the form says why and when to try again.
        await page.goto(f"{live.url}/ui/#/new")
        await form.locator('textarea[name="input"]').fill("one more")
        await form.get_by_role("button", name="Submit").click()
        refused = form.locator(".form-error")
        await expect(refused).to_have_attribute("data-status", "429")
        await expect(refused).to_contain_text("Budget exhausted: ")
        await expect(refused).to_contain_text(
            "tenant default's daily budget ($1 and 50000 tokens; $0.9 and"
        )
        await expect(refused).to_contain_text(
            "nothing is submitted for it before then. Try again after"
        )
        retry = datetime.fromisoformat(
            (await refused.locator(".retry time").get_attribute("datetime") or "").replace(
                "Z", "+00:00"
            )
        )
        assert abs((retry - _tomorrow()).total_seconds()) < 5
        await expect(page).to_have_url(f"{live.url}/ui/#/new")
        # The browser's own line for the refused request: the one error expected.
        console.errors[:] = [e for e in console.errors if "status of 429" not in e]
        assert console.errors == []


async def test_a_run_its_budget_stopped_names_it_and_forks_with_a_larger_one(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        # No tenant budget: the Spend page shows none.
        await page.goto(f"{live.url}/ui/#/spend?range=7d")
        await expect(page.locator("#spend-totals, .spend .empty").first).to_be_visible()
        await expect(page.locator("#budget")).to_have_count(0)

        # A request's output bound (1,024 tokens) does not fit in 100: it fails before
        # its first request.
        task = await submit(live.url, {"input": "hi", "max_tokens": 100})
        failed = await _task(live.url, task["id"])
        assert failed["state"] == "failed", failed
        budget = failed["error"]["budget"]
        assert failed["error"]["code"] == "budget_exhausted"
        assert (budget["scope"], budget["name"], budget["limit"]) == ("task", "max_tokens", 100)
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(page.locator("#run-head .state")).to_have_text("failed")
        await expect(page.locator("#run-budget .budget-text")).to_have_text("100 tokens")
        stop = page.locator("#budget-stop")
        await expect(stop).to_have_attribute("data-scope", "task")
        await expect(stop).to_contain_text(
            f"Stopped by the task's own budget max_tokens: limit 100 tokens, spent "
            f"{budget['spent']:,} tokens, and the next model request could take up to "
            f"{budget['next_request']:,} tokens."
        )
        await expect(stop.locator(".resets")).to_have_count(0)  # the task's own: no period
        await screenshot(page, "console-run-budget", full_page=False, docs=True)

        # Fork it with a larger budget: the dialog offers one with room.
        await stop.get_by_role("button", name="Fork with a larger budget").click()
        dialog = page.locator("dialog.fork-dialog[open]")
        offered = dialog.locator('input[name="max_tokens"]')
        wanted = 2 * (budget["spent"] + budget["next_request"])
        given = int(await offered.input_value())
        assert given >= wanted
        await expect(dialog.locator('input[name="max_cost"]')).to_have_value("")
        await expect(dialog.locator(".fork-budget .hint")).to_contain_text(
            "this run's (100 tokens)"
        )
        await dialog.get_by_role("button", name="Fork").click()
        await expect(page).not_to_have_url(re.compile(task["id"]))
        fork_id = page.url.rsplit("/", 1)[1]
        await expect(page.locator("#run-head .state")).to_have_text("completed", timeout=20_000)
        fork = await _task(live.url, fork_id)
        assert fork["forked_from"]["task_id"] == task["id"]
        assert fork["max_tokens"] == given
        assert fork["result"], fork
        await expect(page.locator("#run-budget .budget-text")).to_have_text(
            f"{fork['max_tokens']:,} tokens"
        )
        await expect(page.locator("#budget-stop")).to_have_count(0)
        assert console.errors == []


async def test_a_shared_budgets_stop_names_it_as_text_and_says_when_it_starts_afresh(
    make_live: LiveFactory, page: Page, console: Console, tmp_path: Path
) -> None:
    agents = tmp_path / "agents.json"
    profile = {"model": "offline", "budget": {"period": "day", "max_tokens": 100}}
    agents.write_text(json.dumps({"agents": {XSS: profile}}))
    async with serving(make_live, page, agents_file=str(agents)) as live:
        task = await submit(live.url, {"agent": XSS, "input": "hi"})
        failed = await _task(live.url, task["id"])
        budget = failed["error"]["budget"]
        assert (budget["scope"], budget["period"]) == (f"agent {XSS}", "day"), failed
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        stop = page.locator("#budget-stop")
        await expect(stop.locator(".scope")).to_have_text(f"the {XSS} profile's daily total")
        await expect(stop.locator(".resets time")).to_have_attribute(
            "datetime", _tomorrow().isoformat().replace("+00:00", ".000Z")
        )
        # A fork draws on the same shared budget: offered plainly, with no budget filled.
        await stop.get_by_role("button", name="Fork", exact=True).click()
        dialog = page.locator("dialog.fork-dialog[open]")
        await expect(dialog).to_contain_text("the same shared budget")
        await expect(dialog.locator('input[name="max_tokens"]')).to_have_value("")
        await dialog.get_by_role("button", name="Keep it").click()
        assert await page.evaluate("window.__xss") is None
        assert await page.locator("#run-head img, #run-head script").count() == 0
        assert console.errors == []
