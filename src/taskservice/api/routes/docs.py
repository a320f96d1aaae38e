"""`/docs` (Swagger UI) and `/redoc`: the API's reference, working with no network.

FastAPI's own pages load their scripts, styles, fonts and icon from CDNs (and are
blank offline); these serve the same pages with every file from the package:
`taskservice/api/static/vendor/`, copied unchanged from npm by `frontend/`'s
`npm run vendor` (versions and digests in `VENDORED.json`). Every URL in the pages
is relative, so they work behind a path prefix as the dashboard does. No key: the
OpenAPI document they read is public too.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from fastapi import APIRouter, HTTPException, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse, Response

router = APIRouter(tags=["docs"], include_in_schema=False)

DOCS = "/docs"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
REDOC = "/redoc"
STATIC = "/docs/static"

_OPENAPI = "openapi.json"  # relative: next to /docs and /redoc, behind any prefix
_JS = "text/javascript; charset=utf-8"
# name served → (the npm package's folder in vendor/, media type)
_FILES = {
    "swagger-ui-bundle.js": ("swagger-ui-dist", _JS),
    "swagger-ui.css": ("swagger-ui-dist", "text/css; charset=utf-8"),
    "favicon-32x32.png": ("swagger-ui-dist", "image/png"),
    "redoc.standalone.js": ("redoc", _JS),
    # The bundles' first lines point here for their third-party licences.
    "swagger-ui-bundle.js.LICENSE.txt": ("swagger-ui-dist", "text/plain; charset=utf-8"),
    "redoc.standalone.js.LICENSE.txt": ("redoc", "text/plain; charset=utf-8"),
}
# The pages run an inline script (the one FastAPI writes to start the viewer), and
# both viewers set inline styles; everything else is this origin's. Redoc searches
# in a worker it makes from a blob.
_CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_PAGE_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # revalidated: a new release's files are named at once
}
_FILE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    # The pages name each file with its digest (`?v=`): a new file is a new URL.
    "Cache-Control": "public, max-age=31536000, immutable",
}


def _vendor() -> resources.abc.Traversable:
    return resources.files("taskservice") / "api" / "static" / "vendor"


@cache
def _digests() -> dict[str, str]:
    """Each served file's SHA-256, from the manifest `npm run vendor` writes."""
    manifest = json.loads((_vendor() / "VENDORED.json").read_text(encoding="utf-8"))
    return {
        name: entry["sha256"]
        for package in manifest.values()
        for name, entry in package["files"].items()
    }


def asset_url(name: str) -> str:
    """A vendored file's URL relative to `/docs` and `/redoc`, changing with its bytes."""
    return f"{STATIC.lstrip('/')}/{name}?v={_digests()[name][:16]}"


@router.api_route(DOCS, methods=["GET", "HEAD"])
async def swagger_ui(request: Request) -> HTMLResponse:
    # Swagger UI's OAuth2 redirect is `location.origin` + this path (its own rule),
    # so it is an absolute path, under the ASGI root path as FastAPI's page has it.
    root_path = request.scope.get("root_path", "").rstrip("/")
    page = get_swagger_ui_html(
        openapi_url=_OPENAPI,
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=asset_url("swagger-ui-bundle.js"),
        swagger_css_url=asset_url("swagger-ui.css"),
        swagger_favicon_url=asset_url("favicon-32x32.png"),
        oauth2_redirect_url=root_path + OAUTH2_REDIRECT,
        # No badge fetched from validator.swagger.io for a document not on localhost.
        swagger_ui_parameters={"validatorUrl": None},
    )
    page.headers.update(_PAGE_HEADERS)
    return page


@router.api_route(OAUTH2_REDIRECT, methods=["GET", "HEAD"])
async def swagger_ui_oauth2_redirect() -> HTMLResponse:
    page = get_swagger_ui_oauth2_redirect_html()
    page.headers.update(_PAGE_HEADERS)
    return page


@router.api_route(REDOC, methods=["GET", "HEAD"])
async def redoc(request: Request) -> HTMLResponse:
    page = get_redoc_html(
        openapi_url=_OPENAPI,
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=asset_url("redoc.standalone.js"),
        redoc_favicon_url=asset_url("favicon-32x32.png"),
        with_google_fonts=False,
    )
    page.headers.update(_PAGE_HEADERS)
    return page


@router.api_route(STATIC + "/{name}", methods=["GET", "HEAD"])
async def vendored_file(name: str) -> Response:
    known = _FILES.get(name)
    if known is None:
        raise HTTPException(status_code=404, detail=f"no such file: {name}")
    package, media_type = known
    return Response(
        (_vendor() / package / name).read_bytes(), media_type=media_type, headers=_FILE_HEADERS
    )
