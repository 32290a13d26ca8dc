"""Reading text corpora: files and folders -> documents (lists of sentences), with file:line errors.

The first stage of the pre-training pipeline (data/shards.py tokenizes what it reads) and
the reader the tokenizer trainer shares. Three layouts, each plain or compressed (gzip,
bz2, xz, zstd: by suffix, else by the file's first bytes), all streamed:

- text (.txt .raw .text, or any file given by name): `read_documents` decides per file
  whether a line is a sentence or paragraph with blank lines between documents ("lines")
  or the whole file is one document ("file"); a corpus that is one text file is cut into
  documents at its blank lines, or at every line when it has none;
- JSONL (.jsonl), as the Pile and `datasets` exports keep text: one JSON object per line
  is one document, its text in a string field (`text_field`);
- Parquet (.parquet, read with pyarrow in record batches): one row is one document, its
  text in a string column (`text_field`).

A record's text is cut into sentences by the rules of the text files (within one document),
and `split_sentences` cuts paragraphs into sentences.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import itertools
import json
import lzma
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import zstandard

from ..errors import UserError
from ..files import loads_json
from ..text import SNIFF_BYTES, replace_controls, sniff_encoding, split_lines

TEXT_SUFFIXES = (".txt", ".raw", ".text")


JSONL_SUFFIX = ".jsonl"


PARQUET_SUFFIX = ".parquet"


CORPUS_SUFFIXES = (*TEXT_SUFFIXES, JSONL_SUFFIX, PARQUET_SUFFIX)  # what a folder is searched for


COMPRESSION_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}


DOC_FORMATS = ("auto", "lines", "file")


# How "auto" reads a corpus that is one text file, which as one document could hold nothing out
# for evaluation (as recorded in ReadStats.formats): hard-wrapped prose as a document per
# paragraph (blank lines between), other text as "lines", or without blank lines, a document per line.
PARAGRAPHS, LINE_PER_DOCUMENT = "paragraphs", "line per document"


# A sentence ends at . ! or ? (optionally followed by closing quotes or brackets), then
# whitespace, then something that can start a sentence: an uppercase letter, a digit or an
# opening quote/bracket. The negative look-behinds keep common abbreviations ("Mr. Darcy"),
# initials ("J. R. Smith", "H. americanus") and WikiText's decimal marks ("0 @.@ 7") whole.
_SENTENCE_BREAK = re.compile(
    r"""(?:(?<=[.!?])|(?<=[.!?]["'”’)\]]))"""
    r"""(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<!\bJr\.)(?<!\bSr\.)(?<!\bvs\.)"""
    r"""(?<!\b[A-Z]\.)(?<!@\.)"""
    r"""\s+(?=["'“‘(\[]?[A-Z0-9])"""
)


# WikiText headings: " = Title = " (level 1, one per article), " = = Section = = ", ...
_WIKI_HEADING = re.compile(r"^(=(?: =)*) ([^=].*?) (=(?: =)*)$")


# The first bytes of each compressed format. None of them can start UTF-8 text except
# bz2's, which is ASCII; its block (or end-of-stream) marker after the level makes a text
# file that starts the same way implausible.
_MAGIC = (
    (re.compile(rb"\x1f\x8b"), "gzip"),
    (re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), "bz2"),
    (re.compile(rb"\xfd7zXZ\x00"), "xz"),
    (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd"),
)


_MAGIC_BYTES = 10  # enough for the longest pattern above


_FORMAT_SNIFF_BYTES = 1 << 20  # "auto" looks at the first MiB of each text file


_MIN_WRAPPED_LINES = 4  # fewer continued lines than this cannot show a wrap width


_ZSTD_READ_BYTES = 1 << 16  # compressed bytes decompressed per step


_PARQUET_BATCH_ROWS = 1024  # rows converted to Python strings at a time


@dataclass
class ReadStats:
    """What `read_documents` found; pass one in to have it filled while reading."""

    files: int = 0
    documents: int = 0
    sentences: int = 0
    skipped_lines: int = 0  # lines not valid UTF-8, or (JSONL) not a JSON object; only with skip_bad_lines
    control_characters: int = 0  # NUL and other control characters replaced by spaces (see text.py)
    # file -> "lines" or "file", as read (a one-file corpus: also PARAGRAPHS or LINE_PER_DOCUMENT);
    # for a JSONL or Parquet file the format asked for, "auto" meaning decided per record.
    formats: dict[str, str] = field(default_factory=dict)


def text_files(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Expand files and folders (or one of them) into the list of corpus files to read.

    A file given by name is read whatever its name. A folder is searched recursively for
    text (*.txt, *.raw, *.text), JSONL (*.jsonl) and Parquet (*.parquet) files, the first
    two also compressed (*.txt.gz, *.jsonl.zst, ...: .gz .bz2 .xz .zst), skipping hidden
    files and folders (names starting with "."), in sorted path order; other files in it
    (extensionless, .csv, .npy, .tar.gz, ...) are ignored, so caches, tables and binaries
    kept beside the text stay out of the corpus.

    Raises:
        UserError: a path does not exist, or a folder holds no corpus files.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            inside = sorted(
                p
                for p in path.rglob("*")
                if _is_corpus_file_name(p)
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not inside:
                raise UserError(f"{path}: folder holds no corpus files ({', '.join('*' + s for s in CORPUS_SUFFIXES)}, "
                                f"text and JSONL also compressed: {' '.join(COMPRESSION_SUFFIXES)})")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise UserError(f"{path}: no such file or folder")
    if not found:
        raise UserError("no corpus files given")
    return found


def _inner_suffix(path: Path) -> str:
    """The suffix that says the layout: ".txt" for both wiki.txt and wiki.txt.gz."""
    return Path(path.stem).suffix if path.suffix in COMPRESSION_SUFFIXES else path.suffix


def _is_corpus_file_name(path: Path) -> bool:
    """Whether a folder search picks `path` up (Parquet compresses inside: never wrapped)."""
    inner = _inner_suffix(path)
    return inner in CORPUS_SUFFIXES and not (inner == PARQUET_SUFFIX and path.suffix in COMPRESSION_SUFFIXES)


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences with a small rule (see `_SENTENCE_BREAK`).

    >>> split_sentences('He left. "Why?" she asked. Mr. Smith stayed.')
    ['He left.', '"Why?" she asked.', 'Mr. Smith stayed.']

    The rule over-splits a few abbreviations it does not know ("etc. The" is right, "Fig. 3"
    is not); pre-training only needs sentences to be roughly right.
    """
    return [s for s in _SENTENCE_BREAK.split(text.strip()) if s]


def detect_format(path: Path) -> str:
    """Guess whether a text file (compressed or not) is hard-wrapped prose ("file") or one
    paragraph per line ("lines"), from its first MiB; see `_guess_format`."""
    lines, size = [], 0
    for _, line in text_lines(path, skip_bad_lines=True, stats=None):
        lines.append(line)
        size += len(line)
        if size >= _FORMAT_SNIFF_BYTES:
            break
    return _guess_format(lines)


def _guess_format(lines: Sequence[str]) -> str:
    """"file" for hard-wrapped prose, else "lines".

    Hard-wrapped text (Project Gutenberg books) has paragraphs that run over several lines
    cut at a fixed width, so the lines that continue onto a next line have nearly equal
    lengths. The rule: "file" when at least half of the non-empty lines continue onto the
    next line, and the middle half of those lines' lengths lies within 15 characters,
    between 40 and 100. Sentence-per-line files fail the width test (sentence lengths vary
    widely); WikiText fails both (its paragraphs are single long lines).
    """
    lengths = [len(line.strip()) for line in lines]
    continued = [n for n, after in zip(lengths, lengths[1:]) if n and after]
    nonempty = sum(1 for n in lengths if n)
    if len(continued) < max(_MIN_WRAPPED_LINES, nonempty / 2):
        return "lines"
    q25, q75 = np.percentile(continued, [25, 75])
    return "file" if 40 <= q25 and q75 <= 100 and q75 - q25 <= 15 else "lines"


def read_documents(
    paths: Sequence[str | os.PathLike],
    doc_format: str = "auto",
    skip_bad_lines: bool = False,
    stats: ReadStats | None = None,
    text_field: str = "text",
) -> Iterator[list[str]]:
    """Stream the documents of a corpus, each a list of sentences.

    Files are read one line (JSONL), one record batch (Parquet) or one line at a time
    (text), so a corpus need not fit in memory (except that a "file"-format document, one
    whole file, is held as one list).

    Formats of text files:
        "lines": BERT's format, one sentence or paragraph per line, documents separated by
            blank lines. Files in WikiText's layout (the first non-blank line is a title
            " = Title = ") are split into articles at each title instead, blank lines
            being mere paragraph gaps, and their headings are dropped, as BERT "ignores
            lists, tables, and headers".
        "file": one document per file; blank lines separate paragraphs, and the lines of
            a paragraph (hard-wrapped text) are joined with spaces.
        "auto": `detect_format` chooses per file; except that a corpus of one text file,
            which as one document could hold none out for evaluation, is cut into documents
            at its blank lines (hard-wrapped prose: a document per paragraph), or at every
            line when it has none (see `one_file_documents`).
    In every format a line or paragraph is then split into sentences by `split_sentences`,
    since "lines" files often hold a paragraph per line (WikiText does). A JSONL or Parquet
    record is one document whose text is read by the same rules ("auto": chosen per
    record), so a record holding the text of a "lines" document, or of a whole "file",
    gives the document the text file gives.

    Args:
        paths: files and folders (see `text_files`).
        doc_format: "auto", "lines" or "file".
        skip_bad_lines: skip lines that are not valid UTF-8, and JSONL lines that are not a
            JSON object, instead of failing (counted in `stats`).
        stats: filled in as the documents are read.
        text_field: the JSONL field or Parquet column that holds a record's text.

    Yields:
        Documents, each a non-empty list of sentences (non-empty strings).

    Raises:
        UserError: a missing path, a folder without corpus files, an unknown format, a line
            that is not valid UTF-8 ("path:line: not valid UTF-8"), a damaged or truncated
            compressed file ("path:line: ..." naming the line reached), a bad JSONL line or
            record, a Parquet file without the column, or no text at all.
    """
    _check_doc_format(doc_format)
    files = text_files(paths)
    stats = ReadStats() if stats is None else stats
    for path in files:
        stats.files += 1
        if _inner_suffix(path) in (JSONL_SUFFIX, PARQUET_SUFFIX):
            stats.formats[str(path)] = doc_format
            texts = _record_texts(path, text_field, skip_bad_lines, stats)
            documents = filter(None, (_record_document(text, doc_format) for text in texts))
        elif doc_format == "auto" and len(files) == 1:
            documents = one_file_documents(path, skip_bad_lines, stats)
        else:
            file_format = detect_format(path) if doc_format == "auto" else doc_format
            stats.formats[str(path)] = file_format
            documents = _text_documents(read_lines(path, skip_bad_lines, stats), file_format)
        for document in documents:
            stats.documents += 1
            stats.sentences += len(document)
            yield document
    if stats.documents == 0:
        shown = ", ".join(map(str, files[:3])) + (", ..." if len(files) > 3 else "")
        raise UserError(f"{shown}: the corpus has no text")


def one_file_documents(path: Path, skip_bad_lines: bool = False, stats: ReadStats | None = None) -> list[list[str]]:
    """The documents of a corpus that is one text file, read with "auto": never the one document
    that "file" makes, which could hold none out for evaluation.

    Hard-wrapped prose (`detect_format` says "file", e.g. a Project Gutenberg book) gives a
    document per paragraph, the paragraphs being separated by blank lines and their lines joined
    (PARAGRAPHS); other text is read as "lines" (documents between blank lines, or WikiText's
    articles); and when that gives one document, the file having no blank line, each line is a
    document (LINE_PER_DOCUMENT). The file is read into memory, as "file" does. `stats.formats`
    records the reading.
    """
    stats = ReadStats() if stats is None else stats
    lines = list(read_lines(path, skip_bad_lines, stats))
    sniffed = list(itertools.takewhile(lambda end: end < _FORMAT_SNIFF_BYTES,
                                       itertools.accumulate(len(line) + 1 for line in lines)))
    if _guess_format(lines[: len(sniffed) + 1]) == "file":  # as `detect_format` does, on the first MiB
        stats.formats[str(path)] = PARAGRAPHS
        paragraphs = (list(group) for blank, group in itertools.groupby(lines, key=lambda line: not line) if not blank)
        return [sentences for paragraph in paragraphs if (sentences := split_sentences(" ".join(paragraph)))]
    documents = list(_line_documents(lines))
    if len(documents) > 1:
        stats.formats[str(path)] = "lines"
        return documents
    stats.formats[str(path)] = LINE_PER_DOCUMENT
    return [sentences for line in lines if (sentences := split_sentences(line))]


def corpus_notes(formats: dict[str, str]) -> str:
    """How a one-file corpus was cut into documents (`one_file_documents`), for the run's log
    ("" when it was read as its format says)."""
    readings = {PARAGRAPHS: "a document per paragraph (hard-wrapped text; blank lines between paragraphs)",
                LINE_PER_DOCUMENT: "a document per line (the file has no blank lines)"}
    special = [(path, reading) for path, reading in formats.items() if reading in readings]
    if not special:
        return ""
    path, reading = special[0]
    return f"{path}: one text file, read as {readings[reading]}; --doc-format file reads it as one document"


def corpus_lines(
    paths: Sequence[str | os.PathLike],
    text_field: str = "text",
    skip_bad_lines: bool = False,
    stats: ReadStats | None = None,
) -> Iterator[str]:
    """Every line of a corpus's text, stripped (blank lines included): the lines of text
    files and of each JSONL or Parquet record's text, without documents or sentences.

    What word statistics need (the WordPiece trainer). Arguments and errors as for
    `read_documents`; `stats` counts files and skipped lines.
    """
    stats = ReadStats() if stats is None else stats
    for path in text_files(paths):
        stats.files += 1
        if _inner_suffix(path) in (JSONL_SUFFIX, PARQUET_SUFFIX):
            for text in _record_texts(path, text_field, skip_bad_lines, stats):
                yield from _stripped_lines(text)
        else:
            yield from read_lines(path, skip_bad_lines, stats)


def _check_doc_format(doc_format: str) -> None:
    if doc_format not in DOC_FORMATS:
        raise UserError(f"unknown document format {doc_format!r}: use one of {', '.join(DOC_FORMATS)}")


def read_lines(path: Path, skip_bad_lines: bool = False, stats: ReadStats | None = None) -> Iterator[str]:
    """The lines of a text file (decompressed), stripped of surrounding whitespace (and of
    a UTF-8 byte order mark).

    Raises:
        UserError: `path:line: not valid UTF-8`, unless `skip_bad_lines` (then counted in
            `stats`); a damaged or truncated compressed file.
    """
    for _, line in text_lines(path, skip_bad_lines, stats):
        yield line.strip()


def text_lines(path: Path, skip_bad_lines: bool = False, stats: ReadStats | None = None) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file (compressed or not) by the rules of text.py: decoded
    (UTF-8, or UTF-16/32 by their byte order mark, which is dropped), cut at every LF, CRLF or
    lone CR, control characters replaced by spaces (counted in `stats`), nothing stripped.

    Raises:
        UserError: `path:line: not valid UTF-8` (unless `skip_bad_lines`: then counted in
            `stats`), UTF-16 without a byte order mark, a damaged compressed file.
    """
    number = 0
    for raw_number, raw, encoding in _numbered_lines(path):
        if encoding == "utf-8":
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                _skip_or_fail(f"{path}:{number + 1}: not valid UTF-8", error.reason, skip_bad_lines, stats)
                number += 1
                continue
        else:
            text = raw  # decoded by the text stream
        if raw_number == 1:
            text = text.lstrip("\ufeff")
        text = text.removesuffix("\n").removesuffix("\r")
        for line in split_lines(text):  # a lone CR ends a line too
            number += 1
            line, replaced = replace_controls(line)
            if stats is not None:
                stats.control_characters += replaced
            yield number, line


def _skip_or_fail(problem: str, reason: str, skip_bad_lines: bool, stats: ReadStats | None) -> None:
    """Count a bad line in `stats` when skipping, else stop with "`problem` (`reason`; ...)"."""
    if not skip_bad_lines:
        raise UserError(f"{problem} ({reason}; --skip-bad-lines skips such lines)")
    if stats is not None:
        stats.skipped_lines += 1


def _compression(path: Path) -> str | None:
    """"gzip", "bz2", "xz", "zstd" by the suffix, else by the first bytes; None for plain."""
    if path.suffix in COMPRESSION_SUFFIXES:
        return COMPRESSION_SUFFIXES[path.suffix]
    with _open(path) as file:
        head = file.read(_MAGIC_BYTES)
    return next((codec for magic, codec in _MAGIC if magic.match(head)), None)


def _open(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as error:
        raise UserError(f"{path}: cannot open ({error.strerror})") from None


def _numbered_lines(path: Path) -> Iterator[tuple[int, bytes | str, str]]:
    """(line number from 1, line, encoding) of `path`, decompressed: raw bytes cut at LF when
    the encoding is UTF-8 (each line decoded by the caller, so that one bad line can be
    skipped), text lines when it is UTF-16 or UTF-32 (decoded here, as a whole).

    Raises:
        UserError: the compressed stream is damaged or ends early, or the text is not valid in
            its encoding; the message names the line being read when it happened.
    """
    codec = _compression(path)
    number = 0
    encoding = "utf-8"
    try:
        with _open(path) as file, _decompressed(file, codec) as stream:
            try:
                encoding, _ = sniff_encoding(stream.peek(SNIFF_BYTES))
            except ValueError as error:
                raise UserError(f"{path}: {error}") from None
            lines = stream if encoding == "utf-8" else io.TextIOWrapper(stream, encoding=encoding, newline="")
            for number, line in enumerate(lines, start=1):
                yield number, line, encoding
    except EOFError:
        raise UserError(f"{path}:{number + 1}: the {codec} stream ends early: the file is truncated") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path}:{number + 1}: not valid {encoding.upper()[:6]} ({error.reason})") from None
    except (OSError, zlib.error, lzma.LZMAError, zstandard.ZstdError) as error:
        what = f"damaged {codec} data" if codec else "cannot read"
        raise UserError(f"{path}:{number + 1}: {what} ({error})") from None


def _decompressed(file: BinaryIO, codec: str | None) -> contextlib.AbstractContextManager[BinaryIO]:
    """A binary stream of the decompressed bytes of `file` (itself when `codec` is None)."""
    if codec == "gzip":
        return gzip.GzipFile(fileobj=file)
    if codec == "bz2":
        return bz2.BZ2File(file)
    if codec == "xz":
        return lzma.LZMAFile(file)
    if codec == "zstd":
        return io.BufferedReader(_ZstdReader(file))
    return contextlib.nullcontext(file)


class _ZstdReader(io.RawIOBase):
    """The decompressed bytes of a zstd file, frame after frame.

    zstandard's own `stream_reader` ends quietly inside a truncated frame; this raises
    EOFError there, as gzip, bz2 and lzma do, so a cut-off download is an error rather than
    a silently shorter corpus.
    """

    def __init__(self, file: BinaryIO):
        self._file = file
        self._decompressor = zstandard.ZstdDecompressor()
        self._frame = self._decompressor.decompressobj()
        self._mid_frame = False  # part of a frame read, its end not yet
        self._output = b""  # decompressed, from `_offset` on not yet returned
        self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._offset == len(self._output):
            data = self._file.read(_ZSTD_READ_BYTES)
            if not data:
                if self._mid_frame:
                    raise EOFError("the last zstd frame is incomplete")
                return 0
            self._output, self._offset = self._decompress(data), 0
        count = min(len(buffer), len(self._output) - self._offset)
        buffer[:count] = self._output[self._offset : self._offset + count]
        self._offset += count
        return count

    def _decompress(self, data: bytes) -> bytes:
        """Decompress `data`, starting a new frame where one ends."""
        pieces = []
        while data:
            pieces.append(self._frame.decompress(data))
            self._mid_frame = not self._frame.eof
            data = b""
            if self._frame.eof:
                data = self._frame.unused_data
                self._frame = self._decompressor.decompressobj()
        return b"".join(pieces)


def _record_texts(path: Path, text_field: str, skip_bad_lines: bool, stats: ReadStats | None) -> Iterator[str]:
    """The text of each record of a JSONL or Parquet file, control characters replaced by
    spaces (JSON's escapes such as \\u0000 put them back into the text)."""
    if _inner_suffix(path) == PARQUET_SUFFIX:
        if path.suffix in COMPRESSION_SUFFIXES:
            raise UserError(f"{path}: a compressed Parquet file cannot be read in batches; decompress it "
                            "(Parquet compresses its pages itself)")
        texts = _parquet_texts(path, text_field)
    else:
        texts = _jsonl_texts(path, text_field, skip_bad_lines, stats)
    for text in texts:
        text, replaced = replace_controls(text)
        if stats is not None:
            stats.control_characters += replaced
        yield text


def reading_notes(skipped_lines: int, control_characters: int) -> str:
    """What reading a corpus skipped or cleaned, for the run's log ("" when nothing)."""
    notes = []
    if skipped_lines:
        notes.append(f"skipped {skipped_lines:,} bad line(s) (not valid UTF-8, or not a JSON object)")
    if control_characters:
        notes.append(f"replaced {control_characters:,} control character(s) (NUL, ...) by spaces")
    return "; ".join(notes)


def _jsonl_texts(path: Path, text_field: str, skip_bad_lines: bool, stats: ReadStats | None) -> Iterator[str]:
    """The `text_field` of each JSON object of a JSONL file, one object per line (blank lines ignored).

    Raises:
        UserError: "path:line: ..." for a line that is not a JSON object (unless
            `skip_bad_lines`: then counted in `stats`), and for an object whose field is
            missing or not a string (always: that is a wrong `text_field`, not damage).
    """
    for number, line in text_lines(path, skip_bad_lines, stats):
        if not line.strip():
            continue
        try:
            record = loads_json(line)
        except json.JSONDecodeError as error:
            _skip_or_fail(f"{path}:{number}: not valid JSON", f"{error.msg} at column {error.colno}",
                          skip_bad_lines, stats)
            continue
        if not isinstance(record, dict):
            _skip_or_fail(f"{path}:{number}: not a JSON object", f"found {_json_kind(record)}", skip_bad_lines, stats)
            continue
        if text_field not in record:
            fields = ", ".join(map(repr, list(record)[:10])) or "none"
            raise UserError(f"{path}:{number}: no field {text_field!r} (fields: {fields}); "
                            "name the text field with --text-field")
        text = record[text_field]
        if not isinstance(text, str):
            raise UserError(f"{path}:{number}: field {text_field!r} is {_json_kind(text)}, not a string")
        yield text


def _json_kind(value) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def _parquet_texts(path: Path, text_field: str) -> Iterator[str]:
    """The `text_field` column of a Parquet file, row after row, read in record batches.

    Rows are numbered from 0 in errors, as pandas and `datasets` index them.

    Raises:
        UserError: the file is not readable Parquet, lacks the column, the column does not
            hold strings, or a row's value is null.
    """
    # Imported here, not at the top: pyarrow takes ~0.2 s to import and only Parquet corpora need it.
    import pyarrow
    import pyarrow.parquet

    try:
        parquet = pyarrow.parquet.ParquetFile(path)
    except (OSError, pyarrow.ArrowException) as error:
        raise UserError(f"{path}: not a readable Parquet file ({error})") from None
    with parquet:
        names = parquet.schema_arrow.names
        if text_field not in names:
            raise UserError(f"{path}: no column {text_field!r} (columns: {', '.join(map(repr, names[:10]))}); "
                            "name the text column with --text-field")
        kind = parquet.schema_arrow.field(text_field).type
        if not (pyarrow.types.is_string(kind) or pyarrow.types.is_large_string(kind)):
            raise UserError(f"{path}: column {text_field!r} holds {kind}, not strings")
        row = 0
        batches = parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=[text_field])
        while True:
            try:
                batch = next(batches, None)
            except (OSError, pyarrow.ArrowException) as error:
                raise UserError(f"{path}: row {row}: damaged Parquet data ({error})") from None
            if batch is None:
                return
            for text in batch.column(0).to_pylist():
                if text is None:
                    raise UserError(f"{path}: row {row}: column {text_field!r} is null, not a string")
                yield text
                row += 1


def _record_document(text: str, doc_format: str) -> list[str]:
    """The sentences of one record's text, read as a text file's document would be."""
    lines = _stripped_lines(text)
    record_format = _guess_format(lines) if doc_format == "auto" else doc_format
    return [sentence for document in _text_documents(lines, record_format) for sentence in document]


def _stripped_lines(text: str) -> list[str]:
    # Cut as reading a file does: str.splitlines would also cut at U+2028, \x0c, ...
    return [line.strip() for line in split_lines(text)]


def _text_documents(lines: Iterable[str], file_format: str) -> Iterator[list[str]]:
    """The documents of stripped lines in the "file" or "lines" format."""
    return _file_documents(lines) if file_format == "file" else _line_documents(lines)


def _line_documents(lines: Iterable[str]) -> Iterator[list[str]]:
    """Documents of a "lines" file (see `read_documents`)."""
    document: list[str] = []
    wikitext = None  # decided by the first non-blank line
    for line in lines:
        if not line:
            if document and not wikitext:
                yield document
                document = []
            continue
        heading = _WIKI_HEADING.match(line)
        if wikitext is None:
            wikitext = heading is not None and heading[1] == "="
        if wikitext and heading:
            if heading[1] == "=" and document:  # a level-1 title starts the next article
                yield document
                document = []
            continue
        document += split_sentences(line)
    if document:
        yield document


def _file_documents(lines: Iterable[str]) -> Iterator[list[str]]:
    """The one document of a "file" file: paragraphs rejoined, then split into sentences."""
    document: list[str] = []
    paragraph: list[str] = []
    for line in itertools.chain(lines, [""]):  # the final "" ends the last paragraph
        if line:
            paragraph.append(line)
        elif paragraph:
            document += split_sentences(" ".join(paragraph))
            paragraph = []
    if document:
        yield document
