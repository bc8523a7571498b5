"""The redis-cpu part of ``crawlfleet bench``: a small crawl on a Redis of its own."""

from __future__ import annotations

from crawlfleet.benchmark.rediscpu import run_redis_cpu
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
