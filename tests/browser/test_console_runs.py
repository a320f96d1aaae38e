"""The console's runs list at /ui/#/runs in a real browser, against a live server."""

from __future__ import annotations

import asyncio
import re

import httpx
from playwright.async_api import Page, expect

from tests.browser.conftest import XSS, Console, screenshot, serving, submit
from tests.conftest import LiveFactory


async def test_a_submitted_task_appears_live_and_moves_on_in_place(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        await page.goto(f"{live.url}/ui/#/runs")
        await expect(page.locator("#tasks thead")).to_be_attached()
        await asyncio.sleep(0.3)  # the list's live stream is open
        task = await submit(live.url, {"agent": "demo", "input": "take 2s"})
        row = page.locator(f'tr[data-task="{task["id"]}"]')
        await expect(row).to_be_visible(timeout=10_000)  # live: no reload (below)
        await expect(row.locator(".state")).to_have_text("completed", timeout=15_000)
        # Its duration is the run's, from start to end: at least the 2 s the demo took,
        # and no longer counting once it has ended.
        await expect(row.locator(".duration")).to_have_text(re.compile(r"^\d+(\.\d)? s$"))
        shown = await row.locator(".duration").text_content()
        assert float(shown.split()[0]) >= 2.0, shown
        await asyncio.sleep(1.2)
        assert await row.locator(".duration").text_content() == shown
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


def _luminance(rgb: str) -> float:
    """WCAG's relative luminance of a computed `rgb(r, g, b)` colour."""
    channels = [int(c) / 255 for c in re.findall(r"\d+", rgb)[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(one: str, other: str) -> float:
    light, dark = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


_COLOURS = """(selector) => [...document.querySelectorAll(selector)].map((el) => {
  const style = getComputedStyle(el);
  let back = el, bg = style.backgroundColor;
  while (bg === "rgba(0, 0, 0, 0)" && back.parentElement) {
    back = back.parentElement;
    bg = getComputedStyle(back).backgroundColor;
  }
  return [el.textContent, style.color, bg];
})"""


async def test_the_console_follows_the_system_scheme_and_stays_legible(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        done = await submit(live.url, {"agent": "demo", "input": "take 0.1s"})
        await submit(live.url, {"agent": "demo", "input": "ask", "metadata": {"n": 1}})
        slow = await submit(live.url, {"agent": "demo", "input": "take 30s"})
        async with httpx.AsyncClient(base_url=live.url) as client:
            await client.post(f"/v1/tasks/{slow['id']}/pause", json={})
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            await page.goto(f"{live.url}/ui/#/runs")
            await expect(page.locator(f'tr[data-task="{done["id"]}"] .state')).to_have_text(
                "completed", timeout=15_000
            )
            await expect(page.locator(".state.needs-you")).to_have_count(1, timeout=15_000)
            background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert (_luminance(background) < 0.1) == (scheme == "dark"), (scheme, background)
            # Text and every state's badge readable on what is behind it (WCAG AA, 4.5:1;
            # 3:1 for the badges' bold small text, as large text's).
            for text, colour, behind in await page.evaluate(_COLOURS, "td, h1"):
                assert _contrast(colour, behind) >= 4.5, (scheme, text, colour, behind)
            await expect(page.locator(".paused-mark")).to_have_count(1)
            for text, colour, behind in await page.evaluate(_COLOURS, ".state, .paused-mark"):
                assert _contrast(colour, behind) >= 3, (scheme, text, colour, behind)
            if scheme == "dark":
                await screenshot(page, "console-runs-dark", full_page=False, docs=True)
        assert console.errors == []


async def test_a_time_range_is_a_url_too(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "take 0.1s"})
        row = page.locator(f'tr[data-task="{task["id"]}"]')
        # A range after the task was made: not listed; the range's inputs show it.
        later = "2099-01-01T00:00:00.000Z"
        await page.goto(f"{live.url}/ui/#/runs?created_after={later}")
        await expect(page.get_by_label("created")).to_have_value("custom")
        await expect(page.get_by_label("from")).not_to_have_value("")
        await expect(page.locator("p.empty")).to_be_visible()
        await expect(row).to_have_count(0)
        # Chosen in the form: a range around now lists it, and the address holds it.
        await page.get_by_label("from").fill("2000-01-01T00:00")
        await page.get_by_label("from").dispatch_event("change")
        await expect(row).to_be_visible(timeout=5_000)
        assert "created_after=2000-01-01" in page.url
        await page.get_by_label("created").select_option("")
        await expect(page.get_by_label("from")).to_have_count(0)
        assert "created_after" not in page.url
        assert console.errors == []


async def test_a_state_filtered_list_gains_each_task_entering_the_state(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        await page.goto(f"{live.url}/ui/#/runs?state=completed")
        await expect(page.locator("p.empty")).to_be_visible()
        await asyncio.sleep(0.3)  # the list's live stream is open
        task = await submit(live.url, {"agent": "demo", "input": "take 1s"})
        row = page.locator(f'tr[data-task="{task["id"]}"]')
        await asyncio.sleep(0.5)
        await expect(row).to_have_count(0)  # pending, then running: not in this list
        await expect(row.locator(".state")).to_have_text("completed", timeout=15_000)
        await expect(page.locator(".count")).to_have_text("1 task")
        assert console.errors == []


async def test_a_burst_of_new_tasks_is_read_with_the_list_not_one_by_one(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    reads: list[str] = []
    page.on("request", lambda request: reads.append(request.url))
    async with serving(make_live, page) as live:
        await page.goto(f"{live.url}/ui/#/runs")
        await expect(page.locator("#tasks thead")).to_be_attached()
        await asyncio.sleep(0.3)  # the list's live stream is open
        made = await asyncio.gather(
            *(submit(live.url, {"agent": "demo", "input": "take 0.1s"}) for _ in range(20))
        )
        for task in made:
            row = page.locator(f'tr[data-task="{task["id"]}"] .state')
            await expect(row).to_have_text("completed", timeout=20_000)
        await expect(page.locator(".count")).to_have_text("20 tasks")
        one_by_one = [url for url in reads if re.search(r"/v1/tasks/[0-9a-f-]{36}$", url)]
        assert one_by_one == []  # 60 state changes, none read a task of its own
        assert console.errors == []


async def test_the_paused_filter_is_a_url_and_paused_rows_are_marked(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page, workers=False) as live:
        held = await submit(live.url, {"agent": "demo", "input": "take 0.1s"})
        free = await submit(live.url, {"agent": "demo", "input": "take 0.1s"})
        async with httpx.AsyncClient(base_url=live.url) as client:
            paused = await client.post(f"/v1/tasks/{held['id']}/pause", json={"reason": "wait"})
            assert paused.status_code == 200, paused.text
            await page.goto(f"{live.url}/ui/#/runs")
            held_row = page.locator(f'tr[data-task="{held["id"]}"]')
            free_row = page.locator(f'tr[data-task="{free["id"]}"]')
            await expect(held_row.locator(".paused-mark")).to_have_text("paused")
            await expect(held_row.locator(".state")).to_have_text("pending")
            await expect(free_row.locator(".paused-mark")).to_have_count(0)
            await page.get_by_label("paused").select_option("true")
            await expect(page).to_have_url(f"{live.url}/ui/#/runs?paused=true")
            await expect(free_row).to_have_count(0)
            await page.reload()
            await expect(page.get_by_label("paused")).to_have_value("true")
            await expect(page.locator("#tasks tbody tr")).to_have_count(1)
            await expect(held_row).to_be_visible()
            # Live: a task paused elsewhere joins the list of paused tasks.
            await asyncio.sleep(0.3)  # the list's live stream is open
            await client.post(f"/v1/tasks/{free['id']}/pause", json={})
            await expect(free_row.locator(".paused-mark")).to_be_visible(timeout=5_000)
            await page.goto(f"{live.url}/ui/#/runs?paused=false")
            await expect(page.locator("p.empty")).to_be_visible()
        assert console.errors == []
