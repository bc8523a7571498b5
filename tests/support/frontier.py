"""Frontier entries and shards made by hand, for tests that drive a frontier directly:
an outgoing request with its fingerprint taken from the URL, site names that fall in a
given shard, a shard whose Redis is down, pages of a continuous job tracked by hand."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import Outgoing, Revisit
from crawlfleet.frontier.serialization import RequestCodec, with_meta
from crawlfleet.frontier.sharded import JobFrontier, shard_of
from crawlfleet.meta import REVISIT_META
from crawlfleet.redis.connection import make_client

__all__ = ["fp", "lease_all", "out", "shard_down", "site_in", "sites_in", "track_pages"]


def fp(text: str) -> bytes:
    """A fingerprint of *text* (the first 16 bytes of its SHA-1)."""
    return hashlib.sha1(text.encode()).digest()[:16]


def out(url: str, site: str = "a", priority: int = 0, *, dont_filter: bool = False) -> Outgoing:
    """A request for *url* on *site*, its fingerprint taken from the URL (none when
    *dont_filter*)."""
    return Outgoing(b"" if dont_filter else fp(url), site, priority, url.encode())


def sites_in(shard: int, shards: int, tag: str = "site", n: int = 1) -> list[str]:
    """The first *n* site names "<tag><i>.test" of shard *shard* (of *shards*)."""
    names = (f"{tag}{i}.test" for i in range(100_000))
    return list(itertools.islice((x for x in names if shard_of(x, shards) == shard), n))


def site_in(shard: int, shards: int, tag: str) -> str:
    """A site name of shard *shard*."""
    return sites_in(shard, shards, tag)[0]


def shard_down(f: JobFrontier, shard: int) -> Any:
    """Shard *shard* of *f* as reached through a client of a port that refuses
    connections (a master down); returns its client, to close."""
    assert f._parts is not None
    client = make_client("redis://127.0.0.1:1/0")
    f._parts[shard] = Frontier(client, f.keys.in_shard(shard, len(f._parts)), f.home.seen)
    return client


async def lease_all(f: Any, node: str = "n1", n: int = 100, **kw: Any) -> list[str]:
    """The payloads (as text) of up to *n* requests leased to *node* from the sites
    *f* offers."""
    res = await f.lease(
        node,
        n,
        await f.offer(50),
        lease_ms=kw.get("lease_ms", 60000),
        per_site=kw.get("per_site", n),
        offer_size=50,
    )
    return [e.payload.decode() for e in res.entries]


async def track_pages(f: Frontier, site: str, ages: list[float], changed: int = 0) -> list[str]:
    """Pages of a continuous job, one per age in *ages* (seconds since its last visit),
    queued, leased and kept for a visit in a minute, as a node does; the first *changed*
    of them with a change event. Their URLs (``http://<site>/p/<i>``), in that order."""
    import time

    from scrapy import Request

    urls = [f"http://{site}/p/{i}" for i in range(len(ages))]
    codec = RequestCodec(None)
    await f.register_job()  # as a node does: the manager knows it
    await f.commit("n1", [Outgoing(fp(u), site, 0, codec.encode(Request(u))) for u in urls])
    leased = await f.lease(
        "n1", len(urls), [site], lease_ms=60_000, per_site=len(urls), offer_size=10
    )
    by_url = {u: e for e in leased.entries for u in urls if u.encode() in e.payload}
    now = time.time()
    revisits = []
    for i, url in enumerate(urls):
        entry = by_url[url]
        state = {"visits": 1, "kept": 1, "last": now - ages[i]}
        event = f'{{"url": "{url}", "kind": "new"}}'.encode() if i < changed else b""
        payload = with_meta(entry.payload, {REVISIT_META: state})
        revisits.append(Revisit(entry.rid, 60_000, payload, new=True, event=event))
    result = await f.commit("n1", revisits=revisits)
    assert result.revisited == len(urls)
    return urls
