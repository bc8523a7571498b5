"""Browser identities for requests: the ``BrowserHeaders`` downloader middleware (enabled
by the add-on, active when ``CRAWLFLEET_USER_AGENTS`` is set) gives each request the
headers of a real browser, consistent with its User-Agent:

- ``browser``: identities from browserforge's generator of real browsers' headers
  (User-Agent with its ``sec-ch-ua`` client hints, Accept, Accept-Language,
  ``Sec-Fetch-*`` as a browser sends them when it navigates: ``Sec-Fetch-Site`` is
  ``none`` without a Referer, ``same-origin`` for a link on the same host, else
  ``cross-site``);
- a file path: one User-Agent a line (``#`` comments), each with the Accept and
  Accept-Language of its browser family;
- empty (the default): nothing changes, Scrapy's ``USER_AGENT`` applies.

``CRAWLFLEET_USER_AGENT_STICKY`` (default ``site``) keeps one identity per site on a
node, as one browser would browse a site (one per session with ``CRAWLFLEET_SESSIONS``);
``request`` draws a new one for every request.
A header the request already has is kept (a spider's own choice wins), and
``Accept-Encoding`` is left to Scrapy (it announces what it can decode). The identity's
User-Agent is in ``request.meta["crawlfleet_user_agent"]``. Robots.txt rules are read
for ``ROBOTSTXT_USER_AGENT`` (or ``USER_AGENT``), one name for the whole crawl.
"""

from __future__ import annotations

import random
import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

from crawlfleet.exceptions import ConfigError
from crawlfleet.meta import IDENTITY_META, NEW_IDENTITY_META, SESSION_META, USER_AGENT_META
from crawlfleet.middlewares.common import site_of

__all__ = [
    "BrowserHeaders",
    "Identity",
    "browser_identities",
    "consistent",
    "file_identities",
]

#: Sites whose identity a node remembers at most (least recently used forgotten).
STICKY_SITES = 10_000
#: Identities drawn from the generator once, at start, and reused at random.
POOL_SIZE = 200

Identity = dict[str, str]

_ACCEPT_HTML = {
    "chrome": "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
    "image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7",
    "firefox": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "safari": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
}
#: What a browser sends when the user navigates to a page (browserforge's generator
#: gives these headers, but not always with their values in the right places).
_NAVIGATE = {
    "sec-fetch-site": "none",
    "sec-fetch-mode": "navigate",
    "sec-fetch-user": "?1",
    "sec-fetch-dest": "document",
}


def family(user_agent: str) -> str:
    """chrome (Chromium-based: Chrome, Edge, Opera...), firefox or safari."""
    if "Firefox/" in user_agent:
        return "firefox"
    if "Chrome/" in user_agent or "Chromium/" in user_agent:
        return "chrome"
    return "safari" if "Safari/" in user_agent else "chrome"


def _repaired(headers: dict[str, str]) -> Identity:
    out: Identity = {}
    for name, value in headers.items():
        low = name.lower()
        if low == "accept-encoding":
            continue  # Scrapy says what it can decode
        out[name] = _NAVIGATE.get(low, value)
    return out


def consistent(identity: Identity) -> bool:
    """Whether *identity*'s client hints (``sec-ch-ua``) name its User-Agent's Chromium
    version (the generator now and then pairs an old User-Agent with new hints)."""
    low = {k.lower(): v for k, v in identity.items()}
    hints = low.get("sec-ch-ua")
    if hints is None:
        return True
    major = re.search(r"(?:Chrome|Chromium)/(\d+)", low.get("user-agent", ""))
    return major is not None and f'v="{major.group(1)}"' in hints


def browser_identities(count: int = POOL_SIZE) -> list[Identity]:
    """*count* identities from browserforge's header generator (desktop browsers), each
    consistent (see :func:`consistent`)."""
    try:
        from browserforge.headers import HeaderGenerator
    except ImportError:  # pragma: no cover - a dependency of crawlfleet
        raise ConfigError(
            "CRAWLFLEET_USER_AGENTS=browser needs browserforge: pip install 'browserforge[all]'"
        ) from None
    generator = HeaderGenerator(device="desktop")
    out: list[Identity] = []
    for _ in range(count * 5):  # bounded: an inconsistent one is drawn again
        identity = _repaired(dict(generator.generate()))
        if consistent(identity):
            out.append(identity)
            if len(out) == count:
                break
    if not out:
        raise ConfigError("browserforge gave no consistent browser identity")
    return out


def file_identities(path: str) -> list[Identity]:
    """One identity per User-Agent line of the file *path*; ConfigError naming the file
    when it cannot be read or holds none."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(
            f"CRAWLFLEET_USER_AGENTS: cannot read {path}: {exc.strerror or exc}"
        ) from None
    agents = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not agents:
        raise ConfigError(f"CRAWLFLEET_USER_AGENTS: {path} holds no User-Agent line")
    return [
        {
            "User-Agent": ua,
            "Accept": _ACCEPT_HTML[family(ua)],
            "Accept-Language": "en-US,en;q=0.9",
        }
        for ua in agents
    ]


class BrowserHeaders:
    """See the module docstring. *site_of*: the site a request belongs to (stickiness)."""

    def __init__(
        self,
        identities: list[Identity],
        *,
        sticky: str = "site",
        site_of: Callable[[Request], str] | None = None,
        choose: Callable[[list[Identity]], Identity] = random.choice,
    ) -> None:
        if not identities:
            raise ValueError("BrowserHeaders needs at least one identity")
        if sticky not in ("site", "request"):
            raise ConfigError(
                f"CRAWLFLEET_USER_AGENT_STICKY must be site or request, got {sticky!r}"
            )
        self.identities = identities
        self.sticky = sticky
        self.site_of = site_of or _host
        self.choose = choose
        self._by_site: OrderedDict[str, Identity] = OrderedDict()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BrowserHeaders:
        settings = crawler.settings
        source = str(settings.get("CRAWLFLEET_USER_AGENTS") or "").strip()
        if not source:
            raise NotConfigured  # CRAWLFLEET_USER_AGENTS unset (no message: Scrapy warns of one)
        identities = browser_identities() if source == "browser" else file_identities(source)

        return cls(
            identities,
            sticky=str(settings.get("CRAWLFLEET_USER_AGENT_STICKY")),
            site_of=lambda request: site_of(crawler, request),
        )

    def identity(self, request: Request) -> Identity:
        """The identity *request* goes out with (the site's, when sticky); a new one,
        other than the refused one, when it asks for one (a ban)."""
        refused = request.headers.get("User-Agent")
        if request.meta.pop(NEW_IDENTITY_META, False):
            for name in request.meta.pop(IDENTITY_META, ()):
                request.headers.pop(name, None)
            others = [i for i in self.identities if i.get("User-Agent", "").encode() != refused]
            fresh = self.choose(others or self.identities)
            if self.sticky == "site":
                self._by_site[self._sticky_key(request)] = fresh
            return fresh
        if self.sticky == "request":
            return self.choose(self.identities)
        site = self._sticky_key(request)
        found = self._by_site.get(site)
        if found is None:
            found = self._by_site[site] = self.choose(self.identities)
            if len(self._by_site) > STICKY_SITES:
                self._by_site.popitem(last=False)
        else:
            self._by_site.move_to_end(site)
        return found

    def _sticky_key(self, request: Request) -> str:
        """What keeps one identity: the request's session (``CRAWLFLEET_SESSIONS``), else
        its site."""
        return str(request.meta.get(SESSION_META) or self.site_of(request))

    def process_request(self, request: Request, spider: Spider | None = None) -> Any:
        if request.meta.get("dont_obey_robotstxt") and request.url.endswith("/robots.txt"):
            return None  # robots.txt is asked for under the crawl's own name
        identity = self.identity(request)
        for name, value in identity.items():
            if name.lower() == "sec-fetch-site":
                value = _fetch_site(request)
            request.headers.setdefault(name, value)
        request.meta[USER_AGENT_META] = identity.get("User-Agent", "")
        request.meta[IDENTITY_META] = list(identity)
        return None


def _fetch_site(request: Request) -> str:
    """Sec-Fetch-Site as a browser says it: none (typed in), same-origin (a link on the
    same host) or cross-site."""
    referer = request.headers.get("Referer")
    if not referer:
        return "none"
    found = _HOST.match(referer.decode("latin-1"))
    return "same-origin" if found and found.group(1).lower() == _host(request) else "cross-site"


_HOST = re.compile(r"^[a-z][a-z0-9+.-]*://([^/?#]+)", re.IGNORECASE)


def _host(request: Request) -> str:
    found = _HOST.match(request.url)
    return found.group(1).lower() if found else ""
