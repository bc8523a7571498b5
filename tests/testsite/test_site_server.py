"""The test site's server: every kind of URL, counting, rates, both ways to run it."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from crawlfleet.testsite import (
    SiteModel,
    TestSite,
    fetch_stats,
    reset_stats,
    start_site_process,
    stop_site_process,
)
from crawlfleet.testsite.stats import RateWindow, RequestLog

MODEL = SiteModel(pages=70, hosts=3, seed=2)  # two catalogue pages per host


def get(url: str, method: str = "GET", timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """One request, no redirects followed, no proxy."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def running() -> Iterator[TestSite]:
    with TestSite(MODEL, timeout_seconds=0.3) as site:
        yield site


@pytest.fixture
def site(running: TestSite) -> TestSite:
    running.reset()
    return running


def test_each_kind_of_url(site: TestSite) -> None:
    base = f"http://127.0.0.2:{site.port}"
    status, headers, body = get(site.seed_urls[1])
    assert (status, headers["Content-Type"]) == (200, "text/html; charset=utf-8")
    assert b'<div class="product"' in body
    article = min(MODEL.article_ids)
    status, _, body = get(site.url(article))
    assert status == 200 and b'<article class="post"' in body
    status, _, body = get(f"{base}/catalog?page=1")
    assert status == 200 and b'rel="next"' in body
    assert get(f"{base}/catalog?page=99")[0] == 404
    assert get(f"{base}/p/{article}x")[0] == 404
    assert get(f"http://127.0.0.1:{site.port}/p/4")[0] == 404  # page 4 is on host 1
    assert get(f"{base}/status/404")[0] == 404
    assert [get(f"{base}/status/500")[0] for _ in range(3)] == [500, 500, 500]
    status, headers, _ = get(f"{base}/r/5")
    assert (status, headers["Location"]) == (302, site.url(5))
    status, headers, body = get(f"{base}/feed.json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["pages"][0] == site.url(1)
    status, headers, body = get(f"{base}/logo.png")
    assert status == 200 and body.startswith(b"\x89PNG")
    status, _, body = get(f"{base}/robots.txt")
    assert status == 200 and b"Allow: /" in body
    started = time.monotonic()
    assert get(f"{base}/slow")[0] == 200
    assert time.monotonic() - started >= 0.29
    for n, case in MODEL.encoded_pages.items():
        status, headers, body = get(site.url(n))
        assert headers["Content-Type"] == case.content_type
        assert case.title in body.decode(case.codec)


def test_counting_and_classification(site: TestSite) -> None:
    for url in sorted(site.expected_urls()):
        assert get(url)[0] == 200
    base = f"http://127.0.0.3:{site.port}"
    get(site.url(7))
    get(site.url(7))
    get(f"{base}/status/500")
    get(f"{base}/r/7")
    get(f"{base}/nothing-here")
    get(f"{base}/robots.txt")
    get(f"{base}/_stats")
    stats = site.stats()
    assert stats["never_fetched"] == []
    assert stats["fetched_twice"] == [{"url": site.url(7), "count": 3}]
    assert stats["problem_requests"] == {f"{base}/status/500": 1, f"{base}/r/7": 1}
    assert stats["unknown_requests"] == {f"{base}/nothing-here": 1}
    assert stats["robots_requests"] == {"127.0.0.1": 0, "127.0.0.2": 0, "127.0.0.3": 1}
    expected = len(site.expected_urls())
    assert stats["expected_urls"] == stats["content_fetched"] == expected
    assert stats["total_requests"] == expected + 5
    assert stats["content_requests"] == expected + 2
    assert sum(h["requests"] for h in stats["hosts"].values()) == stats["total_requests"]
    assert stats["requests"][site.url(7)] == 3
    assert f"{base}/_stats" not in stats["requests"]
    assert f"{base}/robots.txt" not in stats["requests"]


def test_never_fetched_and_reset(site: TestSite) -> None:
    get(site.seed_urls[0])
    stats = site.stats()
    assert site.seed_urls[0] not in stats["never_fetched"]
    assert len(stats["never_fetched"]) == len(site.expected_urls()) - 1
    site.reset()
    stats = site.stats()
    assert stats["total_requests"] == 0 and stats["requests"] == {}
    assert len(stats["never_fetched"]) == len(site.expected_urls())


def test_stats_and_reset_over_http(site: TestSite) -> None:
    get(site.url(4))
    status, _, body = get(f"http://127.0.0.2:{site.port}/_stats")
    assert status == 200
    over_http = json.loads(body)
    assert over_http["requests"] == {site.url(4): 1}
    assert over_http == {**site.stats(), "active_seconds": over_http["active_seconds"]}
    brief = fetch_stats(site.port, brief=True)
    assert "requests" not in brief and brief["total_requests"] == 1
    assert get(f"http://127.0.0.1:{site.port}/_reset")[0] == 405
    assert get(f"http://127.0.0.1:{site.port}/_reset", method="POST")[0] == 200
    assert site.stats()["total_requests"] == 0
    get(site.url(4))
    reset_stats(site.port)
    assert site.stats()["total_requests"] == 0


def test_max_rate_of_a_burst(site: TestSite) -> None:
    started = time.monotonic()
    for _ in range(25):
        get(site.url(1))
    if time.monotonic() - started >= 0.9:
        pytest.skip("the machine is too slow for a 25-request burst within 1 s")
    hosts = site.stats()["hosts"]
    busy, idle = hosts["127.0.0.2"], hosts["127.0.0.1"]
    assert (busy["requests"], busy["max_rate_1s"], len(busy["peak_window"])) == (25, 25, 25)
    assert idle == {"requests": 0, "max_rate_1s": 0, "peak_window": [], "robots_at": []}


def test_rate_window_is_an_exact_sliding_window() -> None:
    window = RateWindow(1.0, keep_window=True)
    for t in (0.0, 0.5, 0.9, 1.0, 1.2, 1.95, 3.0, 3.1, 3.2, 3.3):
        window.add(t, f"/{t}")
    # (0.0, 1.0] holds 0.5, 0.9, 1.0; (0.2, 1.2] holds 0.5, 0.9, 1.0, 1.2; and so does
    # (2.3, 3.3], which comes later: the first busiest window is the one kept
    assert window.peak == 4
    assert window.peak_window == ((0.5, "/0.5"), (0.9, "/0.9"), (1.0, "/1.0"), (1.2, "/1.2"))
    spread = RateWindow(1.0)
    for i in range(100):
        spread.add(i * 0.25)  # four per second
    assert spread.peak == 4


def test_request_log_counts_hosts_and_rates_apart() -> None:
    now = [0.0]
    log = RequestLog(MODEL, 80, clock=lambda: now[0])
    for i in range(30):
        now[0] = i * 0.01
        log.record(0, "/")
    for i in range(10):
        now[0] = 5.0 + i * 0.2  # five per second
        log.record(1, "/p/1", "node2")
    now[0] = 7.0
    log.record_robots(1)
    snapshot = log.snapshot()
    first, second = snapshot["hosts"]["127.0.0.1"], snapshot["hosts"]["127.0.0.2"]
    assert (first["requests"], first["max_rate_1s"], len(first["peak_window"])) == (30, 30, 30)
    assert (second["requests"], second["max_rate_1s"]) == (10, 5)
    # the busiest window's requests, in seconds after the site's first request
    assert second["peak_window"] == [[t, "/p/1 node2"] for t in (5.0, 5.2, 5.4, 5.6, 5.8)]
    assert (first["robots_at"], second["robots_at"]) == ([], [7.0])
    assert snapshot["max_rate_1s"] == 30
    assert snapshot["active_seconds"] == pytest.approx(6.8)


def test_latency_is_added() -> None:
    with TestSite(SiteModel(pages=5, hosts=1), latency_seconds=0.2) as slow_site:
        started = time.monotonic()
        assert get(slow_site.seed_urls[0])[0] == 200
        assert time.monotonic() - started >= 0.19
        assert get(f"http://127.0.0.1:{slow_site.port}/robots.txt")[0] == 200


def test_stop_answers_pending_slow_requests_at_once() -> None:
    site = TestSite(SiteModel(pages=5, hosts=2), timeout_seconds=60)
    site.start()
    results: list[int] = []
    worker = threading.Thread(
        target=lambda: results.append(get(f"http://127.0.0.2:{site.port}/slow")[0])
    )
    worker.start()
    time.sleep(0.2)
    started = time.monotonic()
    site.stop()
    worker.join(timeout=10)
    assert time.monotonic() - started < 5
    assert results == [200]
    site.stop()  # idempotent


def test_a_taken_port_is_an_error(site: TestSite) -> None:
    with pytest.raises(OSError, match=r"cannot bind 127\.0\.0\.1"):
        TestSite(SiteModel(pages=3, hosts=1), port=site.port).start()


def test_site_in_a_child_process() -> None:
    model = SiteModel(pages=30, hosts=2)
    proc, port = start_site_process(model, timeout_seconds=5)
    try:
        assert get(model.url(3, port))[0] == 200
        assert get(model.url(3, port))[0] == 200
        stats = fetch_stats(port, host=1)
        assert stats["fetched_twice"] == [{"url": model.url(3, port), "count": 2}]
        assert len(stats["never_fetched"]) == len(model.expected_urls(port)) - 1
        reset_stats(port)
        assert fetch_stats(port)["total_requests"] == 0
    finally:
        assert stop_site_process(proc) == 0


def test_arrival_times_on_request_and_the_sites_own_stalls() -> None:
    """Arrivals per host on the log's clock (first request at 0); a ticker's lateness
    is the site's own stall, kept with its time, largest first when space runs out."""
    now = [100.0]
    log = RequestLog(MODEL, 8080, clock=lambda: now[0])
    for t, host in ((100.0, 0), (100.25, 1), (100.5, 0)):
        now[0] = t
        log.record(host, MODEL.path_of(host))
    assert "arrivals" not in log.snapshot() and log.snapshot()["loop_stalls"] is None
    snap = log.snapshot(arrivals=True)
    assert snap["arrivals"] == {"127.0.0.1": [0.0, 0.5], "127.0.0.2": [0.25], "127.0.0.3": []}
    log.watch_stalls(0.002)
    log.record_tick(100.1, 0.0005)  # under a millisecond: counted, not kept
    log.record_tick(100.3, 0.040)
    stalls = log.snapshot()["loop_stalls"]
    assert stalls == {"tick_ms": 2.0, "ticks": 2, "max_ms": 40.0, "stalls": [[0.3, 40.0]]}
    log.reset()
    assert log.snapshot()["loop_stalls"]["ticks"] == 0  # still watched, counted anew


def test_a_ticking_site_reports_its_stalls_over_http() -> None:
    with TestSite(MODEL, stall_tick_seconds=0.002) as site:
        get(site.url(1))
        time.sleep(0.05)
        stats = fetch_stats(site.port, arrivals=True)
    assert stats["loop_stalls"]["ticks"] > 5 and stats["loop_stalls"]["tick_ms"] == 2.0
    assert stats["arrivals"]["127.0.0.2"] == [0.0] and stats["arrivals_kept"] > 0
