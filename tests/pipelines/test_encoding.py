"""Encoding: decoding bodies with a missing or wrong charset, repairing item strings."""

# ruff: noqa: RUF001 - Chinese and Japanese text uses full-width punctuation on purpose

from __future__ import annotations

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse, Response
from scrapy.utils.test import get_crawler

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.charset import decode_body, fix_mojibake, to_valid_utf8
from crawlfleet.pipelines.encoding import CharsetMiddleware, EncodingPipeline

TEXTS = {
    "zh-hans": (
        "这是一个关于中文编码检测的测试页面。我们希望检测器能够正确地识别出编码，"
        "并且把文本还原成正确的字符。北京的天气今天很好。"
    ),
    "zh-hant": (
        "這是一個關於中文編碼偵測的測試頁面。我們希望偵測器能夠正確地識別出編碼，"
        "並且把文字還原成正確的字元。台北的天氣今天很好。"
    ),
    "ja": (
        "これは日本語の文字コード判定のテストページです。検出器が正しくエンコーディングを"
        "識別し、テキストを正しい文字に戻すことを期待しています。東京の天気は今日は良いです。"
    ),
    "fr": (
        "Le café de la gare était fermé. Les élèves ont attendu à côté de la fenêtre, "
        "où il faisait très froid. Ça arrive souvent en hiver à Genève."
    ),
    "de": "Die Größe der Straße ist schön, aber die Bäume müssen gepflegt werden. „Gut“ – 5 €.",
}


def _page(text: str, head: str = "") -> str:
    return f"<html><head>{head}<title>t</title></head><body><p>{text}</p></body></html>"


@pytest.mark.parametrize(
    ("lang", "actual", "declared", "codec"),
    [
        ("zh-hans", "gbk", None, "gb18030"),  # missing charset
        ("zh-hans", "gb2312", "gb2312", "gb18030"),
        ("zh-hans", "gbk", "iso-8859-1", "gb18030"),  # server default label, GBK body
        ("zh-hant", "big5", None, "big5hkscs"),
        ("zh-hant", "big5", "big5", "big5hkscs"),
        ("ja", "shift_jis", None, "cp932"),
        ("ja", "shift_jis", "shift_jis", "cp932"),
        ("fr", "latin-1", "utf-8", "cp1252"),  # Latin-1 served as UTF-8
        ("de", "cp1252", "utf-8", "cp1252"),
        ("fr", "latin-1", None, "cp1252"),  # missing charset, Western
        ("fr", "utf-8", "iso-8859-1", "utf-8"),  # UTF-8 served as Latin-1
        ("zh-hans", "utf-8", "windows-1252", "utf-8"),
        ("ja", "utf-8", None, "utf-8"),  # missing charset, UTF-8
    ],
)
def test_decode_body_finds_the_right_codec(
    lang: str, actual: str, declared: str | None, codec: str
) -> None:
    text, found = decode_body(_page(TEXTS[lang]).encode(actual), declared)
    assert found == codec
    assert TEXTS[lang] in text


def test_decode_body_reads_meta_bom_and_ascii() -> None:
    body = _page(TEXTS["zh-hans"], '<meta charset="gbk">').encode("gbk")
    assert decode_body(body, None)[1] == "gb18030"
    text, codec = decode_body("\ufeffhé".encode("utf-16-le").replace(b"\xfe\xff", b""), None)
    assert (text, codec) == ("hé", "utf-16-le")
    assert decode_body(b"plain", "latin1") == ("plain", "cp1252")
    assert decode_body(b"", None) == ("", "utf-8")
    assert decode_body(b"caf\xe9", "no-such-charset")[0] == "café"


def _response(body: bytes, content_type: str | None) -> HtmlResponse:
    headers = {"Content-Type": content_type} if content_type else {}
    return HtmlResponse(
        "https://x.test/", body=body, headers=headers, request=Request("https://x.test/")
    )


@pytest.mark.parametrize(
    ("lang", "actual", "content_type"),
    [
        ("fr", "latin-1", "text/html; charset=utf-8"),
        ("fr", "utf-8", "text/html; charset=iso-8859-1"),
        ("zh-hans", "gbk", "text/html; charset=iso-8859-1"),
        ("zh-hant", "big5", "text/html; charset=utf-8"),
        ("zh-hant", "big5", "text/html"),  # Scrapy's own detection gets this one right
    ],
)
def test_charset_middleware_fixes_wrong_encodings(
    lang: str, actual: str, content_type: str
) -> None:
    crawler = get_crawler()
    middleware = CharsetMiddleware.from_crawler(crawler)
    response = _response(_page(TEXTS[lang]).encode(actual), content_type)
    scrapy_right = TEXTS[lang] in response.text
    fixed = middleware.process_response(response.request, response)  # type: ignore[arg-type]
    assert isinstance(fixed, HtmlResponse)
    assert TEXTS[lang] in fixed.text
    assert fixed.css("p::text").get() == TEXTS[lang]
    assert crawler.stats is not None
    expected = None if scrapy_right else 1
    assert crawler.stats.get_value("crawlfleet/encoding/responses_fixed") == expected


def test_charset_middleware_leaves_right_responses_alone() -> None:
    middleware = CharsetMiddleware()
    right = _response(_page(TEXTS["ja"]).encode("utf-8"), "text/html; charset=utf-8")
    assert middleware.process_response(right.request, right) is right  # type: ignore[arg-type]
    ascii_page = _response(b"<html><body>hi</body></html>", None)
    assert middleware.process_response(ascii_page.request, ascii_page) is ascii_page  # type: ignore[arg-type]
    binary = Response("https://x.test/a.png", body=b"\x89PNG\r\n")
    assert middleware.process_response(Request(binary.url), binary) is binary


@pytest.mark.parametrize(
    ("broken", "fixed"),
    [
        ("cafÃ©", "café"),
        ("Itâ€™s â€œquotedâ€\x9d â€” ok", "It’s “quoted” — ok"),  # via cp1252
        ("It\xe2\x80\x99s", "It’s"),  # via Latin-1 (C1 controls)
        ("ä¸\xadæ–‡", "中文"),
        ("cafÃƒÂ©", "café"),  # twice
        ("déjà vu, naïve, Größe", "déjà vu, naïve, Größe"),  # correct Latin text stays
        ("plain ascii", "plain ascii"),
    ],
)
def test_fix_mojibake(broken: str, fixed: str) -> None:
    assert fix_mojibake(broken) == fixed


def test_to_valid_utf8_repairs_surrogates_and_nul() -> None:
    raw = b"caf\xe9 \xc3\xa9".decode("utf-8", "surrogateescape")
    assert to_valid_utf8(raw) == "café é"
    assert (
        to_valid_utf8("pair \ud83d\ude00, lone \ud800 and \x00nul")
        == "pair 😀, lone \ufffd and nul"
    )
    for value in (raw, "\ud800", "ok"):
        to_valid_utf8(value).encode("utf-8")  # never raises


def test_encoding_pipeline_repairs_item_strings() -> None:
    crawler = get_crawler()
    pipeline = EncodingPipeline.from_crawler(crawler)
    item = {
        "title": "CafÃ© du monde",
        "tags": ["naÃ¯ve", "ok"],
        "specs": {"note": "bad \udce9 byte"},
        "price": 3,
        "_html": "<p>CafÃ©</p>",
    }
    pipeline.process_item(item)
    assert item == {
        "title": "Café du monde",
        "tags": ["naïve", "ok"],
        "specs": {"note": "bad é byte"},
        "price": 3,
        "_html": "<p>CafÃ©</p>",
    }
    assert crawler.stats is not None
    assert crawler.stats.get_value("crawlfleet/encoding/items_changed") == 1
    untouched = EncodingPipeline(fix_mojibake=False).process_item({"t": "cafÃ©"})
    assert untouched == {"t": "cafÃ©"}


def test_chinese_conversion_t2s_and_s2t() -> None:
    t2s = EncodingPipeline(chinese_convert="t2s")
    item = {
        "title": "漢字轉換測試，這是繁體中文。",
        "url": "https://zh.wikipedia.org/wiki/漢字",
        "links": ["https://x.test/繁體"],
        "_type": "體",
    }
    t2s.process_item(item)
    assert item["title"] == "汉字转换测试，这是繁体中文。"
    assert item["url"] == "https://zh.wikipedia.org/wiki/漢字"
    assert item["links"] == ["https://x.test/繁體"]
    assert item["_type"] == "體"
    s2t = EncodingPipeline(chinese_convert="s2t")
    assert s2t.process_item({"t": "汉字转换测试"}) == {"t": "漢字轉換測試"}
    assert EncodingPipeline().process_item({"t": "漢字"}) == {"t": "漢字"}  # off by default


def test_chinese_conversion_setting_is_checked() -> None:
    crawler = get_crawler(settings_dict={"CRAWLFLEET_CHINESE_CONVERT": "t2x"})
    with pytest.raises(ConfigError, match="CRAWLFLEET_CHINESE_CONVERT must be one of"):
        EncodingPipeline.from_crawler(crawler)
    crawler = get_crawler(settings_dict={"CRAWLFLEET_CHINESE_CONVERT": "T2S"})
    assert EncodingPipeline.from_crawler(crawler).chinese_convert == "t2s"
