"""The benchmark's tables and targets: each part's figures printed as a table, and the
targets it checks (name -> met) returned for the JSON report; one module per theme."""

from __future__ import annotations

from crawlfleet.benchmark.reports.crawling import (
    balance_report,
    crawl_report,
    polite_report,
    real_report,
    scaling_report,
    versus_report,
)
from crawlfleet.benchmark.reports.durability import faults_report, outage_report
from crawlfleet.benchmark.reports.field import field_cpu_report, field_polite_report
from crawlfleet.benchmark.reports.redis import (
    cluster_report,
    redis_cpu_report,
    scale_report,
    seen_report,
)
from crawlfleet.benchmark.reports.services import freshness_report, items_report, manager_report

__all__ = [
    "balance_report",
    "cluster_report",
    "crawl_report",
    "faults_report",
    "field_cpu_report",
    "field_polite_report",
    "freshness_report",
    "items_report",
    "manager_report",
    "outage_report",
    "polite_report",
    "real_report",
    "redis_cpu_report",
    "scale_report",
    "scaling_report",
    "seen_report",
    "versus_report",
]
