"""Quality measures of extracted text (used by tests and the benchmark).

Token F1 compares two texts as bags of tokens: words in lower case (letters and digits),
and each CJK character (Han, kana, Hangul) as a token of its own, since those scripts do
not separate words with spaces. Punctuation and whitespace do not count.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

__all__ = ["TokenScore", "token_f1", "token_scores", "tokenize"]

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN_RE = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+")


def tokenize(text: str) -> list[str]:
    """The tokens of *text*, in order (see the module docstring)."""
    return _TOKEN_RE.findall(text.lower())


@dataclass(frozen=True)
class TokenScore:
    """Precision, recall and F1 of a predicted text against a reference, in [0, 1]."""

    precision: float
    recall: float
    f1: float


def token_scores(predicted: str, reference: str) -> TokenScore:
    """Token precision, recall and F1 of *predicted* against *reference*.

    Two empty texts score 1.0; one empty text against a non-empty one scores 0.0.
    """
    pred = Counter(tokenize(predicted))
    ref = Counter(tokenize(reference))
    if not pred and not ref:
        return TokenScore(1.0, 1.0, 1.0)
    if not pred or not ref:
        return TokenScore(0.0, 0.0, 0.0)
    overlap = sum((pred & ref).values())
    precision = overlap / sum(pred.values())
    recall = overlap / sum(ref.values())
    f1 = 0.0 if overlap == 0 else 2 * precision * recall / (precision + recall)
    return TokenScore(precision, recall, f1)


def token_f1(predicted: str, reference: str) -> float:
    """Token F1 of *predicted* against *reference* (see :func:`token_scores`)."""
    return token_scores(predicted, reference).f1
