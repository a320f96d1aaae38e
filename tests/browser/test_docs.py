"""`/docs` (Swagger UI) and `/redoc` in a real browser that has no network: every
request for another host than the service's is aborted, and recorded. The pages must
render the API from the files the package serves, and ask for nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Page, Request, Route, expect

from tests.browser.conftest import Console, screenshot, serving
from tests.conftest import LiveFactory, LiveServer

LOCAL_HOSTS = {"127.0.0.1", "localhost"}


class Offline:
    """The page's context with the network cut: what it asked for elsewhere."""

    def __init__(self) -> None:
        self.elsewhere: list[str] = []  # aborted by the route
        self.requested: list[str] = []  # every request the page made, as it saw it

    def is_elsewhere(self, url: str) -> bool:
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about"):
            return False  # made in the page, never on the network
        return parts.hostname not in LOCAL_HOSTS

    async def route(self, route: Route) -> None:
        if self.is_elsewhere(route.request.url):
            self.elsewhere.append(route.request.url)
            await route.abort("internetdisconnected")
        else:
            await route.continue_()


@pytest.fixture
async def offline(page: Page) -> Offline:
    cut = Offline()
    await page.context.route("**/*", cut.route)

    def seen(request: Request) -> None:
        cut.requested.append(request.url)

    page.on("request", seen)
    return cut


@pytest.fixture
async def live(make_live: LiveFactory, page: Page) -> AsyncIterator[LiveServer]:
    async with serving(make_live, page, workers=False) as server:
        yield server


def assert_nothing_asked_elsewhere(offline: Offline) -> None:
    assert offline.elsewhere == []
    assert [url for url in offline.requested if offline.is_elsewhere(url)] == []


async def test_swagger_ui_renders_the_api_with_the_network_off(
    live: LiveServer, page: Page, offline: Offline, console: Console
) -> None:
    await page.goto(f"{live.url}/docs")
    await expect(page.locator(".swagger-ui .info .title")).to_contain_text(
        "taskservice", timeout=15_000
    )
    submit = page.locator("#operations-tasks-createTask")
    await expect(submit.locator(".opblock-summary-path")).to_have_text("/v1/tasks")
    await expect(submit.locator(".opblock-summary-description")).to_have_text("Submit a task")
    # An operation opens: its parameters and responses are drawn from the document.
    await submit.locator(".opblock-summary").click()
    await expect(submit.locator(".responses-wrapper")).to_contain_text("201")
    await screenshot(page, "docs-swagger", full_page=False)
    # "Try it out" calls the service from the page (the policy lets it, and only it).
    agents = page.locator("#operations-agents-listAgents")
    await agents.locator(".opblock-summary").click()
    await agents.locator(".try-out__btn").click()
    await agents.locator(".execute").click()
    await expect(
        agents.locator(".live-responses-table td.response-col_status:not(.col_header)")
    ).to_contain_text("200")
    await expect(agents.locator(".live-responses-table")).to_contain_text('"demo"')
    assert_nothing_asked_elsewhere(offline)
    assert console.errors == []


async def test_redoc_renders_the_api_with_the_network_off(
    live: LiveServer, page: Page, offline: Offline, console: Console
) -> None:
    await page.goto(f"{live.url}/redoc")
    await expect(page.locator(".api-info h1")).to_contain_text("taskservice", timeout=15_000)
    await expect(page.locator("h2", has_text="Submit a task")).to_be_visible()
    await expect(page.locator("[role=navigation], .menu-content").first).to_contain_text(
        "List tasks, newest first"
    )
    await screenshot(page, "docs-redoc", full_page=False)
    # Its search runs in a worker made from a blob (the policy lets it).
    await page.locator("input[placeholder='Search...']").fill("cancel")
    await expect(page.locator("[data-role='search:results']")).to_contain_text("Cancel a task")
    assert_nothing_asked_elsewhere(offline)
    assert console.errors == []
