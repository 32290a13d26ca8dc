"""Reading text corpora: files and folders -> documents (lists of sentences), with file:line errors.

The first stage of the pre-training pipeline (data/shards.py tokenizes what it reads) and
the reader the tokenizer trainer shares. `read_documents` decides per file whether a
line is a sentence or paragraph with blank lines between documents ("lines") or the
whole file is one document ("file"), and `split_sentences` cuts paragraphs into sentences.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import UserError

TEXT_SUFFIXES = (".txt", ".raw", ".text")  # what a folder is searched for


DOC_FORMATS = ("auto", "lines", "file")


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


_SNIFF_BYTES = 1 << 20  # "auto" looks at the first MiB of each file


_MIN_WRAPPED_LINES = 4  # fewer continued lines than this cannot show a wrap width


@dataclass
class ReadStats:
    """What `read_documents` found; pass one in to have it filled while reading."""

    files: int = 0
    documents: int = 0
    sentences: int = 0
    skipped_lines: int = 0  # lines that were not valid UTF-8 (only with skip_bad_lines)
    formats: dict[str, str] = field(default_factory=dict)  # file -> "lines" or "file", as read


def text_files(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Expand files and folders (or one of them) into the list of text files to read.

    A file given by name is read whatever its name. A folder is searched recursively for
    *.txt, *.raw and *.text files, skipping hidden files and folders (names starting with
    "."), in sorted path order; other files in it (extensionless, .csv, .npy, ...) are
    ignored, so caches, tables and binaries kept beside the text stay out of the corpus.

    Raises:
        UserError: a path does not exist, or a folder holds no text files.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            inside = sorted(
                p
                for p in path.rglob("*")
                if p.suffix in TEXT_SUFFIXES
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not inside:
                raise UserError(f"{path}: folder holds no text files ({', '.join('*' + s for s in TEXT_SUFFIXES)})")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise UserError(f"{path}: no such file or folder")
    if not found:
        raise UserError("no corpus files given")
    return found


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences with a small rule (see `_SENTENCE_BREAK`).

    >>> split_sentences('He left. "Why?" she asked. Mr. Smith stayed.')
    ['He left.', '"Why?" she asked.', 'Mr. Smith stayed.']

    The rule over-splits a few abbreviations it does not know ("etc. The" is right, "Fig. 3"
    is not); pre-training only needs sentences to be roughly right.
    """
    return [s for s in _SENTENCE_BREAK.split(text.strip()) if s]


def detect_format(path: Path) -> str:
    """Guess whether a file is hard-wrapped prose ("file") or one paragraph per line ("lines").

    Hard-wrapped text (Project Gutenberg books) has paragraphs that run over several lines
    cut at a fixed width, so the lines that continue onto a next line have nearly equal
    lengths. The rule: "file" when at least half of the non-empty lines continue onto the
    next line, and the middle half of those lines' lengths lies within 15 characters,
    between 40 and 100. Sentence-per-line files fail the width test (sentence lengths vary
    widely); WikiText fails both (its paragraphs are single long lines).
    """
    with open(path, "rb") as file:
        head = file.read(_SNIFF_BYTES)
    lines = head.decode("utf-8", errors="replace").splitlines()
    if len(head) == _SNIFF_BYTES:
        lines = lines[:-1]  # probably cut in the middle
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
) -> Iterator[list[str]]:
    """Stream the documents of a corpus, each a list of sentences.

    Files are read one line at a time, so a corpus need not fit in memory (except that a
    "file"-format document, one whole file, is held as one list).

    Formats:
        "lines": BERT's format, one sentence or paragraph per line, documents separated by
            blank lines. Files in WikiText's layout (the first non-blank line is a title
            " = Title = ") are split into articles at each title instead, blank lines
            being mere paragraph gaps, and their headings are dropped, as BERT "ignores
            lists, tables, and headers".
        "file": one document per file; blank lines separate paragraphs, and the lines of
            a paragraph (hard-wrapped text) are joined with spaces.
        "auto": `detect_format` chooses per file.
    In every format a line or paragraph is then split into sentences by `split_sentences`,
    since "lines" files often hold a paragraph per line (WikiText does).

    Args:
        paths: files and folders (see `text_files`).
        doc_format: "auto", "lines" or "file".
        skip_bad_lines: skip lines that are not valid UTF-8 (counted in `stats`) instead
            of failing.
        stats: filled in as the documents are read.

    Yields:
        Documents, each a non-empty list of sentences (non-empty strings).

    Raises:
        UserError: a missing path, a folder without text files, an unknown format, a line
            that is not valid UTF-8 ("path:line: not valid UTF-8"), or no text at all.
    """
    _check_doc_format(doc_format)
    files = text_files(paths)
    stats = ReadStats() if stats is None else stats
    for path in files:
        file_format = detect_format(path) if doc_format == "auto" else doc_format
        stats.files += 1
        stats.formats[str(path)] = file_format
        lines = read_lines(path, skip_bad_lines, stats)
        for document in _file_documents(lines) if file_format == "file" else _line_documents(lines):
            stats.documents += 1
            stats.sentences += len(document)
            yield document
    if stats.documents == 0:
        shown = ", ".join(map(str, files[:3])) + (", ..." if len(files) > 3 else "")
        raise UserError(f"{shown}: the corpus has no text")


def _check_doc_format(doc_format: str) -> None:
    if doc_format not in DOC_FORMATS:
        raise UserError(f"unknown document format {doc_format!r}: use one of {', '.join(DOC_FORMATS)}")


def read_lines(path: Path, skip_bad_lines: bool = False, stats: ReadStats | None = None) -> Iterator[str]:
    """The lines of `path`, stripped of surrounding whitespace (and of a UTF-8 byte order mark).

    Raises:
        UserError: `path:line: not valid UTF-8`, unless `skip_bad_lines` (then counted in `stats`).
    """
    with open(path, "rb") as file:
        for number, raw in enumerate(file, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                if not skip_bad_lines:
                    raise UserError(f"{path}:{number}: not valid UTF-8 ({error.reason}; "
                                    "--skip-bad-lines skips such lines)") from None
                if stats is not None:
                    stats.skipped_lines += 1
                continue
            yield line.lstrip("\ufeff").strip() if number == 1 else line.strip()


def _line_documents(lines: Iterator[str]) -> Iterator[list[str]]:
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


def _file_documents(lines: Iterator[str]) -> Iterator[list[str]]:
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
