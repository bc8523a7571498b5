"""Request fingerprints as a node's scheduler takes them: Scrapy's stock fingerprint,
remembered by URL.

Most links of a page are URLs the node met on other pages (navigation, references to
the same anchors: on the python docs, 86 % of some 155,000 links), and computing the
fingerprint (canonicalizing the URL, JSON, SHA-1) is most of what the scheduler spends
on a link. Scrapy's stock fingerprint
(:class:`~scrapy.utils.request.RequestFingerprinter`) is a function of the request's
method, URL, body and ``verbatim_url`` meta alone, so for a request without a body the
node looks the fingerprint up by those. Any other fingerprinter (a project's own, or
one configured with headers) is called every time: the memo is exact or absent.

Bounded by two generations of dicts, as :class:`~crawlfleet.node.seencache.SeenCache`
is: at most *size* URLs (a few hundred bytes each).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy import Request
from scrapy.utils import request as scrapy_request

__all__ = ["MEMO_SIZE", "FingerprintMemo", "node_fingerprint"]

#: URLs whose fingerprints a node remembers (two generations of half of it each).
MEMO_SIZE = 32_768

_Key = tuple[str, str, bool]


class FingerprintMemo:
    """*fingerprint* (a pure function of method, URL, body and ``verbatim_url``) with
    the fingerprints of at most *size* body-less requests remembered by those."""

    def __init__(self, fingerprint: Callable[[Request], bytes], size: int = MEMO_SIZE) -> None:
        if size < 2:
            raise ValueError(f"size must be >= 2, got {size}")
        self.fingerprint = fingerprint
        self._half = size // 2
        self._new: dict[_Key, bytes] = {}
        self._old: dict[_Key, bytes] = {}

    def __call__(self, request: Request) -> bytes:
        if request.body:
            return self.fingerprint(request)
        key = (request.url, request.method, bool(request.meta.get("verbatim_url")))
        fp = self._new.get(key)
        if fp is None:
            fp = self._old.pop(key, None)
            if fp is None:
                fp = self.fingerprint(request)
            self._new[key] = fp
            if len(self._new) >= self._half:
                self._old, self._new = self._new, {}
        return fp

    def __len__(self) -> int:
        return len(self._new) + len(self._old)


def node_fingerprint(fingerprinter: Any) -> Callable[[Request], bytes]:
    """The fingerprint function a node's scheduler uses for *fingerprinter* (the
    crawler's ``request_fingerprinter``): remembered by URL when it is Scrapy's stock
    one, as it is."""
    if (
        type(fingerprinter) is scrapy_request.RequestFingerprinter
        and getattr(fingerprinter, "_fingerprint", None) is scrapy_request.fingerprint
    ):
        return FingerprintMemo(fingerprinter.fingerprint)
    fingerprint: Callable[[Request], bytes] = fingerprinter.fingerprint
    return fingerprint
