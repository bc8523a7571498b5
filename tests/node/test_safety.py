"""A node's safer defaults, with a real node process: no telnet console (a remote Python
shell) unless asked, and a gzip bomb dropped at the decompressed-size limit instead of
inflated in memory."""

from __future__ import annotations

import http.server
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.node.launcher import start_node, wait_all

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
    assert "'response_received_count': 2" in text  # the index and /ok
    peak = int(text.split("'memusage/max': ")[1].split(",")[0])
    assert peak < 400 * 2**20, f"peak memory {peak / 2**20:.0f} MiB"
