"""The redis-cpu part of ``crawlfleet bench``: a small crawl on a Redis of its own."""

from __future__ import annotations

from rich.console import Console

from crawlfleet.benchmark.rediscpu import RedisCpuResult, run_redis_cpu
from crawlfleet.benchmark.reports.redis import REDIS_US_JUDGED_PAGES, redis_cpu_report
from crawlfleet.testsite.model import SiteModel


def test_redis_cpu_per_page_is_measured_and_the_cache_counts_its_hits() -> None:
    r = run_redis_cpu(cache_size=1000, nodes=2, pages=60, menu_pages=18, profile=True)
    assert r.exit_codes == [0, 0]
    pages = len(SiteModel(pages=60, hosts=4, problems=False).content_locs())
    assert (r.pages, r.fetched_twice, r.never_fetched) == (pages, 0, 0)
    assert r.redis_us_per_page > 0 and r.script_calls_per_page > 0
    assert r.cache_hits > 0 and r.cache_lookups > r.cache_hits
    # every link a node sent or dropped counts, once: the job's figures are true
    assert r.enqueued == r.pages and r.duplicates >= r.cache_hits
    assert r.us_per_page_by_script["commit"] > 0 and r.calls_per_page_by_script["lease"] > 0


def test_the_target_is_judged_on_crawls_of_its_size_only() -> None:
    def result(pages: int, us: float) -> RedisCpuResult:
        return RedisCpuResult(
            site="test site",
            nodes=4,
            cache_size=200_000,
            pages=pages,
            seconds=2.0,
            redis_cpu_seconds=us * pages / 1e6,
            redis_us_per_page=us,
            script_calls_per_page=0.2,
        )

    quiet = Console(file=None, quiet=True)
    small = redis_cpu_report(quiet, [result(420, 74.7)])
    assert not any("µs Redis CPU per page" in name for name in small)
    assert all(small.values())  # the crawl itself is still judged: every page once
    large = redis_cpu_report(quiet, [result(REDIS_US_JUDGED_PAGES + 100, 74.7)])
    assert (
        large["redis-cpu test site, cache 200000: <= 60 µs Redis CPU per page (measured 74.7)"]
        is False
    )
