"""A real browser for the dashboard: Debian's Chromium driven by Playwright.

Browser downloads are not possible here, so Playwright launches the system's
`/usr/bin/chromium` (`TASKSERVICE_CHROMIUM` to name another). Without one the tests
are skipped, unless `TASKSERVICE_REQUIRE_BROWSER=1` (set by `.ci/run`, which installs
Chromium) makes that a failure. Every page collects its console errors and uncaught
exceptions; a test passes only if there were none. Screenshots go to
`tests/browser/screenshots/`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright

from tests.conftest import LiveFactory, LiveServer

CHROMIUM = os.environ.get("TASKSERVICE_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(__file__).parent / "screenshots"
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
# As the machine's own probe starts it: no sandbox as root, and nothing that reaches
# for the network this machine does not have.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    if not shutil.which(CHROMIUM):
        if os.environ.get("TASKSERVICE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"no browser at {CHROMIUM}: apt-get install chromium")
        pytest.skip(f"no browser at {CHROMIUM} (apt-get install chromium)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        await launched.close()


class Console:
    """What a page said that is wrong: console errors and uncaught exceptions."""

    def __init__(self) -> None:
        self.errors: list[str] = []


@pytest.fixture
async def console() -> Console:
    return Console()


@pytest.fixture
async def page(browser: Browser, console: Console) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    opened = await context.new_page()
    opened.on("console", lambda m: console.errors.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda exc: console.errors.append(f"uncaught: {exc}"))
    yield opened
    await context.close()


@asynccontextmanager
async def serving(
    make_live: LiveFactory, page: Page, *, workers: bool = True, **settings: Any
) -> AsyncIterator[LiveServer]:
    """A live server (with workers, unless told) for `page`; the page lets go of its
    event streams before the server stops (a server waits for open connections)."""
    async with make_live(workers_enabled=workers, **settings) as live:
        try:
            yield live
        finally:
            await page.goto("about:blank")


# What no task content may do in the page: run as script (each page's XSS test puts it
# in what a task, a schedule, a webhook or a key carries; `window.__xss` stays unset).
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


async def post(url: str, path: str, body: dict[str, Any], key: str | None = None) -> Any:
    """POST `body` to the live server at `url`, as a client would; it must answer 201."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(base_url=url, headers=headers) as client:
        response = await client.post(path, json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def submit(url: str, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    """A task submitted over the API: what the POST answered."""
    return await post(url, "/v1/tasks", body, key)  # type: ignore[no-any-return]


async def screenshot(page: Page, name: str, *, full_page: bool = True, docs: bool = False) -> None:
    """A screenshot in `tests/browser/screenshots/`; `docs`: also `docs/images/`, where
    the documentation shows it, so that the docs never show an older console than the
    one the tests last ran (commit the new image with a change to the console)."""
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=full_page)
    if docs:
        DOCS_IMAGES.mkdir(exist_ok=True)
        await page.screenshot(path=DOCS_IMAGES / f"{name}.png", full_page=full_page)
