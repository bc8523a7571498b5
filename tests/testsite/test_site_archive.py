"""The test site's date x category archive: ground truth, what is served, accounting."""

from __future__ import annotations

import datetime as dt
import http.client
from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

import parsel
import pytest

from crawlfleet.testsite import SiteModel, TestSite
from crawlfleet.testsite.archive import (
    ARCHIVE_PAGE_SIZE,
    MAX_DOCS_PER_UNIT,
    Archive,
    Unit,
    category_names,
)

MODEL = SiteModel(pages=20, hosts=2, seed=3, archive_dates=6, archive_categories=category_names(5))


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def running() -> Iterator[TestSite]:
    with TestSite(MODEL) as site:
        yield site


@pytest.fixture
def site(running: TestSite) -> TestSite:
    running.reset()
    return running


def units_by_pages(model: SiteModel) -> dict[int, Unit]:
    """One unit for each number of listing pages (1 with an empty unit apart as 0)."""
    found: dict[int, Unit] = {}
    for unit in model.archive_units():
        n = model.archive.doc_count(unit)
        key = 0 if n == 0 else model.archive.page_count(unit)
        found.setdefault(key, unit)
    return found


# -- the model ---------------------------------------------------------------------------


def test_units_and_ground_truth() -> None:
    units = MODEL.archive_units()
    assert len(units) == 6 * 5
    assert units[:6] == [(f"2026-01-0{d}", f"c0{c}") for d in (1, 2) for c in range(5)][:6]
    assert units[-1] == ("2026-01-06", "c04")
    counts = [MODEL.archive.doc_count(unit) for unit in units]
    assert all(0 <= n <= MAX_DOCS_PER_UNIT for n in counts)
    unit = next(u for u in units if MODEL.archive.doc_count(u) > ARCHIVE_PAGE_SIZE)
    n = MODEL.archive.doc_count(unit)
    base = f"http://127.0.0.1:80/archive/{unit[0]}/{unit[1]}"
    assert MODEL.archive_unit_url(unit, 80) == base
    assert MODEL.archive_doc_urls(unit, 80) == [f"{base}/{i}" for i in range(1, n + 1)]
    pages = -(-n // ARCHIVE_PAGE_SIZE)
    assert MODEL.archive_listing_urls(unit, 80) == [
        base,
        *(f"{base}?page={k}" for k in range(2, pages + 1)),
    ]
    with pytest.raises(ValueError, match="no archive unit"):
        MODEL.archive_doc_urls(("2025-12-31", "c00"), 80)


def test_counts_are_seeded_and_some_units_are_empty() -> None:
    big = Archive(seed=1, dates=60, categories=category_names(10))
    counts = [big.doc_count(unit) for unit in big.units()]
    assert 0 in counts and MAX_DOCS_PER_UNIT in counts
    assert 5 < sum(counts) / len(counts) < 7
    again = Archive(seed=1, dates=60, categories=category_names(10))
    assert [again.doc_count(unit) for unit in again.units()] == counts
    other = Archive(seed=2, dates=60, categories=category_names(10))
    assert [other.doc_count(unit) for unit in other.units()] != counts
    assert big.document(("2026-01-05", "c03"), 1) == again.document(("2026-01-05", "c03"), 1)


def test_every_path_resolves_to_its_page() -> None:
    archive = MODEL.archive
    total = 0
    for unit in MODEL.archive_units():
        for k, path in enumerate(archive.listing_paths(unit), 1):
            page = archive.resolve(path)
            assert page is not None and (page.kind, page.unit, page.number) == ("listing", unit, k)
        for i, path in enumerate(archive.doc_paths(unit), 1):
            page = archive.resolve(path)
            assert page is not None and (page.kind, page.unit, page.number) == ("document", unit, i)
        total += archive.page_count(unit) + archive.doc_count(unit)
    assert archive.url_count() == total


def test_no_archive_by_default() -> None:
    model = SiteModel(pages=10, hosts=1)
    assert not model.archive and model.archive_units() == []
    assert model.archive.resolve("/archive/2026-01-01/c00") is None
    assert model == SiteModel(pages=10, hosts=1, archive_categories=())
    with_archive = SiteModel(pages=10, hosts=1, archive_dates=2, archive_categories=["a", "b"])
    assert with_archive.archive_categories == ("a", "b")
    assert with_archive.content_locs() == model.content_locs()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"archive_dates": -1, "archive_categories": ("a",)}, "archive_dates must be between"),
        ({"archive_dates": 1.5, "archive_categories": ("a",)}, "archive_dates must be an int"),
        ({"archive_dates": 2}, "archive_categories must not be empty"),
        (
            {"archive_dates": 30_000, "archive_categories": category_names(10)},
            "archive_dates x archive_categories must be at most",
        ),
        ({"archive_dates": 2, "archive_categories": "c00"}, "archive_categories must be a seq"),
        ({"archive_dates": 2, "archive_categories": ("a", "a")}, "must be distinct"),
        ({"archive_dates": 2, "archive_categories": ("a/b",)}, "archive_categories must be names"),
        ({"archive_dates": 2, "archive_categories": ("",)}, "archive_categories must be names"),
        (
            {"archive_dates": 2, "archive_categories": ("a",), "archive_start": "2026-01-01"},
            "archive_start must be a date",
        ),
        (
            {"archive_dates": 2, "archive_categories": ("a",), "archive_start": dt.date.max},
            "archive_start is too late",
        ),
    ],
)
def test_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SiteModel(pages=5, hosts=1, **kwargs)


def test_category_names() -> None:
    assert category_names(0) == ()
    assert category_names(3) == ("c00", "c01", "c02")
    assert category_names(101)[-1] == "c100"
    with pytest.raises(ValueError, match="archive_categories must be an integer >= 0"):
        category_names(-1)


# -- served ------------------------------------------------------------------------------


def walk_unit(url: str) -> tuple[list[str], list[str]]:
    """Follow ``rel=next`` from a unit's first listing page: (listing URLs, doc URLs)."""
    listings: list[str] = []
    docs: list[str] = []
    next_url: str | None = url
    while next_url is not None:
        status, body = get(next_url)
        assert status == 200, next_url
        listings.append(next_url)
        page = parsel.Selector(body.decode("utf-8"))
        docs += [
            urljoin(next_url, h) for h in page.css("ol.archive-list a.doc::attr(href)").getall()
        ]
        following = page.css('a.next[rel="next"]::attr(href)').get()
        next_url = None if following is None else urljoin(next_url, following)
    return listings, docs


def test_walking_units_matches_the_ground_truth(site: TestSite) -> None:
    port = site.port
    chosen = units_by_pages(MODEL)
    assert {0, 1, 2} <= set(chosen)  # an empty unit, one page, several pages
    for unit in chosen.values():
        listings, docs = walk_unit(MODEL.archive_unit_url(unit, port))
        assert listings == MODEL.archive_listing_urls(unit, port)
        assert docs == MODEL.archive_doc_urls(unit, port)
    empty = chosen[0]
    status, body = get(MODEL.archive_unit_url(empty, port))
    assert status == 200 and b'<p class="empty">' in body
    stats = site.stats()["archive"]
    expected = {
        url: 1
        for unit in chosen.values()
        for url in (*MODEL.archive_listing_urls(unit, port), MODEL.archive_unit_url(empty, port))
    }
    expected[MODEL.archive_unit_url(empty, port)] = 2
    assert stats["requests"] == expected
    assert stats["fetched_twice"] == [{"url": MODEL.archive_unit_url(empty, port), "count": 2}]
    assert stats["total_requests"] == sum(expected.values())
    assert stats["fetched"] == len(expected)
    assert stats["units"] == 30 and stats["expected_urls"] == MODEL.archive.url_count()


def test_a_document_and_its_links(site: TestSite) -> None:
    unit = units_by_pages(MODEL)[2]
    url = MODEL.archive_doc_urls(unit, site.port)[-1]
    status, body = get(url)
    assert status == 200
    page = parsel.Selector(body.decode("utf-8"))
    doc = MODEL.archive.document(unit, MODEL.archive.doc_count(unit))
    assert page.css("h1.title::text").get() == doc.title
    assert page.css("span.date::text").get() == unit[0]
    assert page.css("span.category::text").get() == unit[1]
    assert "\n\n".join(page.css("div.body p::text").getall()) == doc.body
    links = {urljoin(url, h) for h in page.css("a::attr(href)").getall()}
    inside = set(MODEL.archive_listing_urls(unit, site.port)) | set(
        MODEL.archive_doc_urls(unit, site.port)
    )
    assert links and links <= inside
    stats = site.stats()
    assert stats["archive"]["requests"] == {url: 1}
    assert stats["unknown_requests"] == {} and stats["content_requests"] == 0
    assert stats["total_requests"] == 1


def test_unknown_archive_pages_are_404(site: TestSite) -> None:
    port = site.port
    unit = units_by_pages(MODEL)[2]
    n = MODEL.archive.doc_count(unit)
    base = f"http://127.0.0.1:{port}/archive"
    bad = [
        f"{base}/2025-12-31/c00",
        f"{base}/2026-01-07/c00",
        f"{base}/2026-01-01/c05",
        f"{base}/2026-1-1/c00",
        f"{base}/{unit[0]}/{unit[1]}?page=1",
        f"{base}/{unit[0]}/{unit[1]}?page=9",
        f"{base}/{unit[0]}/{unit[1]}/0",
        f"{base}/{unit[0]}/{unit[1]}/01",
        f"{base}/{unit[0]}/{unit[1]}/{n + 1}",
        f"{base}/{unit[0]}/{unit[1]}/1/x",
        f"{base}/{unit[0]}",
        f"http://127.0.0.2:{port}/archive/{unit[0]}/{unit[1]}",  # host 0 only
    ]
    assert [get(url)[0] for url in bad] == [404] * len(bad)
    stats = site.stats()
    assert stats["archive"]["total_requests"] == 0
    assert len(stats["unknown_requests"]) == len(bad)


def test_brief_stats_leave_out_archive_urls(site: TestSite) -> None:
    unit = MODEL.archive_units()[0]
    get(MODEL.archive_unit_url(unit, site.port))
    brief = site.stats(brief=True)["archive"]
    assert "requests" not in brief and brief["total_requests"] == 1
