"""crawlfleet's own judgement of a URL a user gives it: an http(s) URL with a host.

Every entry point that takes a URL from a user (``crawlfleet seed`` and its files, the
manager's API, seed lists in Redis, a spec's start URLs, scrapy-redis keys, re-crawls)
judges the text as given, with :func:`check_http_url`, before any library normalises
it. Normalisers differ between releases and are lenient on purpose: w3lib 2.6 reads
``https:///path`` as ``https://path/`` (as the WHATWG URL Standard does), which would
queue a page on a host called ``path``. crawlfleet's rule does not move with them:

- the scheme is ``http`` or ``https`` (any case), followed by exactly ``//``;
- the authority (up to the first ``/``, ``?``, ``#`` or ``\\``) has a host: a name
  without spaces, controls or any of ``%<>[]^|`` (after percent-decoding), or an IPv6
  address in brackets; an optional ``user:password@`` before it is allowed;
- a port, when there is one, is a number from 1 to 65535 (an empty port means the
  scheme's default, as in ``http://example.com:/``).

Leading and trailing whitespace is not part of the URL.
"""

from __future__ import annotations

import ipaddress
import re
from typing import NamedTuple
from urllib.parse import unquote

__all__ = ["HttpUrl", "check_http_url", "is_http_url"]

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_AUTHORITY_END = re.compile(r"[/?#\\]")
# The WHATWG URL Standard's forbidden domain code points, but for "%" (a host is
# percent-decoded before it is judged) and ":" / "@" / "[" / "]" (split off before).
_FORBIDDEN_HOST = re.compile(r"[\x00-\x20\x7f#%/<>?@\[\\\]^|:]")


class HttpUrl(NamedTuple):
    """What :func:`check_http_url` read: the scheme (lower case), the host as given
    (brackets removed from an IPv6 address) and the port (None: the scheme's default)."""

    scheme: str
    host: str
    port: int | None


def check_http_url(text: str) -> HttpUrl:
    """The parts of http(s) URL *text*, judged by the rules of the module docstring.

    Raises ValueError whose message is a predicate of the URL, for the caller to put
    after its subject ("seed URL " + "has no host"); the URL itself is not repeated, so
    that the caller can leave a password in it out."""
    url = text.strip()
    match = _SCHEME.match(url)
    if match is None:
        raise ValueError("has no scheme (http:// or https://)")
    scheme = match.group(1).lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"must be http or https, not {scheme!r}")
    rest = url[match.end() :]
    if not rest.startswith("//"):
        raise ValueError(f"must start with {scheme}:// and a host")
    rest = rest[2:]
    end = _AUTHORITY_END.search(rest)
    authority = rest[: end.start()] if end else rest
    host_port = authority.rpartition("@")[2]
    if host_port.startswith("["):
        close = host_port.find("]")
        if close < 0:
            raise ValueError("has an IPv6 host without its ']'")
        host, after = host_port[1:close], host_port[close + 1 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(
                f"has a host in brackets that is not an IPv6 address: {host!r}"
            ) from None
        if after and not after.startswith(":"):
            raise ValueError("has something other than ':port' after its IPv6 host")
        port_text = after[1:] if after else None
    else:
        host, colon, port_text_ = host_port.partition(":")
        port_text = port_text_ if colon else None
        if not host:
            raise ValueError("has no host")
        try:
            decoded = unquote(host, errors="strict") if "%" in host else host
        except UnicodeDecodeError:
            raise ValueError(f"has a host that is not percent-encoded UTF-8: {host!r}") from None
        bad = _FORBIDDEN_HOST.search(decoded)
        if bad is not None:
            raise ValueError(f"has a host with a character no host may hold: {bad.group()!r}")
    return HttpUrl(scheme, host, _port(port_text))


def _port(text: str | None) -> int | None:
    if not text:
        return None
    if not text.isascii() or not text.isdigit():
        raise ValueError(f"has a port that is not a number: {text!r}")
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(f"has a port out of range (1-65535): {port}")
    return port


def is_http_url(text: str) -> bool:
    """Whether *text* passes :func:`check_http_url`."""
    try:
        check_http_url(text)
    except ValueError:
        return False
    return True
