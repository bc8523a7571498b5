"""What crawlfleet relies on in the libraries it installs, one behaviour a test.

A fresh install takes what ``requirements/test.lock`` pins; ``./dev.sh test --latest``
takes the newest releases. When a release changes one of these behaviours, its test
fails first and names the package and the version that changed, so the failures further
down the suite have a cause to point at (docs/operations.md, "Dependencies").

crawlfleet's own rules (a URL needs a host, a charset label is read as browsers read it)
do not depend on these libraries: see tests/test_urls.py and tests/pipelines/test_labels.py.
"""

from __future__ import annotations

from importlib.metadata import version

import pytest


def relies(package: str, what: str, ok: bool) -> None:
    """Fail naming *package*, its installed version and *what* crawlfleet relies on."""
    if not ok:
        pytest.fail(
            f"{package} {version(package)} no longer does what crawlfleet relies on: {what}"
        )


def test_scrapy_fingerprints_stay_the_same() -> None:
    # seen-filters in Redis outlive a node's Scrapy: a new fingerprint would crawl again
    from scrapy import Request
    from scrapy.utils.request import fingerprint

    fp = fingerprint(Request("http://example.com/a?b=1&a=2")).hex()
    relies(
        "scrapy",
        "a request's fingerprint is what it was",
        fp == "076cbf37a7607993f4fffdaf9c57c38a3d1c474a",
    )


def test_scrapy_normalises_request_urls() -> None:
    from scrapy import Request

    url = Request("http://Example.com/a b?q=é#f").url
    relies(
        "scrapy",
        "Request() quotes a URL's path and query",
        url == "http://example.com/a%20b?q=%C3%A9#f",
    )


def test_scrapy_decodes_a_response_with_the_encoding_it_is_given() -> None:
    # the charset middleware corrects a response's encoding with replace(encoding=...)
    from scrapy.http import HtmlResponse

    body = "中文𠀀".encode("gb18030")
    response = HtmlResponse("http://x.example/", body=body, headers={"Content-Type": "text/html"})
    relies(
        "scrapy",
        "replace(encoding=...) decodes .text with it",
        response.replace(encoding="gb18030").text == "中文𠀀",
    )


def test_w3lib_canonicalizes_item_urls() -> None:
    # item keys (crawlfleet.pipelines.key): the same page is one key whatever its order
    from w3lib.url import canonicalize_url

    url = canonicalize_url("http://Example.com/a?b=1&a=2#x", keep_fragments=False)
    relies(
        "w3lib",
        "canonicalize_url sorts the query and drops the fragment",
        url == "http://example.com/a?a=2&b=1",
    )


def test_tldextract_reads_its_bundled_list_offline() -> None:
    # CRAWLFLEET_SITE_KEY=domain: no network at a node's start
    import tldextract

    parts = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)("a.b.example.co.uk")
    relies(
        "tldextract",
        "the bundled suffix list knows co.uk",
        (parts.domain, parts.suffix) == ("example", "co.uk"),
    )


def test_msgpack_keeps_bytes_and_text_apart() -> None:
    # the frontier's wire format: bodies are bytes, URLs text
    import msgpack

    data = msgpack.unpackb(msgpack.packb({"a": b"x", "b": "y"}, use_bin_type=True), raw=False)
    relies("msgpack", "bin and str round-trip as bytes and str", data == {"a": b"x", "b": "y"})


def test_charset_normalizer_reads_the_bundled_sites_undeclared_shift_jis() -> None:
    # 3.5.3 reads this page as cp1251 (pyproject holds charset-normalizer below it)
    from charset_normalizer import from_bytes

    from crawlfleet.testsite.model import SiteModel
    from crawlfleet.testsite.render import render_site

    model = SiteModel(pages=90, hosts=3)
    served = render_site(model, 8000)
    (n,) = [
        n
        for n, case in model.encoded_pages.items()
        if case.codec == "shift_jis" and not case.header_charset and not case.meta_charset
    ]
    best = from_bytes(served[model.loc_of(n)].body).best()
    guess = best.encoding if best is not None else None
    relies(
        "charset-normalizer",
        f"an undeclared Shift_JIS page is cp932 (not {guess})",
        guess == "cp932",
    )


def test_the_lock_pins_what_pyproject_asks_for() -> None:
    # a dependency added to pyproject.toml without ./dev.sh lock would not be installed
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from crawlfleet.bundle.builder import locked

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    for lock, names in (("test.lock", wanted), ("demo.lock", project["dependencies"])):
        pins = locked(root / "requirements" / lock)
        for text in names:
            req = Requirement(text)
            version = pins.get(canonicalize_name(req.name), ("",))[0]
            assert version and req.specifier.contains(version, prereleases=True), (
                f"requirements/{lock} pins {req.name} {version or 'not at all'}, "
                f"pyproject.toml asks for {req}: run ./dev.sh lock"
            )
