"""A job reset under live nodes, then seeded again: every page is fetched once more,
as the site counts it. The nodes' caches of seen fingerprints must not outlive the
reset (issue: 314 of 315 pages were skipped, judged by what the old job had seen)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from crawlfleet.node.launcher import start_node
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from tests.support.cli import cli
from tests.support.nodes import QUICK, SPIDER, node_logs, nodes
from tests.support.paths import ROOT

pytestmark = pytest.mark.slow

#: nodes that stay when their job is done, and look for work again within a second
STAY = {**QUICK, "CRAWLFLEET_CLOSE_WHEN_FINISHED": False, "CRAWLFLEET_IDLE_MAX_SECONDS": 1}


def crawled(site: TestSite, procs: list[subprocess.Popen[bytes]], seconds: float) -> None:
    """Wait until the site says every page was fetched (the nodes still alive)."""
    deadline = time.monotonic() + seconds
    while site.stats()["never_fetched"] and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), "a node ended"
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["separate", "processes", "sharded"])
def test_a_reset_under_live_nodes_then_a_reseed_fetches_every_page_again(
    how: str, redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    job = f"reset-{how}"
    common = ["--redis-url", redis_server_url]
    common += ["-s", f"CRAWLFLEET_KEY_PREFIX={node_env['CRAWLFLEET_KEY_PREFIX']}"]
    stay = dict(STAY)
    if how == "sharded":  # 3 sites over 2 shards, the reseed's job too
        stay["CRAWLFLEET_SHARDS"] = 2
        common += ["-s", "CRAWLFLEET_SHARDS=2"]
    model = SiteModel(pages=150, hosts=3 if how == "sharded" else 1, problems=False, menu_pages=20)
    with TestSite(model) as site:
        if how != "processes":
            procs = nodes(2, site, redis_server_url, node_env, tmp_path, job, settings=stay)
        else:
            procs = [
                start_node(
                    SPIDER,
                    job=job,
                    redis_url=redis_server_url,
                    log=tmp_path / "node0.log",
                    spider_args={"start_urls": ",".join(site.seed_urls)},
                    settings={**node_env, **stay},
                    processes=2,
                    cwd=ROOT,
                )
            ]
        try:
            crawled(site, procs, 90)
            first = site.stats()
            assert first["never_fetched"] == [], node_logs(tmp_path)[-3000:]
            time.sleep(1.5)  # the nodes idle, their caches full of the job's pages
            reset = cli("job", "reset", job, "--force", *common, cwd=ROOT)
            assert reset.returncode == 0, reset.stderr
            site.reset()
            seeded = cli("seed", job, *site.seed_urls, *common, cwd=ROOT)
            assert seeded.returncode == 0, seeded.stderr
            crawled(site, procs, 90)
            again = site.stats()
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGINT)
            codes = [proc.wait(60) for proc in procs]
    logs = node_logs(tmp_path)
    assert codes == [0] * len(procs), logs[-3000:]
    # every page once more, none skipped, none twice
    assert again["never_fetched"] == [], (len(again["never_fetched"]), logs[-3000:])
    assert again["fetched_twice"] == [], again["fetched_twice"]
    assert "was reset while this node ran" in logs
    assert "Traceback" not in logs, logs[-3000:]
