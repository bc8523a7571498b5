"""``/api/v1/proxies``: the fleet's proxy pool (``crawlfleet proxies status``): every
proxy with its state, uses, successes, failures and bans; passwords as ``***``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from crawlfleet.fleet.proxies import ProxyPool
from crawlfleet.manager.auth import Ctx, Viewer

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/proxies", tags=["proxies"])


@router.get("", summary="every proxy of the fleet's pool")
async def proxies(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    return {"proxies": await ProxyPool(ctx.redis, ctx.key_prefix).status()}
