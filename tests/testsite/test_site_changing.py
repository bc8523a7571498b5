"""The changing test site: its schedule, conditional requests, timestamp-only pages and
the freshness figures of ``/_stats``, over real HTTP with the site's clock in hand."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from scrapy.http import HtmlResponse

from crawlfleet.cli import site as site_cli
from crawlfleet.testsite import (
    ChangeStats,
    Changing,
    SiteModel,
    TestSite,
    fetch_change_stats,
    fetch_stats,
    reset_stats,
    spider,
    start_site_process,
    stop_site_process,
)
from crawlfleet.testsite.changing import (
    CHANGE_CLASSES,
    Schedule,
    change_mix,
    etag_matches,
    iso_time,
    modified_since,
)
from crawlfleet.testsite.process import site_command
from crawlfleet.testsite.server import CLIENT_HEADER
from crawlfleet.testsite.spider import TestSiteSpider


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    url: str

    def item(self) -> dict[str, object] | None:
        response = HtmlResponse(self.url, body=self.body, encoding="utf-8")
        return TestSiteSpider.extract_item(response)


def get(site: TestSite, n: int, client: str | None = "A", **headers: str) -> Answer:
    """One GET of page ``n``, as *client*, with these extra headers (``_`` for ``-``)."""
    return get_page(site.model, site.port, n, client, **headers)


def get_page(
    model: SiteModel, port: int, n: int, client: str | None = "A", **headers: str
) -> Answer:
    url = model.url(n, port)
    conn = http.client.HTTPConnection(f"127.0.0.{model.host_of(n) + 1}", port, timeout=10)
    sent = {name.replace("_", "-"): value for name, value in headers.items()}
    if client is not None:
        sent[CLIENT_HEADER] = client
    try:
        conn.request("GET", model.path_of(n), headers=sent)
        response = conn.getresponse()
        return Answer(response.status, dict(response.getheaders()), response.read(), url)
    finally:
        conn.close()


class Clock:
    """The site's clock, in real seconds, set by the test in site seconds (the site
    reads it when it starts: its time 0)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def at(self, site_seconds: float) -> None:
        assert site_seconds / self.scale >= self.now, "the clock never goes back"
        self.now = site_seconds / self.scale


def changing_site(changing: Changing, clock: Clock, pages: int = 2) -> TestSite:
    model = SiteModel(pages=pages, hosts=1, problems=False, articles=0)
    return TestSite(model, changing=changing, clock=clock)


# -- the schedule (pure) ------------------------------------------------------------------


def test_options_name_the_bad_field() -> None:
    for kwargs, name in [
        ({"time_scale": 0}, "time_scale"),
        ({"time_scale": float("inf")}, "time_scale"),
        ({"validators": 1.5}, "validators"),
        ({"mix": (("weekly", 1.0),)}, "mix"),
        ({"mix": (("minute", 1.0), ("minute", 2.0))}, "mix"),
        ({"mix": (("minute", 0.0),)}, "mix"),
        ({"mix": (("minute", -1.0),)}, "mix"),
    ]:
        with pytest.raises(ValueError, match=name):
            Changing(**kwargs)  # type: ignore[arg-type]
    assert change_mix("minute=2, stamp=0.5,") == (("minute", 2.0), ("stamp", 0.5))
    with pytest.raises(ValueError, match="mix"):
        change_mix("minute=often")
    assert Changing(mix=change_mix(Changing().spec)) == Changing()


def test_schedule_is_deterministic_and_shares_are_exact() -> None:
    model = SiteModel(seed=3)
    first, again = Schedule(model, Changing()), Schedule(SiteModel(seed=3), Changing())
    other = Schedule(SiteModel(seed=4), Changing())
    pages = range(model.pages)
    assert [first.page_class(n) for n in pages] == [again.page_class(n) for n in pages]
    assert [first.page_class(n) for n in pages] != [other.page_class(n) for n in pages]
    times = [0.0, 59.5, 61.0, 3599.0, 7300.25, 86400.0 * 3]
    assert [first.version(n, t) for n in pages for t in times] == [
        again.version(n, t) for n in pages for t in times
    ]
    for name in CHANGE_CLASSES:
        members = first.pages_of(name)
        assert len(members) == 50
        assert sum(first.has_validators(n) for n in members) == 25
    skewed = Schedule(model, Changing(validators=0.0, mix=change_mix("minute=3,hourly=1")))
    assert [len(skewed.pages_of(name)) for name in CHANGE_CLASSES] == [150, 50, 0, 0]
    assert not any(skewed.has_validators(n) for n in pages)


def test_versions_are_born_on_schedule() -> None:
    model = SiteModel(pages=40, hosts=2)
    schedule = Schedule(model, Changing())
    for name, interval in (("minute", 60.0), ("hourly", 3600.0)):
        for n in schedule.pages_of(name):
            assert schedule.interval(n) == interval
            assert schedule.version(n, 0.0) == 0 and -interval < schedule.birth(n, 0) <= 0
            for v in (1, 2, 7):
                born = schedule.birth(n, v)
                assert born == pytest.approx(schedule.birth(n, 0) + v * interval)
                assert schedule.version(n, born) == v
                assert schedule.version(n, born - 1e-6) == v - 1
            assert schedule.births_between(n, 0.0, 10 * interval) == 10
            assert schedule.births_between(n, 5.0, 5.0) == 0
            assert schedule.updated_at(n, 123.4) == schedule.birth(n, schedule.version(n, 123.4))
    for name in ("never", "stamp"):
        for n in schedule.pages_of(name):
            assert schedule.interval(n) is None
            assert schedule.version(n, 1e9) == 0 and schedule.births_between(n, 0, 1e9) == 0
    stamp = schedule.pages_of("stamp")[0]
    assert schedule.updated_at(stamp, 123.4) == 123.0
    assert iso_time(3661.9) == "2025-01-01T01:01:01Z"


def test_every_version_changes_what_a_scraper_extracts() -> None:
    model = SiteModel(pages=60, hosts=2)
    schedule = Schedule(model, Changing())
    products = [n for n in range(model.pages) if not model.is_article(n)][:10]
    for n in products:
        prices = [schedule.product(n, v).price for v in range(30)]
        assert prices[0] == model.product(n).price
        assert all(a != b for a, b in itertools.pairwise(prices))
        assert schedule.product(n, 5).title == model.product(n).title
    for n in sorted(model.article_ids)[:3]:
        headlines = [schedule.article(n, v).headline for v in range(5)]
        assert headlines[0] == model.article(n).headline and len(set(headlines)) == 5
        assert schedule.article(n, 2).author == model.article(n).author


def test_conditional_header_matching() -> None:
    assert etag_matches('"a", "b"', '"b"') and etag_matches("*", '"x"')
    assert etag_matches('W/"b"', '"b"') and not etag_matches('"c"', '"b"')
    date = "Wed, 01 Jan 2025 00:01:00 GMT"
    assert modified_since("Wed, 01 Jan 2025 00:01:00 GMT", date) is False
    assert modified_since("Wed, 01 Jan 2025 00:00:59 GMT", date) is True
    assert modified_since("yesterday", date) is None


# -- over HTTP ----------------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock(scale=60.0)


@pytest.fixture
def minute_site(clock: Clock) -> Iterator[TestSite]:
    """Two pages changing every minute (every real second): one with validators."""
    changing = Changing(time_scale=60.0, validators=0.5, mix=change_mix("minute=1"))
    with changing_site(changing, clock) as site:
        yield site


def pages_by_validators(site: TestSite) -> tuple[int, int]:
    schedule = site.server.schedule
    assert schedule is not None
    with_tags = [n for n in range(site.model.pages) if schedule.has_validators(n)]
    assert len(with_tags) == 1
    return with_tags[0], 1 - with_tags[0]


def test_validators_and_304(minute_site: TestSite, clock: Clock) -> None:
    site = minute_site
    schedule = site.server.schedule
    assert schedule is not None
    tagged, plain = pages_by_validators(site)
    first = get(site, tagged)
    assert first.status == 200
    etag, last_modified = first.headers["ETag"], first.headers["Last-Modified"]
    assert (etag, last_modified) == (schedule.etag(tagged, 0), schedule.last_modified(tagged, 0))
    clock.at(2.0)
    again = get(site, tagged, If_None_Match=etag)
    assert (again.status, again.body, again.headers["ETag"]) == (304, b"", etag)
    assert get(site, tagged, If_Modified_Since=last_modified).status == 304
    # If-None-Match wins over If-Modified-Since (RFC 9110)
    assert get(site, tagged, If_None_Match='"other"', If_Modified_Since=last_modified).status == 200
    clock.at(schedule.birth(tagged, 1) + 3.0)
    changed = get(site, tagged, If_None_Match=etag, If_Modified_Since=last_modified)
    assert changed.status == 200 and changed.headers["ETag"] == schedule.etag(tagged, 1)
    assert changed.item() != first.item()
    assert get(site, tagged, If_Modified_Since=last_modified).status == 200
    assert get(site, tagged, If_Modified_Since=changed.headers["Last-Modified"]).status == 304
    # a page without validators sends none and always answers 200
    answer = get(site, plain, If_None_Match="*", If_Modified_Since=last_modified)
    assert answer.status == 200
    assert "ETag" not in answer.headers and "Last-Modified" not in answer.headers


def test_timestamp_only_pages(clock: Clock) -> None:
    changing = Changing(time_scale=60.0, validators=0.5, mix=change_mix("stamp=1"))
    with changing_site(changing, clock) as site:
        tagged, plain = pages_by_validators(site)
        before = {n: get(site, n) for n in (tagged, plain)}
        clock.at(3600.0 * 5 + 7.0)
        after = {n: get(site, n) for n in (tagged, plain)}
        for n in (tagged, plain):
            old, new = before[n].item(), after[n].item()
            assert old is not None and new is not None
            assert old["updated_at"] == "2025-01-01T00:00:00Z"
            assert new["updated_at"] == "2025-01-01T05:00:07Z"
            assert {k: v for k, v in old.items() if k != "updated_at"} == {
                k: v for k, v in new.items() if k != "updated_at"
            }
        # validators are of the content, which never changes
        assert after[tagged].headers["ETag"] == before[tagged].headers["ETag"]
        assert get(site, tagged, If_None_Match=before[tagged].headers["ETag"]).status == 304
        figures = ChangeStats.from_stats(site.stats())
    stamp = figures.classes["stamp"]
    assert (stamp.pages, stamp.changes, stamp.fetches, stamp.not_modified) == (2, 0, 5, 1)
    assert stamp.unchanged_fetches == 3  # both second fetches, and the 304
    assert stamp.interval_seconds is None and stamp.on_time_share is None


def test_spider_reads_updated_at_and_a_static_site_has_none(
    minute_site: TestSite, clock: Clock
) -> None:
    clock.at(90.0)
    item = get(minute_site, 0).item()
    assert item is not None and item["updated_at"] == iso_time(
        minute_site.server.schedule.updated_at(0, 90.0)  # type: ignore[union-attr]
    )
    with TestSite(SiteModel(pages=3, hosts=1, problems=False)) as static:
        answer = get(static, 1)
        assert "updated_at" not in (answer.item() or {}) and "ETag" not in answer.headers
        assert static.stats()["changing"] is None
        with pytest.raises(ValueError, match="not changing"):
            ChangeStats.from_stats(static.stats())


def test_stats_of_a_scripted_crawl(minute_site: TestSite, clock: Clock) -> None:
    """Fetches at known times: changes picked up, missed and pending, unchanged fetches,
    304s and pick-up delays, per validators group (each holds one page)."""
    site = minute_site
    schedule = site.server.schedule
    assert schedule is not None
    tagged, plain = pages_by_validators(site)
    born = {n: [schedule.birth(n, v) for v in range(6)] for n in (tagged, plain)}
    # the page without validators, fetched by A (and once by B)
    clock.at(0.0)
    get(site, plain)  # version 0: no change, not unchanged (A never had it)
    clock.at(1.0)
    get(site, plain)  # unchanged
    get(site, plain, client="B")  # B never had it: not unchanged
    get(site, plain, client=None)  # nor the anonymous client
    clock.at(born[plain][1] + 5.0)
    get(site, plain)  # version 1 picked up 5 site s after its birth
    # version 2 is replaced unseen: missed
    clock.at(born[plain][3] + 10.0)  # after the tagged page's version 1 (born <= 60)
    get(site, plain)  # version 3 picked up 10 site s late
    # the page with validators, fetched by A only now: versions 1 (and 2) missed
    etag = get(site, tagged).headers["ETag"]
    get(site, tagged, If_None_Match=etag)  # 304
    clock.at(born[plain][4] + 1.0)
    now = clock.now * clock.scale
    figures = ChangeStats.from_stats(site.stats())

    assert figures.time_scale == 60.0 and figures.site_seconds == pytest.approx(now)
    assert figures.clients == 3  # A, B and the anonymous client
    plain_counts = figures.validators["none"]
    assert plain_counts.pages == 1
    assert (plain_counts.fetches, plain_counts.unchanged_fetches, plain_counts.not_modified) == (
        6,
        1,
        0,
    )
    assert (plain_counts.changes, plain_counts.picked_up, plain_counts.missed) == (4, 2, 1)
    assert plain_counts.pending == 1  # version 4, born 1 site s ago
    # delays in real seconds: 5 and 10 site seconds at 60 site seconds a second
    assert plain_counts.delay_seconds.median == pytest.approx(5 / 60, abs=1e-6)
    assert plain_counts.delay_seconds.p95 == pytest.approx(10 / 60, abs=1e-6)
    assert plain_counts.delay_seconds.max == pytest.approx(10 / 60, abs=1e-6)
    # due: born two intervals (120 site s) ago or more: versions 1 and 2; on time: 1
    assert (plain_counts.due, plain_counts.on_time, plain_counts.on_time_share) == (2, 1, 0.5)

    tagged_counts = figures.validators["etag"]
    assert (tagged_counts.fetches, tagged_counts.unchanged_fetches) == (2, 1)
    assert tagged_counts.not_modified == 1
    current = schedule.version(tagged, now)
    assert tagged_counts.changes == current
    assert tagged_counts.picked_up == 1  # the version current at the first fetch
    assert tagged_counts.picked_up + tagged_counts.missed + tagged_counts.pending == current

    total, minute = figures.total, figures.classes["minute"]
    assert minute.interval_seconds == 1.0 and total.interval_seconds is None
    assert (total.pages, minute.pages, figures.classes["hourly"].pages) == (2, 2, 0)
    assert total.fetches == minute.fetches == 8
    assert total.changes == minute.changes == 4 + current
    assert total.picked_up == 3
    assert total.changes == total.picked_up + total.missed + total.pending
    assert total.as_dict() == minute.as_dict() | {"interval_seconds": None}


def test_reset_counts_changes_from_then_and_keeps_what_clients_had(
    minute_site: TestSite, clock: Clock
) -> None:
    site = minute_site
    schedule = site.server.schedule
    assert schedule is not None
    _, plain = pages_by_validators(site)
    clock.at(schedule.birth(plain, 2) + 1.0)
    get(site, plain)
    site.reset()
    figures = ChangeStats.from_stats(site.stats())
    assert figures.counted_seconds == 0 and figures.total.fetches == 0
    assert figures.total.changes == 0  # the versions the site has now are no changes
    get(site, plain)  # A already had it before the reset
    clock.at(schedule.birth(plain, 3) + 2.0)
    get(site, plain)
    counts = ChangeStats.from_stats(site.stats()).validators["none"]
    assert (counts.fetches, counts.unchanged_fetches) == (2, 1)
    assert (counts.changes, counts.picked_up, counts.missed, counts.pending) == (1, 1, 0, 0)
    assert counts.delay_seconds.median == pytest.approx(2 / 60, abs=1e-6)


# -- the command ----------------------------------------------------------------------------


def test_command_line_and_a_site_process() -> None:
    model = SiteModel(pages=12, hosts=2, problems=False)
    changing = Changing(time_scale=600.0, validators=0.0, mix=change_mix("minute=1"))
    argv = site_command(model, changing=changing)
    assert "--changing" in argv and "--change-mix=minute=1" in argv
    assert site_cli.main(["--changing", "--change-mix=weekly=1"]) == 2
    assert site_cli.main(["--changing", "--time-scale=0"]) == 2
    proc, port = start_site_process(model, changing=changing)
    try:
        first = get_page(model, port, 3).item()
        time.sleep(0.25)  # a version lasts 0.1 s
        second = get_page(model, port, 3).item()
        assert first is not None and second is not None and first["price"] != second["price"]
        figures = fetch_change_stats(port)
        assert figures.total.fetches == 2 and figures.total.changes > 0
        assert figures.classes["minute"].interval_seconds == pytest.approx(0.1)
        reset_stats(port)
        assert fetch_change_stats(port).total.fetches == 0
        assert fetch_stats(port)["changing"]["time_scale"] == 600.0
    finally:
        assert stop_site_process(proc) == 0


def test_vanilla_scrapy_gets_every_item_with_its_timestamp(tmp_path: Path) -> None:
    model = SiteModel(pages=40, hosts=2, seed=5)  # problems on: legacy encodings too
    clock = Clock(scale=1.0)  # as Changing()
    env = {
        key: value
        for key, value in os.environ.items()
        if "proxy" not in key.lower() and not key.startswith("SCRAPY_")
    }
    with TestSite(model, timeout_seconds=1, changing=Changing(), clock=clock) as site:
        schedule = site.server.schedule
        assert schedule is not None
        clock.at(600.0)  # site time 600 for the whole crawl
        items_file = tmp_path / "items.jsonl"
        argv = [
            sys.executable, "-m", "scrapy", "runspider", str(Path(spider.__file__)),
            "-a", "start_urls=" + ",".join(site.seed_urls),
            "-o", f"{items_file}:jsonlines",
            "-s", "DOWNLOAD_TIMEOUT=2", "-s", "RETRY_ENABLED=False",
            "-s", "TELNETCONSOLE_ENABLED=False", "-s", "LOG_LEVEL=WARNING",
        ]  # fmt: skip
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]
        figures = ChangeStats.from_stats(site.stats())
    items = {item["url"]: item for item in map(json.loads, items_file.read_text().splitlines())}
    assert len(items) == model.pages
    for n in range(model.pages):
        item = items[model.url(n, site.port)]
        assert item["updated_at"] == iso_time(schedule.updated_at(n, 600.0))
        if not model.is_article(n) and model.encoded_pages.get(n) is None:
            assert item["price"] == schedule.product(n, schedule.version(n, 600.0)).price
    total = figures.total
    assert total.fetches == model.pages
    assert total.changes == sum(schedule.births_between(n, 0, 600.0) for n in range(model.pages))
    changed = [n for n in range(model.pages) if schedule.version(n, 600.0) > 0]
    assert (total.picked_up, total.pending) == (len(changed), 0)  # each page's current one
    assert total.missed == total.changes - len(changed)
