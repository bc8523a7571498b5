"""The node's fingerprints: Scrapy's stock fingerprint remembered by URL, exactly."""

from __future__ import annotations

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter, fingerprint
from scrapy.utils.test import get_crawler

from crawlfleet.node.fingerprints import FingerprintMemo, node_fingerprint


def _requests() -> list[Request]:
    urls = [
        "http://a.example/p.html",
        "http://a.example/p.html#frag",  # the same page: the same fingerprint
        "http://a.example/q?b=2&a=1",
        "http://a.example/q?a=1&b=2",
        "http://A.example:80/p.html",
        "http://a.example/%7Euser/",
        "http://a.example/~user/",
    ]
    requests: list[Request] = []
    for url in urls:
        requests += [
            Request(url),
            Request(url, method="HEAD"),
            Request(url, method="POST", body=b"x=1"),
            Request(url, method="POST", body=b"x=2"),
            Request(url, meta={"verbatim_url": True}),
            Request(url, headers={"Cookie": "a=b"}),
        ]
    return requests


def test_the_memo_gives_scrapys_fingerprints() -> None:
    memo = FingerprintMemo(RequestFingerprinter().fingerprint)
    for _ in range(2):  # computed, then remembered
        for request in _requests():
            fresh = request.replace()  # Scrapy's own cache is per request object
            assert memo(request) == fingerprint(fresh), request
    bodiless = {(r.url, r.method, "verbatim_url" in r.meta) for r in _requests() if not r.body}
    assert len(memo) == len(bodiless)  # requests with a body are not remembered


def test_the_memo_is_bounded_and_keeps_what_it_meets_again() -> None:
    calls: list[str] = []

    def counted(request: Request) -> bytes:
        calls.append(request.url)
        return fingerprint(request)

    memo = FingerprintMemo(counted, size=8)
    for i in range(100):
        memo(Request(f"http://a.example/{i}"))
        memo(Request("http://a.example/nav"))  # met on every page
    assert len(memo) <= 8
    assert calls.count("http://a.example/nav") == 1
    assert len(calls) == 101


def test_only_the_stock_fingerprinter_is_remembered() -> None:
    crawler = get_crawler()
    assert isinstance(node_fingerprint(crawler.request_fingerprinter), FingerprintMemo)

    class Own(RequestFingerprinter):
        def fingerprint(self, request: Request) -> bytes:
            return request.url.encode()

    own = Own()
    assert not isinstance(node_fingerprint(own), FingerprintMemo)
    assert node_fingerprint(own)(Request("http://a.example/")) == b"http://a.example/"
    headers = RequestFingerprinter()
    headers._fingerprint = lambda request: b"h"  # e.g. one that includes headers
    assert not isinstance(node_fingerprint(headers), FingerprintMemo)
