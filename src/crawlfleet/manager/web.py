"""The dashboard's files: ``/`` (the page) and ``/assets/NAME`` (its script, style and
icon), all from the package (no build step, nothing from outside), and the security
headers every answer of the manager carries.

The page is one static shell; the script signs in through ``/session`` and draws
everything from the API, putting what comes from crawled pages into the page as text
only. The Content-Security-Policy allows scripts, styles and connections from the
manager alone, and no inline script or style.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources

from fastapi import APIRouter, FastAPI, HTTPException, Request, Response
from starlette.middleware.gzip import GZipMiddleware

import crawlfleet

__all__ = ["CSP", "install_dashboard"]

CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
#: The dashboard's assets: name -> media type (nothing else is served from the folder).
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
#: Assets are fetched with ``?v=<version>``: a new release is a new URL.
ASSET_MAX_AGE = 86_400


def _read(name: str) -> bytes:
    return (resources.files("crawlfleet.manager") / "dashboard" / name).read_bytes()


def install_dashboard(app: FastAPI) -> None:
    """Serve the dashboard at ``/`` and add the security headers to every answer."""
    page = _read("index.html").replace(b"{{version}}", crawlfleet.__version__.encode())
    assets = {name: _read(name) for name in ASSETS}
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def index() -> Response:
        return Response(
            page, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-store"}
        )

    @router.get("/assets/{name}")
    async def asset(name: str) -> Response:
        if name not in assets:
            raise HTTPException(404, f"no asset {name[:100]!r}")
        return Response(
            assets[name],
            media_type=ASSETS[name],
            headers={"Cache-Control": f"public, max-age={ASSET_MAX_AGE}"},
        )

    app.include_router(router)
    app.add_middleware(GZipMiddleware, minimum_size=1000)

    @app.middleware("http")
    async def security_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response
