"""The error registry's eyes on a node: ``FailureRegistry`` (a downloader middleware
that also listens to the spider's and pipelines' signals, enabled by the add-on with
``CRAWLFLEET_ERRORS``) records each request that fails for good into the state DB
(:mod:`crawlfleet.state.errors`), through a writer thread:

- ``http``: its final response has an error status (400 and above) that the spider does
  not handle (``handle_httpstatus_list``/``_all``, ``HTTPERROR_ALLOWED_CODES``,
  ``HTTPERROR_ALLOW_ALL``);
- ``exception``: its download raised (timeouts, refused or dropped connections...; not
  ``IgnoreRequest``: offsite and robots.txt refusals are on purpose);
- ``parse``: the spider's callback raised (with the stack);
- ``item``: an item pipeline raised on one of its items (with the stack);
- ``invalid``: a pipeline dropped one of its items (``DropItem``: validation; not
  ``ItemNotDurable``, a store giving an item up: its page is queued again instead);
- ``ban``: the site kept refusing the crawler (recorded by
  :class:`~crawlfleet.middlewares.bans.BanDetector` through :meth:`FailureRegistry.record`).

It sits below Scrapy's RetryMiddleware (550): what it sees has spent its retries. A
request re-crawled from the registry (``crawlfleet_error`` in its meta) that is answered
without an error status resolves its error; failing again reopens it. Requests for
robots.txt are not recorded.

A request whose failure is recorded is not acknowledged in the frontier before the
record is durable in the state DB (:meth:`FailureRegistry.record` holds it through
:meth:`~crawlfleet.node.scheduler.Scheduler.hold_for_record`): a node killed while the
writer has not written it yet leaves the lease to expire, and the page is fetched (and
fails, and is recorded) again elsewhere. A resolution holds nothing: one lost leaves
its failure open, to be crawled once more.
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from twisted.python.failure import Failure as TwistedFailure

from crawlfleet.exceptions import ItemNotDurable, SerializationError
from crawlfleet.meta import ERROR_META, UNIT_ID_META, UNIT_META
from crawlfleet.middlewares.common import is_robots
from crawlfleet.parts import node_of, parts_of
from crawlfleet.state.records import Failure, utcnow
from crawlfleet.state.url import check_state_db_url, state_db_identity, state_db_url
from crawlfleet.state.writer import RegistryWriter

__all__ = ["STACK_CHARS", "FailureRegistry"]


logger = logging.getLogger(__name__)

#: A stack is kept to its last so many characters.
STACK_CHARS = 20_000


class FailureRegistry:
    """See the module docstring."""

    def __init__(self, crawler: Crawler, writer: RegistryWriter) -> None:
        self.crawler = crawler
        self.writer = writer
        settings = crawler.settings
        self.allowed = {int(c) for c in settings.getlist("HTTPERROR_ALLOWED_CODES")}
        self.allow_all = settings.getbool("HTTPERROR_ALLOW_ALL")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FailureRegistry:
        if not crawler.settings.getbool("CRAWLFLEET_ERRORS"):
            raise NotConfigured  # CRAWLFLEET_ERRORS is off (no message: Scrapy warns of one)
        url = check_state_db_url(state_db_url(crawler.settings))  # ConfigError: one line
        ext = cls(crawler, RegistryWriter(url))
        # the node says where its failures go: the manager shows nodes that write to
        # another state DB than the one it reads
        where = {"state_db": state_db_identity(url)}
        parts = parts_of(crawler)
        parts.status_providers.append(lambda: where)
        parts.failures = ext  # for BanDetector and ProxyRotation
        crawler.signals.connect(ext.spider_error, signal=signals.spider_error)
        crawler.signals.connect(ext.item_error, signal=signals.item_error)
        crawler.signals.connect(ext.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    # -- downloads -------------------------------------------------------------------
    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Any:
        if response.status >= 400 and not self._handled(request, response):
            self.record(request, "http", f"HTTP {response.status}", status=response.status)
            return response
        if ERROR_META in request.meta:
            self._resolved(request)
        unit_id = request.meta.get(UNIT_ID_META)
        if isinstance(unit_id, int):
            self.writer.unit_finished(unit_id, ok=True)
        return response

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        if not isinstance(exception, IgnoreRequest):  # offsite, robots.txt: on purpose
            self.record(request, "exception", _one_line(exception))

    # -- the spider and the pipelines -------------------------------------------------
    def spider_error(self, failure: TwistedFailure, response: Response, spider: Spider) -> None:
        self._raised(response, "parse", failure)

    def item_error(
        self, item: Any, response: Response | None, spider: Spider, failure: TwistedFailure
    ) -> None:
        self._raised(response, "item", failure)

    def _raised(self, response: Response | None, reason: str, failure: TwistedFailure) -> None:
        """Code that handled *response* raised *failure*: its request failed for
        *reason*, with the stack (nothing without a request: nothing to re-crawl)."""
        request = getattr(response, "request", None)
        if request is not None:
            self.record(
                request, reason, _one_line(failure.value or Exception()), stack=_stack(failure)
            )

    def item_dropped(
        self, item: Any, response: Response | None, exception: Exception, spider: Spider
    ) -> None:
        if isinstance(exception, ItemNotDurable):
            return  # a store gave the item up: its page goes back to its queue, not failed
        request = getattr(response, "request", None)
        if request is not None:
            self.record(request, "invalid", _one_line(exception))

    def spider_closed(self, spider: Spider) -> None:
        self.writer.close()

    # -- helpers -------------------------------------------------------------------
    def _handled(self, request: Request, response: Response) -> bool:
        meta = request.meta
        if self.allow_all or meta.get("handle_httpstatus_all"):
            return True
        codes = meta.get("handle_httpstatus_list")
        if codes is None:
            codes = getattr(self.crawler.spider, "handle_httpstatus_list", ()) or ()
        return response.status in codes or response.status in self.allowed

    def _resolved(self, request: Request) -> None:
        scheduler = node_of(self.crawler)
        eid = request.meta.get(ERROR_META)
        if scheduler is not None and isinstance(eid, int):
            self.writer.resolved(scheduler.job, eid)

    def record(
        self,
        request: Request,
        reason: str,
        detail: str,
        *,
        status: int | None = None,
        stack: str | None = None,
    ) -> None:
        """Record that *request* failed for good, for *reason* (see the module docstring):
        the node acknowledges *request* only once the record is written."""
        scheduler = node_of(self.crawler)
        if scheduler is None or is_robots(request):
            return
        try:
            payload: bytes | None = scheduler.encode(request)
        except SerializationError:
            payload = None
        unit_id = request.meta.get(UNIT_ID_META)
        if isinstance(unit_id, int):  # a campaign unit's first page: the unit failed
            self.writer.unit_finished(unit_id, ok=False, error=f"{reason}: {detail}")
        fingerprinter = self.crawler.request_fingerprinter
        failure = Failure(
            job=scheduler.job,
            fingerprint=fingerprinter.fingerprint(request).hex(),
            url=request.url,
            site=scheduler.site_of(request),
            reason=reason,
            detail=detail,
            node=scheduler.node_id,
            at=utcnow(),
            attempts=int(request.meta.get("retry_times", 0)) + 1,
            http_status=status,
            unit=_unit(request),
            stack=stack,
            payload=payload,
        )
        self.writer.failure(failure, scheduler.hold_for_record(request, self.writer.flush))


def _unit(request: Request) -> str | None:
    unit = request.meta.get(UNIT_META)
    return str(unit)[:200] if unit is not None else None


def _one_line(exc: BaseException) -> str:
    """``Class: message`` on one line. Twisted's wrappers (ResponseNeverReceived,
    ResponseFailed: a list of Failure objects as their text) say their reasons'
    classes and messages instead: ``ResponseNeverReceived: ConnectionDone: Connection
    was closed cleanly.``"""
    reasons = getattr(exc, "reasons", None)
    if isinstance(reasons, list) and reasons:
        inner = "; ".join(
            _one_line(r.value)
            for r in reasons
            if isinstance(r, TwistedFailure) and r.value is not None
        )
        if inner:
            return f"{type(exc).__name__}: {inner}"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _stack(failure: TwistedFailure) -> str:
    return str(failure.getTraceback())[-STACK_CHARS:]
