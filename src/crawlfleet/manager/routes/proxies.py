"""``/api/v1/proxies``: the fleet's proxy pool, as ``crawlfleet proxies`` shows and
changes it: every proxy with its state, uses, successes, failures and bans (passwords
as ``***``); an admin adds proxies and takes them out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from crawlfleet.exceptions import NotFound
from crawlfleet.fleet.proxies import ProxyPool, check_proxy_url, shown
from crawlfleet.manager.auth import Admin, Ctx, Viewer
from crawlfleet.manager.context import ManagerContext
from crawlfleet.manager.routes.models import ProxiesBody, ProxyIdPath

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/proxies", tags=["proxies"])


def _pool(ctx: ManagerContext) -> ProxyPool:
    """The fleet's pool, with the key of the state DB's secrets (shared with the nodes)."""
    return ProxyPool(ctx.redis, ctx.key_prefix, ctx.db.secrets)


@router.get("", summary="every proxy of the fleet's pool")
async def proxies(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    return {"proxies": await _pool(ctx).status()}


@router.post("", summary="add proxies to the pool (those removed before stay out)")
async def add(body: ProxiesBody, ctx: Ctx, token: Admin) -> dict[str, Any]:
    urls = [check_proxy_url(url, "proxies") for url in body.proxies]  # ConfigError: 400
    added, size = await _pool(ctx).add(list(dict.fromkeys(urls)))
    detail = {"added": added, "proxies": [shown(u) for u in urls[:20]]}
    await ctx.record(token.name, "proxies.add", None, detail)
    return {"added": added, "size": size}


@router.delete("/{pid}", summary="take a proxy out of the pool for good")
async def remove(pid: ProxyIdPath, ctx: Ctx, token: Admin) -> dict[str, Any]:
    if not await _pool(ctx).remove([pid]):
        raise NotFound(f"no proxy {pid} in the pool")
    await ctx.record(token.name, "proxies.remove", None, {"id": pid})
    return {"removed": pid}
