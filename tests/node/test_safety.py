"""A node's safer defaults, with a real node process: no telnet console (a remote Python
shell) unless asked, and a gzip bomb dropped at the decompressed-size limit instead of
inflated in memory."""

from __future__ import annotations

import http.server
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.redis.localcluster import RedisProcess
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite

ROOT = Path(__file__).resolve().parents[2]
BOMB_MB = 300  # decompressed; about 300 KB on the wire


def _gzip_of_zeros(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: gzip framing
    chunk = b"\0" * 2**20
    return b"".join(packer.compress(chunk) for _ in range(megabytes)) + packer.flush()


@pytest.fixture(scope="module")
def bomb_site() -> Iterator[str]:
    bomb = _gzip_of_zeros(BOMB_MB)
    index = b'<html><body><a href="/bomb">b</a> <a href="/ok">ok</a></body></html>'
    ok = b"<html><body><p>fine</p></body></html>"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, gzipped = {"/": (index, False), "/ok": (ok, False)}.get(self.path, (bomb, True))
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_a_gzip_bomb_is_dropped_and_no_telnet_console_listens(
    bomb_site: str, redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "node.log"
    node = start_node(
        "crawlfleet.testsite.spider:TestSiteSpider",
        job="bomb",
        redis_url=redis_server_url,
        log=log,
        spider_args={"start_urls": bomb_site},
        settings={**node_env, "LOG_LEVEL": "INFO", "MEMUSAGE_ENABLED": True},
        cwd=ROOT,
    )
    assert wait_all([node], 90) == [0], log.read_text()[-3000:]
    text = log.read_text()
    assert "exceeded DOWNLOAD_MAXSIZE (67108864 B)" in text, text[-3000:]
    assert "Telnet console listening" not in text
    assert "Remote control HTTP server listening" not in text  # Scrapy >= 2.19
    assert "'response_received_count': 2" in text  # the index and /ok
    peak = int(text.split("'memusage/max': ")[1].split(",")[0])
    # 64 MB decompressed and its copies while it is joined and dropped: 300-430 MiB
    # measured, 517 MiB once in a loaded CI run (without the limit: 1.5 GB and growing);
    # the bound says it stops there, not how fast the allocator gives memory back
    assert peak < 768 * 2**20, f"peak memory {peak / 2**20:.0f} MiB"


@pytest.mark.slow
def test_a_hung_redis_is_reported_and_costs_no_page_twice(
    redis_server_url: str, tmp_path: Path
) -> None:
    """Redis stops answering (SIGSTOP) for longer than the node timeout and the lease
    length while two nodes crawl: each node says so within its socket timeout and goes
    on once Redis answers again; no node counts the others dead for a silence that was
    Redis's, so no page is fetched twice."""
    redis_proc = RedisProcess(tmp_path / "redis")
    redis_proc.start()
    settings = {
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": 2,
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.5,
        "CRAWLFLEET_RECLAIM_SECONDS": 0.5,
        "CRAWLFLEET_NODE_TIMEOUT_SECONDS": 2,
        "CRAWLFLEET_LEASE_SECONDS": 5,
        "CRAWLFLEET_DATA_DIR": str(tmp_path / "data"),
    }
    try:
        with TestSite(SiteModel(pages=120, hosts=2, problems=False), latency_seconds=0.1) as s:
            procs = [
                start_node(
                    "crawlfleet.testsite.spider:TestSiteSpider",
                    job="hang",
                    redis_url=redis_proc.url,
                    log=tmp_path / f"node{i}.log",
                    spider_args={"start_urls": ",".join(s.seed_urls)},
                    settings=settings,
                    cwd=ROOT,
                )
                for i in range(2)
            ]
            try:
                deadline = time.monotonic() + 30
                while s.stats()["content_fetched"] < 20 and time.monotonic() < deadline:
                    time.sleep(0.05)
                redis_proc.freeze()
                time.sleep(8)
                redis_proc.thaw()
                codes = wait_all(procs, 90)
                stats = s.stats()
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
    finally:
        redis_proc.close()
    text = "".join(p.read_text() for p in sorted(tmp_path.glob("node*.log")))
    assert codes == [0, 0], text[-3000:]
    assert stats["never_fetched"] == [], text[-3000:]
    assert stats["fetched_twice"] == [], stats["fetched_twice"]
    assert text.count("Redis unreachable (TimeoutError") == 2, text[-3000:]
    assert text.count("Redis reachable again after") == 2
