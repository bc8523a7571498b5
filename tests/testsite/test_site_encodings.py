"""Legacy-encoded pages: the raw bytes decode to the model's true text with its codec."""

from __future__ import annotations

import codecs

import pytest

from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.render import render_page_text, render_site

PORT = 8123
MODEL = SiteModel()


def test_every_legacy_encoding_is_present() -> None:
    cases = list(MODEL.encoded_pages.values())
    assert {codecs.lookup(c.codec).name for c in cases} == {
        "gbk",
        "shift_jis",
        "big5",
        "iso8859-1",
    }
    assert any(c.header_charset and c.declared_correctly for c in cases)
    assert any(c.header_charset is None and c.meta_charset is None for c in cases)
    assert any(c.header_charset is None and c.meta_charset for c in cases)
    wrong = [c for c in cases if c.header_charset == "utf-8"]
    assert len(wrong) == 1 and wrong[0].codec == "latin-1" and not wrong[0].declared_correctly
    assert all(not MODEL.is_article(n) for n in MODEL.encoded_pages)


@pytest.mark.parametrize("n", sorted(MODEL.encoded_pages))
def test_raw_bytes_decode_to_the_true_text(n: int) -> None:
    case = MODEL.encoded_pages[n]
    resource = render_site(MODEL, PORT)[MODEL.loc_of(n)]
    assert resource.content_type == case.content_type
    text = resource.body.decode(case.codec)
    assert text == render_page_text(MODEL, n, PORT)
    assert f'<h1 class="title" itemprop="name">{case.title}</h1>' in text
    assert case.description in text
    assert MODEL.product(n).title == case.title
    assert MODEL.product(n).description == case.description
    # the bytes are really not UTF-8 (so a crawler must get the charset right)
    with pytest.raises(UnicodeDecodeError):
        resource.body.decode("utf-8")
    meta = f'<meta charset="{case.meta_charset}">' if case.meta_charset else "<meta charset"
    assert (meta in text) == (case.meta_charset is not None)


def test_other_pages_are_utf8() -> None:
    site = render_site(MODEL, PORT)
    for n in range(MODEL.pages):
        if n not in MODEL.encoded_pages:
            resource = site[MODEL.loc_of(n)]
            assert resource.content_type == "text/html; charset=utf-8"
            resource.body.decode("utf-8")
