"""A news article page with boilerplate all around it (navigation, cookie banner, ads,
related links, comments, footer), for the tests of text extraction: :data:`TITLE` and
:data:`PARAGRAPHS` are what an extractor should find."""

from __future__ import annotations

__all__ = ["PARAGRAPHS", "TITLE", "article_page"]

#: The article's text, paragraph by paragraph.
PARAGRAPHS = [
    "The northern rivers freeze for most of the winter, and the communities along their "
    "banks have learned to live with the ice. Fishermen cut holes through the surface and "
    "set their nets beneath it, checking them every morning before dawn.",
    "In spring the thaw arrives suddenly. Within a week the rivers swell, carrying great "
    "slabs of ice downstream, and the villages prepare for floods that can reach the first "
    "floor of the houses closest to the water.",
    "Scientists have measured the timing of the thaw for more than a century. Their records "
    "show that the ice now breaks up about eleven days earlier than it did in 1920, a change "
    "that alters the lives of fish, birds and people alike.",
    "Local historians keep diaries written by ferrymen who noted the first open water each "
    "year. Comparing those notes with satellite images, researchers have filled gaps in the "
    "record and confirmed that the trend has accelerated since the 1980s.",
    "For the villagers the change is practical rather than abstract: ice roads close sooner, "
    "supplies must arrive by boat, and the winter fishing season grows shorter every decade.",
]
#: The article's title.
TITLE = "Rivers of the North Are Thawing Earlier"


def article_page(paragraphs: list[str] = PARAGRAPHS, title: str = TITLE) -> str:
    """The page of an article titled *title* with *paragraphs*, amid boilerplate."""
    nav = " ".join(f'<a href="/section/{i}">Section {i}</a>' for i in range(12))
    related = "".join(
        f'<li><a href="/story/{i}">Related story number {i} you may also like</a></li>'
        for i in range(8)
    )
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return f"""<!DOCTYPE html><html lang="en"><head>
<meta charset="utf-8"><title>{title} | The Daily Planet</title>
<meta name="author" content="Jane Doe">
<meta property="article:published_time" content="2024-03-05T10:00:00Z">
</head><body>
<div id="cookie-banner">We use cookies to improve your experience. Accept all cookies?</div>
<header><nav>{nav}</nav><form><input name="q" placeholder="Search"></form></header>
<aside class="sidebar"><h3>Most read</h3><ul>{related}</ul>
<div class="ad">Advertisement: buy the best winter boots now, 50% off!</div></aside>
<main><article><h1>{title}</h1><p class="byline">By Jane Doe, March 5, 2024</p>
{body}</article>
<section class="comments"><h3>Comments</h3><div class="comment"><p>Great article! I
remember the floods of 1998 very well.</p></div></section></main>
<footer><p>Copyright 2024 The Daily Planet. All rights reserved.</p>
<a href="/privacy">Privacy policy</a> <a href="/terms">Terms of use</a></footer>
</body></html>"""
