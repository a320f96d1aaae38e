"""The dashboard at /ui in a real browser, against a live server with workers."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from playwright.async_api import Page, expect
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.agents.demo import QUESTION
from taskservice.db.keys import ApiKeyStore
from tests.browser.conftest import Console, screenshot, serving
from tests.conftest import LiveFactory
from tests.fakes.webhook_receiver import Receiver


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


async def test_a_task_page_shows_the_answer_as_it_is_written(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    # The page is served by a replica without workers: what it shows comes from the
    # worker's replica through PostgreSQL.
    async with (
        make_live(workers_enabled=True) as worker,
        serving(make_live, page, workers=False) as live,
    ):
        task = await submit(worker.url, {"agent": "demo", "input": "take 6s, spawn 1"})
        await page.goto(f"{live.url}/ui/#/tasks/{task['id']}")
        # The answer's text (not a tool call's arguments, shown muted: a short one may
        # be in progress first and give way to the next message between two reads).
        writing = page.locator("#writing .bubble.live pre:not(.muted)").first
        await expect(writing).to_be_visible(timeout=15_000)
        first = await writing.inner_text()
        await asyncio.sleep(0.5)
        later = await writing.inner_text()
        assert later.startswith(first)
        assert len(later) > len(first)  # it grows as the model writes
        await page.evaluate("document.getElementById('writing').scrollIntoView({block: 'end'})")
        await screenshot(page, "task-streaming", full_page=False)  # the README's
        result = page.locator("#result")
        await expect(result).to_contain_text("This is the demo agent", timeout=15_000)
        async with httpx.AsyncClient(base_url=live.url) as client:
            done = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert (await result.inner_text()).strip() == done["result"]
        await expect(page.locator("#writing .bubble")).to_have_count(0)  # now persisted
        await expect(page.locator("#subtasks li")).to_have_count(1)
        await expect(page.locator("#timeline li")).to_have_count(5)  # via input_required
        await screenshot(page, "task")
        assert console.errors == []


async def test_a_running_task_is_cancelled_from_its_page(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "take 60s"})
        await page.goto(f"{live.url}/ui/#/tasks/{task['id']}")
        await expect(page.locator("#task-head .state")).to_have_text("running", timeout=10_000)
        await page.fill("#cancel input[name=reason]", "seen enough")
        await page.click("#cancel button")
        await expect(page.locator("#task-head .state")).to_have_text("cancelled")
        await expect(page.locator("#cancel")).to_have_count(0)
        async with httpx.AsyncClient(base_url=live.url) as client:
            stored = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert (stored["state"], stored["cancel_reason"]) == ("cancelled", "seen enough")
        assert console.errors == []


async def test_a_question_is_answered_from_the_task_page(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "ask me, take 1s"})
        await page.goto(f"{live.url}/ui/#/tasks/{task['id']}")
        form = page.locator("#answer")
        await expect(form).to_contain_text(QUESTION, timeout=10_000)
        await screenshot(page, "task-question")
        await form.locator("textarea").fill("ultramarine")
        await form.locator("button").click()
        await expect(page.locator("#result")).to_contain_text(
            "written in ultramarine", timeout=15_000
        )
        await expect(page.locator("#task-head .state")).to_have_text("completed")
        assert console.errors == []


async def test_signing_in_keeps_the_key_out_of_every_url(
    make_live: LiveFactory, page: Page, console: Console, db: AsyncEngine
) -> None:
    key, _ = await ApiKeyStore(db).create(tenant="acme", name="browser")
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    async with serving(make_live, page) as live:
        await submit(live.url, {"agent": "demo", "input": "take 1s"}, key)
        await page.goto(f"{live.url}/ui/#/tasks")
        await page.fill("input[name=key]", key)
        await page.click(".signin button")
        await expect(page.locator("#tasks tbody tr")).to_have_count(1)
        # The list follows the tenant's tasks live, through a stream token.
        task = await submit(live.url, {"agent": "demo", "input": "take 1s"}, key)
        await expect(page.locator(f'tr[data-task="{task["id"]}"]')).to_be_visible(timeout=1000)
        assert await page.evaluate("sessionStorage.getItem('taskservice.apiKey')") == key
        assert any("/v1/events?" in url and "token=" in url for url in urls)
        assert not [url for url in urls if key in url]
        await page.click("#sign-out")
        await expect(page.locator(".signin")).to_be_visible()
        # A 401 is what a signed-out page is told; the browser reports the response.
        console.errors[:] = [e for e in console.errors if "401" not in e]
        assert console.errors == []


async def test_a_webhook_delivery_is_shown_with_its_attempts_and_redelivered(
    make_live: LiveFactory, page: Page, console: Console, receiver: Receiver
) -> None:
    hooks = {"webhook_allow_http": True, "webhook_allow_targets": ["127.0.0.1/32"]}
    async with serving(make_live, page, **hooks) as live:
        hook = {"url": receiver.url("/alerts"), "states": ["completed"]}
        task = await submit(live.url, {"agent": "demo", "input": "take 0.5s", "webhooks": [hook]})
        await page.goto(f"{live.url}/ui/#/tasks/{task['id']}")
        delivery = page.locator("#deliveries tr[data-delivery]")
        await expect(delivery).to_contain_text("succeeded", timeout=15_000)
        await expect(delivery.locator("li")).to_have_count(1)  # attempt #1
        await expect(delivery.locator("li")).to_contain_text("#1 200")
        await delivery.locator("button").click()
        await expect(delivery.locator("li")).to_have_count(2, timeout=10_000)
        assert len(receiver.at("/alerts")) == 2
        assert len({r.webhook_id for r in receiver.at("/alerts")}) == 1  # the same delivery
        assert console.errors == []
