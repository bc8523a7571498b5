"""The manager's ASGI application: ``create_app(settings, redis_url, db)``.

Stateless apart from Redis (the live fleet) and the state DB, so several managers can
serve one fleet. At start it pings Redis and brings the state DB's schema up to date.
``/healthz`` (no token) says whether both answer; ``/openapi.json`` describes the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from redis.asyncio import Redis
from scrapy.settings import BaseSettings
from sqlalchemy.exc import SQLAlchemyError

import crawlfleet
from crawlfleet.manager import metrics
from crawlfleet.manager.context import ManagerContext
from crawlfleet.manager.edge import Edge
from crawlfleet.manager.problems import install_error_handlers
from crawlfleet.manager.routes import (
    alerts,
    campaigns,
    errors,
    events,
    items,
    jobs,
    limits,
    live,
    nodes,
    proxies,
    scrapyd,
    session,
    timers,
)
from crawlfleet.manager.watcher import watch
from crawlfleet.manager.web import install_dashboard
from crawlfleet.redis.connection import REDIS_FAILURES, make_client
from crawlfleet.settings.access import get_int
from crawlfleet.state.db import StateDB
from crawlfleet.state.sealing import Sealer, reseal

__all__ = ["create_app"]

logger = logging.getLogger(__name__)

#: Seconds the manager waits for Redis to connect and to answer each call.
REDIS_TIMEOUT_SECONDS = 5.0
#: How long a stopping manager waits for its own tasks and its Redis connections.
STOP_WAIT_SECONDS = 5.0


def create_app(settings: BaseSettings, redis_url: str, db: StateDB) -> FastAPI:
    """The application; ConfigError now for a wrong setting. The Redis client is made,
    the state DB migrated and its secrets sealed when it starts (lifespan); *db* is
    closed when it stops. *db* gets the sealer of *settings* unless it has one."""
    client: Redis = make_client(
        redis_url,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
    )
    ctx = ManagerContext.build(settings, client, redis_url, db)
    if db.sealer is None:
        db.sealer = Sealer.from_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        revision = await ctx.in_db(db.upgrade)
        logger.info("state DB %s at schema revision %s", db.shown, revision)
        sealed = await ctx.in_db(reseal, db, db.secrets)
        if sealed:
            logger.info("state DB %s: %d secrets kept in clear are sealed now", db.shown, sealed)
        try:
            await client.ping()
        except REDIS_FAILURES as exc:  # serve anyway: /healthz says so until Redis is back
            logger.warning("Redis does not answer yet: %s", type(exc).__name__)
        watcher = asyncio.create_task(watch(ctx, ctx.watch_seconds), name="crawlfleet-watch")
        try:
            yield
        finally:
            # the watch, webhook deliveries and figures still being made (a live
            # stream's next one) end with the manager; a stop never waits long for them
            tasks = [watcher, *ctx.deliveries, *ctx.figures.making()]
            for task in tasks:
                task.cancel()
            _, stuck = await asyncio.wait(tasks, timeout=STOP_WAIT_SECONDS)
            if stuck:
                logger.warning(
                    "stopping: %s did not end within %.0f s",
                    ", ".join(sorted(t.get_name() for t in stuck)),
                    STOP_WAIT_SECONDS,
                )
            with contextlib.suppress(*REDIS_FAILURES, TimeoutError):
                await asyncio.wait_for(client.aclose(), STOP_WAIT_SECONDS)
            await ctx.in_db(ctx.items.close)
            db.close()

    app = FastAPI(
        title="crawlfleet manager",
        version=crawlfleet.__version__,
        summary="Sees and steers a crawlfleet fleet: jobs, nodes, limits, control.",
        lifespan=lifespan,
        docs_url=None,  # interactive docs would load assets from a CDN: none served
        redoc_url=None,
    )
    app.state.ctx = ctx
    install_error_handlers(app)
    for module in (
        jobs,
        errors,
        items,
        campaigns,
        proxies,
        limits,
        nodes,
        events,
        live,
        scrapyd,
        timers,
        alerts,
        metrics,
        session,
    ):
        app.include_router(module.router)
    install_dashboard(app)
    app.add_middleware(  # outermost: bounds, the caller, headers, JSON 500s
        Edge,
        max_body=get_int(settings, "CRAWLFLEET_MANAGER_MAX_BODY", minimum=1024),
        max_egg=get_int(settings, "CRAWLFLEET_MANAGER_MAX_EGG", minimum=1024),
        on_change=ctx.changed,
    )

    @app.get("/healthz", tags=["health"], summary="whether Redis and the state DB answer")
    async def healthz() -> JSONResponse:
        checks: dict[str, Any] = {}
        try:
            await client.ping()
            checks["redis"] = "ok"
        except REDIS_FAILURES as exc:
            checks["redis"] = f"unavailable ({type(exc).__name__})"
        try:
            await ctx.in_db(db.check)
            checks["state_db"] = "ok"
        except SQLAlchemyError as exc:
            checks["state_db"] = f"unavailable ({type(exc).__name__})"
        ok = all(v == "ok" for v in checks.values())
        return JSONResponse({"status": "ok" if ok else "degraded", **checks}, 200 if ok else 503)

    return app
