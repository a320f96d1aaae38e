"""The dashboard's files are served by the service itself, with a strict policy."""

from __future__ import annotations

import httpx


async def test_the_dashboard_is_served_from_the_package_under_a_strict_policy(
    client: httpx.AsyncClient,
) -> None:
    moved = await client.get("/ui")
    assert (moved.status_code, moved.headers["location"]) == (308, "ui/")
    page = await client.get("/ui/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "'unsafe-inline'" not in policy
    assert '<script type="module" src="static/console.js">' in page.text
    script = await client.get("/ui/static/console.js")
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert "EventSource" in script.text
    style = await client.get("/ui/static/console.css")
    assert style.headers["content-type"] == "text/css; charset=utf-8"
    licences = await client.get("/ui/static/LICENSES.txt")
    assert "preact" in licences.text
    assert "uplot" in licences.text
    for missing in (
        "/ui/static/index.html",
        "/ui/static/../settings.py",
        "/ui/static/nope.js",
        "/ui/static/BUILD.json",
    ):
        assert (await client.get(missing)).status_code == 404


async def test_the_dashboard_is_not_in_the_api_document(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not [path for path in paths if path.startswith("/ui")]


async def test_the_service_address_opens_the_dashboard(client: httpx.AsyncClient) -> None:
    """`/` in a browser is the dashboard, not a JSON 404; it is no API operation."""
    for method in ("GET", "HEAD"):
        moved = await client.request(method, "/")
        assert (moved.status_code, moved.headers["location"]) == (307, "ui/")
    assert "/" not in (await client.get("/openapi.json")).json()["paths"]
