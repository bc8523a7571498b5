"""The test site's model: validation, determinism, reachability, rendered links."""

from __future__ import annotations

from collections import deque
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin, urlsplit

import parsel
import pytest

from crawlfleet.testsite.model import CATALOG_PAGE_SIZE, Loc, SiteModel
from crawlfleet.testsite.render import href, relative_path, render_site

PORT = 8123


class _Hrefs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [value for name, value in attrs if name == "href" and value]


def hrefs_of(html: str) -> list[str]:
    parser = _Hrefs()
    parser.feed(html)
    return parser.hrefs


def loc_of_url(url: str) -> Loc:
    parts = urlsplit(url)
    assert parts.scheme == "http" and parts.port == PORT, url
    host = int((parts.hostname or "").rsplit(".", 1)[1]) - 1
    return (host, parts.path + (f"?{parts.query}" if parts.query else ""))


def decode(model: SiteModel, loc: Loc, body: bytes) -> str:
    n = model.page_at(loc)
    case = model.encoded_pages.get(n) if n is not None else None
    return body.decode(case.codec if case else "utf-8")


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"hosts": 0}, "hosts"),
        ({"hosts": 9}, "hosts"),
        ({"pages": 2, "hosts": 3}, "pages"),
        ({"pages": "10"}, "pages"),
        ({"links_per_page": -1}, "links_per_page"),
        ({"articles": 500}, "articles"),
        ({"articles": -1}, "articles"),
        ({"problems": 1}, "problems"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_constructor_names_the_bad_argument(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        SiteModel(**kwargs)  # type: ignore[arg-type]


def test_defaults() -> None:
    model = SiteModel()
    assert (model.pages, model.hosts, model.seed, model.links_per_page) == (200, 3, 1, 6)
    assert model.problems is True
    assert model.articles == 20 == len(model.article_ids)
    assert all(n >= model.hosts for n in model.article_ids)  # roots are products
    assert model.seed_urls(PORT) == [f"http://127.0.0.{i}:{PORT}/" for i in (1, 2, 3)]
    assert model.url(7, PORT) == f"http://127.0.0.2:{PORT}/p/7"
    assert model.page_at((1, "/p/7")) == 7
    assert model.page_at((0, "/p/7")) is None  # page 7 lives on host 1
    assert model.page_at((1, "/p/07")) is None


def test_same_arguments_same_site_other_seed_other_links() -> None:
    first, again = render_site(SiteModel(seed=5), PORT), render_site(SiteModel(seed=5), PORT)
    assert first == again
    other = SiteModel(seed=6)
    assert [SiteModel(seed=5).page_links(n) for n in range(50)] != [
        other.page_links(n) for n in range(50)
    ]
    assert SiteModel(seed=5) == SiteModel(seed=5)


@pytest.mark.parametrize(
    "model",
    [
        SiteModel(),
        SiteModel(pages=57, hosts=1, seed=3, links_per_page=0),
        SiteModel(pages=400, hosts=8, seed=9, problems=False, articles=0),
        SiteModel(pages=8, hosts=8, links_per_page=2),
    ],
    ids=repr,
)
def test_bfs_from_the_roots_reaches_every_expected_url(model: SiteModel) -> None:
    content = model.content_locs()
    problems = {loc for locs in model.problem_locs().values() for loc in locs}
    seeds = [model.loc_of(h) for h in range(model.hosts)]
    reached, todo = set(seeds), deque(seeds)
    while todo:
        for target in model.outlinks(todo.popleft()):
            if target not in reached:
                reached.add(target)
                todo.append(target)
    assert content <= reached
    assert reached - content == problems
    assert model.expected_urls(PORT) == {model.loc_url(loc, PORT) for loc in content}
    assert len(content) == model.pages + len(model.catalog_locs())
    for url, destination in model.redirects(PORT).items():
        assert destination in model.expected_urls(PORT), url


def test_rendered_hrefs_resolve_to_the_model_links() -> None:
    model = SiteModel()
    site = render_site(model, PORT)
    html_locs = [loc for loc, res in site.items() if res.content_type.startswith("text/html")]
    assert len(html_locs) == len(model.content_locs())
    forms = {"exact duplicate": 0, "fragment": 0, "relative": 0, "scheme-relative": 0}
    for loc in html_locs:
        base = model.loc_url(loc, PORT)
        hrefs = hrefs_of(decode(model, loc, site[loc].body))
        resolved = {loc_of_url(urldefrag(urljoin(base, ref))[0]) for ref in hrefs}
        assert resolved == model.outlinks(loc), base
        forms["exact duplicate"] += len(hrefs) - len(set(hrefs))
        forms["fragment"] += sum("#" in ref for ref in hrefs)
        forms["relative"] += sum(not ref.startswith(("/", "http", "?")) for ref in hrefs)
        forms["scheme-relative"] += sum(ref.startswith("//") for ref in hrefs)
    assert all(count > 0 for count in forms.values()), forms
    catalog = site[(1, "/catalog?page=2")].body.decode()
    assert 'rel="next" href="?page=3"' in catalog


@pytest.mark.parametrize(
    ("source", "target"),
    [("/p/3", "/p/5"), ("/", "/p/5"), ("/p/3", "/"), ("/", "/"), ("/p/3", "/status/404"),
     ("/catalog?page=2", "/p/9"), ("/p/3", "/catalog?page=1"), ("/catalog?page=2", "/")],
)  # fmt: skip
def test_relative_path_round_trips(source: str, target: str) -> None:
    base = f"http://127.0.0.1:{PORT}{source}"
    assert urljoin(base, relative_path(source, target)) == f"http://127.0.0.1:{PORT}{target}"


def test_cross_host_links_are_never_host_relative() -> None:
    model = SiteModel(pages=300)
    for n in range(model.pages):
        for link in model.page_links(n):
            ref = href(link, model.loc_of(n), PORT)
            if link.host != model.host_of(n):
                assert ref.startswith(("http://", "//")), ref


def test_catalogue_lists_each_host_page_once() -> None:
    model = SiteModel(pages=130, hosts=2)
    for host in range(2):
        listed = [
            n
            for k in range(1, model.catalog_page_count(host) + 1)
            for n in model.catalog_entries(host, k)
        ]
        assert listed == list(range(host, 130, 2))
        assert all(len(model.catalog_entries(host, k)) <= CATALOG_PAGE_SIZE for k in (1, 2))


def test_items_and_article_text_are_in_the_html() -> None:
    model = SiteModel()
    site = render_site(model, PORT)
    for n in range(model.pages):
        body = site[model.loc_of(n)].body
        case = model.encoded_pages.get(n)
        sel = parsel.Selector(text=body.decode(case.codec if case else "utf-8"))
        if model.is_article(n):
            article = model.article(n)
            assert sel.css("h1.headline::text").get() == article.headline
            assert sel.css("span.author::text").get() == article.author
            assert sel.css("time::attr(datetime)").get() == article.date
            paragraphs = sel.css("div.article-body p::text").getall()
            assert "\n\n".join(paragraphs) == model.article_text(n)
            assert len(paragraphs) >= 4
            for boilerplate in ("div.cookie-banner", "aside.sidebar", "section.related"):
                assert sel.css(boilerplate), boilerplate
        else:
            product = model.product(n)
            assert sel.css("h1.title::text").get() == product.title
            assert sel.css("span.price::text").get() == product.price
            assert sel.css("span.sku::text").get() == product.sku
            assert sel.css("time::attr(datetime)").get() == product.date
            assert sel.css("time::text").get() == product.date_human
            assert float(product.price) > 0 and product.price.count(".") == 1
    skus = {model.product(n).sku for n in range(model.pages) if not model.is_article(n)}
    assert len(skus) == model.pages - len(model.article_ids)


def test_without_problems_there_are_no_problem_links() -> None:
    model = SiteModel(problems=False)
    assert not model.encoded_pages
    assert not model.problem_urls(PORT)
    assert all(not locs for locs in model.problem_locs().values())


def test_menu_pages_repeat_navigation_links_on_every_page_and_add_no_url() -> None:
    plain, nav = SiteModel(pages=100, hosts=2), SiteModel(pages=100, hosts=2, menu_pages=18)
    assert nav.expected_urls(PORT) == plain.expected_urls(PORT)
    assert len(nav.nav_links(1)) == 20
    site = render_site(nav, PORT)
    for loc in [nav.loc_of(n) for n in (0, 1, 57)] + [(1, "/catalog?page=2")]:
        menu = parsel.Selector(site[loc].body.decode()).css("nav.menu a::attr(href)").getall()
        assert [urljoin(f"http://x{loc[1]}", h) for h in menu] == [
            f"http://x{link.path}" for link in nav.nav_links(loc[0])
        ]
    assert plain.outlinks((0, "/p/10")) < nav.outlinks((0, "/p/10"))
