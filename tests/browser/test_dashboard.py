"""The dashboard at /ui in a real browser, against a live server with workers."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
from playwright.async_api import Page, expect

from tests.browser.conftest import Console, screenshot, serving
from tests.conftest import LiveFactory


async def submit(url: str, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(base_url=url, headers=headers) as client:
        response = await client.post("/v1/tasks", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_a_task_submitted_over_the_api_appears_in_the_list_within_a_second(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        await page.goto(f"{live.url}/ui/#/tasks")
        await expect(page.locator("#tasks thead")).to_be_visible()
        await asyncio.sleep(0.3)  # the list's live stream is open
        task = await submit(live.url, {"agent": "demo", "input": "take 2s", "priority": 5})
        row = page.locator(f'tr[data-task="{task["id"]}"]')
        await expect(row).to_be_visible(timeout=1000)
        await expect(row.locator(".priority")).to_have_text("5")
        # It moves on in place, without a reload.
        await expect(row.locator(".state")).to_have_text("completed", timeout=15_000)
        assert await page.evaluate("performance.getEntriesByType('navigation').length") == 1
        await screenshot(page, "tasks")
        assert console.errors == []


async def test_the_overview_counts_live_states_and_draws_the_last_minutes(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        for _ in range(2):
            await submit(live.url, {"agent": "demo", "input": "take 0.5s"})
        running = await submit(live.url, {"agent": "demo", "input": "take 30s"})
        await submit(live.url, {"input": "later", "run_at": "2099-01-01T00:00:00Z"})
        await page.goto(f"{live.url}/ui/")
        await expect(page.locator('[data-count="scheduled"] .n')).to_have_text("1")
        completed = page.locator('[data-count="completed"] .n')
        await expect(completed).to_have_text("2", timeout=15_000)
        await expect(page.locator('[data-count="running"] .n')).to_have_text("1")
        await expect(page.locator(".chart rect")).not_to_have_count(0)
        await expect(page.locator("table td.mono")).to_have_count(1)  # the worker
        await screenshot(page, "overview")
        # A new task is counted without a reload (the firehose wakes the page).
        await submit(live.url, {"agent": "demo", "input": "take 30s"})
        await expect(page.locator('[data-count="running"] .n')).to_have_text("2", timeout=3000)
        async with httpx.AsyncClient(base_url=live.url) as client:
            await client.post(f"/v1/tasks/{running['id']}/cancel")
        await expect(page.locator('[data-count="cancelled"] .n')).to_have_text("1", timeout=3000)
        assert console.errors == []


async def test_a_new_task_is_submitted_from_the_form(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        await page.goto(f"{live.url}/ui/#/new")
        await expect(page.locator("#new-task select option")).not_to_have_count(0)
        await page.select_option("#new-task select", "demo")
        await page.fill("#new-task textarea", "take 1s")
        await page.click("#new-task button")
        await expect(page).to_have_url(re.compile(r".*#/tasks/[0-9a-f-]{36}$"), timeout=5000)
        await expect(page.locator("#result")).to_contain_text("demo agent", timeout=15_000)
        assert console.errors == []
