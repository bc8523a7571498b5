"""Visits of tracked pages: the ``Revisits`` downloader middleware (enabled by the
add-on unless ``CRAWLFLEET_REVISIT`` is "off").

For each request of a page the revisit policy tracks (not robots.txt), it keeps the
page's revisit state (:mod:`crawlfleet.revisit.state`, made on its first visit) up to
date with what the visit found:

- going out: the page's last ``ETag`` and ``Last-Modified`` as ``If-None-Match`` and
  ``If-Modified-Since`` (``CRAWLFLEET_REVISIT_CONDITIONAL``); the outcome is "failed"
  until an answer says otherwise (a download that fails for good, a ban given up);
- a 304 to a conditional request: "not_modified", and the request ends here with
  ``IgnoreRequest`` (no parse, no item; not an error: the error registry ignores it);
- 404 or 410: "gone" (one more in a row; the next visit goes without conditional
  headers, so that a page that comes back is fetched whole); any other error status:
  "failed";
- 2xx: "fetched" (the spider middleware, :mod:`crawlfleet.middlewares.changes`, judges
  changed or unchanged; a page back after 404/410 is "changed" whatever it holds), its
  validators kept (or forgotten when it sends none) and the interval its caching
  headers give (``Cache-Control: max-age``, ``Expires``) noted as a hint for the
  adaptive policy.

It sits below the retries (550) and above the error registry (540): what it sees has
spent its retries, and redirects (600) have been followed (the new request takes the
state over: :mod:`crawlfleet.node.revisits`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response

from crawlfleet.meta import REVISIT_META
from crawlfleet.middlewares.common import is_robots
from crawlfleet.revisit.config import revisit_mode, revisit_policy
from crawlfleet.revisit.policy import RevisitPolicy, cache_hint
from crawlfleet.revisit.state import FAILED, FETCHED, GONE, HANDED, NOT_MODIFIED, state_of

__all__ = ["GONE_STATUSES", "NotModified", "Revisits"]

#: The statuses that say a page is gone.
GONE_STATUSES = frozenset({404, 410})
IF_NONE_MATCH = b"If-None-Match"
IF_MODIFIED_SINCE = b"If-Modified-Since"


class NotModified(IgnoreRequest):
    """The page did not change since its last visit (304): nothing to parse."""


class Revisits:
    """See the module docstring. *clock*: epoch seconds."""

    def __init__(self, policy: RevisitPolicy, clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.clock = clock

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Revisits:
        if revisit_mode(crawler.settings) == "off":
            raise NotConfigured  # the add-on leaves it out then
        return cls(revisit_policy(crawler.settings))

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        state = state_of(request)
        if state is None:
            if is_robots(request) or not self.policy.tracks(request.url):
                return
            state = request.meta[REVISIT_META] = {}
        elif state.get("outcome") == HANDED:
            return
        state["outcome"] = FAILED  # until an answer says otherwise
        state["url"] = request.url
        if state.pop("cond", None):  # ours, from an earlier try: the state decides now
            request.headers.pop(IF_NONE_MATCH, None)
            request.headers.pop(IF_MODIFIED_SINCE, None)
        if not self.policy.conditional or state.get("gone"):
            return  # a page that was gone comes back whole, if it does
        etag, modified = state.get("etag"), state.get("lm")
        if etag and IF_NONE_MATCH not in request.headers:
            request.headers[IF_NONE_MATCH] = etag
            state["cond"] = 1
        if modified and IF_MODIFIED_SINCE not in request.headers:
            request.headers[IF_MODIFIED_SINCE] = modified
            state["cond"] = 1

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        state = state_of(request)
        if state is None or state.get("outcome") == HANDED:
            return response
        state["last"] = round(self.clock())  # whole seconds: kept in the payload
        status = response.status
        if status == 304 and state.get("cond"):
            state["outcome"] = NOT_MODIFIED
            self._fetched(state, response)
            raise NotModified(f"{request.url} not modified since its last visit")
        if status in GONE_STATUSES:
            state["outcome"] = GONE
            state["gone"] = int(state.get("gone") or 0) + 1
        elif 200 <= status < 300:
            state["outcome"] = FETCHED
            if state.pop("gone", None):
                state["back"] = 1  # a new version: its stored items lose gone_at
            self._fetched(state, response)
        return response

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        return None  # a failure for good: the outcome stays "failed"

    def _fetched(self, state: dict[str, Any], response: Response) -> None:
        """Keep what a 2xx or 304 *response* says of the page: its validators (a 304
        may renew them; a 2xx without them forgets the old ones) and its caching
        hint."""
        headers = response.headers
        not_modified = response.status == 304
        for key, name in (("etag", b"ETag"), ("lm", b"Last-Modified")):
            value = headers.get(name)
            if value:
                state[key] = value.decode("latin-1")
            elif not not_modified:
                state.pop(key, None)
        hint = cache_hint(
            _text(headers.get(b"Cache-Control")),
            _text(headers.get(b"Expires")),
            _text(headers.get(b"Date")),
            self.clock(),
        )
        if hint is not None:
            state["hint"] = hint
        else:
            state.pop("hint", None)


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value else None
