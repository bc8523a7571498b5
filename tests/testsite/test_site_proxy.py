"""The loopback forwarding proxies: forwarding, source addresses, auth, failure modes,
counters, and a real Scrapy crawl rotating over a farm."""

from __future__ import annotations

import asyncio
import base64
import gzip
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web

from crawlfleet.testsite import SiteModel, TestSite
from crawlfleet.testsite.server import bind_loopback
from tests.support.proxy import ProxyFarm, ProxyServer

Answer = tuple[int, list[tuple[str, str]], bytes]
ZIPPED = gzip.compress(b"compressed text " * 50)


class Target:
    """A small aiohttp site on 127.0.0.1 and 127.0.0.2 (one port), in a thread:
    ``/echo`` answers with what it saw, the client's address first."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.ServerRunner | None = None
        self.port = 0

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/echo":
            seen = {
                "remote": request.remote,
                "method": request.method,
                "path": request.path_qs,
                "headers": [[k, v] for k, v in request.headers.items()],
                "body": (await request.read()).decode(),
            }
            response = web.Response(text=json.dumps(seen), content_type="application/json")
            response.headers["X-Target"] = "yes"
            response.headers.add("Set-Cookie", "a=1")
            response.headers.add("Set-Cookie", "b=2")
            return response
        if request.path == "/redirect":
            return web.Response(status=302, headers={"Location": "/echo"})
        if request.path == "/gzip":
            headers = {"Content-Encoding": "gzip", "Content-Type": "text/plain"}
            return web.Response(body=ZIPPED, headers=headers)
        if request.path == "/stream":
            stream = web.StreamResponse()
            stream.enable_chunked_encoding()
            await stream.prepare(request)
            for part in (b"one ", b"two ", b"three"):
                await stream.write(part)
            await stream.write_eof()
            return stream
        if request.path == "/hang":
            await asyncio.sleep(5)
        return web.Response(status=404, text="no such page")

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def __enter__(self) -> Target:
        self.thread.start()

        async def start() -> None:
            server = web.Server(self.handle, handler_cancellation=True, access_log=None)
            self.runner = web.ServerRunner(server, shutdown_timeout=0.5)
            await self.runner.setup()
            for sock in bind_loopback(2):
                self.port = sock.getsockname()[1]
                await web.SockSite(self.runner, sock).start()

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.runner is not None:
            cleanup = self.runner.cleanup()
            asyncio.run_coroutine_threadsafe(cleanup, self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    with Target() as running:
        yield running


def connect(proxy: ProxyServer, timeout: float = 3.0) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=timeout)


def ask(
    conn: http.client.HTTPConnection,
    url: str,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """One request through the proxy ``conn`` is connected to (absolute URI)."""
    conn.request(method, url, body=body, headers=headers or {})
    response = conn.getresponse()
    return response.status, response.getheaders(), response.read()


def through(proxy: ProxyServer, url: str, **kwargs: Any) -> Answer:
    conn = connect(proxy)
    try:
        return ask(conn, url, **kwargs)
    finally:
        conn.close()


def basic(credentials: str) -> dict[str, str]:
    return {"Proxy-Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


def header(headers: list[tuple[str, str]], name: str) -> list[str]:
    return [v for k, v in headers if k.lower() == name.lower()]


def counters(stats: dict[str, Any]) -> tuple[int, ...]:
    names = ("connections", "received", "rejected", "failed", "forwarded")
    return tuple(stats[name] for name in names)


def test_forwards_method_headers_body_and_answer(target: Target) -> None:
    with ProxyFarm([{}]) as farm:
        proxy = farm.proxies[0]
        sent = {"X-Test": "42", "Connection": "keep-alive, X-Hop", "X-Hop": "gone"}
        sent |= basic("nobody:needed")  # a proxy without auth never passes it on
        status, headers, body = through(
            proxy, target.url("/echo?q=1"), method="POST", body=b"payload", headers=sent
        )
    assert status == 200
    assert header(headers, "X-Target") == ["yes"]
    assert header(headers, "Set-Cookie") == ["a=1", "b=2"]
    seen = json.loads(body)
    assert (seen["method"], seen["path"], seen["body"]) == ("POST", "/echo?q=1", "payload")
    received = {k.lower(): v for k, v in seen["headers"]}
    assert received["x-test"] == "42"
    assert received["host"] == f"127.0.0.1:{target.port}"
    assert not {"proxy-authorization", "connection", "x-hop"} & received.keys()
    assert "user-agent" not in received  # nothing added on the way


def test_redirect_gzip_and_chunked_answers_pass_unchanged(target: Target) -> None:
    with ProxyFarm([{}]) as farm:
        conn = connect(farm.proxies[0])
        status, headers, body = ask(conn, target.url("/redirect"))
        assert (status, header(headers, "Location")) == (302, ["/echo"])
        status, headers, body = ask(conn, target.url("/gzip"), headers={"Accept-Encoding": "gzip"})
        assert (status, header(headers, "Content-Encoding"), body) == (200, ["gzip"], ZIPPED)
        assert header(headers, "Content-Length") == [str(len(ZIPPED))]
        status, headers, body = ask(conn, target.url("/stream"))
        assert (status, body) == (200, b"one two three")
        assert ask(conn, target.url("/nothing"))[0] == 404
        conn.close()
        stats = farm.stats()[0]
    assert counters(stats) == (1, 4, 0, 0, 4)  # one connection kept alive for all four


def test_http_1_0_client_gets_a_body_ended_by_the_close(target: Target) -> None:
    with ProxyFarm([{}]) as farm:
        sock = socket.create_connection(("127.0.0.1", farm.proxies[0].port), timeout=3)
        sock.sendall(f"GET {target.url('/stream')} HTTP/1.0\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"Connection: close" in head.split(b"\r\n")
    assert b"chunked" not in head.lower() and body == b"one two three"


def test_a_proxy_server_in_a_running_loop(target: Target) -> None:
    """Used directly, with aiohttp as the client (credentials from the proxy URL)."""

    async def fetch() -> tuple[int, dict[str, Any], dict[str, Any]]:
        proxy = ProxyServer(source_address="127.0.0.9", username="u", password="p")
        await proxy.start()
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(target.url("/echo"), proxy=proxy.url) as response,
            ):
                return response.status, await response.json(), proxy.stats()
        finally:
            await proxy.stop()

    status, seen, stats = asyncio.run(fetch())
    assert (status, seen["remote"]) == (200, "127.0.0.9")
    assert (stats["forwarded"], stats["rejected"]) == (1, 0)


def test_each_proxy_reaches_the_target_from_its_own_address(target: Target) -> None:
    with ProxyFarm([{}, {}, {}]) as farm:
        remotes = [json.loads(through(p, target.url("/echo"))[2])["remote"] for p in farm.proxies]
        assert remotes == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        assert [s["source_address"] for s in farm.stats()] == remotes


def test_proxy_authentication(target: Target) -> None:
    with ProxyFarm([{"username": "crawler", "password": "s3cret:x"}]) as farm:
        proxy = farm.proxies[0]
        assert farm.urls == [f"http://crawler:s3cret%3Ax@127.0.0.1:{proxy.port}"]
        status, headers, _ = through(proxy, target.url("/echo"))
        assert status == 407
        assert header(headers, "Proxy-Authenticate") == ['Basic realm="crawlfleet-test"']
        assert through(proxy, target.url("/echo"), headers=basic("crawler:wrong"))[0] == 407
        assert through(proxy, target.url("/echo"), headers=basic("crawler:s3cret:x"))[0] == 200
        stats = farm.stats()[0]
    assert counters(stats)[1:] == (3, 2, 0, 1)
    assert stats["auth"] is True and "s3cret" not in repr(stats) + repr(proxy)


def test_each_failure_mode_as_a_client_sees_it(target: Target) -> None:
    configs: list[Any] = [{"mode": m} for m in ("refuse", "drop", "502")]
    with ProxyFarm([*configs, {"mode": "slow", "slow_seconds": 0.3}]) as farm:
        refuse, drop, bad, slow = farm.proxies
        with pytest.raises(ConnectionRefusedError):
            through(refuse, target.url("/echo"))
        with pytest.raises(http.client.RemoteDisconnected):
            through(drop, target.url("/echo"))
        assert through(bad, target.url("/echo"))[0] == 502
        started = time.monotonic()
        assert through(slow, target.url("/echo"))[0] == 200
        assert time.monotonic() - started >= 0.29
        conn = connect(slow, timeout=0.1)  # gives up during the wait: not forwarded
        with pytest.raises(TimeoutError):
            ask(conn, target.url("/echo"))
        conn.close()
        time.sleep(0.4)
        stats = farm.stats()
    assert [counters(s)[1:] for s in stats] == [
        (0, 0, 0, 0),
        (1, 0, 1, 0),
        (1, 0, 1, 0),
        (2, 0, 1, 1),
    ]
    assert [s["mode"] for s in stats] == ["refuse", "drop", "502", "slow"]


def test_set_mode_while_running_keeps_the_port(target: Target) -> None:
    with ProxyFarm([{}]) as farm:
        proxy = farm.proxies[0]
        idle = connect(proxy)
        assert ask(idle, target.url("/echo"))[0] == 200
        farm.set_mode(0, "refuse")
        with pytest.raises(ConnectionRefusedError):
            through(proxy, target.url("/echo"))
        with pytest.raises(ConnectionError):  # the open connection was cut too
            ask(idle, target.url("/echo"))
        idle.close()
        farm.set_mode(0, "ok")
        assert through(proxy, target.url("/echo"))[0] == 200
        farm.set_mode(0, "502")
        assert through(proxy, target.url("/echo"))[0] == 502
        with pytest.raises(ValueError, match="mode must be one of"):
            farm.set_mode(0, "broken")


@pytest.mark.parametrize("then", ["502", "drop", "refuse"])
def test_fail_after_switches_mid_crawl(target: Target, then: str) -> None:
    with ProxyFarm([{"fail_after": 2, "then": then}]) as farm:
        proxy = farm.proxies[0]
        conn = connect(proxy)
        assert [ask(conn, target.url("/echo"))[0] for _ in range(2)] == [200, 200]
        if then == "502":
            assert ask(conn, target.url("/echo"))[0] == 502
        else:
            with pytest.raises(ConnectionError):
                ask(conn, target.url("/echo"))
            error = ConnectionRefusedError if then == "refuse" else ConnectionError
            with pytest.raises(error):
                through(proxy, target.url("/echo"))
        conn.close()
        stats = farm.stats()[0]
    assert stats["mode"] == then
    # "drop" still reads the request on the new connection, "refuse" never sees it
    failed = {"502": 1, "drop": 2, "refuse": 1}[then]
    assert (stats["forwarded"], stats["failed"]) == (2, failed)


def test_only_loopback_http_targets(target: Target) -> None:
    with ProxyFarm([{}]) as farm:
        proxy = farm.proxies[0]
        assert through(proxy, "http://93.184.215.14/")[0] == 403
        assert through(proxy, "http://10.0.0.1:80/")[0] == 403
        assert through(proxy, f"http://localhost:{target.port}/echo")[0] == 403  # no DNS
        assert through(proxy, "/echo")[0] == 400  # not a proxy request
        assert through(proxy, "https://127.0.0.1/")[0] == 400
        assert through(proxy, "http://127.0.0.1:99999/")[0] == 400
        assert through(proxy, "127.0.0.1:443", method="CONNECT")[0] == 405
        stats = farm.stats()[0]
    assert counters(stats)[1:] == (7, 7, 0, 0) and stats["hosts"] == {}


def test_unreachable_and_silent_targets(target: Target) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{closed.getsockname()[1]}/"
        with ProxyFarm([{"upstream_timeout_seconds": 0.3}]) as farm:
            proxy = farm.proxies[0]
            assert through(proxy, nobody)[0] == 502
            assert through(proxy, target.url("/hang"))[0] == 504
            stats = farm.stats()[0]
    assert counters(stats)[1:] == (2, 0, 2, 0)


def test_stats_count_requests_and_hosts(target: Target) -> None:
    with ProxyFarm([{}, {"mode": "502"}]) as farm:
        good, bad = farm.proxies
        conn = connect(good)
        for host in ("127.0.0.1", "127.0.0.2", "127.0.0.2"):
            ask(conn, target.url("/echo", host))
        conn.close()
        through(good, "http://192.0.2.1/")
        through(bad, target.url("/echo", "127.0.0.2"))
        stats = farm.stats()
    assert counters(stats[0]) == (2, 4, 1, 0, 3)
    assert stats[0]["hosts"] == {"127.0.0.1": 1, "127.0.0.2": 2}
    assert counters(stats[1]) == (1, 1, 0, 1, 0)
    assert stats[1]["hosts"] == {"127.0.0.2": 1}
    assert stats[0]["address"] == f"127.0.0.1:{good.port}" and stats[0]["mode"] == "ok"


def test_invalid_configuration_is_named() -> None:
    with pytest.raises(ValueError, match="unknown proxy option 'colour'"):
        ProxyFarm([{}, {"colour": "red"}])  # type: ignore[typeddict-unknown-key]
    with pytest.raises(ValueError, match="then must be one of"):
        ProxyServer(then="sometimes")
    with pytest.raises(ValueError, match="source_address"):
        ProxyServer(source_address="10.0.0.1")
    with pytest.raises(ValueError, match="username and password"):
        ProxyServer(username="alone")


SPIDER = """
import scrapy


class Rotating(scrapy.Spider):
    name = "rotating"

    def __init__(self, urls="", proxies="", **kwargs):
        super().__init__(**kwargs)
        self.page_urls, self.proxy_urls = urls.split(","), proxies.split(",")

    async def start(self):
        for i, url in enumerate(self.page_urls):
            proxy = self.proxy_urls[i % len(self.proxy_urls)]
            yield scrapy.Request(url, meta={"proxy": proxy}, dont_filter=True)

    def parse(self, response):
        yield {"url": response.url, "proxy": response.meta["proxy"]}
"""


def test_scrapy_crawl_rotates_over_the_farm(tmp_path: Path) -> None:
    model = SiteModel(pages=20, hosts=2, problems=False)
    configs: list[Any] = [
        {},
        {"username": "scrapy", "password": "pw"},
        {},
        {"mode": "502"},
        {"fail_after": 1, "then": "refuse"},  # goes bad mid-crawl
    ]
    spider = tmp_path / "rotating.py"
    spider.write_text(SPIDER)
    items = tmp_path / "items.jsonl"
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    with TestSite(model) as site, ProxyFarm(configs) as farm:
        pages = [site.url(n) for n in range(2, 17)]
        argv = [
            sys.executable, "-m", "scrapy", "runspider", str(spider),
            "-a", "urls=" + ",".join(pages), "-a", "proxies=" + ",".join(farm.urls),
            "-o", f"{items}:jsonlines",
            "-s", "ROBOTSTXT_OBEY=False", "-s", "RETRY_ENABLED=False",
            "-s", "TELNETCONSOLE_ENABLED=False", "-s", "DOWNLOAD_TIMEOUT=5",
            "-s", "CONCURRENT_REQUESTS=4", "-s", "LOG_LEVEL=INFO",
        ]  # fmt: skip
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        stats = farm.stats()
        fetched = site.stats(brief=True)
    assert done.returncode == 0, done.stderr[-3000:]
    # Scrapy moves the credentials from meta["proxy"] into Proxy-Authorization
    lines = items.read_text().splitlines()
    by_port = [urlsplit(json.loads(line)["proxy"]).port for line in lines]
    ports = [p.port for p in farm.proxies]
    assert sorted(by_port) == sorted(ports[:3] * 3 + ports[4:])
    assert [(s["forwarded"], s["failed"], s["rejected"]) for s in stats[:4]] == [
        (3, 0, 0),
        (3, 0, 0),
        (3, 0, 0),
        (0, 3, 0),
    ]
    for i, proxy_stats in enumerate(stats[:4]):
        assert sum(proxy_stats["hosts"].values()) == 3
        assert 1 <= proxy_stats["connections"] <= 3, i
    # the last one forwarded once, then refused: its other two requests were cut or refused
    assert (stats[4]["mode"], stats[4]["forwarded"], stats[4]["rejected"]) == ("refuse", 1, 0)
    assert stats[4]["failed"] in (1, 2)
    assert "'log_count/ERROR': 2," in done.stderr  # those two; the 502s are only ignored
    assert fetched["content_fetched"] == 10 and not fetched["fetched_twice"]
