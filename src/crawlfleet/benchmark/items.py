"""Item pipeline figures for ``crawlfleet bench``: throughput into each store, and quality.

Throughput: the pipeline objects the add-on enables (every item stage, then one store)
are built in-process with a Scrapy crawler and fed product items shaped exactly like
the ones the bundled site's spider spec yields (:func:`product_item`), with up to
:data:`ITEMS_IN_FLIGHT` items in the pipelines at once, as Scrapy's engine sends them
(a store returns an item only once it is durable). A run is timed
from the first item to the end of ``close_spider``, i.e. until the store committed
every item; afterwards the store is counted. Runs: the stages alone (no store), SQLite,
PostgreSQL (when one answers), the job's Redis stream, and one item worker (as
``crawlfleet items work``) moving that stream into SQLite.

Quality, on the bundled site's model (no HTTP needed: pages are rendered as served):

- extraction: every article page through :func:`~crawlfleet.pipelines.text.extract_article`,
  token F1 of the main text against the model's truth;
- encoding: every page served in a legacy encoding, decoded as a crawl decodes it
  (Scrapy's response class and encoding from the headers the site sends, the charset
  middleware, the site's spider spec, the encoding and clean stages); its title and
  description must equal the model's.

The crawl's pages/s with and without the pipeline is measured by :mod:`.crawl`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem
from scrapy.http import Headers, Request, TextResponse
from scrapy.responsetypes import responsetypes
from scrapy.utils.conf import build_component_list
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.test import get_crawler
from sqlalchemy.engine import make_url

from crawlfleet.parts import parts_of
from crawlfleet.pipelines.clean import CleanPipeline
from crawlfleet.pipelines.encoding import CharsetMiddleware, EncodingPipeline
from crawlfleet.pipelines.quality import token_f1
from crawlfleet.pipelines.sql import SqlSink
from crawlfleet.pipelines.text import extract_article
from crawlfleet.pipelines.worker_options import WorkerOptions
from crawlfleet.pipelines.workers import ItemWorker
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys, jobs_key
from crawlfleet.spiders.extraction import SpecExtractor
from crawlfleet.spiders.spec import load_spec
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.render import render_page_text, render_site

__all__ = [
    "POSTGRES_CANDIDATES",
    "POSTGRES_URL_ENV",
    "SPEC_PATH",
    "EncodingResult",
    "ExtractionResult",
    "ItemsResult",
    "StoreRun",
    "check_encoding",
    "crawled_response",
    "find_postgres",
    "measure_extraction",
    "measure_stores",
    "product_item",
    "run_items",
]

#: The bundled site's spider spec (its product items are what the benchmark feeds).
SPEC_PATH = Path(__file__).resolve().parents[1] / "testsite" / "spec.yaml"
#: Environment variable naming the PostgreSQL to measure (SQLAlchemy URL).
#: Items in the pipelines at once, as in a crawl (Scrapy's CONCURRENT_ITEMS): a store
#: returns an item only once it is durable, so the stores see them as a crawl sends them.
ITEMS_IN_FLIGHT = 100
POSTGRES_URL_ENV = "CRAWLFLEET_BENCH_POSTGRES_URL"
#: Tried in order when neither the option nor the environment names one (the test URLs).
POSTGRES_CANDIDATES = (
    "postgresql+psycopg://root@127.0.0.1:5432/test",
    "postgresql+psycopg://postgres@127.0.0.1:5432/test",
)
#: Port written into page URLs (nothing listens there: pages are rendered, not fetched).
_PORT = 8080
#: Longest run of one store (feeding and flushing); a store that hangs ends the run.
_RUN_TIMEOUT_SECONDS = 600.0
#: Validation rules of the runs: what a user of the site's spec would declare.
_RULES = {"product": {"title": "str", "sku": "str", "url": "url", "description": "str?"}}


@dataclass
class StoreRun:
    """One throughput run: *items* fed, *stored* counted in the store afterwards
    (None: not counted, e.g. the stages alone); *skipped* says why it did not run."""

    target: str
    items: int
    seconds: float | None = None
    items_per_second: float | None = None
    stored: int | None = None
    skipped: str | None = None

    @property
    def complete(self) -> bool:
        """Ran, and the store holds every item (or there is no store to count)."""
        return self.skipped is None and self.stored in (None, self.items)


@dataclass
class ExtractionResult:
    """Token F1 of the extracted main text of every article page against the truth."""

    articles: int
    mean_f1: float
    min_f1: float
    #: page id of the article with the lowest F1 (None without articles)
    worst_page: int | None
    seconds: float

    @property
    def pages_per_second(self) -> float:
        return self.articles / self.seconds if self.seconds > 0 else 0.0


@dataclass
class EncodingResult:
    """Legacy-encoded pages whose stored title and description equal the truth."""

    pages: int
    correct: int
    #: one entry per wrong page: page id, codec, declared charsets, what came out
    failures: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ItemsResult:
    items: int
    site_pages: int
    runs: list[StoreRun]
    extraction: ExtractionResult
    encoding: EncodingResult

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["extraction"]["pages_per_second"] = self.extraction.pages_per_second
        return data


# --- items ---------------------------------------------------------------------------


def product_item(model: SiteModel, n: int, port: int = _PORT) -> dict[str, Any]:
    """The item the site's spider spec yields for product page *n* (``spec.yaml``), made
    from the model instead of the page: same fields, order and value types."""
    product = model.product(n)
    return {
        "_type": "product",
        "url": model.url(n, port),
        "_key": product.sku,
        "title": product.title,
        "price": Decimal(product.price),
        "currency": "EUR",
        "sku": product.sku,
        "listed": dt.date.fromisoformat(product.date),
        "description": product.description,
    }


def _products(count: int) -> list[dict[str, Any]]:
    # legacy-encoded pages are on: their CJK and accented text is part of the mix
    model = SiteModel(pages=max(count, 3), hosts=3, articles=0)
    return [product_item(model, n) for n in range(count)]


# --- throughput ----------------------------------------------------------------------


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Logger *name* at WARNING for the block (Scrapy logs its set-up at INFO)."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def _crawler(settings: dict[str, Any]) -> Crawler:
    """A crawler with the add-on's configuration (never started)."""
    with _quiet("scrapy"):
        return get_crawler(
            settings_dict={
                "ADDONS": {"crawlfleet.Addon": 100},
                # not crawling: no stats file (and no "disabled" line about it)
                "EXTENSIONS": {"crawlfleet.node.statsfile.StatsFile": None},
                "CRAWLFLEET_VALIDATE_FIELDS": _RULES,
                **settings,
            }
        )


def _pipelines(crawler: Crawler) -> list[Any]:
    """The item pipelines the add-on enabled, in their order."""
    paths = build_component_list(crawler.settings.getwithbase("ITEM_PIPELINES"))
    return [build_from_crawler(load_object(path), crawler) for path in paths]


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _feed(crawler: Crawler, items: list[dict[str, Any]]) -> tuple[float, int]:
    """Every item through every pipeline, then close; ``(seconds, dropped)``."""
    pipelines = _pipelines(crawler)
    for pipeline in pipelines:
        if hasattr(pipeline, "open_spider"):
            await _maybe_await(pipeline.open_spider(None))
    dropped = 0
    slots = asyncio.Semaphore(ITEMS_IN_FLIGHT)

    async def one(item: Any) -> None:
        nonlocal dropped
        try:
            for pipeline in pipelines:
                item = await _maybe_await(pipeline.process_item(item, None))
        except DropItem:
            dropped += 1
        finally:
            slots.release()

    started = time.perf_counter()
    tasks = []
    try:
        for item in items:
            await slots.acquire()  # the engine runs other work between items
            tasks.append(asyncio.ensure_future(one(item)))
        await asyncio.gather(*tasks)
    finally:
        for pipeline in pipelines:
            if hasattr(pipeline, "close_spider"):
                await _maybe_await(pipeline.close_spider(None))
        seconds = time.perf_counter() - started
        # the stream store's shared client is closed by the engine, which is not running
        client = parts_of(crawler).redis
        if client is not None:
            await client.aclose()
    return seconds, dropped


def _timed(
    target: str, items: list[dict[str, Any]], settings: dict[str, Any], count: Callable[[], int]
) -> StoreRun:
    fresh = [dict(item) for item in items]  # stages change items in place
    crawler = _crawler(settings)
    seconds, dropped = asyncio.run(asyncio.wait_for(_feed(crawler, fresh), _RUN_TIMEOUT_SECONDS))
    stored = count() if settings.get("CRAWLFLEET_STORES") else None
    if stored is None and dropped:
        stored = len(items) - dropped
    return StoreRun(target, len(items), seconds, len(items) / seconds, stored)


def _sql_count(url: str, table: str) -> Callable[[], int]:
    return lambda: SqlSink(url, table=table).count()


async def _work(redis_url: str, keys: JobKeys, store: SqlSink) -> tuple[float, int]:
    client = make_client(redis_url)
    try:
        options = WorkerOptions(group="bench", consumer="bench", until_empty=True)
        worker = ItemWorker(client, keys, store, options)
        started = time.perf_counter()
        report = await worker.run()
        return time.perf_counter() - started, report.stored
    finally:
        await client.aclose()


def find_postgres(url: str | None = None) -> tuple[str | None, str]:
    """``(url, "")`` of the PostgreSQL to measure, or ``(None, why not)``.

    *url*, else ``$CRAWLFLEET_BENCH_POSTGRES_URL``, else :data:`POSTGRES_CANDIDATES`.
    """
    from_env = os.environ.get(POSTGRES_URL_ENV, "").strip()
    explicit = url or from_env
    candidates = (explicit,) if explicit else POSTGRES_CANDIDATES
    errors = []
    for candidate in candidates:
        shown = candidate
        try:
            shown = make_url(candidate).render_as_string(hide_password=True)
            engine = sa.create_engine(
                candidate, connect_args={"connect_timeout": 2}, poolclass=sa.NullPool
            )
        except Exception as exc:
            errors.append(f"{shown}: {type(exc).__name__}: {exc}")
            continue
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return candidate, ""
        except Exception as exc:
            lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            errors.append(f"{shown}: {lines[0] if lines else type(exc).__name__}")
        finally:
            engine.dispose()
    source = "the URL given" if url else f"${POSTGRES_URL_ENV}" if from_env else "the test URLs"
    return None, f"PostgreSQL not reachable ({source}): " + "; ".join(errors)


@contextmanager
def _workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="crawlfleet-bench-items-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def measure_stores(
    redis_url: str,
    prefix: str,
    *,
    count: int = 20_000,
    postgres_url: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> list[StoreRun]:
    """Items/s of the full pipeline into each store (see the module docstring).

    *redis_url* and *prefix* locate the stream (its keys are deleted afterwards);
    *postgres_url* as in :func:`find_postgres`. Tables are dropped, files removed.
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    items = _products(count)
    job = f"bench-items-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    table = f"cfbench_items_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    runs: list[StoreRun] = []
    with _workdir() as work:
        base: dict[str, Any] = {
            "CRAWLFLEET_DATA_DIR": str(work / "data"),
            "CRAWLFLEET_JOB": job,
            "CRAWLFLEET_SQL_TABLE": table,
        }
        progress(f"items: {count} through the stages alone ...")
        runs.append(_timed("stages only (no store)", items, base, lambda: 0))

        sqlite = f"sqlite:///{work / 'items.sqlite3'}"
        progress(f"items: {count} into SQLite ...")
        settings = {**base, "CRAWLFLEET_STORES": "sql", "CRAWLFLEET_SQL_URL": sqlite}
        runs.append(_timed("sqlite", items, settings, _sql_count(sqlite, table)))

        pg, why = find_postgres(postgres_url)
        if pg is None:
            progress(f"items: PostgreSQL skipped: {why}")
            runs.append(StoreRun("postgresql", count, skipped=why))
        else:
            progress(f"items: {count} into PostgreSQL ...")
            settings = {**base, "CRAWLFLEET_STORES": "sql", "CRAWLFLEET_SQL_URL": pg}
            try:
                runs.append(_timed("postgresql", items, settings, _sql_count(pg, table)))
            finally:
                SqlSink(pg, table=table).drop_table()

        keys = JobKeys.of(prefix, job)
        settings = {
            **base,
            "CRAWLFLEET_STORES": "redis",
            "CRAWLFLEET_REDIS_URL": redis_url,
            "CRAWLFLEET_KEY_PREFIX": prefix,
        }
        client = redis.Redis.from_url(redis_url)
        try:
            progress(f"items: {count} into the Redis stream ...")
            runs.append(
                _timed("redis stream", items, settings, lambda: int(client.xlen(keys.items)))
            )
            progress("items: one item worker, stream -> SQLite ...")
            worker_db = f"sqlite:///{work / 'worker.sqlite3'}"
            store = SqlSink(worker_db, table=table)
            seconds, stored = asyncio.run(
                asyncio.wait_for(_work(redis_url, keys, store), _RUN_TIMEOUT_SECONDS)
            )
            runs.append(
                StoreRun(
                    "item worker: stream -> sqlite",
                    count,
                    seconds,
                    stored / seconds if seconds > 0 else 0.0,
                    SqlSink(worker_db, table=table).count(),
                )
            )
        finally:
            client.delete(keys.items, keys.items_dead)
            client.srem(jobs_key(prefix), job)
            client.close()
    return runs


# --- quality -------------------------------------------------------------------------


def measure_extraction(model: SiteModel, port: int = _PORT) -> ExtractionResult:
    """Token F1 of :func:`extract_article` on every article page of *model*."""
    scores: dict[int, float] = {}
    started = time.perf_counter()
    for n in sorted(model.article_ids):
        article = extract_article(render_page_text(model, n, port), model.url(n, port))
        scores[n] = token_f1(article["text"] or "", model.article_text(n))
    seconds = time.perf_counter() - started
    if not scores:
        return ExtractionResult(0, 0.0, 0.0, None, seconds)
    worst = min(scores, key=lambda n: scores[n])
    return ExtractionResult(
        len(scores), sum(scores.values()) / len(scores), scores[worst], worst, seconds
    )


def crawled_response(
    url: str, content_type: str, body: bytes, middleware: CharsetMiddleware
) -> TextResponse:
    """The response a crawl hands its spider for what the site sends: the class Scrapy's
    downloader picks from the headers, then the charset middleware."""
    request = Request(url)
    headers = Headers({"Content-Type": content_type})
    cls = responsetypes.from_args(headers=headers, url=url, body=body)
    response = middleware.process_response(
        request, cls(url=url, headers=headers, body=body, request=request)
    )
    if not isinstance(response, TextResponse):
        raise TypeError(f"{url}: Scrapy sees {content_type!r} as {cls.__name__}, not text")
    return response


def check_encoding(model: SiteModel, port: int = _PORT) -> EncodingResult:
    """Title and description of every legacy-encoded page of *model*, decoded and stored
    as a crawl with the site's spec does it, compared with the model's truth."""
    served = render_site(model, port)
    extractor = SpecExtractor(load_spec(SPEC_PATH))
    middleware = CharsetMiddleware()
    stages = (EncodingPipeline(), CleanPipeline())
    result = EncodingResult(pages=len(model.encoded_pages), correct=0)
    for n, case in sorted(model.encoded_pages.items()):
        url = model.url(n, port)
        resource = served[model.loc_of(n)]
        response = crawled_response(url, resource.content_type, resource.body, middleware)
        items = extractor.process(response).items
        item: dict[str, Any] = dict(items[0]) if items else {}
        for stage in stages:
            item = stage.process_item(item)
        title, description = item.get("title"), item.get("description")
        if title == case.title and description == case.description:
            result.correct += 1
        else:
            result.failures.append(
                {
                    "page": n,
                    "codec": case.codec,
                    "header_charset": case.header_charset,
                    "meta_charset": case.meta_charset,
                    "decoded_as": response.encoding,
                    "title": title,
                    "description": description,
                }
            )
    return result


def run_items(
    redis_url: str,
    prefix: str,
    *,
    count: int = 20_000,
    site_pages: int = 600,
    postgres_url: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> ItemsResult:
    """Throughput into every store, then extraction and encoding quality on the bundled
    site with *site_pages* pages over three hosts."""
    runs = measure_stores(
        redis_url, prefix, count=count, postgres_url=postgres_url, progress=progress
    )
    model = SiteModel(pages=site_pages, hosts=3)
    progress(f"items: extraction quality on {len(model.article_ids)} article pages ...")
    extraction = measure_extraction(model)
    progress(f"items: encoding of {len(model.encoded_pages)} legacy-encoded pages ...")
    encoding = check_encoding(model)
    return ItemsResult(count, site_pages, runs, extraction, encoding)
