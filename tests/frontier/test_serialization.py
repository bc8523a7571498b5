"""The request wire format: round trips, clear errors, nothing executed."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from scrapy import FormRequest, Request, Spider

from crawlfleet.exceptions import MalformedEntry, SerializationError
from crawlfleet.frontier.serialization import META_OBJECT_EXT, VERSION, RequestCodec, with_meta


class DemoSpider(Spider):
    name = "demo"

    def parse_item(self, response: Any) -> None:
        pass

    def on_error(self, failure: Any) -> None:
        pass


@pytest.fixture
def codec() -> RequestCodec:
    return RequestCodec(DemoSpider())


def test_round_trip_keeps_every_field(codec: RequestCodec) -> None:
    spider = codec.spider
    assert isinstance(spider, DemoSpider)
    r = Request(
        "https://example.com/a?b=1",
        callback=spider.parse_item,
        errback=spider.on_error,
        method="POST",
        headers={"X-Test": "1"},
        body=b"\x00\xffdata",
        cookies={"c": "v"},
        meta={"depth": 2, "nested": {"list": [1, "two", b"3"]}},
        encoding="latin-1",
        priority=7,
        dont_filter=True,
        flags=["f"],
        cb_kwargs={"k": 1.5},
    )
    back = codec.decode(codec.encode(r))
    assert back.url == r.url and back.method == "POST" and back.body == r.body
    assert back.callback == spider.parse_item and back.errback == spider.on_error
    assert back.headers.get("X-Test") == b"1"
    assert back.meta == r.meta and back.cookies == r.cookies and back.encoding == "latin-1"
    assert (back.priority, back.dont_filter, back.flags, back.cb_kwargs) == (
        7,
        True,
        ["f"],
        {"k": 1.5},
    )


def test_request_subclasses_survive(codec: RequestCodec) -> None:
    r = FormRequest("https://example.com/f", formdata={"q": "x"})
    back = codec.decode(codec.encode(r))
    assert type(back) is FormRequest and back.body == b"q=x"


def test_payload_is_small_for_plain_requests(codec: RequestCodec) -> None:
    assert len(codec.encode(Request("https://example.com/p/1"))) < 40


def test_unserialisable_meta_is_named(codec: RequestCodec) -> None:
    r = Request("https://example.com/", meta={"ok": 1, "handle": object()})
    with pytest.raises(SerializationError, match="handle is a object"):
        codec.encode(r)


def test_callback_must_be_a_spider_method(codec: RequestCodec) -> None:
    with pytest.raises(SerializationError, match="not a method of the spider"):
        codec.encode(Request("https://example.com/", callback=lambda r: None))  # type: ignore[misc]
    spider = codec.spider
    assert spider is not None
    with pytest.raises(SerializationError, match="not allowed as a callback"):
        codec.encode(Request("https://example.com/", callback=spider.log))


def test_generic_spider_callbacks_travel() -> None:
    from scrapy.spiders import CrawlSpider

    class Crawler(CrawlSpider):
        name = "generic"

    codec = RequestCodec(Crawler())
    request = Request("https://example.com/", callback=codec.spider._callback)  # type: ignore[union-attr]
    assert codec.decode(codec.encode(request)).callback == codec.spider._callback  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "empty payload"),
        (b"\x02abc", "unknown format version"),
        (VERSION + b"\xc1", "undecodable"),
        (VERSION + msgpack.packb([1, 2]), "no url"),
        (VERSION + msgpack.packb({"url": "https://e.com", "callback": "nope"}), "not a method"),
        # only the spider's public methods: no dunders, no Spider lifecycle methods
        (VERSION + msgpack.packb({"url": "https://e.com", "callback": "__init__"}), "not allowed"),
        (VERSION + msgpack.packb({"url": "https://e.com", "callback": "close"}), "not allowed"),
        (VERSION + msgpack.packb({"url": "https://e.com", "errback": "_secret"}), "not allowed"),
        (VERSION + msgpack.packb({"url": "https://e.com", "callback": "name"}), "not a method"),
        (VERSION + msgpack.packb({"url": "https://e.com", "_class": "os.system"}), "not allowed"),
        (
            VERSION + msgpack.packb({"url": "https://e.com", "_class": "scrapy.Spider"}),
            "not a Request class",
        ),
        (VERSION + msgpack.packb({"url": "no scheme"}), "invalid request fields"),
    ],
)
def test_malformed_payloads_are_rejected(codec: RequestCodec, payload: bytes, message: str) -> None:
    with pytest.raises(MalformedEntry, match=message):
        codec.decode(payload)


def test_plugins_meta_survives_leasing(codec: RequestCodec) -> None:
    """What widely used download handlers and middlewares keep in meta travels as it
    is; scrapy-playwright's PageMethod objects as their method's name, args, kwargs."""
    page = pytest.importorskip("scrapy_playwright.page")
    meta = {
        "playwright": True,
        "playwright_context": "ctx",
        "playwright_context_kwargs": {"java_script_enabled": True},
        "playwright_page_goto_kwargs": {"wait_until": "networkidle", "timeout": 5000},
        "playwright_include_page": False,
        "playwright_page_methods": [
            page.PageMethod("wait_for_selector", "#late", state="attached"),
            page.PageMethod("evaluate", "n => n + 1", 41),
        ],
        "splash": {"args": {"wait": 0.5, "lua_source": "return 1"}, "endpoint": "execute"},
        "proxy": "http://127.0.0.1:8888",
        "download_timeout": 12.5,
        "dont_retry": True,
        "dont_redirect": True,
        "handle_httpstatus_list": [404, 410],
        "max_retry_times": 4,
        "cookiejar": 3,
        "download_slot": "slow-lane",
        "referrer_policy": "no-referrer",
        "impersonate": "chrome",
        "zyte_api_automap": {"browserHtml": True},
    }
    back = codec.decode(codec.encode(Request("https://example.com/", meta=meta)))
    methods = back.meta.pop("playwright_page_methods")
    assert back.meta == {k: v for k, v in meta.items() if k != "playwright_page_methods"}
    assert [type(m) for m in methods] == [page.PageMethod, page.PageMethod]
    assert [(m.method, m.args, m.kwargs) for m in methods] == [
        ("wait_for_selector", ("#late",), {"state": "attached"}),
        ("evaluate", ("n => n + 1", 41), {}),
    ]
    # the dict form too; and a request sent again on purpose (retry, re-crawl) keeps them
    payload = codec.encode(
        Request("https://example.com/d", meta={"playwright_page_methods": {
            "click": page.PageMethod("click", "#more")}})
    )  # fmt: skip
    again = codec.decode(with_meta(payload, {"retry_times": 1}))
    assert again.meta["playwright_page_methods"]["click"].args == ("#more",)
    assert again.meta["retry_times"] == 1


def test_a_page_method_that_calls_a_function_is_refused(codec: RequestCodec) -> None:
    page = pytest.importorskip("scrapy_playwright.page")
    r = Request("https://example.com/", meta={"playwright_page_methods": [
        page.PageMethod(lambda p: p.title())]})  # fmt: skip
    with pytest.raises(SerializationError, match="calls a function, which cannot be stored"):
        codec.encode(r)


def _ext_payload(code: int, value: Any) -> bytes:
    data = msgpack.packb(value, use_bin_type=True)
    return VERSION + msgpack.packb(  # type: ignore[no-any-return]
        {"url": "https://example.com/", "meta": {"x": msgpack.ExtType(code, data)}},
        use_bin_type=True,
    )


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (_ext_payload(9, ["playwright.PageMethod", ["click", [], {}]]), "extension type 9"),
        (_ext_payload(META_OBJECT_EXT, ["os.system", "ls"]), "'os.system' is not registered"),
        (_ext_payload(META_OBJECT_EXT, ["playwright.PageMethod", "click"]), "is not \\[name, args"),
        (_ext_payload(META_OBJECT_EXT, "nothing"), "not \\[name, state\\]"),
    ],
)
def test_meta_objects_are_read_only_from_registered_types(
    codec: RequestCodec, payload: bytes, message: str
) -> None:
    with pytest.raises(MalformedEntry, match=message):
        codec.decode(payload)


class ForeignRequest(Request):
    """A request class of another package (as a plugin's would be)."""


def test_a_request_class_that_would_not_be_read_back_is_refused_when_stored() -> None:
    codec = RequestCodec(DemoSpider())  # the spider's package: "tests"
    assert type(codec.decode(codec.encode(ForeignRequest("https://example.com/")))) is (
        ForeignRequest
    )
    ForeignRequest.__module__ = "someplugin.requests"
    try:
        with pytest.raises(SerializationError, match=r"class someplugin\.requests\.ForeignRequest"):
            codec.encode(ForeignRequest("https://example.com/"))
    finally:
        ForeignRequest.__module__ = __name__
