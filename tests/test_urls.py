"""crawlfleet's own reading of the URLs users give it (crawlfleet.urls): the same on
every release of the libraries that normalise URLs later."""

from __future__ import annotations

import pytest

from crawlfleet.urls import HttpUrl, check_http_url, is_http_url


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("http://example.com", HttpUrl("http", "example.com", None)),
        ("  HTTPS://Example.com/a?b#c  ", HttpUrl("https", "Example.com", None)),
        ("http://example.com:8080/x", HttpUrl("http", "example.com", 8080)),
        ("http://example.com:/x", HttpUrl("http", "example.com", None)),
        ("http://user:pw@example.com/", HttpUrl("http", "example.com", None)),
        ("http://[::1]:8000/", HttpUrl("http", "::1", 8000)),
        ("http://127.0.0.1?q", HttpUrl("http", "127.0.0.1", None)),
        ("http://bücher.example/", HttpUrl("http", "bücher.example", None)),
        ("http://xn--bcher-kva.example/", HttpUrl("http", "xn--bcher-kva.example", None)),
        ("http://a.example#frag", HttpUrl("http", "a.example", None)),
    ],
)
def test_urls_with_a_host_are_read(url: str, parts: HttpUrl) -> None:
    assert check_http_url(url) == parts
    assert is_http_url(url)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        # w3lib 2.6 normalises the first one to https://path/: not a host the user named
        ("https:///path", "has no host"),
        ("http://", "has no host"),
        ("http://:80/", "has no host"),
        ("http://user@/x", "has no host"),
        ("http://?q", "has no host"),
        ("http:example.com", "must start with http:// and a host"),
        ("http:/example.com", "must start with http:// and a host"),
        ("ftp://example.com/", "must be http or https, not 'ftp'"),
        ("example.com/path", "has no scheme (http:// or https://)"),
        ("", "has no scheme (http:// or https://)"),
        ("http://exa mple.com/", "has a host with a character no host may hold: ' '"),
        ("http://a%20b.example/", "has a host with a character no host may hold: ' '"),
        ("http://a%ff.example/", "has a host that is not percent-encoded UTF-8: 'a%ff.example'"),
        ("http://a<b/", "has a host with a character no host may hold: '<'"),
        ("http://example.com:99999/", "has a port out of range (1-65535): 99999"),
        ("http://example.com:0/", "has a port out of range (1-65535): 0"),
        ("http://example.com:8o/", "has a port that is not a number: '8o'"),
        ("http://example.com:80:80/", "has a port that is not a number: '80:80'"),
        ("http://[::1/", "has an IPv6 host without its ']'"),
        ("http://[example.com]/", "has a host in brackets that is not an IPv6 address"),
        ("http://[::1]x/", "has something other than ':port' after its IPv6 host"),
    ],
)
def test_urls_without_a_usable_host_are_refused_saying_why(url: str, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_http_url(url)
    assert str(caught.value).startswith(reason)
    assert not is_http_url(url)


def test_a_refusal_does_not_repeat_a_password() -> None:
    with pytest.raises(ValueError) as caught:
        check_http_url("http://user:s3cret@:80/")
    assert "s3cret" not in str(caught.value)
