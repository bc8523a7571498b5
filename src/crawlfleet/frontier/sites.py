"""Which site a request belongs to: its queue and, later, its politeness budget."""

from __future__ import annotations

import asyncio
import re
import socket
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached

__all__ = ["SiteKeyer"]


@lru_cache(maxsize=1)
def _extractor() -> Any:
    # imported when the "domain" mode first needs it: a tenth of a node's start otherwise
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)  # bundled list only


#: The netloc of an http(s) URL as urlsplit reads it (one with none of the characters
#: urlsplit removes first: a URL made safe has none)
_HTTP_NETLOC = re.compile(r"https?://([^/?#\t\r\n]*)(?:[/?#]|\Z)")


@lru_cache(maxsize=65536)
def _host_of_netloc(netloc: str) -> str:
    return (urlsplit(f"//{netloc}").hostname or "").lower()


@lru_cache(maxsize=65536)
def _registered_domain(host: str) -> str:
    parts = _extractor()(host)
    if parts.domain and parts.suffix:
        return f"{parts.domain}.{parts.suffix}"
    return host


class SiteKeyer:
    """Maps requests to site names by mode: "host", "domain" or "ip".

    ``site()`` is synchronous for "host" and "domain". In "ip" mode host names are
    resolved with ``resolve()`` (asynchronous, cached) before ``site()`` is asked; an
    unresolvable host is its own site.
    """

    def __init__(self, mode: str) -> None:
        if mode not in ("host", "domain", "ip"):
            raise ValueError(f"site key mode must be host, domain or ip, got {mode!r}")
        self.mode = mode
        self._ips: dict[str, str] = {}

    @staticmethod
    def host(request: Request) -> str:
        return (urlparse_cached(request).hostname or "").lower()

    @staticmethod
    def host_of_url(url: str) -> str:
        """:meth:`host` of ``Request(url)``, for the URL it keeps. The host is read from
        the netloc alone (as urlparse reads it), and remembered by netloc: a seed file's
        million URLs have a few thousand."""
        match = _HTTP_NETLOC.match(url)
        if match is None:
            return _host_of_netloc(urlsplit(url).netloc)
        return _host_of_netloc(match.group(1))

    def site(self, request: Request) -> str:
        return self.site_of_host(self.host(request))

    def site_of_host(self, host: str) -> str:
        """The site of a request to *host* (lower case, as :meth:`host` gives it)."""
        if self.mode == "host":
            return host
        if self.mode == "domain":
            return _registered_domain(host)
        return self._ips.get(host, host)

    def needs_resolving(self, request: Request) -> bool:
        return self.mode == "ip" and self.host(request) not in self._ips

    async def resolve(self, host: str) -> None:
        """Resolve *host* for "ip" mode (no-op in other modes or when cached)."""
        if self.mode != "ip" or host in self._ips:
            return
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, None, type=socket.SOCK_STREAM
            )
            self._ips[host] = str(infos[0][4][0]) if infos else host
        except OSError:
            self._ips[host] = host
