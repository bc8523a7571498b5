"""The fleet's proxy pool (on a real Redis) and proxy rotation in a real node crawling
through real forwarding proxies on loopback: least used first, retirement after its
uses, cool-down and eviction after failures, a site's ban keeps a proxy away from that
site only, a proxy that left never comes back, a provider refills the pool, the site is
never reached directly, and credentials are never shown."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.proxies import ProxyPool, parse_provider_answer, parse_sources, proxy_id
from crawlfleet.node.launcher import start_node
from crawlfleet.redis.connection import make_client
from crawlfleet.state.sealing import Sealer, new_key
from crawlfleet.testsite import SiteModel, TestSite
from tests.support.loopback import LoopbackSite
from tests.support.proxy import ProxyFarm
from tests.support.session_site import SessionSite

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
P = [f"http://user:s3cr3t@127.0.0.1:{8000 + i}" for i in range(4)]
#: the key the tests' nodes and pools share (CRAWLFLEET_SECRET_KEY)
KEY = new_key()
SEALER = Sealer([KEY], "the tests' key")


def on_pool(
    redis_url: str,
    prefix: str,
    fn: Callable[[ProxyPool], Awaitable[T]],
    sealer: Sealer | None = SEALER,
) -> T:
    async def main() -> T:
        client = make_client(redis_url)
        try:
            return await fn(ProxyPool(client, prefix, sealer))
        finally:
            await client.aclose()

    return asyncio.run(main())


REPORT = {"cool_ms": 300, "max_failures": 2, "ban_ms": 60_000}


def run_node(
    spider: str,
    job: str,
    start_url: str,
    redis_url: str,
    node_env: dict[str, str],
    tmp_path: Path,
    **settings: Any,
) -> str:
    """Crawl *start_url* with one real node (robots.txt not read) until its job is
    finished; its log."""
    log = tmp_path / "node.log"
    node = start_node(
        spider,
        job=job,
        redis_url=redis_url,
        log=log,
        spider_args={"start_urls": start_url},
        settings={
            **node_env,
            "ROBOTSTXT_OBEY": False,
            "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
            "CRAWLFLEET_SECRET_KEY": KEY,
            **settings,
        },
        cwd=ROOT,
    )
    assert node.wait(120) == 0, log.read_text()[-3000:]
    return log.read_text()


def test_the_pool_rotates_retires_cools_evicts_and_bans_per_site(
    redis_server_url: str, key_prefix: str
) -> None:
    async def body(pool: ProxyPool) -> None:
        assert await pool.add(P[:3]) == (3, 3)
        assert await pool.add(P[:3]) == (0, 3)  # known already
        picks = [await pool.pick("a.test", max_uses=2) for _ in range(6)]
        assert all(p is not None for p in picks)
        used = [p.url for p in picks if p is not None]
        assert sorted(used) == sorted(P[:3] * 2)  # least used first: each once, then again
        assert await pool.pick("a.test", max_uses=2) is None  # all retired after 2 uses
        assert await pool.add(P[:3]) == (0, 0)  # a proxy that left never comes back

        await pool.add([P[3]])
        pid = (await pool.pick("a.test", max_uses=0)).id  # type: ignore[union-attr]
        # the proxy itself failed (refused): it rests, for every site
        assert await pool.report(pid, "dead", "a.test", **REPORT) == "cooling"
        assert await pool.pick("b.test", max_uses=0) is None  # resting
        await asyncio.sleep(0.4)
        assert (await pool.pick("b.test", max_uses=0)) is not None  # rested
        assert await pool.report(pid, "ok", "b.test", **REPORT) == "ok"  # the streak ends
        # failures that may be the site's: the proxy rests for that site only, and two
        # in a row keep it away from that site, never out of the pool
        assert await pool.report(pid, "fail", "down.test", **REPORT) == "cooling"
        assert await pool.pick("down.test", max_uses=0) is None
        assert (await pool.pick("b.test", max_uses=0)) is not None
        await asyncio.sleep(0.4)
        assert await pool.report(pid, "fail", "down.test", **REPORT) == "banned"
        await asyncio.sleep(0.4)
        assert await pool.pick("down.test", max_uses=0) is None  # kept away (ban_ms)
        assert await pool.report(pid, "ban", "a.test", **REPORT) == "banned"
        assert await pool.pick("a.test", max_uses=0) is None  # a.test banned it
        assert (await pool.pick("b.test", max_uses=0)) is not None  # b.test did not
        assert await pool.report(pid, "dead", "b.test", **REPORT) == "cooling"
        await asyncio.sleep(0.4)
        assert await pool.report(pid, "dead", "b.test", **REPORT) == "evicted"  # 2 in a row
        assert await pool.pick("b.test", max_uses=0) is None
        status = {s["id"]: s for s in await pool.status()}
        assert all("s3cr3t" not in s["proxy"] for s in status.values())
        last = status[pid]
        assert last["proxy"] == "http://***@127.0.0.1:8003"
        assert (last["state"], last["failures"], last["bans"], last["ok"]) == ("failed", 5, 1, 1)
        assert {s["state"] for s in status.values()} == {"used", "failed"}

    on_pool(redis_server_url, key_prefix, body)


def test_credentials_are_sealed_in_redis_and_need_the_shared_key(
    redis_server_url: str, key_prefix: str, sync_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    all_key = f"{key_prefix}:{{proxies}}:all"
    plain = "http://127.0.0.9:3128"
    # a proxy kept in the clear by an earlier crawlfleet
    sync_redis.hset(all_key, proxy_id(P[1]), P[1])
    sync_redis.zadd(f"{key_prefix}:{{proxies}}:live", {proxy_id(P[1]): 0})

    async def body(pool: ProxyPool) -> None:
        assert await pool.add([P[0], P[1], plain]) == (2, 3)
        stored = {k.decode(): v.decode() for k, v in sync_redis.hgetall(all_key).items()}
        assert not any("s3cr3t" in v for v in stored.values()), stored  # resealed too
        assert stored[proxy_id(P[0])].startswith("sealed:v1:")
        assert stored[proxy_id(plain)] == plain  # nothing to hide
        picked = {(await pool.pick("a.test", max_uses=0)).url for _ in range(3)}  # type: ignore[union-attr]
        assert picked == {P[0], P[1], plain}

    on_pool(redis_server_url, key_prefix, body)

    async def other_key(pool: ProxyPool) -> None:
        # a node with another key cannot read the sealed ones: said, and not used
        got = [await pool.pick("b.test", max_uses=0) for _ in range(6)]
        assert {p.url for p in got if p is not None} == {plain}
        shown_ = {s["proxy"] for s in await pool.status()}
        assert shown_ == {plain, "(sealed with another key)"}

    with caplog.at_level("ERROR"):
        on_pool(redis_server_url, key_prefix, other_key, Sealer([new_key()], "another key"))
    assert "set the same CRAWLFLEET_SECRET_KEY on the manager and every node" in caplog.text

    async def no_key(pool: ProxyPool) -> None:
        with pytest.raises(ConfigError, match="holds credentials") as caught:
            await pool.add([P[2]])
        assert "s3cr3t" not in str(caught.value)
        assert await pool.add(["http://127.0.0.8:3128"]) == (1, 4)

    on_pool(redis_server_url, key_prefix, no_key, None)


def test_sources(tmp_path: Path) -> None:
    listed = tmp_path / "proxies.txt"
    listed.write_text(f"# ours\n{P[0]}\n\n{P[1]}\n")
    sources = parse_sources([f"@{listed}", P[2], "provider+http://127.0.0.1:9/list"])
    assert sources.urls == (P[0], P[1], P[2]) and sources.provider == "http://127.0.0.1:9/list"
    assert parse_sources(f"{P[0]},{P[0]}").urls == (P[0],)
    for bad, message in (
        ([], "names no proxy"),
        (["ftp://127.0.0.1:21"], "is not a proxy URL"),
        (["http://user:s3cr3t@127.0.0.1"], "http://\\*\\*\\*@127.0.0.1"),
        (["@/no/such/file"], "cannot read"),
    ):
        with pytest.raises(ConfigError, match=message) as caught:
            parse_sources(bad)
        assert "s3cr3t" not in str(caught.value)
    assert parse_provider_answer(f'["{P[0]}", "nope"]'.encode()) == [P[0]]
    assert parse_provider_answer(f"{P[1]}\n{P[2]}\n".encode()) == [P[1], P[2]]


@pytest.mark.slow
def test_a_node_crawls_only_through_the_pool(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    model = SiteModel(pages=60, hosts=1, problems=False)
    listed = ProxyFarm(
        [
            {"username": "u", "password": "s3cr3t"},
            {"mode": "refuse"},
            {"fail_after": 3, "then": "502"},
        ]
    )
    spare = ProxyFarm([{}, {}])
    with TestSite(model) as site, listed, spare:
        provider = LoopbackSite(lambda path, headers: (200, "\n".join(spare.urls).encode()))
        with provider:
            text = run_node(
                "crawlfleet.testsite.spider:TestSiteSpider",
                "proxied",
                site.seed_urls[0],
                redis_server_url,
                node_env,
                tmp_path,
                CRAWLFLEET_PROXY_ENABLED=True,
                CRAWLFLEET_PROXIES=",".join([*listed.urls, f"provider+{provider.url}list"]),
                CRAWLFLEET_PROXY_MAX_USES=30,
                CRAWLFLEET_PROXY_MAX_FAILURES=2,
                CRAWLFLEET_PROXY_COOLDOWN_SECONDS=0.2,
                CRAWLFLEET_PROXY_MIN_POOL=2,
                CRAWLFLEET_RETRY_BACKOFF=0.1,
                RETRY_TIMES=5,
            )
        stats = site.stats()
        assert not stats["never_fetched"] and not stats["fetched_twice"]
        a, b = listed.stats(), spare.stats()
        forwarded = sum(s["forwarded"] for s in [*a, *b])
        assert forwarded == stats["total_requests"]  # nothing reached the site directly
        assert 0 < a[0]["forwarded"] <= 30  # at most its uses
        assert a[1]["forwarded"] == 0  # refused: evicted
        assert a[2]["forwarded"] == 3  # turned into a 502 gateway: kept away from the site
        assert all(s["forwarded"] > 0 for s in b)  # the provider's refill
        assert "s3cr3t" not in text
        pool = on_pool(redis_server_url, node_env["CRAWLFLEET_KEY_PREFIX"], ProxyPool.status)
        states = {s["proxy"].split(":")[-1]: s["state"] for s in pool}
        ports = [u.rsplit(":", 1)[1] for u in [*listed.urls, *spare.urls]]
        # refused: out of the pool; a 502 gateway: kept away from this site only; the
        # others may have reached their 30 uses
        assert [states[p] for p in ports[1:3]] == ["failed", "live"], pool
        assert {states[p] for p in ports[:1] + ports[3:]} <= {"live", "used"}, pool
        assert "'crawlfleet/proxies/evicted': 1" in text
        assert "crawlfleet/proxies/refills" in text


def test_the_proxies_command(redis_server_url: str, key_prefix: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "crawlfleet.cli.main",
                "proxies",
                *args,
                "--redis-url",
                redis_server_url,
                "-s",
                f"CRAWLFLEET_KEY_PREFIX={key_prefix}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
        )

    listed = tmp_path / "p.txt"
    listed.write_text(f"{P[0]}\n{P[1]}\n")
    added = run("add", f"@{listed}", P[2])
    assert added.returncode == 0 and "3 proxy(ies) added; 3 in the pool" in added.stdout
    assert "1 proxy(ies) removed" in run("remove", P[1]).stdout
    status = run("status")
    lines = [line.split("\t") for line in status.stdout.splitlines()]
    assert sorted(line[1] for line in lines) == ["live", "live", "removed"]
    assert "s3cr3t" not in status.stdout + status.stderr
    again = run("add", P[1])
    assert "0 proxy(ies) added; 2 in the pool" in again.stdout  # removed for good
    bad = run("add", "ftp://user:s3cr3t@127.0.0.1:21")
    assert bad.returncode == 2 and "s3cr3t" not in bad.stderr and "not a proxy URL" in bad.stderr


@pytest.mark.slow
def test_a_site_that_bans_a_proxy_gets_the_others(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    import http.client

    from crawlfleet.testsite.hostile import Hostile

    model = SiteModel(pages=40, hosts=1, problems=False)
    farm = ProxyFarm([{}, {}, {}])
    with TestSite(model, hostile=Hostile(ban_rate=20, ban_seconds=120, ban_by="ip")) as site, farm:
        banned = farm.stats()[0]["source_address"]
        port = int(farm.urls[0].rsplit(":", 1)[1])
        for _ in range(22):  # the site bans the first proxy's address before the crawl
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", f"http://127.0.0.1:{site.port}/robots.txt?x")
            conn.getresponse().read()
            conn.close()
        assert site.stats()["hostile"]["bans"].get(banned) == 1
        before = farm.stats()[0]["forwarded"]
        text = run_node(
            "crawlfleet.testsite.spider:TestSiteSpider",
            "banned",
            site.seed_urls[0],
            redis_server_url,
            node_env,
            tmp_path,
            CRAWLFLEET_PROXY_ENABLED=True,
            CRAWLFLEET_PROXIES=",".join(farm.urls),
            CRAWLFLEET_RATE_LIMITS='{"127.0.0.1": "10/1s"}',  # each proxy ~5/s < 20
            CRAWLFLEET_RETRY_BACKOFF=0.1,
            CRAWLFLEET_BACKOFF_STATUSES="429",
        )
        stats = site.stats()
        assert not stats["never_fetched"], stats["never_fetched"]
        through_banned = farm.stats()[0]["forwarded"] - before
        # the first ban keeps the proxy away from the site: only requests already on
        # their way went through it, each refused and sent again through another
        assert through_banned <= 8, through_banned
        assert stats["hostile"]["denied"].get(banned, 0) >= through_banned
        assert all(s["forwarded"] > 10 for s in farm.stats()[1:])
        pool = on_pool(redis_server_url, node_env["CRAWLFLEET_KEY_PREFIX"], ProxyPool.status)
        first = next(p for p in pool if p["proxy"].endswith(f":{port}"))
        assert first["state"] == "live" and first["bans"] >= 1  # banned there, not failed
        assert "'crawlfleet/bans/gave_up'" not in text


@pytest.mark.slow
def test_sessions_keep_jar_identity_and_proxy_together(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    agents = tmp_path / "agents.txt"
    agents.write_text(
        "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0\n"
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:139.0) Gecko/20100101 Firefox/139.0\n"
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5; rv:138.0) Gecko/20100101 Firefox/138.0\n"
    )
    farm = ProxyFarm([{}, {}])
    with SessionSite() as site, farm:
        log = run_node(
            "tests.support.session_site:SessionSpider",
            "sessions",
            site.url,
            redis_server_url,
            node_env,
            tmp_path,
            CRAWLFLEET_SESSIONS=True,
            CRAWLFLEET_USER_AGENTS=str(agents),
            CRAWLFLEET_PROXY_ENABLED=True,
            CRAWLFLEET_PROXIES=",".join(farm.urls),
            CRAWLFLEET_RETRY_BACKOFF=0.2,
            CRAWLFLEET_BACKOFF_STATUSES="429",
        )
        forwarded = [s["forwarded"] for s in farm.stats()]
    seen = site.seen
    first_agent = seen[0][2]
    gates = [s for s in seen if s[0] == "/gate"]
    assert len(gates) == 2 and gates[0][1] == "1"  # refused in session 1 (its cookie)
    # every request of session 1 (cookie sid=1) went out as one browser
    assert {agent for _, sid, agent in seen if sid == "1"} == {first_agent}
    # the ban ended the session: the gate came back with an empty jar, as another browser
    assert gates[1][1] == "" and gates[1][2] != first_agent
    # ... and what followed it carried the new session's cookie, under the same browser
    after = [s for s in seen if s[0] == "/a1?again"]
    assert after and after[0][1] == "2" and after[0][2] == gates[1][2]
    # a session keeps its proxy: one proxy for session 1, the other after the ban
    assert all(n > 0 for n in forwarded), forwarded
    assert "'crawlfleet/sessions/ended': 1" in log


@pytest.mark.slow
@pytest.mark.timing  # the site counts requests a second: not beside 4 other workers
def test_proxies_do_not_multiply_a_sites_budget(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    model = SiteModel(pages=40, hosts=1, problems=False)
    farm = ProxyFarm([{}, {}, {}, {}])
    with TestSite(model) as site, farm:
        run_node(
            "crawlfleet.testsite.spider:TestSiteSpider",
            "budget",
            site.seed_urls[0],
            redis_server_url,
            node_env,
            tmp_path,
            CRAWLFLEET_PROXY_ENABLED=True,
            CRAWLFLEET_PROXIES=",".join(farm.urls),
            CRAWLFLEET_RATE_LIMITS='{"127.0.0.1": "8/1s"}',
            CONCURRENT_REQUESTS=32,
        )
        stats = site.stats()
        forwarded = [s["forwarded"] for s in farm.stats()]
    assert not stats["never_fetched"]
    assert all(n >= 5 for n in forwarded), forwarded  # every proxy carried a share
    # four proxies, one site, one budget: never more than 8 requests in any second
    assert stats["max_rate_1s"] <= 8, stats["max_rate_1s"]
