"""`/ui`: the console, served by the service itself from files in the package.

The console (`taskservice/ui/`: one HTML page, one ES module bundle and one
stylesheet, built by `frontend/`'s `npm run console` from `frontend/console/` with
Preact and uPlot, and committed: `BUILD.json` records what they were built from) is a
client of the public API: it signs in with an API key (kept in the browser's session
storage) and follows tasks over the event streams with stream tokens. These routes
serve its files only, with no key: nothing here reads a tenant's data. A strict
Content-Security-Policy keeps the page to its own files and its own origin.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, HTTPException
from fastapi.responses import RedirectResponse, Response

router = APIRouter(tags=["ui"], include_in_schema=False)

_FILES = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "LICENSES.txt": "text/plain; charset=utf-8",
}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # revalidated: a new release is seen at once
}


def _read(name: str) -> bytes:
    return (resources.files("taskservice") / "ui" / name).read_bytes()


@router.api_route("/", methods=["GET", "HEAD"])
async def root() -> RedirectResponse:
    """The service's address, opened in a browser: the dashboard (the API's reference
    is at `/docs`)."""
    return RedirectResponse("ui/", status_code=307)  # relative: right behind a prefix


@router.api_route("/ui", methods=["GET", "HEAD"])
async def ui_root() -> RedirectResponse:
    return RedirectResponse("ui/", status_code=308)  # relative: right behind a path prefix


@router.api_route("/ui/", methods=["GET", "HEAD"])
async def ui_page() -> Response:
    return Response(_read("index.html"), media_type="text/html; charset=utf-8", headers=_HEADERS)


@router.api_route("/ui/static/{name}", methods=["GET", "HEAD"])
async def ui_file(name: str) -> Response:
    media_type = _FILES.get(name)
    if media_type is None:
        raise HTTPException(status_code=404, detail=f"no such file: {name}")
    return Response(_read(f"static/{name}"), media_type=media_type, headers=_HEADERS)
