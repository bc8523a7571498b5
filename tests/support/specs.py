"""Spider specs and pages made from text, for the tests of configuration-only spiders:
a spec file written from a string, a loaded spec, an HTML response for a URL."""

from __future__ import annotations

import textwrap
from pathlib import Path

from scrapy.http import HtmlResponse, Request

from crawlfleet.spiders.spec import Spec, load_spec

__all__ = ["html_response", "spec_from_text", "write_spec"]


def write_spec(directory: Path, text: str, name: str = "spec.yaml") -> Path:
    """Write *text* (dedented) to ``directory/name``; return the path."""
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def spec_from_text(directory: Path, text: str) -> Spec:
    """Load the spec written in *text*."""
    return load_spec(write_spec(directory, text))


def html_response(url: str, body: str, meta: dict[str, object] | None = None) -> HtmlResponse:
    """An HTML response for *url*; with *meta*, as the answer to a request carrying it."""
    request = Request(url, meta=meta or {})
    return HtmlResponse(url, body=body.encode("utf-8"), encoding="utf-8", request=request)
