"""Change detection on what a spider extracts: the ``Changes`` spider middleware
(enabled by the add-on unless ``CRAWLFLEET_REVISIT`` is "off").

For a tracked page fetched with a 2xx (outcome "fetched", set by
:mod:`crawlfleet.middlewares.revisit`), it takes the whole output of the spider's
callback and fingerprints it (:func:`~crawlfleet.revisit.fingerprint.change_fingerprint`:
the items' fields minus ``CRAWLFLEET_REVISIT_IGNORE_FIELDS``, else the URLs of the
requests it yields). The same fingerprint as at the last visit: "unchanged", the items
are dropped (quietly: nothing changed, nothing is wrong) and the requests go on (new
links are still found). Otherwise, or when the page is back after 404/410, "changed": a
new version; the items that accept the fields (dicts, and items declaring them) get
``first_seen``, ``changed_at`` (ISO 8601, UTC) and ``version``, and the keys of the
last version's items are forgotten (those of this version's stored items are kept
instead: :mod:`crawlfleet.pipelines.gone`).

Pages that are not tracked pass through untouched, as they come.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator
from typing import Any

from itemadapter import ItemAdapter
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Response

from crawlfleet.revisit.config import revisit_mode, revisit_policy
from crawlfleet.revisit.fingerprint import change_fingerprint
from crawlfleet.revisit.state import CHANGED, FETCHED, UNCHANGED, iso, state_of

__all__ = ["Changes"]


class Changes:
    """See the module docstring. *ignored*: item fields left out of the fingerprint;
    *clock*: epoch seconds."""

    def __init__(self, ignored: Collection[str] = (), clock: Callable[[], float] = time.time):
        self.ignored = frozenset(ignored)
        self.clock = clock

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Changes:
        if revisit_mode(crawler.settings) == "off":
            raise NotConfigured
        return cls(revisit_policy(crawler.settings).ignore_fields)

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Spider | None = None
    ) -> Iterator[Any]:
        state = self._judged(response)
        if state is None:
            yield from result
            return
        out: list[Any] = []
        try:
            out.extend(result)
        except BaseException:
            yield from out  # what it gave goes on, unjudged (the visit counts as failed)
            raise
        yield from self._judge(state, out)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        state = self._judged(response)
        if state is None:
            async for x in result:
                yield x
            return
        out: list[Any] = []
        try:
            async for x in result:
                out.append(x)
        except BaseException:
            for x in out:  # what it gave goes on, unjudged (the visit counts as failed)
                yield x
            raise
        for x in self._judge(state, out):
            yield x

    @staticmethod
    def _judged(response: Response) -> dict[str, Any] | None:
        """The state of *response*'s page if this middleware judges it, else None."""
        request = response.request
        state = state_of(request) if request is not None else None
        return state if state is not None and state.get("outcome") == FETCHED else None

    def _judge(self, state: dict[str, Any], out: list[Any]) -> list[Any]:
        """Judge a page whose callback gave *out*: its output, as it goes on."""
        items = [x for x in out if not isinstance(x, Request) and ItemAdapter.is_item(x)]
        urls = [x.url for x in out if isinstance(x, Request)]
        fp = change_fingerprint((ItemAdapter(x).asdict() for x in items), urls, self.ignored)
        if state.get("fp") == fp and not state.get("back"):
            state["outcome"] = UNCHANGED
            dropped = {id(x) for x in items}
            return [x for x in out if id(x) not in dropped]
        now = round(self.clock())  # whole seconds: the state travels with every payload
        version = int(state.get("version") or 0) + 1
        first = state.setdefault("first", now)
        state.update(outcome=CHANGED, fp=fp, changed=now, version=version)
        state.pop("keys", None)  # this version's stored items say theirs
        stamps = {"first_seen": iso(first), "changed_at": iso(now), "version": version}
        for item in items:
            adapter = ItemAdapter(item)
            for name, value in stamps.items():
                # an item that does not declare the field goes without it
                with contextlib.suppress(KeyError, TypeError, AttributeError):
                    adapter[name] = value
        return out
