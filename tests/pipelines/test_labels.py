"""Charset labels read with the WHATWG Encoding Standard's table (crawlfleet.pipelines
.labels), whatever the installed w3lib maps them to."""

from __future__ import annotations

import codecs

import pytest

from crawlfleet.pipelines.charset import decode_body
from crawlfleet.pipelines.labels import (
    WHATWG_LABELS,
    body_label,
    bom_codec,
    codec_for_label,
    detected_codec,
    header_label,
)


def test_every_label_names_a_python_codec_by_its_own_name() -> None:
    assert len(WHATWG_LABELS) >= 200  # the standard's table, not a few favourites
    for label, codec in WHATWG_LABELS.items():
        assert label == label.lower().strip(), label
        assert codecs.lookup(codec).name == codec, (label, codec)


@pytest.mark.parametrize(
    ("label", "codec"),
    [
        ("gb2312", "gb18030"),
        ("GBK", "gb18030"),
        ("x-gbk", "gb18030"),
        ("csGB2312", "gb18030"),
        ("gb18030", "gb18030"),
        ("big5", "big5hkscs"),
        ("Shift_JIS", "cp932"),
        ("euc-kr", "cp949"),
        ("iso-8859-1", "cp1252"),
        ("us-ascii", "cp1252"),
        ("latin1", "cp1252"),
        ("iso-8859-9", "cp1254"),
        ("tis-620", "cp874"),
        ("iso-8859-8-i", "iso8859-8"),
        ("utf-16", "utf-16-le"),
        ("unicode-1-1-utf-8", "utf-8"),
        (' "UTF-8" ', "utf-8"),
        ("x-mac-cyrillic", "mac-cyrillic"),
    ],
)
def test_legacy_labels_decode_with_their_web_superset(label: str, codec: str) -> None:
    assert codec_for_label(label) == codec


@pytest.mark.parametrize(
    "label",
    # "replacement" encodings and x-user-defined, which browsers do not decode as text;
    # names Python knows that are no label of the standard
    [
        "hz-gb-2312",
        "iso-2022-kr",
        "iso-2022-cn",
        "replacement",
        "x-user-defined",
        "latin-1",
        "utf-32",
        "cp037",
        "rot13",
        "",
        None,
    ],
)
def test_labels_outside_the_table_are_unknown(label: str | None) -> None:
    assert codec_for_label(label) is None


def test_a_detectors_answer_maps_to_the_web_superset() -> None:
    assert detected_codec("gb2312") == "gb18030"
    assert detected_codec("latin_1") == "cp1252"
    assert detected_codec("euc_kr") == "cp949"
    assert detected_codec("mac_cyrillic") == "mac-cyrillic"
    assert detected_codec("cp037") == "cp037"  # no label of the standard: kept
    assert detected_codec("no-such-codec") == "no-such-codec"


def test_declared_labels_are_read_as_given() -> None:
    assert header_label("text/html; charset=GB2312") == "GB2312"
    assert header_label('text/html; charset="utf-8"; q=1') == "utf-8"
    assert header_label("text/html") is None
    assert header_label(None) is None
    assert body_label(b'<html><meta charset="gb2312"><p>x') == "gb2312"
    assert (
        body_label(b'<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">')
        == "Shift_JIS"
    )
    assert body_label(b'<?xml version="1.0" encoding="EUC-KR"?><rss/>') == "EUC-KR"
    assert body_label(b"<html><p>charset=koi8-r</p>") is None  # not in a <meta>
    assert body_label(b" " * 5000 + b'<meta charset="gbk">') is None  # past the prescan


def test_byte_order_marks() -> None:
    assert bom_codec(codecs.BOM_UTF8 + b"x") == ("utf-8", 3)
    assert bom_codec(codecs.BOM_UTF16_BE + b"\x00x") == ("utf-16-be", 2)
    assert bom_codec(codecs.BOM_UTF32_LE + b"x\x00\x00\x00") == ("utf-16-le", 2)
    assert bom_codec(b"<html>") is None


def test_a_gb2312_page_with_characters_beyond_gbk_decodes_exactly() -> None:
    text = "<p>中文𠀀㐀𪚥</p>"
    assert decode_body(text.encode("gb18030"), "gb2312") == (text, "gb18030")
    meta = f'<meta charset="gbk">{text}'
    assert decode_body(meta.encode("gb18030"), None) == (meta, "gb18030")
