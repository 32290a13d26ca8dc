"""Parallel corpora: line i of the source file translates line i of the target file.

The layout is Multi30k's (and WMT's, as most translation toolkits read them): a folder with
`{split}.{language}` files, plain or compressed (`train.en.gz`, `train.de.gz`, `val.en`, ...),
one sentence per line. The lines are read by data/corpus.py's rules (text.py: encodings, line
ends, control characters), so a parallel file reads as any corpus file does.

The two sides of a split must have the same number of lines: one missing line shifts every
later pair onto the wrong translation, silently, so a mismatch is an error naming both files
and both counts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from .corpus import COMPRESSION_SUFFIXES, read_lines


@dataclass(frozen=True)
class SentencePair:
    """One line of each side, with where it came from ("train.en.gz:12")."""

    source: str
    target: str
    where: str


def split_file(folder: str | os.PathLike, split: str, language: str) -> Path:
    """The file of one side of a split: `{split}.{language}`, plain or with a compression suffix.

    Raises:
        UserError: the folder does not exist, or it has no such file (the message names the
            path looked for).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such folder (expected a parallel corpus folder with {split}.{language} "
                        "and its translation)")
    plain = folder / f"{split}.{language}"
    for path in (plain, *(plain.with_name(plain.name + suffix) for suffix in COMPRESSION_SUFFIXES)):
        if path.is_file():
            return path
    raise UserError(f"{plain}: no such file (nor {plain.name}.gz); the split {split!r} needs one file per language")


def read_parallel(source_file: str | os.PathLike, target_file: str | os.PathLike) -> list[SentencePair]:
    """Every line pair of two aligned files, blank pairs included (they keep the alignment;
    training drops them), each line stripped.

    Raises:
        UserError: a file cannot be read, or the two have different numbers of lines
            (`a: 29000 lines, but b: 28999 lines`).
    """
    source_file, target_file = Path(source_file), Path(target_file)
    sources = list(read_lines(source_file))
    targets = list(read_lines(target_file))
    if len(sources) != len(targets):
        raise UserError(f"{source_file}: {len(sources):,} lines, but {target_file}: {len(targets):,} lines; "
                        "line i of one must translate line i of the other")
    return [SentencePair(s, t, f"{source_file.name}:{i}") for i, (s, t) in enumerate(zip(sources, targets), start=1)]


def read_split(folder: str | os.PathLike, split: str, source_language: str = "en",
               target_language: str = "de") -> list[SentencePair]:
    """The sentence pairs of one split of a parallel corpus folder (see `split_file`)."""
    return read_parallel(split_file(folder, split, source_language), split_file(folder, split, target_language))
