"""Charset labels read as browsers read them: the WHATWG Encoding Standard's label table.

A page's declared charset (``Content-Type``, ``<meta charset>``) is a *label*; the
standard maps every label browsers accept to one of its encodings, and those to the
decoder that is used. Several legacy labels name a subset of what servers really send,
so the standard merges them into the superset's decoder: ``gb2312``, ``gbk`` and
``x-gbk`` decode as GB18030 (whose decoder the standard's GBK uses), ``big5`` as
Big5-HKSCS, ``shift_jis`` as Windows-31J (cp932), ``euc-kr`` as cp949, ``iso-8859-1``,
``ascii`` and ``latin1`` as windows-1252, ``iso-8859-9`` as windows-1254,
``tis-620`` as windows-874.

crawlfleet holds the table itself: what a library release maps a label to (w3lib 2.6
reads ``gb2312`` as GBK, which has no decoder for GB18030's four-byte characters) does
not change how a page is decoded. Labels outside the table are unknown (None), as in a
browser; the standard's "replacement" labels (``iso-2022-kr``, ``hz-gb-2312``, ...:
encodings browsers refuse to decode) and ``x-user-defined`` are unknown too, so the
body's bytes decide.
"""

from __future__ import annotations

import codecs
import re

__all__ = [
    "WHATWG_LABELS",
    "body_label",
    "bom_codec",
    "codec_for_label",
    "detected_codec",
    "header_label",
]

# The Python codec of each WHATWG encoding, and that encoding's labels.
# fmt: off
_ENCODINGS: dict[str, tuple[str, ...]] = {
    "utf-8": ("unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "utf-8", "utf8",
              "x-unicode20utf8"),
    "cp866": ("866", "cp866", "csibm866", "ibm866"),
    "iso8859-2": ("csisolatin2", "iso-8859-2", "iso-ir-101", "iso8859-2", "iso88592",
                  "iso_8859-2", "iso_8859-2:1987", "l2", "latin2"),
    "iso8859-3": ("csisolatin3", "iso-8859-3", "iso-ir-109", "iso8859-3", "iso88593",
                  "iso_8859-3", "iso_8859-3:1988", "l3", "latin3"),
    "iso8859-4": ("csisolatin4", "iso-8859-4", "iso-ir-110", "iso8859-4", "iso88594",
                  "iso_8859-4", "iso_8859-4:1988", "l4", "latin4"),
    "iso8859-5": ("csisolatincyrillic", "cyrillic", "iso-8859-5", "iso-ir-144", "iso8859-5",
                  "iso88595", "iso_8859-5", "iso_8859-5:1988"),
    "iso8859-6": ("arabic", "asmo-708", "csiso88596e", "csiso88596i", "csisolatinarabic",
                  "ecma-114", "iso-8859-6", "iso-8859-6-e", "iso-8859-6-i", "iso-ir-127",
                  "iso8859-6", "iso88596", "iso_8859-6", "iso_8859-6:1987"),
    "iso8859-7": ("csisolatingreek", "ecma-118", "elot_928", "greek", "greek8", "iso-8859-7",
                  "iso-ir-126", "iso8859-7", "iso88597", "iso_8859-7", "iso_8859-7:1987",
                  "sun_eu_greek"),
    # ISO-8859-8 and ISO-8859-8-I differ in display direction only, not in characters
    "iso8859-8": ("csiso88598e", "csisolatinhebrew", "hebrew", "iso-8859-8", "iso-8859-8-e",
                  "iso-ir-138", "iso8859-8", "iso88598", "iso_8859-8", "iso_8859-8:1988",
                  "visual", "csiso88598i", "iso-8859-8-i", "logical"),
    "iso8859-10": ("csisolatin6", "iso-8859-10", "iso-ir-157", "iso8859-10", "iso885910",
                   "l6", "latin6"),
    "iso8859-13": ("iso-8859-13", "iso8859-13", "iso885913"),
    "iso8859-14": ("iso-8859-14", "iso8859-14", "iso885914"),
    "iso8859-15": ("csisolatin9", "iso-8859-15", "iso8859-15", "iso885915", "iso_8859-15",
                   "l9"),
    "iso8859-16": ("iso-8859-16",),
    "koi8-r": ("cskoi8r", "koi", "koi8", "koi8-r", "koi8_r"),
    "koi8-u": ("koi8-ru", "koi8-u"),
    "mac-roman": ("csmacintosh", "mac", "macintosh", "x-mac-roman"),
    "cp874": ("dos-874", "iso-8859-11", "iso8859-11", "iso885911", "tis-620", "windows-874"),
    "cp1250": ("cp1250", "windows-1250", "x-cp1250"),
    "cp1251": ("cp1251", "windows-1251", "x-cp1251"),
    "cp1252": ("ansi_x3.4-1968", "ascii", "cp1252", "cp819", "csisolatin1", "ibm819",
               "iso-8859-1", "iso-ir-100", "iso8859-1", "iso88591", "iso_8859-1",
               "iso_8859-1:1987", "l1", "latin1", "us-ascii", "windows-1252", "x-cp1252"),
    "cp1253": ("cp1253", "windows-1253", "x-cp1253"),
    "cp1254": ("cp1254", "csisolatin5", "iso-8859-9", "iso-ir-148", "iso8859-9", "iso88599",
               "iso_8859-9", "iso_8859-9:1989", "l5", "latin5", "windows-1254", "x-cp1254"),
    "cp1255": ("cp1255", "windows-1255", "x-cp1255"),
    "cp1256": ("cp1256", "windows-1256", "x-cp1256"),
    "cp1257": ("cp1257", "windows-1257", "x-cp1257"),
    "cp1258": ("cp1258", "windows-1258", "x-cp1258"),
    "mac-cyrillic": ("x-mac-cyrillic", "x-mac-ukrainian"),
    # the standard's GBK: its decoder is GB18030's
    "gb18030": ("chinese", "csgb2312", "csiso58gb231280", "gb2312", "gb_2312", "gb_2312-80",
                "gbk", "iso-ir-58", "x-gbk", "gb18030"),
    "big5hkscs": ("big5", "big5-hkscs", "cn-big5", "csbig5", "x-x-big5"),
    "euc_jp": ("cseucpkdfmtjapanese", "euc-jp", "x-euc-jp"),
    "iso2022_jp": ("csiso2022jp", "iso-2022-jp"),
    "cp932": ("csshiftjis", "ms932", "ms_kanji", "shift-jis", "shift_jis", "sjis",
              "windows-31j", "x-sjis"),
    "cp949": ("cseuckr", "csksc56011987", "euc-kr", "iso-ir-149", "korean", "ks_c_5601-1987",
              "ks_c_5601-1989", "ksc5601", "ksc_5601", "windows-949"),
    "utf-16-be": ("unicodefffe", "utf-16be"),
    "utf-16-le": ("csunicode", "iso-10646-ucs-2", "ucs-2", "unicode", "unicodefeff", "utf-16",
                  "utf-16le"),
}
# fmt: on

#: label (lower case) -> Python codec name (as ``codecs.lookup(...).name`` gives it)
WHATWG_LABELS: dict[str, str] = {
    label: codec for codec, labels in _ENCODINGS.items() for label in labels
}

# ASCII whitespace, which the standard strips around a label; quotes, which pages and
# servers put around one (charset="utf-8") and browsers read through.
_STRIP = "\t\n\f\r \"'"


def codec_for_label(label: str | None) -> str | None:
    """The Python codec that decodes charset *label* as a browser does, or None when the
    label is not one the WHATWG Encoding Standard decodes (see the module docstring)."""
    if not label:
        return None
    return WHATWG_LABELS.get(label.strip(_STRIP).lower())


def detected_codec(name: str) -> str:
    """The codec a browser would use for Python codec *name* (a detector's answer, such
    as ``"gb2312"`` or ``"latin_1"``): its WHATWG superset where it is one of the
    standard's encodings, else the codec itself."""
    try:
        canonical = codecs.lookup(name).name
    except LookupError:
        return name
    return codec_for_label(canonical) or codec_for_label(canonical.replace("_", "-")) or canonical


# Byte-order marks, longest first; a UTF-32LE mark reads as UTF-16LE, as browsers do
# (the standard has no UTF-32).
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
)


def bom_codec(body: bytes) -> tuple[str, int] | None:
    """The codec of *body*'s byte-order mark and the mark's length, or None."""
    for mark, codec in _BOMS:
        if body.startswith(mark):
            return codec, len(mark)
    return None


# charset=LABEL or charset="LABEL" in a Content-Type value
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s;,]+))""", re.I)
# <meta charset=...>, <meta http-equiv=Content-Type content="...; charset=...">, and an
# XML declaration's encoding=, in the first 4,096 bytes (the HTML standard's prescan
# reads 1,024, but pages with long heads declare later, and browsers still find it)
_BODY_CHARSET = re.compile(
    rb"""<meta\s[^>]*?charset\s*=\s*["']?\s*([-\w.:]+)"""
    rb"""|<\?xml\s[^>]*?encoding\s*=\s*["']([-\w.:]+)""",
    re.I,
)
_PRESCAN_BYTES = 4096


def header_label(content_type: str | None) -> str | None:
    """The charset label of a ``Content-Type`` value as given (``"GB2312"``), or None."""
    match = _HEADER_CHARSET.search(content_type or "")
    if match is None:
        return None
    return (match.group(1) or match.group(2) or match.group(3) or "").strip() or None


def body_label(body: bytes) -> str | None:
    """The charset label a page declares in its first 4,096 bytes (``<meta charset>``,
    a ``<meta http-equiv>`` Content-Type, an XML declaration), as given, or None."""
    match = _BODY_CHARSET.search(body[:_PRESCAN_BYTES])
    if match is None:
        return None
    raw = match.group(1) or match.group(2)
    return raw.decode("ascii", "replace")
