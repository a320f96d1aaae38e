"""The console's runs list at /ui/#/runs in a real browser, against a live server."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
from playwright.async_api import Page, expect

from tests.browser.conftest import Console, screenshot, serving
from tests.conftest import LiveFactory

XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


async def submit(url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.post("/v1/tasks", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_a_submitted_task_appears_live_and_moves_on_in_place(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        await page.goto(f"{live.url}/ui/#/runs")
        await expect(page.locator("#tasks thead")).to_be_attached()
        await asyncio.sleep(0.3)  # the list's live stream is open
        task = await submit(live.url, {"agent": "demo", "input": "take 2s"})
        row = page.locator(f'tr[data-task="{task["id"]}"]')
        await expect(row).to_be_visible(timeout=1000)
        await expect(row.locator(".state")).to_have_text("completed", timeout=15_000)
        await expect(row.locator(".duration")).to_have_text(re.compile(r"^2\.\d s$"), timeout=5_000)
        assert await page.evaluate("performance.getEntriesByType('navigation').length") == 1
        await screenshot(page, "console-runs", full_page=False, docs=True)
        assert console.errors == []


async def test_filters_live_in_the_url_and_subtasks_fold_under_their_parent(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        parent = await submit(live.url, {"agent": "demo", "input": "spawn 2, take 0.2s"})
        lone = await submit(live.url, {"agent": "demo", "input": "take 0.1s"})
        await page.goto(f"{live.url}/ui/#/runs")
        row = page.locator(f'tr[data-task="{parent["id"]}"]')
        fold = row.locator("button.fold")
        await expect(fold).to_contain_text("2", timeout=15_000)
        children = page.locator("tr.depth-1")
        await expect(children).to_have_count(0)  # folded
        await fold.click()
        await expect(children).to_have_count(2)
        # A filter is a URL: choosing one changes the address, and the address the list.
        await page.get_by_label("completed").check()
        await expect(page).to_have_url(f"{live.url}/ui/#/runs?state=completed")
        await page.reload()
        await expect(page.get_by_label("completed")).to_be_checked()
        await expect(page.locator(f'tr[data-task="{lone["id"]}"] .state')).to_have_text("completed")
        assert console.errors == []


async def test_no_task_content_runs_as_script_in_the_list(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": XSS, "metadata": {"note": XSS}})
        await page.goto(f"{live.url}/ui/#/runs")
        row = page.locator(f'tr[data-task="{task["id"]}"]')
        await expect(row).to_contain_text("<img src=x", timeout=5_000)
        await asyncio.sleep(0.5)
        assert await page.evaluate("window.__xss") is None
        assert await row.locator("img, script").count() == 0
        # The page's policy would have refused an inline script anyway; none was tried.
        assert not [e for e in console.errors if "Content Security Policy" in e]
        assert console.errors == []
