"""The wire format of queued requests: a version byte, then msgpack. Never pickle.

The fields are those of ``Request.to_dict``: callbacks and errbacks travel by name and
are looked up on the spider when the request is read back: only its public methods
(not Scrapy's own Spider methods such as ``close``) and the callbacks of Scrapy's generic
spiders. Only request classes from Scrapy or from the spider's own top-level package are
instantiated; anything else is a malformed entry, as is any entry that does not decode.

A request's meta, cb_kwargs and cookies hold msgpack's plain values (str, bytes, numbers,
bools, None, lists, dicts), which is what the download handlers and middlewares of
other Scrapy plugins mostly keep there (scrapy-playwright's ``playwright``,
``playwright_context``, ``playwright_page_goto_kwargs``; scrapy-splash's ``splash``;
``proxy``, ``download_timeout``, ``dont_retry``, ``handle_httpstatus_list``, ...). The
few objects such plugins put there travel as a msgpack extension (:data:`META_OBJECT_EXT`)
holding a registered name and the object's plain state (:data:`META_TYPES`), never as
code: scrapy-playwright's ``PageMethod`` (``playwright_page_methods``) as its method's
name, args and kwargs. Reading one back builds it from its registered class alone.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
from scrapy import Request, Spider
from scrapy.utils.misc import load_object

from crawlfleet.exceptions import MalformedEntry, SerializationError
from crawlfleet.meta import POOL_PROXY_META

__all__ = [
    "META_OBJECT_EXT",
    "META_TYPES",
    "VERSION",
    "MetaType",
    "RequestCodec",
    "payload_meta",
    "payload_priority",
    "url_payload",
    "with_meta",
]

VERSION = b"\x01"
#: Private methods that Scrapy's generic spiders (CrawlSpider, SitemapSpider) use as
#: callbacks: allowed like public ones.
GENERIC_CALLBACKS = frozenset({"_callback", "_errback", "_parse_sitemap"})

_POOL_PROXY_KEYS = frozenset({"proxy", "_auth_proxy", POOL_PROXY_META})

#: The msgpack extension type of an object kept in a request's meta: its data is the
#: msgpack of ``[registered name, state]``.
META_OBJECT_EXT = 1


@dataclass(frozen=True)
class MetaType:
    """A class whose objects may travel in a request's meta: the *name* they travel
    under, the import *path* of the class (imported only to read one back), and how an
    object becomes plain values (*dump*; SerializationError if this one cannot) and
    back (*load*, given the class; MalformedEntry for a state it cannot take)."""

    name: str
    path: str
    dump: Callable[[Any], Any]
    load: Callable[[type, Any], Any]


def _dump_page_method(pm: Any) -> list[Any]:
    if not isinstance(pm.method, str):
        raise SerializationError(
            f"PageMethod({pm.method!r}) calls a function, which cannot be stored: name a "
            "Playwright Page method instead (PageMethod('evaluate', 'js ...'))"
        )
    return [pm.method, list(pm.args), dict(pm.kwargs)]


def _load_page_method(cls: type, state: Any) -> Any:
    if not (
        isinstance(state, list)
        and len(state) == 3
        and isinstance(state[0], str)
        and isinstance(state[1], list)
        and isinstance(state[2], dict)
        and all(isinstance(k, str) for k in state[2])
    ):
        raise MalformedEntry(f"PageMethod state {state!r} is not [name, args, kwargs]")
    return cls(state[0], *state[1], **state[2])


#: The registered classes, by class path (see :class:`MetaType`).
META_TYPES: dict[str, MetaType] = {
    t.path: t
    for t in (
        MetaType(
            "playwright.PageMethod",
            "scrapy_playwright.page.PageMethod",
            _dump_page_method,
            _load_page_method,
        ),
    )
}
_META_BY_NAME = {t.name: t for t in META_TYPES.values()}


def _class_path(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _pack_object(obj: Any) -> msgpack.ExtType:
    """msgpack's ``default``: a registered object as its extension; TypeError for any
    other value msgpack cannot pack."""
    meta_type = META_TYPES.get(_class_path(obj))
    if meta_type is None:
        raise TypeError(f"cannot store a {type(obj).__name__}")
    data = msgpack.packb(
        [meta_type.name, meta_type.dump(obj)], use_bin_type=True, datetime=False,
        default=_pack_object,
    )  # fmt: skip
    return msgpack.ExtType(META_OBJECT_EXT, data)


def _unpack_object(code: int, data: bytes) -> Any:
    """msgpack's ``ext_hook``: a registered object from its extension."""
    if code != META_OBJECT_EXT:
        raise MalformedEntry(f"unknown msgpack extension type {code}")
    value = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_unpack_object)
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
        raise MalformedEntry("a meta object is not [name, state]")
    meta_type = _META_BY_NAME.get(value[0])
    if meta_type is None:
        raise MalformedEntry(f"meta object type {value[0]!r} is not registered")
    module, _, name = meta_type.path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise MalformedEntry(
            f"a request's meta holds a {meta_type.path}, which is not installed here"
        ) from None
    return meta_type.load(cls, value[1])


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


def url_payload(url: str) -> bytes:
    """The payload of ``Request(url)`` for a *url* that is already as Request keeps it
    (``w3lib.url.safe_url_string``): a GET with every other field at its default, the
    bytes :meth:`RequestCodec.encode` gives, without building the request (seeding
    queues them by the million)."""
    packed: bytes = msgpack.packb({"url": url}, use_bin_type=True)
    return VERSION + packed


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
            path = f"{type(request).__module__}.{type(request).__name__}"
            # one that would not be read back (without a spider, the roots are unknown)
            if self.spider is not None and not path.startswith(self._class_roots):
                raise SerializationError(
                    f"request {request.url} cannot be stored: its class {path} is neither "
                    "Scrapy's nor from the spider's own package (send a scrapy.Request "
                    "with the plugin's meta instead)"
                )
            d["_class"] = path
        try:
            packed: bytes = msgpack.packb(
                d, use_bin_type=True, datetime=False, default=_pack_object
            )
            return VERSION + packed
        except SerializationError as exc:
            raise SerializationError(f"request {request.url} cannot be stored: {exc}") from None
        except (TypeError, ValueError, OverflowError) as exc:
            bad = _first_unpackable(d)
            raise SerializationError(
                f"request {request.url} cannot be stored: {bad or exc} "
                "(meta, cb_kwargs and cookies must hold only str, bytes, numbers, "
                "bools, None, lists and dicts, or objects of META_TYPES such as "
                "scrapy-playwright's PageMethod)"
            ) from None

    def decode(self, data: bytes) -> Request:
        """A request from *data*; raises MalformedEntry for anything that is not one."""
        d = _unpack(data, objects=True)
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


def _unpack(payload: bytes, *, objects: bool = False) -> dict[str, Any]:
    """The fields of *payload*; meta objects built (*objects*), else kept as their
    msgpack extensions (to be packed again as they are)."""
    if not payload:
        raise MalformedEntry("empty payload")
    if payload[:1] != VERSION:
        raise MalformedEntry(f"unknown format version {payload[:1]!r}")
    hook: dict[str, Any] = {"ext_hook": _unpack_object} if objects else {}
    try:
        d = msgpack.unpackb(payload[1:], raw=False, strict_map_key=False, **hook)
    except MalformedEntry:
        raise
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


def payload_meta(payload: bytes) -> dict[str, Any]:
    """The meta of the request in *payload* (its objects left packed); MalformedEntry
    for what is not a request's payload."""
    meta = _unpack(payload).get("meta")
    return meta if isinstance(meta, dict) else {}


def payload_priority(payload: bytes) -> int:
    """The priority of the request in *payload* (0 when it has none)."""
    value = _unpack(payload).get("priority", 0)
    return value if isinstance(value, int) else 0


def _first_unpackable(value: Any, path: str = "") -> str | None:
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return None
    if _class_path(value) in META_TYPES:
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
