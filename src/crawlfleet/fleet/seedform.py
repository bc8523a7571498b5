"""Seed entries in the form the frontier stores them (:class:`SeedForm`): what
``crawlfleet seed`` and the manager's seeds endpoint queue.

A seed is fingerprinted as Scrapy does by default (``RequestFingerprinter``: a project
with its own REQUEST_FINGERPRINTER_CLASS seeds through the job's seed list instead,
which its nodes fingerprint) and stored as
:class:`~crawlfleet.frontier.serialization.RequestCodec` encodes its request, so nodes
read it as any other. A plain URL, the usual seed and most of a large seed file, is put
in that form without building its ``Request``: the same ``safe_url_string`` and
``canonicalize_url``, the same hash of the same JSON, the same payload, for a third of
the cost. A plain URL of the plainest kind (:data:`PLAIN`: most of a crawl's seed
files) is already both: it skips them too. Once per process the short way is checked
against Scrapy's own on a few URLs, plain ones among them (:func:`short_way_agrees`);
should a Scrapy release fingerprint or build a plain GET differently, every seed takes
the long way. JSON entries always take it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from functools import lru_cache

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter
from w3lib.url import canonicalize_url, safe_url_string

from crawlfleet.exceptions import SerializationError
from crawlfleet.frontier.records import FINGERPRINT_BYTES
from crawlfleet.frontier.serialization import RequestCodec, url_payload
from crawlfleet.frontier.sites import SiteKeyer
from crawlfleet.spiders.seeding import judge_seed

__all__ = ["PLAIN", "SeedForm", "seed_form", "short_way_agrees"]

logger = logging.getLogger(__name__)

_fingerprinter = RequestFingerprinter()
_codec = RequestCodec(None)

#: Scrapy's fingerprint of a GET without body is the SHA-1 of ``json.dumps({"method":
#: "GET", "url": canonical URL, "body": "", "headers": {}}, sort_keys=True)``: this text
#: around ``json.dumps(canonical URL)``
_GET_HEAD = '{"body": "", "headers": {}, "method": "GET", "url": '

#: A URL that ``safe_url_string`` and ``canonicalize_url`` leave as it is (with no "--"
#: in it, checked apart): http(s) in lower case; a host of lower-case ASCII labels of
#: letters, digits and inner hyphens (no IDNA "xn--" label), its last label starting
#: with a letter (no IPv4 number); no userinfo, no port; a path of segments of
#: unreserved characters with inner dots only (no "." or ".." segment, no escape, no
#: empty segment but a last one); no query, no fragment.
PLAIN = re.compile(
    r"https?://"
    r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?"
    r"/(?:[A-Za-z0-9_~-]+(?:\.[A-Za-z0-9_~-]+)*/?)*"
)

#: URLs that exercise what the short way must do as Scrapy does: case, default port,
#: spaces, escapes, query order, fragments, non-ASCII path and host; and plain ones
#: (:data:`PLAIN`), which it takes as they are
_SAMPLES = (
    "https://Example.COM:443/a b/%7Euser/./x?b=2&a=1&a=0#frag",
    "http://bücher.example/straße?q=ä&z",
    "http://h.example",
    "https://h.example/p/1?utm=%41%2f",
    "https://h1.example/p/1",
    "http://a-b.c0.example/x_y/z~w.html/v1.2-3/",
    "http://localhost/",
)


@dataclass(frozen=True, slots=True)
class SeedForm:
    """A seed as the frontier queues it: its fingerprint (FINGERPRINT_BYTES), the host
    its site is made of (by the job's site key), its priority and its payload."""

    fp: bytes
    host: str
    priority: int
    payload: bytes


def seed_form(entry: str) -> SeedForm:
    """The form of seed *entry* (a URL or a JSON seed entry), judged by
    :func:`~crawlfleet.spiders.seeding.judge_seed` as ``parse_seed`` judges it. Raises
    ValueError saying what is wrong with it (as parse_seed does, or why its request
    cannot be stored)."""
    seed = judge_seed(entry)
    if isinstance(seed, str):
        if short_way_agrees():
            return _url_form(seed)
        seed = Request(seed)
    return _request_form(seed)


def _url_form(text: str) -> SeedForm:
    """The form of ``Request(text)`` without building it (see the module docstring)."""
    if PLAIN.fullmatch(text) and "--" not in text:
        url, canonical = text, f'"{text}"'  # its own safe and canonical form, JSON-safe
    else:
        url = safe_url_string(text, "utf-8")  # what Request keeps
        canonical = json.dumps(canonicalize_url(url))
    fp = hashlib.sha1(f"{_GET_HEAD}{canonical}}}".encode()).digest()  # Scrapy's hash
    return SeedForm(fp[:FINGERPRINT_BYTES], SiteKeyer.host_of_url(url), 0, url_payload(url))


def _request_form(request: Request) -> SeedForm:
    try:
        payload = _codec.encode(request)
    except SerializationError as exc:
        raise ValueError(str(exc)) from None
    return SeedForm(
        _fingerprinter.fingerprint(request)[:FINGERPRINT_BYTES],
        SiteKeyer.host(request),
        request.priority,
        payload,
    )


@lru_cache(maxsize=1)
def short_way_agrees() -> bool:
    """Whether the short way gives what Scrapy's own does for a few telling URLs (once
    per process); if not, a WARNING says so and every seed takes the long way."""
    for url in _SAMPLES:
        if _url_form(url) != _request_form(Request(url)):
            logger.warning(
                "This Scrapy release fingerprints or builds a plain GET of %s differently "
                "from crawlfleet's short way: seeds take the long way (slower, the same "
                "result)",
                url,
            )
            return False
    return True
