"""A campaign that lasts longer than CRAWLFLEET_PROGRESS_SECONDS says how far it got in
its node's log: units done out of the total, growing, with the rate, and a last line
once it is finished. One node, 6 units of the test site's archive, the site held to
12 requests a second so that the campaign takes a few seconds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from crawlfleet.campaigns.space import ParamSpace
from crawlfleet.node.launcher import start_node
from crawlfleet.state.campaigns import campaign_status, create_campaign
from crawlfleet.state.db import StateDB
from crawlfleet.testsite import SiteModel, TestSite
from crawlfleet.testsite.archive import category_names

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SPIDER = "tests.support.archive_spider:ArchiveSpider"
JOB = "campaign-progress"
MODEL = SiteModel(
    pages=20, hosts=1, problems=False, archive_dates=3, archive_categories=category_names(2)
)
LINE = re.compile(
    r"Campaign 'progress' \((\w+)\): (\d+)/6 units done, (\d+) failed \(([\d.]+) %\)(.*)$",
    flags=re.M,
)


def test_a_long_campaign_says_how_far_it_got(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    state_url = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    db = StateDB.open(state_url)
    db.upgrade()
    log = tmp_path / "node.log"
    try:
        with TestSite(MODEL) as site:
            create_campaign(
                db,
                "progress",
                job=JOB,
                space=ParamSpace.from_dict(
                    {"from": "2026-01-01", "to": "2026-01-03", "categories": category_names(2)}
                ),
                template=f"http://127.0.0.1:{site.port}/archive/{{date}}/{{category}}",
                units_ahead=2,
            )
            node = start_node(
                SPIDER,
                job=JOB,
                redis_url=redis_server_url,
                log=log,
                settings={
                    **node_env,
                    "CRAWLFLEET_STATE_DB_URL": state_url,
                    "CRAWLFLEET_CAMPAIGN": "progress",
                    "CRAWLFLEET_PROGRESS_SECONDS": 1,
                    "CRAWLFLEET_RATE_LIMITS": json.dumps({"127.0.0.1": "12/1s"}),
                    "CRAWLFLEET_HEARTBEAT_SECONDS": 0.5,
                    "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
                    "ROBOTSTXT_OBEY": False,
                },
                cwd=ROOT,
            )
            assert node.wait(120) == 0, log.read_text()[-3000:]
        assert campaign_status(db, "progress")["state"] == "finished"
    finally:
        db.close()
    text = log.read_text()
    lines = LINE.findall(text)
    assert len(lines) >= 3, text[-3000:]
    *during, last = lines
    assert last[:4] == ("finished", "6", "0", "100.0"), last
    done = [int(d) for _state, d, *_ in during]
    assert done == sorted(done) and done[0] < 6, lines  # it grows, from short of the end
    for state, d, failed, percent, _rest in during:
        assert state == "running" and failed == "0"
        assert float(percent) == pytest.approx(int(d) / 6 * 100, abs=0.05)
    # once units are finished, the line has their rate (units/min or units/s)
    assert any(re.search(r", [\d.]+ units/(s|min)", rest) for *_, rest in during), lines
    assert "in flight" in text and "ETA" in text
    # a unit is done with its first page: the pages it leads to are still counted
    assert any(re.search(r", \d+ request\(s\) left in the job$", rest) for *_, rest in during)
