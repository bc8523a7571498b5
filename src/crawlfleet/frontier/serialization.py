"""The wire format of queued requests: a version byte, then msgpack. Never pickle.

The fields are those of ``Request.to_dict``: callbacks and errbacks travel by name and
are looked up on the spider when the request is read back: only its public methods
(not Scrapy's own Spider methods such as ``close``) and the callbacks of Scrapy's generic
spiders. Only request classes from Scrapy or from the spider's own top-level package are
instantiated; anything else is a malformed entry, as is any entry that does not decode.
"""

from __future__ import annotations

import inspect
from typing import Any

import msgpack
from scrapy import Request, Spider
from scrapy.utils.misc import load_object

from crawlfleet.exceptions import MalformedEntry, SerializationError

__all__ = ["POOL_PROXY_META", "VERSION", "RequestCodec", "payload_priority", "with_meta"]

VERSION = b"\x01"
#: Private methods that Scrapy's generic spiders (CrawlSpider, SitemapSpider) use as
#: callbacks: allowed like public ones.
GENERIC_CALLBACKS = frozenset({"_callback", "_errback", "_parse_sitemap"})

#: Meta of a request whose proxy the fleet's pool chose (crawlfleet.middlewares.proxies):
#: its proxy, the proxy's credentials and their header are chosen again for every try,
#: and never stored with the request (in Redis, or in the error registry).
POOL_PROXY_META = "crawlfleet_proxy"
_POOL_PROXY_KEYS = frozenset({"proxy", "_auth_proxy", POOL_PROXY_META})

# Fields equal to these defaults are left out of the payload.
_DEFAULTS: dict[str, Any] = {
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "flags": [],
    "cb_kwargs": {},
    "method": "GET",
    "priority": 0,
    "dont_filter": False,
    "headers": {},
    "callback": None,
    "errback": None,
}


class RequestCodec:
    """Encodes and decodes requests for one spider. Method-name lookups are cached."""

    def __init__(self, spider: Spider | None) -> None:
        self.spider = spider
        self._names: dict[Any, str] = {}
        root = type(spider).__module__.split(".")[0] if spider is not None else None
        self._class_roots = ("scrapy.",) + ((root + ".",) if root else ())
        self._classes: dict[str, type[Request]] = {}

    def _method_name(self, func: Any, what: str) -> str | None:
        if func is None or isinstance(func, str):
            return func
        inner = getattr(func, "__func__", None)
        if inner is not None and getattr(func, "__self__", None) is self.spider:
            name = self._names.get(inner)
            if name is None:
                name = inner.__name__
                if getattr(getattr(self.spider, name, None), "__func__", None) is not inner:
                    raise SerializationError(f"{what} {func!r} is not a method of the spider")
                try:
                    self._spider_method(what, name)
                except MalformedEntry as exc:
                    raise SerializationError(str(exc)) from None
                self._names[inner] = name
            return name
        raise SerializationError(
            f"{what} {func!r} is not a method of the spider; only spider methods can be "
            "stored in the shared frontier"
        )

    def encode(self, request: Request) -> bytes:
        """The payload for *request*. Raises SerializationError naming what cannot go."""
        d: dict[str, Any] = {"url": request.url}
        cb = self._method_name(request.callback, "callback")
        eb = self._method_name(request.errback, "errback")
        if cb is not None:
            d["callback"] = cb
        if eb is not None:
            d["errback"] = eb
        if request.headers:
            d["headers"] = dict(request.headers)
        for attr in request.attributes:
            if attr in d or attr in ("url", "callback", "errback", "headers"):
                continue
            value = getattr(request, attr)
            if attr in _DEFAULTS and value == _DEFAULTS[attr]:
                continue
            d[attr] = value
        if POOL_PROXY_META in request.meta:
            d["meta"] = {k: v for k, v in request.meta.items() if k not in _POOL_PROXY_KEYS}
            headers = {k: v for k, v in d.get("headers", {}).items() if k != b"Proxy-Authorization"}
            d.pop("headers", None)
            if headers:
                d["headers"] = headers
        if type(request) is not Request:
            d["_class"] = f"{type(request).__module__}.{type(request).__name__}"
        try:
            packed: bytes = msgpack.packb(d, use_bin_type=True, datetime=False)
            return VERSION + packed
        except (TypeError, ValueError, OverflowError) as exc:
            bad = _first_unpackable(d)
            raise SerializationError(
                f"request {request.url} cannot be stored: {bad or exc} "
                "(meta, cb_kwargs and cookies must hold only str, bytes, numbers, "
                "bools, None, lists and dicts)"
            ) from None

    def decode(self, data: bytes) -> Request:
        """A request from *data*; raises MalformedEntry for anything that is not one."""
        d = _unpack(data)
        cls = self._request_class(d.pop("_class", None))
        kwargs = {k: v for k, v in d.items() if k in cls.attributes}
        for name in ("callback", "errback"):
            value = d.get(name)
            if value is not None:
                kwargs[name] = self._spider_method(name, value)
        try:
            return cls(**kwargs)
        except Exception as exc:
            raise MalformedEntry(f"invalid request fields: {exc}") from None

    def _spider_method(self, what: str, name: Any) -> Any:
        """The spider's method *name*, if it may be a callback: a public method of the
        spider (not one of Scrapy's Spider's own, such as ``close`` or ``start``), or
        a callback of Scrapy's generic spiders (:data:`GENERIC_CALLBACKS`)."""
        if not isinstance(name, str) or not name or self.spider is None:
            raise MalformedEntry(f"{what} {name!r} is not a method of the spider")
        private = name.startswith("_") and name not in GENERIC_CALLBACKS
        if private or (name != "parse" and hasattr(Spider, name)):
            raise MalformedEntry(f"{what} {name!r} is not allowed as a callback")
        method = getattr(self.spider, name, None)
        if not inspect.ismethod(method) or method.__self__ is not self.spider:
            raise MalformedEntry(f"{what} {name!r} is not a method of the spider")
        return method

    def _request_class(self, path: Any) -> type[Request]:
        if path is None:
            return Request
        if not isinstance(path, str) or not path.startswith(self._class_roots):
            raise MalformedEntry(f"request class {path!r} is not allowed")
        cls = self._classes.get(path)
        if cls is None:
            try:
                cls = load_object(path)
            except Exception as exc:
                raise MalformedEntry(f"request class {path!r}: {exc}") from None
            if not (isinstance(cls, type) and issubclass(cls, Request)):
                raise MalformedEntry(f"{path!r} is not a Request class")
            self._classes[path] = cls
        return cls


def _unpack(payload: bytes) -> dict[str, Any]:
    if not payload:
        raise MalformedEntry("empty payload")
    if payload[:1] != VERSION:
        raise MalformedEntry(f"unknown format version {payload[:1]!r}")
    try:
        d = msgpack.unpackb(payload[1:], raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise MalformedEntry(f"undecodable payload: {exc}") from None
    if not isinstance(d, dict) or not isinstance(d.get("url"), str):
        raise MalformedEntry("payload is not a request (no url)")
    return d


def with_meta(
    payload: bytes,
    meta: dict[str, Any],
    *,
    drop: tuple[str, ...] = (),
    drop_headers_named_by: str | None = None,
) -> bytes:
    """*payload*, to be sent again on purpose, without a spider to decode its callbacks:
    *meta* added to its request's meta, the *drop* keys and ``is_start_request`` (which
    would send it through the seen-filter) left out, with the headers listed in its meta
    under *drop_headers_named_by* (and that key), and ``dont_filter`` set.
    MalformedEntry for what is not a request's payload."""
    d = _unpack(payload)
    old = d.get("meta")
    merged = {**(old if isinstance(old, dict) else {}), **meta}
    for key in (*drop, "is_start_request"):
        merged.pop(key, None)
    named = merged.pop(drop_headers_named_by, None) if drop_headers_named_by else None
    headers = d.get("headers")
    if isinstance(named, list) and isinstance(headers, dict):
        gone = {str(n).lower() for n in named}
        d["headers"] = {
            k: v
            for k, v in headers.items()
            if (k.decode("latin-1") if isinstance(k, bytes) else str(k)).lower() not in gone
        }
    d["meta"] = merged
    d["dont_filter"] = True
    packed: bytes = msgpack.packb(d, use_bin_type=True, datetime=False)
    return VERSION + packed


def payload_priority(payload: bytes) -> int:
    """The priority of the request in *payload* (0 when it has none)."""
    value = _unpack(payload).get("priority", 0)
    return value if isinstance(value, int) else 0


def _first_unpackable(value: Any, path: str = "") -> str | None:
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _first_unpackable(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _first_unpackable(v, f"{path}[{i}]")
            if found:
                return found
        return None
    return f"{path} is a {type(value).__name__}"
