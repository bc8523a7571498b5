"""Decoding of page bodies whose charset is missing or wrong, and repair of item strings.

- :func:`decode_body` picks the codec of a body: a byte-order mark, else valid UTF-8
  (whatever was declared: non-ASCII bytes that form valid UTF-8 are UTF-8 in practice),
  else the declared charset (HTTP header or ``<meta>``) if the body decodes with it, else
  charset-normalizer's guess. Labels are read with the WHATWG Encoding Standard's table,
  as browsers read them (:mod:`crawlfleet.pipelines.labels`): legacy names map to their
  web supersets (GB2312/GBK -> GB18030, Big5 -> Big5-HKSCS, Shift_JIS -> cp932,
  Latin-1 -> cp1252).
- :func:`fix_mojibake` repairs UTF-8 text that was decoded as Latin-1/cp1252
  (``"cafÃ©"`` -> ``"café"``), also when that happened twice.
- :func:`to_valid_utf8` returns a string that encodes to UTF-8 without error and has no
  NUL character (PostgreSQL refuses it): raw bytes kept as surrogate escapes are
  decoded, surrogate pairs joined, lone surrogates replaced by U+FFFD.
"""

from __future__ import annotations

import re

from charset_normalizer import from_bytes

from crawlfleet.pipelines.labels import body_label, bom_codec, codec_for_label, detected_codec

__all__ = ["decode_body", "fix_mojibake", "resolve_codec", "to_valid_utf8"]

#: Codecs where any byte sequence decodes: a successful decode proves nothing.
_WESTERN_SINGLE_BYTE = frozenset({"cp1252", "latin-1", "iso8859-15", "iso8859-1"})
# fmt: off
_MULTI_BYTE = frozenset({
    "gb18030", "gbk", "gb2312", "big5", "big5hkscs", "cp950", "cp932", "shift_jis",
    "euc_jp", "iso2022_jp", "euc_kr", "cp949", "johab", "hz",
})
# fmt: on
_UTF16_32 = frozenset({"utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"})
_NON_ASCII_RUN = re.compile(rb"[\x80-\xff]+")
#: Detector answers within this chaos of the best one count as a tie.
_CHAOS_TIE = 0.01


def resolve_codec(name: str | None) -> str | None:
    """The Python codec for a charset label, as a browser reads it (the WHATWG table:
    :func:`~crawlfleet.pipelines.labels.codec_for_label`); None if unknown."""
    return codec_for_label(name)


def _try_decode(body: bytes, codec: str) -> str | None:
    try:
        return body.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return None


def _mean_non_ascii_run(body: bytes) -> float:
    runs = [len(m) for m in _NON_ASCII_RUN.findall(body[:65536])]
    return sum(runs) / len(runs) if runs else 0.0


def _detect(body: bytes) -> tuple[str, str] | None:
    """charset-normalizer's reading of *body*, with the web's priors: UTF-16/32 only with
    a BOM (handled before), and cp1252 when it decodes and the guess is one of several
    ties or gives the same text (the detector often answers cp1250 for French or German).
    """
    matches = [m for m in from_bytes(body) if not m.encoding.startswith(("utf_16", "utf_32"))]
    if not matches:
        return None
    best = matches[0]
    codec = detected_codec(best.encoding)
    text = str(best)
    if codec != "cp1252" and codec not in _MULTI_BYTE:
        western = _try_decode(body, "cp1252")
        ties = [m for m in matches if m.chaos <= best.chaos + _CHAOS_TIE]
        tied = len(ties) >= 3 or any(detected_codec(m.encoding) == "cp1252" for m in ties)
        if western is not None and (tied or western == text):
            return western, "cp1252"
    return text, codec


def decode_body(body: bytes, declared: str | None) -> tuple[str, str]:
    """Decode a page body; return ``(text, codec)`` with the Python codec name used.

    *declared* is the charset the server or page announced (None: not announced; the
    body's ``<meta charset>`` is then read). The rules are listed in the module
    docstring. Never raises on bad input: the last resort decodes with replacement
    characters.
    """
    if not body:
        return "", resolve_codec(declared) or "utf-8"
    bom = bom_codec(body)
    if bom is not None:
        return body[bom[1] :].decode(bom[0], "replace"), bom[0]
    codec = resolve_codec(declared) or resolve_codec(body_label(body))
    if codec not in _UTF16_32:
        if body.isascii():
            return body.decode("ascii"), codec or "utf-8"
        text = _try_decode(body, "utf-8")
        if text is not None:
            return text, "utf-8"
    if codec and codec != "utf-8":
        text = _try_decode(body, codec)
        if text is not None:
            if codec in _WESTERN_SINGLE_BYTE and _mean_non_ascii_run(body) >= 2.0:
                # Non-ASCII bytes in runs look like a multi-byte (CJK) page served with
                # a server's default Latin-1 label: ask the detector.
                guess = _detect(body)
                if guess is not None and guess[1] in _MULTI_BYTE:
                    return guess
            return text, codec
    guess = _detect(body)
    if guess is not None:
        return guess
    return body.decode(codec or "utf-8", "replace"), codec or "utf-8"


# --- Mojibake ------------------------------------------------------------------------

# cp1252 characters of the bytes 0x80-0x9F: UTF-8 continuation bytes read as cp1252.
_CP1252_HIGH = bytes(range(0x80, 0xA0)).decode("cp1252", "ignore")
_CONT = "[\x80-\xbf" + re.escape(_CP1252_HIGH) + "]"
_MOJIBAKE_RE = re.compile(f"[\xc2-\xdf]{_CONT}|[\xe0-\xef]{_CONT}{{2}}|[\xf0-\xf4]{_CONT}{{3}}")
_TO_BYTE = {ch: ch.encode("cp1252")[0] for ch in _CP1252_HIGH}


def _unmangle(match: re.Match[str]) -> str:
    chunk = match.group(0)
    raw = bytes(ord(ch) if ord(ch) < 256 else _TO_BYTE[ch] for ch in chunk)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return chunk


def fix_mojibake(text: str) -> str:
    """*text* with UTF-8 sequences that were read as Latin-1/cp1252 decoded again.

    Only complete, valid UTF-8 sequences are touched (``"Ã©"`` -> ``"é"``), so correct
    Latin-1 text (``"déjà"``) is kept. Repeated up to three times for double encoding.
    """
    for _ in range(3):
        if text.isascii():
            return text
        fixed = _MOJIBAKE_RE.sub(_unmangle, text)
        if fixed == text:
            return text
        text = fixed
    return text


# --- Valid UTF-8 ---------------------------------------------------------------------

_PAIR_RE = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_ESCAPED_BYTES_RE = re.compile("[\udc80-\udcff]+")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _escaped_bytes(match: re.Match[str]) -> str:
    raw = match.group(0).encode("utf-8", "surrogateescape")
    return _try_decode(raw, "utf-8") or raw.decode("cp1252", "replace")


def to_valid_utf8(text: str) -> str:
    """*text* made storable: encodable as UTF-8 and free of NUL characters.

    Surrogate escapes of raw bytes (from ``errors="surrogateescape"``) are decoded as
    UTF-8, else as cp1252; surrogate pairs become the character they stand for; any
    other surrogate becomes U+FFFD.
    """
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _PAIR_RE.sub(
            lambda m: m.group(0).encode("utf-16-le", "surrogatepass").decode("utf-16-le"), text
        )
        text = _ESCAPED_BYTES_RE.sub(_escaped_bytes, text)
        text = _SURROGATE_RE.sub("\ufffd", text).replace("\x00", "")
    return text
