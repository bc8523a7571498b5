"""The real part of ``crawlfleet bench``: vanilla Scrapy and crawlfleet's nodes crawl one
site with the link spider; its report compares their pages, CPU and wall time."""

from __future__ import annotations

import subprocess

import pytest
from rich.console import Console

from crawlfleet.benchmark.realsite import RealSiteResult, most_in_window, run_real_site
from crawlfleet.benchmark.reports import real_report
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.process import start_site_process, stop_site_process


@pytest.mark.parametrize("forked", [True, False])
def test_vanilla_and_the_nodes_crawl_the_same_pages_once_each(forked: bool) -> None:
    model = SiteModel(pages=40, hosts=1, problems=False)
    site, port = start_site_process(model, stderr=subprocess.DEVNULL)
    try:
        url = model.seed_urls(port)[0]
        vanilla = run_real_site(url, "scrapy", rate=0, timeout=120)
        fleet = run_real_site(url, "crawlfleet", nodes=2, rate=0, timeout=120, forked=forked)
    finally:
        stop_site_process(site)
    # one command for both nodes, or one each
    assert vanilla.exit_codes == [0] and fleet.exit_codes == ([0] if forked else [0, 0])
    assert vanilla.pages > 40 and fleet.urls == vanilla.urls and fleet.fetched_twice == 0
    for r in (vanilla, fleet):
        assert r.cpu_seconds > 0 and 0 < r.first_seconds <= r.last_seconds < r.seconds
        assert r.most_in_second > 0  # (vanilla fetches its start URL again when linked)
    targets = real_report(Console(file=None, quiet=True), [vanilla, fleet])
    assert [name for name in targets if "none twice" in name and targets[name]]


def _run(
    contender: str, *, pages: int, cpu: float, seconds: float, codes: list[int | None]
) -> RealSiteResult:
    r = RealSiteResult("http://site/", contender, 4 if contender == "crawlfleet" else 1, 50)
    r.pages, r.cpu_seconds, r.seconds, r.exit_codes = pages, cpu, seconds, codes
    r.urls = [f"http://site/{i}" for i in range(pages)]
    r.most_in_second = 50
    return r


def test_the_report_reads_cpu_and_wall_against_vanilla_and_the_bound() -> None:
    quiet = Console(file=None, quiet=True)
    vanilla = _run("scrapy", pages=1000, cpu=20.0, seconds=28.0, codes=[0])
    fleet = _run("crawlfleet", pages=1000, cpu=23.0, seconds=21.5, codes=[0, 0, 0, 0])
    targets = real_report(quiet, [vanilla, fleet])
    met = {name.split(" (")[0].split(": ")[1]: ok for name, ok in targets.items()}
    assert met == {
        "the pages vanilla Scrapy fetched, none twice": True,
        "<= 1.2x vanilla Scrapy's CPU/page": True,  # 1.15x
        "wall <= 1.1x the bound pages/limit": True,  # 21.5 s for a bound of 20
        "never over the limit in any 1 s window": True,
    }
    # pairs in turn: the ratios' medians are read, a noisy pair is outvoted
    noisy = _run("crawlfleet", pages=1000, cpu=40.0, seconds=30.0, codes=[0, 0, 0, 0])
    targets = real_report(quiet, [vanilla, fleet, vanilla, noisy, vanilla, fleet])
    assert all(targets.values()) and any("median of 3" in name for name in targets)
    # a node that failed gives no ratio (with none left: missed, not left out); fewer
    # pages: missed
    broken = _run("crawlfleet", pages=999, cpu=10.0, seconds=20.0, codes=[0, 1, 0, 0])
    targets = real_report(quiet, [vanilla, broken])
    assert not any(ok for name, ok in targets.items() if "CPU" in name or "none twice" in name)
    assert not any(ok for name, ok in targets.items() if "wall" in name)


def test_the_most_in_a_window_counts_any_span_shorter_than_it() -> None:
    assert most_in_window([]) == 0
    assert most_in_window([0.0, 0.5, 0.99, 1.0, 1.5]) == 3  # 0.0-0.99, or 0.5-1.5 (1.5 out)
    assert most_in_window([3.0, 0.0, 2.0, 2.5, 2.9]) == 3
