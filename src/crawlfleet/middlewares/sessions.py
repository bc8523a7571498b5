"""Sessions: a cookie jar, a proxy and a browser identity kept together, for sites that
follow a visitor (a login, a cart, a consent cookie) and compare its cookies with its
address and browser. ``CRAWLFLEET_SESSIONS = True`` (a spec's ``settings:`` can say it
for its site) turns cookies on and gives each site one session at a time on a node:

- every request of the site goes out in the site's current session: its own cookie jar
  (Scrapy's ``cookiejar`` meta), its identity (``CRAWLFLEET_USER_AGENTS``: sticky per
  session) and its proxy (``CRAWLFLEET_PROXY_ENABLED``: one per session, not per
  request);
- a ban (the site refused the session) or a failure of its proxy ends the session: the
  next request of the site starts a new one, with an empty jar, a new identity and a new
  proxy, never the old cookies from a new address.

Sessions are a node's: a request that another node leases goes out in that node's
session for the site (cookies are not shared through Redis). The request's session is
in ``request.meta["crawlfleet_session"]``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

from crawlfleet.meta import NEW_IDENTITY_META, SESSION_META
from crawlfleet.middlewares.common import is_robots, site_of
from crawlfleet.parts import parts_of

__all__ = ["SESSION_META", "Sessions"]

logger = logging.getLogger(__name__)

#: Sites whose session a node remembers at most (least recently used forgotten).
MAX_SITES = 10_000


class Sessions:
    """See the module docstring."""

    def __init__(self, crawler: Crawler | None) -> None:
        self.crawler = crawler
        self.stats = crawler.stats if crawler is not None else None
        #: site -> its current session number
        self._current: OrderedDict[str, int] = OrderedDict()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Sessions:
        if not crawler.settings.getbool("CRAWLFLEET_SESSIONS"):
            raise NotConfigured  # CRAWLFLEET_SESSIONS is off (no message: Scrapy warns of one)
        mw = cls(crawler)
        parts_of(crawler).sessions = mw  # for ProxyRotation
        return mw

    def session_of(self, site: str) -> str:
        """The site's current session."""
        n = self._current.get(site)
        if n is None:
            n = self._current[site] = 1
            if len(self._current) > MAX_SITES:
                self._current.popitem(last=False)
        else:
            self._current.move_to_end(site)
        return f"{site}#{n}"

    def end(self, session: str) -> None:
        """*session* is over (banned, or its proxy failed): its site starts a new one,
        unless it did already."""
        site, _, n = session.rpartition("#")
        if n.isdigit() and self._current.get(site) == int(n):
            self._current[site] = int(n) + 1
            if self.stats is not None:
                self.stats.inc_value("crawlfleet/sessions/ended")
            logger.debug("Session %s ended; %s starts %s#%d", session, site, site, int(n) + 1)

    def process_request(self, request: Request, spider: Spider | None = None) -> Any:
        if is_robots(request):
            return None
        site = site_of(self.crawler, request)
        old = request.meta.get(SESSION_META)
        if old and request.meta.get(NEW_IDENTITY_META):
            self.end(str(old))  # the site refused this session: a whole new one
        session = self.session_of(site)
        if session != old:
            request.meta[SESSION_META] = session
            request.meta["cookiejar"] = session
            if old:  # a request of an ended session: the new one's identity and proxy
                request.meta[NEW_IDENTITY_META] = True
        return None
