"""Other Scrapy plugins keep working through the frontier: scrapy-playwright renders
pages in Debian's chromium on two nodes sharing one job, its ``playwright`` meta and
``playwright_page_methods`` carried by every lease. Real nodes, real Redis, a loopback
site whose content only scripts write; skipped, saying why, without chromium."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from crawlfleet.frontier.client import Frontier
from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from tests.support.chromium import MISSING, chromium_path
from tests.support.loopback import LoopbackSite

ROOT = Path(__file__).resolve().parents[2]
PAGES = 6

ROOT_PAGE = """<!doctype html><html><head><title>rendered</title></head><body>
<ul id="links"></ul>
<script>
for (let i = 1; i <= %d; i++) {
  const a = document.createElement("a");
  a.href = "/p/" + i;
  a.textContent = "page " + i;
  const li = document.createElement("li");
  li.appendChild(a);
  document.getElementById("links").appendChild(li);
}
</script></body></html>"""

PAGE = """<!doctype html><html><head><title>page</title></head><body>
<h1 id="name"></h1>
<script>
document.getElementById("name").textContent = "Item %(n)d";
window.reveal = code => {
  const p = document.createElement("p");
  p.id = "secret";
  p.textContent = code + "-%(n)d";
  document.body.appendChild(p);
};
setTimeout(() => {
  const d = document.createElement("div");
  d.id = "late";
  d.textContent = "late %(n)d";
  document.body.appendChild(d);
}, 200);
</script></body></html>"""


def answer(path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    if path == "/":
        return 200, (ROOT_PAGE % PAGES).encode()
    m = re.fullmatch(r"/p/(\d+)", path)
    if m and 1 <= int(m.group(1)) <= PAGES:
        time.sleep(0.3)  # slow enough that both nodes get pages
        return 200, (PAGE % {"n": int(m.group(1))}).encode()
    return 404, b"<html></html>"


async def set_state(redis_url: str, prefix: str, job: str, state: str, nodes: int = 0) -> None:
    """Every node of *job* to *state*, once *nodes* have joined (at most 60 s)."""
    client = make_client(redis_url)
    try:
        keys = JobKeys.of(prefix, job)
        deadline = time.monotonic() + 60
        while await client.zcard(keys.nodes) < nodes and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await Frontier(client, keys).send_control("*", "state", state)
    finally:
        await client.aclose()


@pytest.mark.slow
def test_scrapy_playwright_renders_through_the_frontier_on_two_nodes(
    redis_server_url: str, key_prefix: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    path = chromium_path()
    if path is None:
        pytest.skip(f"{MISSING}: scrapy-playwright's test is skipped")
    pytest.importorskip("scrapy_playwright", reason="scrapy-playwright is not installed")
    job = "rendered"
    asyncio.run(set_state(redis_server_url, key_prefix, job, "paused"))
    with LoopbackSite(answer) as site:
        procs = [
            start_node(
                "tests.support.rendered_spider:RenderedSpider",
                job=job,
                redis_url=redis_server_url,
                log=tmp_path / f"node{i}.log",
                spider_args={"start": site.url},
                settings={
                    **node_env,
                    "CONCURRENT_REQUESTS": 2,
                    "CRAWLFLEET_ITEM_STAGES": "",
                    "CRAWLFLEET_STATS_FILE": str(tmp_path / f"stats{i}.json"),
                },
                output=tmp_path / f"items{i}.jsonl",
                extra_env={"CRAWLFLEET_CHROMIUM": path},
                cwd=ROOT,
            )
            for i in range(2)
        ]
        asyncio.run(set_state(redis_server_url, key_prefix, job, "running", nodes=2))
        codes = wait_all(procs, 180)
        hits = dict(site.hits)
    logs = [(tmp_path / f"node{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    pages = {"/", *(f"/p/{n}" for n in range(1, PAGES + 1))}
    assert {p: hits.get(p) for p in pages} == dict.fromkeys(pages, 1), hits  # each once
    items = [
        json.loads(line)
        for i in range(2)
        for line in (tmp_path / f"items{i}.jsonl").read_text().splitlines()
        if line.strip()
    ]
    by_url = {item["url"]: item for item in items}
    assert len(items) == len(by_url) == PAGES, items
    for n in range(1, PAGES + 1):  # from the rendered DOM, page methods applied
        assert by_url[f"{site.url}p/{n}"] == {
            "url": f"{site.url}p/{n}",
            "name": f"Item {n}",
            "late": f"late {n}",
            "secret": f"s3cret-{n}",
        }
    stats = [json.loads((tmp_path / f"stats{i}.json").read_text()) for i in range(2)]
    rendered = [s.get("playwright/page_count", 0) for s in stats]
    assert all(n >= 1 for n in rendered), rendered  # both nodes rendered pages
    for log in logs:
        assert "Ignoring" not in log and "Malformed" not in log, log[-3000:]
