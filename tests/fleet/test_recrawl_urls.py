"""A re-crawl by URL (an error whose stored request cannot be read back) judges the URL
as crawlfleet does (crawlfleet.urls): one without a host is left open, not queued."""

from __future__ import annotations

from crawlfleet.fleet.errors import _outgoing


def test_a_recrawl_by_url_refuses_a_url_without_a_host() -> None:
    out, stored = _outgoing(7, "https://books.example/a", None, "books.example")
    assert out is not None and not stored and out.site == "books.example"
    for url in ("https:///path", "http://", "ftp://books.example/", "not a url"):
        assert _outgoing(8, url, None, "x") == (None, False), url
    # a stored request that does not read back falls back to the URL, judged the same
    assert _outgoing(9, "https:///path", b"\xff not a payload", "x") == (None, False)
