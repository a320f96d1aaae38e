"""The console's tenant pages in a real browser, against a live server with workers:
the overview (#/overview), the schedules (#/schedules) and the new task form (#/new)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
from playwright.async_api import Page, expect

from tests.browser.conftest import XSS, Console, post, screenshot, serving, submit
from tests.conftest import LiveFactory


def without_the_refusal(console: Console) -> list[str]:
    """The errors but the browser's own report of the 422 a test asked for."""
    return [e for e in console.errors if "status of 422" not in e]


def count(page: Page, name: str) -> Any:
    return page.locator(f'[data-count="{name}"] .n')


async def charts_have_axes_and_fill_their_cards(page: Page) -> None:
    """Each chart: an x axis and a y axis with tick labels, at least 90 % of its
    card's width."""
    cards = page.locator(".chart-card")
    await expect(cards).to_have_count(3)
    for i in range(3):
        card = cards.nth(i)
        x_ticks = card.locator('.u-axis[data-axis="x"]')
        await expect(x_ticks).to_have_count(1)
        await expect(x_ticks).to_have_attribute("data-ticks", re.compile(r"\d"))
        y_axes = card.locator('.u-axis[data-axis="y"]')
        assert await y_axes.count() >= 1
        await expect(y_axes.first).to_have_attribute("data-ticks", re.compile(r"\d"))
        await expect(card.locator(".u-legend .u-series")).not_to_have_count(0)
        widths = await card.evaluate(
            "card => [card.querySelector('.uplot').getBoundingClientRect().width,"
            " card.getBoundingClientRect().width]"
        )
        assert widths[0] >= 0.9 * widths[1], widths


async def test_the_overview_counts_live_states_and_draws_the_last_minutes(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        for _ in range(2):
            await submit(live.url, {"agent": "demo", "input": "take 0.5s"})
        running = await submit(live.url, {"agent": "demo", "input": "take 30s"})
        await submit(live.url, {"input": "later", "run_at": "2099-01-01T00:00:00Z"})
        await page.goto(f"{live.url}/ui/#/overview")
        await expect(count(page, "scheduled")).to_have_text("1")
        await expect(count(page, "completed")).to_have_text("2", timeout=15_000)
        await expect(count(page, "running")).to_have_text("1")
        await expect(count(page, "pending")).to_have_text("0")
        await expect(page.locator("#workers td.mono")).to_have_count(1)  # the worker
        await charts_have_axes_and_fill_their_cards(page)
        # The tiles link to the runs they count.
        await expect(page.locator('[data-count="failed"]')).to_have_attribute(
            "href", "#/runs?state=failed"
        )
        await screenshot(page, "console-overview", full_page=False, docs=True)
        # The charts follow their cards' width when the window changes.
        await page.set_viewport_size({"width": 900, "height": 900})
        await asyncio.sleep(0.3)
        await charts_have_axes_and_fill_their_cards(page)
        # A new task is counted without a reload (the firehose wakes the page; the
        # bound is generous: a slow machine takes a while to claim it).
        await submit(live.url, {"agent": "demo", "input": "take 30s"})
        await expect(count(page, "running")).to_have_text("2", timeout=15_000)
        async with httpx.AsyncClient(base_url=live.url) as client:
            await client.post(f"/v1/tasks/{running['id']}/cancel")
        await expect(count(page, "cancelled")).to_have_text("1", timeout=15_000)
        assert await page.evaluate("performance.getEntriesByType('navigation').length") == 1
        assert console.errors == []


async def test_needs_you_and_waiting_for_subtasks_are_counted_apart(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        await submit(live.url, {"agent": "demo", "input": "ask"})
        await submit(live.url, {"agent": "demo", "input": "spawn 2, take 5s"})
        await page.goto(f"{live.url}/ui/#/overview")
        await expect(count(page, "needs-you")).to_have_text("1", timeout=15_000)
        await expect(count(page, "waiting")).to_have_text("1", timeout=15_000)
        await expect(page.locator('[data-count="needs-you"]')).to_contain_text("needs you")
        await expect(page.locator('[data-count="waiting"]')).to_contain_text("waiting for subtasks")
        # The parent resumes when its subtasks end; the question still waits for you.
        await expect(count(page, "waiting")).to_have_text("0", timeout=20_000)
        await expect(count(page, "needs-you")).to_have_text("1")
        assert console.errors == []


async def test_nothing_overflows_the_overview_at_a_phone_width(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    await page.set_viewport_size({"width": 375, "height": 800})
    async with serving(make_live, page) as live:
        await submit(live.url, {"agent": "demo", "input": "take 0.2s"})
        await page.goto(f"{live.url}/ui/#/overview")
        await expect(count(page, "completed")).to_have_text("1", timeout=15_000)
        await charts_have_axes_and_fill_their_cards(page)
        assert await page.evaluate("document.documentElement.scrollWidth") <= 375
        await screenshot(page, "console-overview-phone")
        assert console.errors == []


async def test_a_new_task_is_submitted_from_the_form(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        await page.goto(f"{live.url}/ui/#/runs")
        await page.get_by_role("link", name="New task").click()
        await expect(page).to_have_url(re.compile(r".*#/new$"))
        form = page.locator("#new-task")
        await expect(form.locator("select[name=agent] option")).not_to_have_count(0)
        await form.locator("select[name=agent]").select_option("demo")
        # The form says how the input will be sent.
        await form.locator("textarea[name=input]").fill('{"question": "2+2?"}')
        await expect(form.locator(".hint[data-kind=json]")).to_contain_text("JSON object")
        await form.locator("textarea[name=input]").fill("take 1s")
        await expect(form.locator(".hint[data-kind=text]")).to_contain_text("text")
        # The API's 422 is shown beside the form, in its words.
        await form.locator("input[name=priority]").fill("5000")
        await form.get_by_role("button", name="Submit").click()
        await expect(form.locator(".form-error")).to_contain_text("priority")
        # So is a form error of its own (metadata that is not a JSON object).
        await form.locator("input[name=priority]").fill("3")
        await form.locator("textarea[name=metadata]").fill("[1]")
        await form.get_by_role("button", name="Submit").click()
        await expect(form.locator(".form-error")).to_contain_text("metadata")
        await form.locator("textarea[name=metadata]").fill('{"ticket": "T-1"}')
        await form.get_by_role("button", name="Submit").click()
        await expect(page).to_have_url(re.compile(r".*#/runs/[0-9a-f-]{36}$"), timeout=5000)
        task_id = page.url.rsplit("/", 1)[1]
        await expect(page.locator("main")).to_contain_text(task_id)
        async with httpx.AsyncClient(base_url=live.url) as client:
            task = (await client.get(f"/v1/tasks/{task_id}")).json()
        assert (task["input"], task["agent"]["profile"], task["priority"]) == ("take 1s", "demo", 3)
        assert task["metadata"] == {"ticket": "T-1"}
        await expect(page.locator("main")).to_contain_text("demo agent", timeout=15_000)
        assert without_the_refusal(console) == []


async def test_a_schedule_is_created_disabled_and_deleted_from_its_page(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        await page.goto(f"{live.url}/ui/#/schedules")
        await expect(page.locator(".empty")).to_contain_text("No schedule")
        form = page.locator("#new-schedule")
        # A bad cron: the API's error, in its words.
        await form.locator("input[name=cron]").fill("61 * * * *")
        await form.locator("select[name=agent]").select_option("demo")
        await form.locator("textarea[name=input]").fill("take 1s")
        await form.get_by_role("button", name="Create schedule").click()
        await expect(form.locator(".form-error")).to_contain_text("cron")
        await expect(page.locator("#schedules")).to_have_count(0)
        # A good one: listed, with its next runs.
        await form.locator("input[name=name]").fill("nightly report")
        await form.locator("input[name=cron]").fill("0 3 * * *")
        await form.locator("input[name=timezone]").fill("Europe/Paris")
        await form.get_by_role("button", name="Create schedule").click()
        row = page.locator("#schedules tbody tr")
        await expect(row).to_have_count(1)
        await expect(row.locator(".name")).to_have_text("nightly report")
        await expect(row).to_contain_text("Europe/Paris")
        await expect(row.locator(".next-runs li")).to_have_count(3)
        await expect(row.locator(".enabled")).to_have_text("enabled")
        await expect(form.locator(".form-error")).to_have_count(0)
        await screenshot(page, "console-schedules", full_page=False, docs=True)
        # Disabled, after a confirmation.
        await row.get_by_role("button", name="Disable").click()
        dialog = page.locator("dialog[open]")
        await expect(dialog).to_contain_text("Disable nightly report?")
        await dialog.get_by_role("button", name="Disable").click()
        await expect(row.locator(".enabled")).to_have_text("disabled")
        await expect(row.locator(".next-runs")).to_contain_text("none while disabled")
        await expect(page.locator("dialog[open]")).to_have_count(0)
        # Deleted, after a confirmation.
        await row.get_by_role("button", name="Delete").click()
        dialog = page.locator("dialog[open]")
        await expect(dialog).to_contain_text("Delete nightly report?")
        await dialog.get_by_role("button", name="Delete").click()
        await expect(page.locator("#schedules")).to_have_count(0)
        async with httpx.AsyncClient(base_url=live.url) as client:
            assert (await client.get("/v1/schedules")).json()["schedules"] == []
        assert without_the_refusal(console) == []


async def test_no_schedule_or_task_content_runs_as_script(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        schedule = {"name": XSS, "cron": "0 3 * * *", "task": {"agent": "demo", "input": XSS}}
        await post(live.url, "/v1/schedules", schedule)
        await page.goto(f"{live.url}/ui/#/schedules")
        row = page.locator("#schedules tbody tr")
        await expect(row.locator(".name")).to_have_text(XSS)
        await expect(row.locator(".task")).to_contain_text("<img src=x")
        # A task submitted from the form with that input, and its page.
        await page.goto(f"{live.url}/ui/#/new")
        form = page.locator("#new-task")
        await form.locator("select[name=agent]").select_option("demo")
        await form.locator("textarea[name=input]").fill(XSS)
        await form.get_by_role("button", name="Submit").click()
        await expect(page).to_have_url(re.compile(r".*#/runs/[0-9a-f-]{36}$"), timeout=5000)
        await expect(page.locator("main")).to_contain_text("<img src=x")
        await page.goto(f"{live.url}/ui/#/schedules")
        await expect(row).to_have_count(1)
        await asyncio.sleep(0.5)
        assert await page.evaluate("window.__xss") is None
        assert await page.locator("main img, main script").count() == 0
        assert console.errors == []
