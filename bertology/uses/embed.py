"""`bertology embed`: every line (or JSONL field) of a file -> sentence or word vectors in .npy or .jsonl.

Streams the input in chunks, embeds each through inference/embedding.py and writes the
array to a temporary file renamed into place, so an interrupted run leaves nothing half-written.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

from ..config import Device, check_settings, setting
from ..data.corpus import text_lines
from ..errors import UserError
from ..files import atomic_path
from ..inference.embedding import (
    LEVELS,
    POOLINGS,
    WORD_PIECES,
    EmbedStats,
    WordVectors,
    _align_words,
    _layer_choice,
    embed_texts,
    embed_tokens,
    length_limit,
    load_encoder,
)
from ..models.features import LAYER_CHOICES, feature_width
from ..ops import PRECISION_HELP, PRECISIONS
from ..tasks.readers import json_object
from ..text import is_invisible, replace_controls

OUTPUT_SUFFIXES = (".npy", ".jsonl")


_CHUNK_BATCHES = 32  # batches read from the input at a time: long enough to sort by length, short to stream


# Every layer choice but ELMo's mix, whose weights are learned by a head (there is none here).
EMBED_LAYERS_HELP = (f"{', '.join(name for name in LAYER_CHOICES if name != 'mix')}, or layer numbers like 4,5,6 "
                     "(summed; 0 = embeddings, -1 = last)")


@dataclass
class EmbedConfig(Device):
    """What to embed, how, and where the vectors go.

    The settings of `bertology embed`.
    """

    model: str = setting(required=True, metavar="MODEL", model_dir=True,
                         help="any model directory, or an installed model's name (e.g. all-MiniLM-L6-v2)")
    input: str = setting(required=True, metavar="FILE", help="one text per line, or JSONL (see --text-field)")
    out: str = setting(required=True, metavar="FILE", output="file",
                       help="FILE.npy or FILE.jsonl (the suffix picks the format)")
    layers: str = setting("last", help=EMBED_LAYERS_HELP)
    pooling: str = setting("mean", choices=POOLINGS, help="sentence vectors: the mean or max over the tokens, or "
                                                          "the [CLS] vector")
    normalize: bool = setting(False, help="scale each vector to unit length")
    level: str = setting("sentence", choices=LEVELS, help="one vector per line, or one per word")
    word_pieces: str = setting("first", choices=WORD_PIECES,
                               help="token level: a word's first WordPiece, the mean of its pieces, ends (an ELMo: forward "
                                    "state at its last piece, backward at its first), or every piece")
    text_field: str | None = setting(None, formerly=("field",),
                                     help="JSONL input: the field that holds the text (default for .jsonl: text; "
                                          "given, the input is read as JSONL whatever its name)")
    skip_empty: bool = setting(False, help="leave out blank lines instead of stopping at the first")
    batch_size: int = setting(64, positive=True, help="texts per forward pass")
    max_seq_len: int | None = setting(None, positive=True,
                                      help="tokens per text; longer ones are cut and counted (default: the "
                                           "model's limit)")
    # Vectors are stored and compared across machines: bf16 would make them depend on the processor.
    precision: str = setting("fp32", choices=PRECISIONS,
                             help="fp32: the same vectors on every machine (sentence-transformers' within 1e-5); "
                                  f"bf16 is faster, but the vectors differ by about 1e-3; {PRECISION_HELP}")
    progress: bool = setting(True, help="show a progress bar")

    def validate(self) -> None:
        """Raise UserError for an unknown choice or output format, before any work is done."""
        check_settings(self)
        if Path(self.out).suffix not in OUTPUT_SUFFIXES:
            raise UserError(f"{self.out}: the output must end in .npy or .jsonl (that picks the format)")

    @property
    def jsonl_field(self) -> str | None:
        """The JSONL field holding the text, or None for a plain text file."""
        return self.text_field or ("text" if Path(self.input).suffix == ".jsonl" else None)


def read_texts(path: Path, text_field: str | None, skip_empty: bool,
               stats: EmbedStats | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of a text file, or each JSONL object's `text_field`.

    Blank lines (or blank texts) stop with an error naming file:line, since every line should
    become one row, unless `skip_empty` (then counted in `stats.skipped_empty`).
    """
    if not path.is_file():
        raise UserError(f"{path}: no such input file")
    for number, line in text_lines(path):  # text.py's rules: encodings, line ends, control characters
        text = line if text_field is None or not line.strip() else _json_text(line, text_field, f"{path}:{number}")
        if is_invisible(text):
            if not skip_empty:
                what = "line" if text_field is None or not line.strip() else f"text in field {text_field!r}"
                raise UserError(f"{path}:{number}: empty {what} (every line becomes one vector; "
                                "remove it or pass --skip-empty)")
            if stats is not None:
                stats.skipped_empty += 1
            continue
        yield number, text


def _json_text(line: str, text_field: str, where: str) -> str:
    """The string at `text_field` of one JSONL line."""
    record = json_object(line, where)
    if text_field not in record:
        raise UserError(f"{where}: no field {text_field!r} (fields: {', '.join(record) or 'none'}; "
                        "--text-field picks one)")
    text = record[text_field]
    if not isinstance(text, str):
        raise UserError(f"{where}: field {text_field!r} must be a string, got {type(text).__name__}")
    return replace_controls(text)[0]  # JSON's \\u0000 escapes


def _chunks(records: Iterator[tuple[int, str]], size: int) -> Iterator[tuple[list[int], list[str]]]:
    """(line numbers, texts) of up to `size` records at a time."""
    while chunk := list(itertools.islice(records, size)):
        numbers, texts = zip(*chunk)
        yield list(numbers), list(texts)


def _write_sentence_npy(path: Path, chunks: Iterator, rows: int, width: int) -> int:
    """Fill a (rows, width) .npy in place, chunk by chunk, on a temporary file renamed at the end."""
    with atomic_path(path) as tmp:
        array = open_memmap(tmp, mode="w+", dtype=np.float32, shape=(rows, width))
        start = 0
        for _, vectors in chunks:
            array[start: start + len(vectors)] = vectors
            start += len(vectors)
        array.flush()
        del array  # closes the memory map before the rename
    return rows


def _write_token_npy(path: Path, index_file: Path, chunks: Iterator, rows: int, width: int) -> int:
    """All word vectors stacked in one (rows, width) .npy, and per line its row range and words."""
    with atomic_path(path) as tmp, atomic_path(index_file) as tmp_index, \
            open(tmp_index, "w", encoding="utf-8") as index:
        array = open_memmap(tmp, mode="w+", dtype=np.float32, shape=(rows, width))
        start = 0
        for numbers, results in chunks:
            for number, (words, vectors) in zip(numbers, results):
                array[start: start + len(words)] = vectors
                entry = {"line": number, "start": start, "end": start + len(words), "words": words}
                index.write(json.dumps(entry, ensure_ascii=False) + "\n")
                start += len(words)
        array.flush()
        del array
    return rows


def _write_jsonl(path: Path, chunks: Iterator, level: str) -> int:
    """One JSON object per embedded line: its number and its vector, or its words and their vectors.
    Returns the number of vectors written."""
    vectors = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for numbers, results in chunks:
            for number, result in zip(numbers, results):
                if level == "sentence":
                    entry = {"line": number, "embedding": result.tolist()}
                else:
                    entry = {"line": number, "words": result.words, "embeddings": result.vectors.tolist()}
                out.write(json.dumps(entry, ensure_ascii=False) + "\n")
                vectors += 1 if level == "sentence" else len(result.words)
    return vectors


def index_path(out: str | Path) -> Path:
    """Where a token-level .npy's index goes: vectors.npy -> vectors.index.jsonl."""
    return Path(out).with_suffix(".index.jsonl")


def run_embed(cfg: EmbedConfig) -> dict:
    """`bertology embed`: embed every line (or JSONL field) of `cfg.input` into `cfg.out`.

    The whole input is checked before any text is embedded, so a bad line late in a long file
    costs no wasted work; then the input streams through in chunks. Sentence level writes a (lines, width) .npy
    or {"line", "embedding"} JSONL; token level writes one .npy of all word vectors plus
    `<out stem>.index.jsonl` ({"line", "start", "end", "words"}), or {"line", "words",
    "embeddings"} JSONL. Nothing half-written is left behind.

    Returns:
        A summary: lines, shape, path (and index), seconds, truncated, skipped_empty, dropped_words.
    """
    started = time.perf_counter()
    cfg.validate()
    source, out, text_field = Path(cfg.input), Path(cfg.out), cfg.jsonl_field
    model, tokenizer = load_encoder(cfg.model, cfg.device)
    indices, combine = _layer_choice(model, cfg.layers)
    width = feature_width(model.hidden_size, indices, combine)
    limit = length_limit(model, tokenizer, cfg.max_seq_len)
    stats = EmbedStats()
    lines = sum(1 for _ in read_texts(source, text_field, cfg.skip_empty, stats))
    if lines == 0:
        raise UserError(f"{source}: no text to embed" + (" (every line is blank)" if stats.skipped_empty else ""))
    chunk_size = cfg.batch_size * _CHUNK_BATCHES
    options = {"layers": cfg.layers, "normalize": cfg.normalize, "batch_size": cfg.batch_size,
               "precision": cfg.precision, "max_seq_len": limit, "stats": stats}

    def embedded() -> Iterator[tuple[list[int], np.ndarray | list[WordVectors]]]:
        from tqdm.auto import tqdm

        with tqdm(total=lines, unit="line", desc="embedding", disable=not cfg.progress, leave=False) as bar:
            for numbers, texts in _chunks(read_texts(source, text_field, cfg.skip_empty), chunk_size):
                if cfg.level == "sentence":
                    yield numbers, embed_texts(model, tokenizer, texts, pooling=cfg.pooling, **options)
                else:
                    yield numbers, embed_tokens(model, tokenizer, texts, word_pieces=cfg.word_pieces, **options)
                bar.update(len(numbers))

    summary = {"lines": lines, "path": str(out)}
    if out.suffix == ".jsonl":
        rows = _write_jsonl(out, embedded(), cfg.level)
    elif cfg.level == "sentence":
        rows = _write_sentence_npy(out, embedded(), lines, width)
    else:
        # The .npy's shape goes in its header, so count the word vectors first (tokenizing is cheap).
        rows = sum(len(a.words) for _, texts in _chunks(read_texts(source, text_field, cfg.skip_empty), chunk_size)
                   for a in _align_words(tokenizer, texts, cfg.word_pieces, limit, None))
        _write_token_npy(out, index_path(out), embedded(), rows, width)
        summary["index"] = str(index_path(out))
    return {**summary, "shape": [rows, width], "seconds": time.perf_counter() - started, "truncated": stats.truncated,
            "skipped_empty": stats.skipped_empty, "dropped_words": stats.dropped_words}
