"""The politeness scenario of ``crawlfleet bench``: N nodes crawl one site under a
cluster-wide rate limit, and the site measures what it received.

Per rate: a fresh bundled site of one host with ``rate * seconds`` pages (at least 40),
every page queued with ``crawlfleet seed``, then N crawlfleet nodes with
``CRAWLFLEET_RATE_LIMITS = {"*": "<rate>/1s"}`` running :class:`PageListSpider`, which
parses nothing: the limit, not this machine's CPU, must be what holds the crawl back
(the test-site spider with its parsing does about 300 pages/s with 4 nodes on 2 cores).
The site counts the most requests it saw in any sliding 1-s window (must never exceed the limit) and
the span from its first to its last request; budget use is the rate achieved over
that span, ``(requests - 1) / span``, against the limit (target >= 0.95).

With ``jobs`` = 2 the nodes belong to two jobs in turn, each with half of the pages
queued: the limit (set on every node, as ``CRAWLFLEET_RATE_LIMITS``) names one budget
that both jobs share, so the site must see the limit, not twice it, and both jobs
must get a fair part of it: each node sends its job's label to the site, and the job
that finished first must have finished late in the run (a job starved by the other
would finish first at about half of it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any

import scrapy
from scrapy.http import Response

from crawlfleet.benchmark.crawl import CrawlResult, Scenario, run_crawl

__all__ = ["PageListSpider", "PoliteResult", "run_polite"]

#: Pages of the smallest politeness run.
MIN_PAGES = 40


@dataclass
class PoliteResult:
    rate: int  #: the limit, requests per second
    nodes: int
    pages: int
    requests: int
    seconds: float  #: the site's first to last request
    max_1s: int  #: the most requests in any 1-s window
    fetched_twice: int
    never_fetched: int
    late: int  #: requests given back unsent: their node missed the slot
    jobs: int = 1  #: jobs sharing the site's budget
    #: per job, when its last request came, as a share of the run (see CrawlResult)
    job_done_at: list[float] = field(default_factory=list)

    @property
    def achieved(self) -> float:
        return (self.requests - 1) / self.seconds if self.seconds > 0 else 0.0

    @property
    def use(self) -> float:
        """Share of the budget used (1.0: exactly the limit)."""
        return self.achieved / self.rate

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "achieved": self.achieved, "use": self.use}


class PageListSpider(scrapy.Spider):
    """Fetches what its job's frontier holds and parses nothing (no start requests)."""

    name = "pagelist"

    def __init__(self, start_urls: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)

    async def start(self) -> AsyncIterator[Any]:
        return
        yield

    def parse(self, response: Response, **kwargs: Any) -> Any:
        return ()


def run_polite(
    rate: int,
    *,
    seconds: float,
    nodes: int,
    redis_url: str,
    key_prefix: str,
    margin: float | None = None,
    jobs: int = 1,
) -> PoliteResult:
    """One politeness run at *rate* requests/s by *nodes* nodes of *jobs* jobs (see
    the module docstring)."""
    pages = max(MIN_PAGES, round(rate * seconds))
    # enough concurrency per node for its share at the site's loopback latency
    concurrency = max(8, min(64, rate // nodes // 4))
    scenario = Scenario(
        f"polite-{rate}" + (f"-{jobs}jobs" if jobs > 1 else ""),
        pages,
        0.0,
        concurrency,
        hosts=1,
        rate_limit=f"{rate}/1s",
        spider=f"{__name__}:PageListSpider",
        preseed=True,
        settings=() if margin is None else (("CRAWLFLEET_RATE_LIMIT_MARGIN", str(margin)),),
        jobs=jobs,
    )
    r: CrawlResult = run_crawl(
        scenario, "crawlfleet", nodes, redis_url=redis_url, key_prefix=key_prefix
    )
    return PoliteResult(
        rate=rate,
        nodes=nodes,
        pages=pages,
        requests=r.requests,
        seconds=r.seconds,
        max_1s=max(r.max_rate_1s.values(), default=0),
        fetched_twice=r.fetched_twice,
        never_fetched=r.never_fetched,
        late=r.late,
        jobs=jobs,
        job_done_at=r.job_done_at,
    )
