"""`/docs` and `/redoc` name only the service's own files, each served from the
package with its type; nothing in the pages points at another host."""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from taskservice.api.app import create_app
from taskservice.settings import Settings

VENDOR = resources.files("taskservice") / "api" / "static" / "vendor"
BASE = "http://testserver"
# What a page names: its links, scripts and Redoc's document; Swagger UI's document.
REFERENCE = re.compile(r"""(?:href|src|spec-url)="([^"]*)"|\burl: '([^']*)'""")
TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".json": "application/json",
}


def references(html: str) -> list[str]:
    return [href or url for href, url in REFERENCE.findall(html)]


def manifest_digests() -> dict[str, str]:
    manifest = json.loads((VENDOR / "VENDORED.json").read_text())
    return {
        name: entry["sha256"]
        for package in manifest.values()
        for name, entry in package["files"].items()
    }


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/docs", {"openapi.json", "swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"}),
        ("/redoc", {"openapi.json", "redoc.standalone.js", "favicon-32x32.png"}),
    ],
)
async def test_a_reference_page_names_only_its_own_files(
    client: httpx.AsyncClient, path: str, expected: set[str]
) -> None:
    page = await client.get(path)
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "http://" not in page.text
    assert "https://" not in page.text
    assert "fonts.googleapis" not in page.text
    policy = page.headers["content-security-policy"]
    assert "http" not in policy  # no other origin allowed, for anything
    assert "connect-src 'self'" in policy
    assert "img-src 'self' data:" in policy
    named = references(page.text)
    assert {urlsplit(url).path.rsplit("/", 1)[-1] for url in named} == expected
    digests = manifest_digests()
    for url in named:
        # Relative (no scheme, no host, no leading slash): right behind a path prefix.
        parts = urlsplit(url)
        assert (parts.scheme, parts.netloc) == ("", ""), url
        assert not url.startswith("/"), url
        served = await client.get(urljoin(f"{BASE}{path}", url))
        assert served.status_code == 200, url
        name = parts.path.rsplit("/", 1)[-1]
        assert served.headers["content-type"] == TYPES[name[name.rfind(".") :]], url
        if name == "openapi.json":
            assert served.json()["info"]["title"] == "taskservice"
            continue
        # A vendored file: the package's bytes, named by their digest, kept a year.
        assert parts.path.startswith("docs/static/"), url
        digest = hashlib.sha256(served.content).hexdigest()
        assert digest == digests[name], url
        assert parts.query == f"v={digest[:16]}", url
        assert served.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert served.headers["x-content-type-options"] == "nosniff"


async def test_the_oauth2_redirect_page_is_served_as_fastapis_was(
    client: httpx.AsyncClient,
) -> None:
    docs = await client.get("/docs")
    assert "oauth2RedirectUrl: window.location.origin + '/docs/oauth2-redirect'" in docs.text
    page = await client.get("/docs/oauth2-redirect")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "swaggerUIRedirectOauth2" in page.text
    assert "http://" not in page.text
    assert "https://" not in page.text


async def test_behind_a_path_prefix_the_pages_name_the_same_relative_files(
    settings: Settings,
) -> None:
    """An ASGI root path (a proxy's prefix) changes no relative URL; the OAuth2
    redirect, an absolute path by Swagger UI's rule, is under it. (No lifespan: the
    pages need no runtime.)"""
    app = create_app(settings)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, root_path="/prefix"), base_url=BASE
    ) as client:
        docs = await client.get("/prefix/docs")
        redoc = await client.get("/prefix/redoc")
        plain = await client.get("/prefix/docs/static/swagger-ui.css")
    assert (docs.status_code, redoc.status_code, plain.status_code) == (200, 200, 200)
    assert "'/prefix/docs/oauth2-redirect'" in docs.text
    for page in (docs, redoc):
        assert all(not url.startswith("/") for url in references(page.text))


async def test_only_the_vendored_files_the_pages_load_are_served(
    client: httpx.AsyncClient,
) -> None:
    for name in ("swagger-ui-bundle.js.LICENSE.txt", "redoc.standalone.js.LICENSE.txt"):
        licence = await client.get(f"/docs/static/{name}")  # the bundles point there
        assert licence.headers["content-type"] == "text/plain; charset=utf-8"
    for missing in (
        "/docs/static/LICENSE",
        "/docs/static/VENDORED.json",
        "/docs/static/swagger-ui-bundle.js.map",
        "/docs/static/../routes/docs.py",
        "/docs/static/nope.js",
    ):
        assert (await client.get(missing)).status_code == 404, missing
    head = await client.head("/docs/static/redoc.standalone.js")
    assert head.status_code == 200
    assert head.headers["content-type"] == TYPES[".js"]


async def test_the_reference_pages_are_not_in_the_api_document(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not [path for path in paths if path.startswith(("/docs", "/redoc"))]
