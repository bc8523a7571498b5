"""``/metrics`` parses with the Prometheus client's own parser and says what Redis holds."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.support.manager import Manager

SEEDS = [f"http://site{i % 2}.test/p/{i}" for i in range(7)]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_of_a_job_its_sites_and_nodes(manager: Manager) -> None:
    assert manager.client.get("/metrics").status_code == 401
    op = manager.as_("operator")
    manager.client.post("/api/v1/jobs/news/seeds", json={"seeds": SEEDS}, headers=op)
    manager.client.post("/api/v1/jobs/news/seeds", json={"seeds": SEEDS[:2]}, headers=op)
    manager.beat("news", "n1")
    manager.client.post("/api/v1/jobs/news/control", json={"command": "pause"}, headers=op)
    r = manager.client.get("/metrics", headers=manager.as_("viewer"))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    got = samples(r.text)
    job = (("job", "news"),)
    assert got[("crawlfleet_job_queued", job)] == 7
    assert got[("crawlfleet_job_leased", job)] == 0
    assert got[("crawlfleet_job_paused", job)] == 1
    assert got[("crawlfleet_requests_enqueued_total", job)] == 7
    assert got[("crawlfleet_duplicates_filtered_total", job)] == 2
    assert got[("crawlfleet_job_nodes", (("job", "news"), ("state", "alive")))] == 1
    assert got[("crawlfleet_site_queued", (("job", "news"), ("site", "site0.test")))] == 4
    assert got[("crawlfleet_site_queued", (("job", "news"), ("site", "site1.test")))] == 3
    node = (("job", "news"), ("node", "n1"))
    assert got[("crawlfleet_node_up", node)] == 1
    assert got[("crawlfleet_node_pages_per_minute", node)] == 60
    assert got[("crawlfleet_job_pages_per_second", job)] == 1.0
    assert all(name.startswith("crawlfleet_") for name, _ in got)
