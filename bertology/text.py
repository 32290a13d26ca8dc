"""Text hygiene, decided once for every reader (corpora, task files, plain-text input).

- Encodings: UTF-8 (a leading byte order mark dropped); UTF-16 and UTF-32 when the file
  starts with their byte order mark, decoded. A file that looks like UTF-16 without a
  byte order mark (a NUL in every other byte) is refused: read as UTF-8 it would be letters
  interleaved with NULs, and guessing the byte order would be a coin toss.
- Line ends: universal, as Python's text mode and the csv module read them: LF, CRLF and a
  lone CR (old Mac files) all end a line, so a CR-only file is many lines, not one.
- Control characters: NUL and the other C0 controls (and DEL), except tab, are replaced by
  a space and counted: a tokenizer would drop some and keep others, and word-level models
  (static vectors) would take them as parts of words. Tab stays, since it separates fields.
- Invisible text: a labelled example whose text holds nothing visible (empty, whitespace,
  no-break spaces, zero-width characters) is an error naming the file and line.
- Lone surrogates: no UTF-8 file holds one, but a text given directly can (a JSON request's
  "\ud800", a Python string); each becomes U+FFFD, the replacement character, as an undecodable
  byte would (tokenizers refuse such a string outright). `normalize_text` applies these rules,
  controls included, to a text that comes from no file (a prompt).
"""

from __future__ import annotations

import codecs
import re
import unicodedata

# Longest first: the UTF-32 LE mark starts with the UTF-16 LE one.
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
SNIFF_BYTES = 4096  # what `sniff_encoding` looks at; callers read (or peek) this many bytes
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a Python string, every surrogate is a lone one
_LINE_END = re.compile(r"\r\n|\r|\n")
# Unicode categories with nothing to see: separators (spaces), controls, format (zero-width) characters.
_INVISIBLE_CATEGORIES = ("Zs", "Zl", "Zp", "Cc", "Cf")


def sniff_encoding(head: bytes) -> tuple[str, int]:
    """The encoding of a file from its first bytes, and the length of its byte order mark.

    Args:
        head: the file's first bytes (a few KB are plenty).

    Returns:
        ("utf-8" | "utf-16-le" | "utf-16-be" | "utf-32-le" | "utf-32-be", mark length).

    Raises:
        ValueError: the bytes look like UTF-16 without a byte order mark (the caller names the
            file in its error).
    """
    for mark, encoding in _BYTE_ORDER_MARKS:
        if head.startswith(mark):
            return encoding, len(mark)
    if _looks_like_utf16(head[:SNIFF_BYTES]):
        raise ValueError("looks like UTF-16 without a byte order mark (a NUL in every other byte); "
                         "save it as UTF-8, or as UTF-16 with a byte order mark")
    return "utf-8", 0


def _looks_like_utf16(head: bytes) -> bool:
    """A NUL in most even or most odd positions: ASCII text stored as 16-bit units."""
    pairs = len(head) // 2
    if pairs < 2:
        return False
    even_nuls, odd_nuls = head[0 : 2 * pairs : 2].count(0), head[1 : 2 * pairs : 2].count(0)
    return max(even_nuls, odd_nuls) >= 0.8 * pairs


def split_lines(text: str) -> list[str]:
    """`text` cut at every LF, CRLF or lone CR, without the line ends.

    Unlike `str.splitlines`, it does not cut at U+2028, U+0085, form feeds and the other
    characters that sentences in real data sets contain.
    """
    return _LINE_END.split(text)


def replace_controls(text: str) -> tuple[str, int]:
    """`text` with each C0 control character (tab, LF and CR aside) and DEL replaced by a space.

    Returns:
        (the cleaned text, how many characters were replaced).
    """
    return _CONTROL.subn(" ", text)


def is_invisible(text: str) -> bool:
    """True when `text` has no visible character: empty, spaces of any kind, controls or
    zero-width (format) characters only."""
    return all(unicodedata.category(char) in _INVISIBLE_CATEGORIES for char in text)


def replace_surrogates(text: str) -> tuple[str, int]:
    """`text` with each lone surrogate replaced by U+FFFD.

    Returns:
        (the cleaned text, how many characters were replaced).
    """
    return _SURROGATE.subn("\ufffd", text)


def normalize_text(text: str) -> str:
    """A text that comes from no file (a prompt, a request's text) under the readers' rules: C0
    controls (tab, LF and CR aside) and DEL replaced by a space, lone surrogates by U+FFFD."""
    return replace_surrogates(replace_controls(text)[0])[0]
