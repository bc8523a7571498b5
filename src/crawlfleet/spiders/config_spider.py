"""A Scrapy spider whose behaviour is a spec file.

Three ways to run one:

- in a Scrapy project, a two-line spider module, then ``scrapy crawl <spec name>``::

      from crawlfleet.spiders import SpecSpider

      class CatalogSpider(SpecSpider):
          spec_path = "catalog.yaml"  # relative to this module's folder

  The spec is loaded (and validated) when the class is defined, which gives the class
  its ``name`` so that Scrapy's spider loader finds it;
- from code: ``CrawlerProcess.crawl(SpecSpider, spec="catalog.yaml")`` (or a
  :class:`~crawlfleet.spiders.spec.Spec` object), or ``SpecSpider.from_spec(spec)``
  which returns a named subclass;
- ``scrapy crawl <name> -a spec=other.yaml`` replaces a subclass's spec for one run, and
  ``-a start_urls=URL,URL`` its start URLs, ``-a allowed_domains=HOST,HOST`` its
  allowed domains (both replace the spec's).

Every request goes to :meth:`SpecSpider.parse`; its role (item types, depth) travels in
request meta, so requests that go through the shared frontier keep it. Seeds without
that meta are placed by URL (see :mod:`crawlfleet.spiders.extraction`).

Start requests go through the duplicate filter like every other request (Scrapy's own
start requests are ``dont_filter``): a start URL that pages link to again is fetched
once, under vanilla Scrapy as with crawlfleet's seen-filter.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar, Self, cast

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.http import Response, TextResponse
from scrapy.utils.response import get_meta_refresh

from crawlfleet.exceptions import ConfigError
from crawlfleet.settings.config import redact_url
from crawlfleet.spiders.extraction import (
    ERRORS_FIELD,
    WARNINGS_FIELD,
    PageRole,
    SpecExtractor,
)
from crawlfleet.spiders.spec import Spec, load_spec
from crawlfleet.urls import check_http_url

__all__ = ["SpecSpider"]


class SpecSpider(Spider):
    """A spider built from a :class:`Spec`.

    Set ``spec_path`` on a subclass (loaded when the subclass is defined), or pass
    ``spec=`` (a path or a :class:`Spec`) when the spider is created. The spec's
    ``settings`` apply at spider priority; ``allowed_domains`` feed Scrapy's offsite
    filter.
    """

    #: Path of the spec file; a relative path is relative to the subclass's module.
    spec_path: ClassVar[str | Path | None] = None
    #: The spec of a subclass with ``spec_path`` (or made by :meth:`from_spec`).
    default_spec: ClassVar[Spec | None] = None
    #: The spec this spider runs (``default_spec`` unless ``spec=`` was given).
    spec: Spec

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("spec_path") is None:
            return
        path = Path(cls.__dict__["spec_path"])
        if not path.is_absolute():
            module_file = getattr(sys.modules.get(cls.__module__), "__file__", None)
            base = Path(module_file).parent if module_file else Path.cwd()
            path = base / path
        cls.default_spec = load_spec(path)
        cls._apply_spec_to_class(cls.default_spec)

    #: the spider follows meta refreshes itself (spec key meta_refresh)
    custom_settings = {"METAREFRESH_ENABLED": False}  # noqa: RUF012 - Scrapy's attribute

    @classmethod
    def _apply_spec_to_class(cls, spec: Spec) -> None:
        cls.name = spec.name
        cls.allowed_domains = list(spec.allowed_domains)
        cls.custom_settings = {"METAREFRESH_ENABLED": False, **spec.settings}

    @classmethod
    def from_spec(cls, spec: Spec | str | Path, module: str | None = None) -> type[SpecSpider]:
        """A subclass named after *spec* (``scrapy crawl`` finds it if *module* is its module).

        Spider loaders only list classes defined in the module they scan; pass that
        module's ``__name__`` as *module* when assigning the result at module level.
        """
        if not isinstance(spec, Spec):
            spec = load_spec(spec)
        namespace: dict[str, Any] = {"default_spec": spec, "__module__": module or cls.__module__}
        subclass = cast(
            "type[SpecSpider]", type(f"{_class_name(spec.name)}Spider", (cls,), namespace)
        )
        subclass._apply_spec_to_class(spec)
        return subclass

    def __init__(
        self,
        *args: Any,
        spec: Spec | str | Path | None = None,
        start_urls: str | list[str] | None = None,
        allowed_domains: str | list[str] | None = None,
        **kwargs: Any,
    ):
        if spec is not None:
            loaded = spec if isinstance(spec, Spec) else load_spec(spec)
        elif self.default_spec is not None:
            loaded = self.default_spec
        else:
            raise ConfigError(
                f"{type(self).__name__} needs a spec: set spec_path on the class "
                "or pass spec=PATH (scrapy crawl ... -a spec=PATH)"
            )
        kwargs.setdefault("name", loaded.name)
        super().__init__(*args, **kwargs)
        self.spec = loaded
        if isinstance(allowed_domains, str):
            allowed_domains = [d.strip() for d in allowed_domains.split(",") if d.strip()]
        if allowed_domains is not None:  # offsite filtering and link rules use them
            loaded = dataclasses.replace(loaded, allowed_domains=tuple(allowed_domains))
        self.allowed_domains = list(loaded.allowed_domains)
        if isinstance(start_urls, str):
            start_urls = [url.strip() for url in start_urls.split(",") if url.strip()]
        for url in start_urls or ():  # a spec's own were judged when it was loaded
            try:
                check_http_url(url)
            except ValueError as exc:
                raise ConfigError(f"start_urls: {redact_url(url)!r} {exc}") from None
        self.start_urls = list(loaded.start_urls if start_urls is None else start_urls)
        self.extractor = SpecExtractor(loaded)

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)
        if spider.spec.settings and not crawler.settings.frozen:
            # Specs given as spec= are only known now; settings are applied after this.
            crawler.settings.setdict(dict(spider.spec.settings), priority="spider")
        return spider

    async def start(self) -> AsyncIterator[Any]:
        """One request per start URL (none if seeds come from the shared frontier).

        They are not ``dont_filter``: a start URL reached again by a link, or listed
        twice, is fetched once.
        """
        role = self.extractor.start_role()
        for url in self.start_urls:
            yield self._request(url, role)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        """Yield the page's items, then requests for the links the spec follows.

        Stats: ``spec/items``, ``spec/items_with_errors``, ``spec/items_with_warnings``,
        ``spec/pages_unmatched`` (the ``match`` of none of the page's item types found
        anything), ``spec/pages_not_text`` (skipped).
        """
        if not isinstance(response, TextResponse):
            self.logger.debug("%s: not a text page; skipped", response.url)
            self._count("spec/pages_not_text")
            return
        if self.spec.meta_refresh != "ignore":
            target = self._refresh_target(response)
            if target is not None:
                self._count("spec/meta_refresh")
                role = self.extractor.role_for(response.url, response.meta)
                yield self._request(target, role)  # the target takes the page's place
                if self.spec.meta_refresh == "follow":
                    return
        result = self.extractor.process(response)
        if result.unmatched:
            matches = ", ".join(f"items.{name}.match" for name in result.role.item_types)
            self.logger.debug("%s: no item: nothing selected by %s", response.url, matches)
            self._count("spec/pages_unmatched")
        for warning in result.warnings:
            self.logger.warning("%s", warning)
        self._count("spec/items", len(result.items))
        self._count("spec/items_with_errors", sum(1 for i in result.items if ERRORS_FIELD in i))
        self._count("spec/items_with_warnings", sum(1 for i in result.items if WARNINGS_FIELD in i))
        yield from result.items
        for link in result.links:
            yield self._request(link.url, link.role)

    @staticmethod
    def _refresh_target(response: TextResponse) -> str | None:
        """The absolute URL a ``<meta http-equiv="refresh">`` of *response* leads to (not
        inside ``<noscript>``; None when there is none or it points at the page)."""
        _interval, url = get_meta_refresh(response, ignore_tags=["noscript"])
        return url if url and url != response.url else None

    def _count(self, key: str, count: int = 1) -> None:
        crawler = getattr(self, "crawler", None)  # absent when built without a crawler
        if count and crawler is not None and crawler.stats is not None:
            crawler.stats.inc_value(key, count)

    def _request(self, url: str, role: PageRole) -> Request:
        spec = self.spec
        meta: dict[str, Any] = {**spec.request.meta, **role.meta()}
        if not spec.request.cookies:
            meta["dont_merge_cookies"] = True
        return Request(
            url,
            callback=self.parse,
            headers=dict(spec.request.headers) or None,
            meta=meta,
        )


def _class_name(name: str) -> str:
    parts = [p for p in name.replace("-", "_").replace(".", "_").split("_") if p]
    text = "".join(p[:1].upper() + p[1:] for p in parts)
    return text if text[:1].isalpha() else f"Spec{text}"
