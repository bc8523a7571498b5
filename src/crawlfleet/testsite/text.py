"""Deterministic filler text for the test site: product names, prose, people, dates.

Every function takes the :class:`random.Random` to draw from, so the same generator
state always yields the same text. All output is plain ASCII except where a caller
asks for a native-script sample (:data:`NATIVE_SAMPLES`).
"""

from __future__ import annotations

import datetime as dt
import random

__all__ = [
    "NATIVE_SAMPLES",
    "headline",
    "human_date",
    "paragraph",
    "person_name",
    "product_title",
    "random_date",
    "sentence",
]

_ADJECTIVES = (
    "sturdy", "compact", "elegant", "rustic", "modern", "classic", "portable", "quiet",
    "bright", "durable", "handmade", "vintage", "foldable", "smart", "gentle", "bold",
)  # fmt: skip
_MATERIALS = (
    "copper", "oak", "steel", "linen", "ceramic", "bamboo", "wool", "glass", "leather",
    "cotton", "walnut", "brass", "stone", "aluminium",
)  # fmt: skip
_NOUNS = (
    "kettle", "lamp", "chair", "notebook", "backpack", "teapot", "clock", "blanket",
    "bicycle bell", "desk", "mug", "shelf", "umbrella", "radio", "scarf", "frying pan",
)  # fmt: skip
_WORDS = (
    "crawler", "frontier", "queue", "network", "harbour", "market", "river", "engine",
    "morning", "garden", "signal", "library", "winter", "station", "journey", "pattern",
    "village", "machine", "window", "letter", "history", "planet", "kitchen", "theory",
    "museum", "ocean", "bridge", "forest", "festival", "archive", "measure", "balance",
)  # fmt: skip
_VERBS = (
    "changes", "follows", "reveals", "carries", "shapes", "improves", "questions",
    "joins", "remembers", "describes", "protects", "connects", "explains", "rebuilds",
)  # fmt: skip
_DETERMINERS = ("every", "a", "the", "each", "one", "its", "no", "another")
_LINKERS = ("and", "while", "because", "although", "so", "until", "before", "after")
_FIRST_NAMES = (
    "Ada", "Brian", "Chen", "Dana", "Emeka", "Farah", "Greta", "Hiro", "Ines", "Jonas",
    "Kaia", "Luis", "Mira", "Noor", "Oskar", "Priya", "Quinn", "Rosa", "Sven", "Tariq",
)  # fmt: skip
_LAST_NAMES = (
    "Lovelace", "Okafor", "Lindqvist", "Tanaka", "Moreau", "Haddad", "Novak", "Silva",
    "Kowalski", "Brennan", "Achebe", "Ferreira", "Nakamura", "Schmidt", "Osei", "Varga",
)  # fmt: skip
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December",
)  # fmt: skip
_EPOCH = dt.date(2020, 1, 1)

#: Native-script (title, description) samples per Python codec name; each pair encodes
#: strictly in its codec and cannot be read as UTF-8 once encoded.
NATIVE_SAMPLES: dict[str, tuple[str, str]] = {
    "gbk": ("绿茶礼盒", "精选杭州龙井绿茶，清香甘醇，适合送礼。"),  # noqa: RUF001
    "shift_jis": ("南部鉄器の急須", "伝統的な岩手の鉄瓶です。お茶がまろやかになります。"),
    "big5": ("臺灣高山烏龍茶", "產自阿里山的高山茶葉，香氣濃郁。"),  # noqa: RUF001
    "latin-1": ("Crème brûlée façade", "Élégant café crème à Noël, «très» spécial, über naïve."),
}


def product_title(rng: random.Random) -> str:
    """A product name such as ``"Rustic oak lamp"``."""
    return f"{rng.choice(_ADJECTIVES).capitalize()} {rng.choice(_MATERIALS)} {rng.choice(_NOUNS)}"


def headline(rng: random.Random) -> str:
    """An article headline such as ``"How the harbour remembers the winter"``."""
    return f"How the {rng.choice(_WORDS)} {rng.choice(_VERBS)} the {rng.choice(_WORDS)}"


def sentence(rng: random.Random) -> str:
    """One sentence of two or three clauses (11 to 17 words), capitalised, with a full
    stop."""
    pick = rng.random  # one C call per word: rendering large sites stays fast
    words: list[str] = []
    for clause in range(2 + int(pick() * 2)):
        if clause:
            words.append(_LINKERS[int(pick() * len(_LINKERS))])
        words += (
            _DETERMINERS[int(pick() * len(_DETERMINERS))],
            _WORDS[int(pick() * len(_WORDS))],
            _VERBS[int(pick() * len(_VERBS))],
            _DETERMINERS[int(pick() * len(_DETERMINERS))],
            _WORDS[int(pick() * len(_WORDS))],
        )
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


def paragraph(rng: random.Random) -> str:
    """A paragraph of 3-6 sentences separated by single spaces."""
    return " ".join(sentence(rng) for _ in range(rng.randint(3, 6)))


def person_name(rng: random.Random) -> str:
    """A "First Last" name."""
    return f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}"


def random_date(rng: random.Random) -> dt.date:
    """A date between 2020-01-01 and the end of 2024."""
    return _EPOCH + dt.timedelta(days=rng.randrange(5 * 365))


def human_date(day: dt.date) -> str:
    """``day`` as e.g. ``"March 5, 2024"`` (English, independent of the locale)."""
    return f"{_MONTHS[day.month - 1]} {day.day}, {day.year}"
