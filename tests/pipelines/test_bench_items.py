"""The item part of ``crawlfleet bench`` (``crawlfleet.benchmark.items``): its items are
the spec's, its quality checks can fail, every store run is counted, and the command
prints and records it (real Redis; PostgreSQL when it answers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from crawlfleet.benchmark.items import (
    SPEC_PATH,
    check_encoding,
    crawled_response,
    find_postgres,
    measure_extraction,
    measure_stores,
    product_item,
)
from crawlfleet.pipelines.encoding import CharsetMiddleware
from crawlfleet.spiders.extraction import SpecExtractor
from crawlfleet.spiders.spec import load_spec
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.render import render_site

MODEL = SiteModel(pages=90, hosts=3)
PORT = 8080
ROOT = Path(__file__).resolve().parents[2]


def test_bench_items_are_what_the_site_spec_yields() -> None:
    served = render_site(MODEL, PORT)
    extractor = SpecExtractor(load_spec(SPEC_PATH))
    middleware = CharsetMiddleware()
    products = [n for n in range(MODEL.pages) if not MODEL.is_article(n)]
    for n in products:
        resource = served[MODEL.loc_of(n)]
        response = crawled_response(
            MODEL.url(n, PORT), resource.content_type, resource.body, middleware
        )
        yielded = extractor.process(response).items
        assert yielded == [product_item(MODEL, n, PORT)], f"page {n}"
        assert list(yielded[0]) == list(product_item(MODEL, n, PORT)), "field order"


def test_quality_checks_pass_on_the_bundled_site() -> None:
    extraction = measure_extraction(MODEL)
    assert extraction.articles == len(MODEL.article_ids) == 9
    assert extraction.min_f1 >= 0.9
    assert extraction.mean_f1 >= extraction.min_f1
    encoding = check_encoding(MODEL)
    assert encoding.pages == len(MODEL.encoded_pages) == 6
    assert (encoding.correct, encoding.failures) == (6, [])


def test_encoding_check_reports_pages_decoded_wrongly(monkeypatch: pytest.MonkeyPatch) -> None:
    # without the charset middleware, Scrapy believes the wrong "utf-8" header of page 56
    monkeypatch.setattr(
        CharsetMiddleware, "process_response", lambda self, request, response: response
    )
    result = check_encoding(MODEL)
    assert result.correct < result.pages
    wrong = {failure["page"]: failure for failure in result.failures}
    mislabelled = next(n for n, c in MODEL.encoded_pages.items() if c.header_charset == "utf-8")
    assert wrong[mislabelled]["title"] != MODEL.encoded_pages[mislabelled].title


def test_find_postgres_says_why_it_is_not_measured() -> None:
    url, why = find_postgres("postgresql+psycopg://root@127.0.0.1:1/test")
    assert url is None
    assert why.startswith("PostgreSQL not reachable (the URL given): ")
    assert "127.0.0.1:1" in why


def test_every_store_run_holds_every_item(redis_server_url: str, key_prefix: str) -> None:
    runs = measure_stores(redis_server_url, key_prefix, count=300)
    assert [run.target for run in runs] == [
        "stages only (no store)",
        "sqlite",
        "postgresql",
        "redis stream",
        "item worker: stream -> sqlite",
    ]
    for run in runs:
        if run.skipped is not None:
            assert run.target == "postgresql"
            assert run.skipped.startswith("PostgreSQL not reachable")
            print(f"PostgreSQL run skipped: {run.skipped}")
            continue
        assert run.complete, run
        assert run.items_per_second is not None and run.items_per_second > 0
    stored = [run.stored for run in runs[1:] if run.skipped is None]
    assert stored == [300] * len(stored)
    assert runs[0].stored is None  # the stages alone: nothing to count, nothing dropped
    client = redis.Redis.from_url(redis_server_url)
    try:
        assert list(client.scan_iter(match=f"{key_prefix}:*")) == []  # stream removed
    finally:
        client.close()


def bench(
    tmp_path: Path, redis_url: str, prefix: str, *args: str
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "crawlfleet.cli.main", "bench", "--skip", "cpu"]
    argv += [
        "--skip",
        "near",
        "--skip",
        "latency",
        "--skip",
        "polite",
        "--skip",
        "balance",
        "--skip",
        "seen",
    ]
    argv += ["--skip", "faults", "--skip", "manager", "--skip", "redis-cpu"]
    argv += ["--redis-url", redis_url]
    argv += ["-s", f"CRAWLFLEET_KEY_PREFIX={prefix}", "--json", str(tmp_path / "bench.json")]
    return subprocess.run(
        [*argv, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )


def test_bench_command_prints_and_records_the_items_part(
    tmp_path: Path, redis_server_url: str, key_prefix: str
) -> None:
    done = bench(tmp_path, redis_server_url, key_prefix, "--items", "200")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "item pipeline: every stage + one store, 200 product items" in done.stdout
    assert "6/6 correct" in done.stdout
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["complete"] is True and report["items"]["items"] == 200
    assert "] items: 200 items through the pipeline into each store ..." in done.stdout
    assert report["targets"] == {
        "items: every store holds all 200 items": True,
        "extraction F1 >= 0.9 (min over 60 articles)": True,
        "encoding: all 6 non-UTF-8 pages correct": True,
    }
    assert report["targets_met"] is True
    figures = report["items"]
    assert figures["items"] == 200 and figures["site_pages"] == 600
    assert figures["encoding"]["correct"] == figures["encoding"]["pages"] == 6
    assert figures["extraction"]["min_f1"] >= 0.9
    by_target = {run["target"]: run for run in figures["runs"]}
    assert by_target["sqlite"]["stored"] == 200
    assert by_target["item worker: stream -> sqlite"]["stored"] == 200
    postgres = by_target["postgresql"]
    assert postgres["stored"] == 200 or postgres["skipped"].startswith("PostgreSQL not reachable")
    assert "--items=200" in report["command"]


def test_bench_skip_items_leaves_the_part_out(
    tmp_path: Path, redis_server_url: str, key_prefix: str
) -> None:
    done = bench(tmp_path, redis_server_url, key_prefix, "--skip", "items")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "item pipeline" not in done.stdout
    report = json.loads((tmp_path / "bench.json").read_text())
    assert "items" not in report and report["complete"] is True  # a part left out: no key
    assert report["targets"] == {}


def test_bench_rejects_a_bad_item_count(
    tmp_path: Path, redis_server_url: str, key_prefix: str
) -> None:
    done = bench(tmp_path, redis_server_url, key_prefix, "--items", "0")
    assert done.returncode == 2
    assert "--items must be >= 1" in done.stdout
