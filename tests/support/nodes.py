"""Node processes for tests: real ``crawlfleet`` nodes (the bundled test site's spider)
started from the repository's root on the tests' Redis, each logging to a file of the
test's folder. The caller waits for them (``crawlfleet.node.launcher.wait_all``) or
kills them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from crawlfleet.node.launcher import start_node
from crawlfleet.testsite.server import TestSite
from tests.support.paths import ROOT

__all__ = ["QUICK", "SPIDER", "limited_nodes", "node_logs", "nodes", "site_node"]

#: The bundled test site's spider, as a node process names it.
SPIDER = "crawlfleet.testsite.spider:TestSiteSpider"


def site_node(
    site: TestSite,
    *,
    job: str,
    redis_url: str,
    log: Path,
    settings: dict[str, Any],
    spider: str = SPIDER,
    output: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A node process of *job* running *spider* from *site*'s seeds, with *settings*,
    logging to *log* (items to *output*, environment *extra_env* if given)."""
    return start_node(
        spider,
        job=job,
        redis_url=redis_url,
        log=log,
        spider_args={"start_urls": ",".join(site.seed_urls)},
        settings=settings,
        output=output,
        extra_env=extra_env,
        cwd=ROOT,
    )


#: The settings of :func:`nodes` unless told others: 4 requests at a time, quick
#: heartbeats.
QUICK = {
    "CONCURRENT_REQUESTS": 4,
    "CRAWLFLEET_HEARTBEAT_SECONDS": 0.3,
    "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
    "LOG_LEVEL": "INFO",
}


def nodes(
    n: int,
    site: TestSite,
    redis_url: str,
    node_env: dict[str, Any],
    tmp_path: Path,
    job: str,
    *,
    settings: dict[str, Any] | None = None,
    per_node: list[dict[str, Any]] | None = None,
    per_node_env: list[dict[str, str]] | None = None,
) -> list[subprocess.Popen[bytes]]:
    """*n* nodes of *job* crawling *site* with *node_env* and *settings* (default
    :data:`QUICK`); *per_node*: extra settings of each node, *per_node_env*: extra
    environment of each node. Their logs are ``node<k>.log`` in *tmp_path*, numbered
    after those already there."""
    common = {**node_env, **(QUICK if settings is None else settings)}
    first = len(list(tmp_path.glob("node*.log")))
    return [
        site_node(
            site,
            job=job,
            redis_url=redis_url,
            log=tmp_path / f"node{first + i}.log",
            settings={**common, **(per_node[i] if per_node else {})},
            extra_env=per_node_env[i] if per_node_env else None,
        )
        for i in range(n)
    ]


def limited_nodes(
    n: int,
    job: str,
    limit: str,
    site: TestSite,
    redis_url: str,
    env: dict[str, str],
    tmp_path: Path,
    per_node: list[dict[str, Any]] | None = None,
    per_node_env: list[dict[str, str]] | None = None,
) -> list[subprocess.Popen[bytes]]:
    """:func:`nodes` with every site limited to *limit*."""
    limited = {
        "CRAWLFLEET_RATE_LIMITS": json.dumps({"*": limit}),
        # sends on the test suite's busy machine can be tens of ms late: a wider margin
        # (CRAWLFLEET_RATE_LIMIT_MARGIN) than the default, still checked exactly
        "CRAWLFLEET_RATE_LIMIT_MARGIN": 0.1,
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.5,
        "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
        "LOG_LEVEL": "INFO",
    }
    return nodes(
        n,
        site,
        redis_url,
        env,
        tmp_path,
        job,
        settings=limited,
        per_node=per_node,
        per_node_env=per_node_env,
    )


def node_logs(tmp_path: Path) -> str:
    """The logs of every node of the test (``node*.log`` in *tmp_path*), one after the
    other."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("node*.log")))
