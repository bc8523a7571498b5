"""The dashboard's files: ``/`` (the page) and ``/assets/NAME`` (its scripts, style and
icon), all from the package (no build step, nothing from outside).

The page is one static shell; its scripts (ES modules) sign in through ``/session``
and draw everything from the API, putting what comes from crawled pages into the page
as text only. The Content-Security-Policy allows scripts, styles and connections from the
manager alone, and no inline script or style.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from fastapi import APIRouter, FastAPI, HTTPException, Request, Response
from starlette.middleware.gzip import GZipMiddleware

import crawlfleet

__all__ = ["ASSETS", "install_dashboard"]

#: The dashboard's assets: name -> media type (nothing else is served from the folder).
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "core.js": "text/javascript; charset=utf-8",
    "dom.js": "text/javascript; charset=utf-8",
    "pages.js": "text/javascript; charset=utf-8",
    "lists.js": "text/javascript; charset=utf-8",
    "runs.js": "text/javascript; charset=utf-8",
    "campaigns.js": "text/javascript; charset=utf-8",
    "items.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}


def _read(name: str) -> bytes:
    return (resources.files("crawlfleet.manager") / "dashboard" / name).read_bytes()


def install_dashboard(app: FastAPI) -> None:
    """Serve the dashboard at ``/`` and its assets (gzipped where that helps)."""
    page = _read("index.html").replace(b"{{version}}", crawlfleet.__version__.encode())
    assets = {name: _read(name) for name in ASSETS}
    # the scripts import each other by plain names: a browser asks again each time
    # (no-cache) and gets 304 while its copy is the manager's (ETag of the content)
    etags = {name: f'"{hashlib.sha256(body).hexdigest()[:32]}"' for name, body in assets.items()}
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def index() -> Response:
        return Response(
            page, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-store"}
        )

    @router.get("/assets/{name}")
    async def asset(name: str, request: Request) -> Response:
        if name not in assets:
            raise HTTPException(404, f"no asset {name[:100]!r}")
        headers = {"Cache-Control": "no-cache", "ETag": etags[name]}
        if request.headers.get("if-none-match") == etags[name]:
            return Response(status_code=304, headers=headers)
        return Response(assets[name], media_type=ASSETS[name], headers=headers)

    app.include_router(router)
    app.add_middleware(GZipMiddleware, minimum_size=1000)
