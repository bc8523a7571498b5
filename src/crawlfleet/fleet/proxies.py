"""The fleet's proxy pool, shared by every node and job through Redis (keys
``<prefix>:{proxies}:*``, one hash slot: crawlfleet.redis.keys.ProxyKeys): each proxy's
uses, failures and bans, a cool-down after a failure, eviction after failures in a row,
a per-site ban that keeps a proxy away from the site that banned it (and only from that
one), and retirement after a set number of uses. A proxy that left the pool is never
taken back by a refill.

Sources (``CRAWLFLEET_PROXIES``): a list of proxy URLs, a file (``@path`` or an existing
path: one URL a line, ``#`` comments), or a provider's HTTP endpoint
(``provider+http://...``: its body lists proxy URLs, one a line or as a JSON list),
fetched again, by one node at a time, whenever the pool runs low.

Credentials in proxy URLs (a user and password, an API key as the user or in the query)
are never logged or shown (:func:`shown`), and never kept in Redis in the clear: a URL
that holds any is sealed (:class:`~crawlfleet.state.sealing.Sealer`, the key of
``CRAWLFLEET_SECRET_KEY``, which the manager and every node must share, else the key
file under ``CRAWLFLEET_DATA_DIR``) before it goes to the pool, and unsealed by the node
that picks it. A pool without a sealer refuses such URLs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import Redis
from scrapy.settings import BaseSettings

from crawlfleet.exceptions import ConfigError
from crawlfleet.redis.connection import redact
from crawlfleet.redis.keys import ProxyKeys
from crawlfleet.redis.replies import text
from crawlfleet.redis.scripts import script_source
from crawlfleet.settings.access import get_path, get_str
from crawlfleet.state.sealing import KEY_FILE, PREFIX, Sealer

__all__ = [
    "PickedProxy",
    "ProxyPool",
    "ProxySources",
    "has_secret",
    "parse_sources",
    "proxy_id",
    "proxy_sealer",
    "shown",
]

logger = logging.getLogger(__name__)

#: Proxies read at a time by a pick (the whole pool is looked through, least used first).
PAGE = 200
#: A provider is asked at most once per this long, fleet-wide.
REFILL_EVERY_MS = 10_000
#: The largest provider answer read.
PROVIDER_MAX_BYTES = 4 * 2**20


def proxy_id(url: str) -> str:
    """A short stable id of *url* (credentials included: the same host with other
    credentials is another proxy)."""
    return hashlib.sha1(url.encode()).hexdigest()[:12]


def shown(url: str) -> str:
    """*url* as it may be logged or shown: scheme, host, port and path only; any
    credentials (a user, a password, an API key as the user or in the query) as
    ``***``."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return redact(url.split("?", 1)[0])
    secret = "***@" if "@" in parts.netloc else ""
    query = "?***" if parts.query else ""
    return f"{parts.scheme}://{secret}{host}{port}{parts.path}{query}"


def check_proxy_url(url: str, where: str) -> str:
    """*url* if it names an HTTP(S) proxy (scheme, host, port), else ConfigError (the
    URL redacted)."""
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ConfigError(f"{where}: {shown(url)!r} is not a proxy URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        raise ConfigError(
            f"{where}: {shown(url)!r} is not a proxy URL like http://user:pass@host:8080"
        )
    return url


@dataclass(frozen=True)
class ProxySources:
    """Proxy URLs given directly (a list or a file), and/or a provider endpoint."""

    urls: tuple[str, ...] = ()
    provider: str = ""


def _lines(body: str) -> list[str]:
    return [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.startswith("#")]


def parse_sources(value: Any) -> ProxySources:
    """``CRAWLFLEET_PROXIES`` (a list, a comma-separated string, ``@file``, a file path,
    ``provider+http://...``); ConfigError naming what is wrong."""
    items: list[str] = []
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, Iterable):
        items = [str(v).strip() for v in value if str(v).strip()]
    urls: list[str] = []
    provider = ""
    for item in items:
        if item.startswith("provider+"):
            provider = check_proxy_url(item.removeprefix("provider+"), "CRAWLFLEET_PROXIES")
            continue
        path = Path(item.removeprefix("@"))
        if item.startswith("@") or ("://" not in item and path.is_file()):
            try:
                listed = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(
                    f"CRAWLFLEET_PROXIES: cannot read {path}: {exc.strerror}"
                ) from None
            urls += [check_proxy_url(u, f"CRAWLFLEET_PROXIES ({path})") for u in _lines(listed)]
            continue
        urls.append(check_proxy_url(item, "CRAWLFLEET_PROXIES"))
    if not urls and not provider:
        raise ConfigError(
            "CRAWLFLEET_PROXY_ENABLED is on but CRAWLFLEET_PROXIES names no proxy (a list "
            "of proxy URLs, @file, or provider+http://...)"
        )
    return ProxySources(tuple(dict.fromkeys(urls)), provider)


def parse_provider_answer(body: bytes) -> list[str]:
    """The proxy URLs of a provider's answer (a JSON list, or one URL a line); the bad
    ones are skipped with a warning (redacted)."""
    answer = body[:PROVIDER_MAX_BYTES].decode("utf-8", errors="replace").strip()
    raw: list[Any]
    if answer.startswith("["):
        try:
            raw = json.loads(answer)
        except json.JSONDecodeError:
            raw = []
    else:
        raw = _lines(answer)
    out = []
    for item in raw:
        try:
            out.append(check_proxy_url(str(item), "proxy provider"))
        except ConfigError as exc:
            logger.warning("%s: skipped", exc)
    return out


@dataclass(frozen=True)
class PickedProxy:
    id: str
    url: str
    uses: int
    #: proxies left in the pool (after this pick)
    left: int


def proxy_sealer(settings: BaseSettings, *, create: bool) -> Sealer | None:
    """The sealer of the proxy pool: of ``CRAWLFLEET_SECRET_KEY``, else of the key file
    under ``CRAWLFLEET_DATA_DIR``, made when missing only if *create* (URLs with
    credentials are about to be added). None: no key (the pool takes no credentials)."""
    configured = get_str(settings, "CRAWLFLEET_SECRET_KEY").strip()
    key_file = get_path(settings, "CRAWLFLEET_DATA_DIR") / KEY_FILE
    if not create and not configured and not key_file.exists():
        return None
    return Sealer.from_settings(settings)


def has_secret(url: str) -> bool:
    """Whether proxy URL *url* holds credentials (a user, a password, a query)."""
    parts = urlsplit(url.strip())
    return "@" in parts.netloc or bool(parts.query)


class ProxyPool:
    """The fleet's proxy pool on *client* (see the module docstring); *sealer* seals
    the URLs with credentials that go to Redis and unseals those picked (None: only
    proxies without credentials may be added)."""

    def __init__(self, client: Redis, prefix: str, sealer: Sealer | None = None) -> None:
        self.client = client
        self.sealer = sealer
        #: proxy ids whose URL this pool's key could not unseal (said once each)
        self._unreadable: set[str] = set()
        self.keys = ProxyKeys.of(prefix)
        self._pick = client.register_script(script_source("proxy_pick"))
        self._report = client.register_script(script_source("proxy_report"))
        self._add = client.register_script(script_source("proxy_add"))

    async def add(self, urls: Sequence[str]) -> tuple[int, int]:
        """Add *urls* (those that never left the pool): (added, pool size)."""
        if not urls:
            return 0, int(await self.client.zcard(self.keys.live))
        args: list[str] = []
        for url in urls:
            args += [proxy_id(url), self._stored(url)]
        added, size = await self._add(keys=self.keys.for_proxy_add(), args=args)
        return int(added), int(size)

    def _stored(self, url: str) -> str:
        """*url* as the pool keeps it: sealed when it holds credentials."""
        if not has_secret(url):
            return url
        if self.sealer is None:
            raise ConfigError(
                f"{shown(url)!r} holds credentials, which are sealed before they go to "
                "Redis: this pool has no key (CRAWLFLEET_SECRET_KEY)"
            )
        return self.sealer.seal(url)

    def _readable(self, pid: str, stored: str) -> str | None:
        """The URL of *stored* (unsealed), or None when this pool's key cannot open it
        (said once a proxy)."""
        if not stored.startswith(PREFIX):
            return stored
        if self.sealer is not None:
            with contextlib.suppress(ConfigError):  # sealed with another key
                return self.sealer.unseal(stored)
        if pid not in self._unreadable:
            self._unreadable.add(pid)
            logger.error(
                "Proxy %s of the pool was sealed with a key this process does not hold "
                "(%s): set the same CRAWLFLEET_SECRET_KEY on the manager and every node",
                pid,
                self.sealer.source if self.sealer is not None else "no key",
            )
        return None

    async def pick(self, site: str, *, max_uses: int) -> PickedProxy | None:
        """The least used proxy that may serve *site* now (its use counted), or None."""
        pid, url, uses, left = await self._pick(
            keys=self.keys.for_proxy_pick(), args=[site, max_uses, PAGE]
        )
        if not pid:
            return None
        readable = self._readable(text(pid), text(url))
        if readable is None:
            return None  # another node may open it; this one's requests wait
        return PickedProxy(text(pid), readable, int(uses), int(left))

    async def report(
        self,
        pid: str,
        outcome: str,
        site: str,
        *,
        cool_ms: int,
        max_failures: int,
        ban_ms: int,
    ) -> str:
        """Record *outcome* ("ok", "dead", "fail", "ban": see proxy_report.lua) of a
        request through proxy *pid*."""
        result = await self._report(
            keys=self.keys.for_proxy_report(),
            args=[pid, outcome, site, cool_ms, max_failures, ban_ms],
        )
        return text(result)

    async def remove(self, which: Sequence[str]) -> int:
        """Take proxies out of the pool for good (by id or URL); how many were in it."""
        ids = [w if "://" not in w else proxy_id(w) for w in which]
        removed = 0
        for pid in ids:
            if await self.client.hexists(self.keys.all, pid):
                async with self.client.pipeline(transaction=True) as pipe:
                    pipe.zrem(self.keys.live, pid)
                    pipe.zrem(self.keys.cool, pid)
                    pipe.hset(self.keys.gone, pid, "removed")
                    await pipe.execute()
                removed += 1
        return removed

    async def size(self) -> int:
        return int(await self.client.zcard(self.keys.live))

    async def may_refill(self) -> bool:
        """Whether this node is the one to ask the provider now (one node per
        ``REFILL_EVERY_MS`` fleet-wide)."""
        return bool(await self.client.set(self.keys.refill, b"1", nx=True, px=REFILL_EVERY_MS))

    async def status(self) -> list[dict[str, Any]]:
        """Every proxy known to the pool: its URL (redacted), state, uses, ok, failures,
        bans, for ``crawlfleet proxies`` and the manager."""
        urls = {text(k): text(v) for k, v in (await self.client.hgetall(self.keys.all)).items()}
        scored: list[Any] = list(await self.client.zrange(self.keys.live, 0, -1, withscores=True))
        live = {text(pair[0]): int(pair[1]) for pair in scored}
        cool = {text(k) for k in await self.client.zrange(self.keys.cool, 0, -1)}
        gone = {text(k): text(v) for k, v in (await self.client.hgetall(self.keys.gone)).items()}
        stats = {text(k): int(v) for k, v in (await self.client.hgetall(self.keys.stats)).items()}
        out = []
        readable = {pid: self._readable(pid, url) for pid, url in urls.items()}
        named = {
            pid: shown(url) if url is not None else "(sealed with another key)"
            for pid, url in readable.items()
        }
        for pid in sorted(named, key=named.__getitem__):
            state = "cooling" if pid in cool else "live" if pid in live else gone.get(pid, "?")
            out.append(
                {
                    "id": pid,
                    "proxy": named[pid],
                    "state": state,
                    "uses": live.get(pid),
                    "ok": stats.get(f"{pid}:ok", 0),
                    "failures": stats.get(f"{pid}:fail", 0),
                    "bans": stats.get(f"{pid}:ban", 0),
                }
            )
        return out
