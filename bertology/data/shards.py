"""The shard cache: a corpus tokenized once, in parallel, into memory-mapped token shards.

`build_corpus` tokenizes the documents of data/corpus.py into shards under a cache folder
keyed by the files, the tokenizer and the settings; `TokenizedCorpus` reads them back
without loading the corpus into memory, so a later run (or another process) starts at once.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tokenizers

from ..errors import UserError
from ..files import atomic_path, loads_json, write_json_atomic
from .corpus import ReadStats, _check_doc_format, read_documents, text_files

MANIFEST = "manifest.json"


_CACHE_VERSION = 4  # bump when the shard layout or the reading rules change (3: tokenizers keyed by their fingerprint; 4: one-file corpora)


_SHARD_TOKENS = 1 << 24  # ~16M tokens: 32 MB of uint16 per shard file


_ENCODE_BATCH = 8192  # sentences per call into the Rust tokenizer: amortises the call overhead


def build_corpus(
    paths: Sequence[str | os.PathLike],
    tokenizer,
    cache_dir: str | os.PathLike,
    doc_format: str = "auto",
    skip_bad_lines: bool = False,
    num_workers: int | None = None,
    text_field: str = "text",
) -> TokenizedCorpus:
    """Tokenize a corpus once into memory-mapped shards, or reuse the shards of an earlier call.

    The shards live in `cache_dir/corpus-<key>/`, where the key hashes the files' absolute
    paths, sizes and modification times (of the files as stored: rewriting a compressed
    file changes them too), `doc_format`, `skip_bad_lines`, `text_field` and the
    tokenizer's whole pipeline (its `fingerprint`); change any of them and a new folder
    is built. The manifest is written last, so an interrupted build is never reused; a
    missing or damaged manifest or shard means a rebuild.

    Sentences are encoded without special tokens by the `tokenizers` engine (Rust, itself
    multi-threaded) in batches of 8192, streamed so memory stays bounded by a few batches
    plus one shard (~16M tokens); the token ids are stored as uint16 when the vocabulary
    fits (at most 65,536 entries), else int32. Each sentence after the first of its document
    is encoded with the space that stood before it in the text: a byte-level BPE such as
    GPT-2's spells a word after a space differently ("ĠThe"), WordPiece and SentencePiece
    drop the space. Sentences that tokenize to nothing are dropped, and
    so are documents left without sentences.

    Args:
        paths: corpus files and folders (see `read_documents`).
        tokenizer: a `bertology.Tokenizer`.
        cache_dir: the folder that holds tokenized corpora.
        doc_format: "auto", "lines" or "file" (see `read_documents`).
        skip_bad_lines: skip lines that are not valid UTF-8 (or JSONL lines that are not
            JSON objects) instead of failing.
        num_workers: threads that encode batches while the next ones are read and split;
            default: the number of CPUs. The engine parallelises within each batch as well.
        text_field: the JSONL field or Parquet column holding the text (see `read_documents`).

    Returns:
        The corpus; its `reused` attribute says whether the cache was already there.
    """
    _check_doc_format(doc_format)
    if num_workers is not None and num_workers < 1:
        raise UserError(f"num_workers must be at least 1, got {num_workers}")
    files = text_files(paths)
    key = _cache_key(files, tokenizer, doc_format, skip_bad_lines, text_field)
    folder = Path(cache_dir) / f"corpus-{key[:20]}"
    try:
        corpus = TokenizedCorpus(folder)
        if corpus.manifest.get("key") == key:
            corpus.reused = True
            return corpus
    except (UserError, OSError, ValueError):
        pass  # absent or damaged: build it afresh
    _build_shards(files, tokenizer, folder, key, doc_format, skip_bad_lines, text_field,
                  num_workers or os.cpu_count() or 1)
    return TokenizedCorpus(folder)


def _cache_key(files: list[Path], tokenizer, doc_format: str, skip_bad_lines: bool, text_field: str) -> str:
    """A hash of everything the shards depend on."""
    described = {
        "version": _CACHE_VERSION,
        "files": [(str(p.resolve()), *_size_and_mtime(p)) for p in files],
        "doc_format": doc_format,
        "skip_bad_lines": skip_bad_lines,
        "text_field": text_field,
        "tokenizer": tokenizer.fingerprint,
    }
    return hashlib.sha256(json.dumps(described).encode("utf-8")).hexdigest()


def _size_and_mtime(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def _build_shards(
    files: list[Path],
    tokenizer,
    folder: Path,
    key: str,
    doc_format: str,
    skip_bad_lines: bool,
    text_field: str,
    num_workers: int,
) -> None:
    """Tokenize `files` into `folder`: token shards, sentence and document offsets, then the manifest."""
    dtype = np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.int32
    # A private copy of the engine, set to neither pad nor truncate: the caller's tokenizer
    # keeps its settings, and threads can share the copy since no call changes it.
    engine = tokenizers.Tokenizer.from_str(tokenizer._engine.to_str())
    engine.no_padding()
    engine.no_truncation()
    stats = ReadStats()
    documents = read_documents(files, doc_format, skip_bad_lines, stats, text_field)

    shard_sizes: list[int] = []
    pending: list[np.ndarray] = []  # encoded batches not yet written to a shard
    sentence_lengths: list[np.ndarray] = []
    sentence_documents: list[np.ndarray] = []

    def write_shard() -> None:
        tokens = np.concatenate(pending)
        with atomic_path(folder / f"tokens-{len(shard_sizes):05d}.npy") as tmp, open(tmp, "wb") as file:
            np.save(file, tokens)
        shard_sizes.append(len(tokens))
        pending.clear()

    for tokens, lengths, doc_numbers in _encoded_batches(documents, engine, dtype, num_workers):
        kept = lengths > 0
        pending.append(tokens)
        sentence_lengths.append(lengths[kept])
        sentence_documents.append(doc_numbers[kept])
        if sum(map(len, pending)) >= _SHARD_TOKENS:
            write_shard()
    if sum(map(len, pending)):
        write_shard()
    if not shard_sizes:
        raise UserError(f"{files[0]}{', ...' if len(files) > 1 else ''}: the corpus has no tokens")

    lengths = np.concatenate(sentence_lengths)
    doc_numbers = np.concatenate(sentence_documents)
    sentence_offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=sentence_offsets[1:])
    document_starts = np.flatnonzero(doc_numbers[1:] != doc_numbers[:-1]) + 1
    document_offsets = np.concatenate([[0], document_starts, [len(lengths)]]).astype(np.int64)
    for name, array in (("sentence_offsets", sentence_offsets), ("document_offsets", document_offsets)):
        with atomic_path(folder / f"{name}.npy") as tmp, open(tmp, "wb") as file:
            np.save(file, array)
    write_json_atomic(
        folder / MANIFEST,
        {
            "version": _CACHE_VERSION,
            "key": key,
            "dtype": np.dtype(dtype).name,
            "vocab_size": tokenizer.vocab_size,
            "shards": [{"file": f"tokens-{i:05d}.npy", "tokens": n} for i, n in enumerate(shard_sizes)],
            "num_tokens": int(sentence_offsets[-1]),
            "num_sentences": len(lengths),
            "num_documents": len(document_offsets) - 1,
            "doc_format": doc_format,
            "formats": stats.formats,
            "skipped_lines": stats.skipped_lines,
            "control_characters": stats.control_characters,
        },
    )


def _encoded_batches(
    documents: Iterator[list[str]], engine: tokenizers.Tokenizer, dtype, num_workers: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Encode the documents' sentences in batches, in order.

    Yields (tokens, lengths, doc_numbers): the batch's token ids end to end, each sentence's
    token count, and the running number of the document each sentence belongs to. Up to
    `num_workers` batches are encoded at once while the main thread reads and splits the
    next; the engine releases the GIL, so on two cores this is ~25% faster than one at a time.
    """
    with ThreadPoolExecutor(num_workers) as pool:
        in_flight: deque = deque()
        for sentences, doc_numbers in _sentence_batches(documents):
            in_flight.append((pool.submit(_encode, engine, sentences, dtype), doc_numbers))
            if len(in_flight) > num_workers:
                future, numbers = in_flight.popleft()
                yield *future.result(), numbers
        while in_flight:
            future, numbers = in_flight.popleft()
            yield *future.result(), numbers


def _sentence_batches(documents: Iterator[list[str]]) -> Iterator[tuple[list[str], np.ndarray]]:
    """Regroup documents into batches of `_ENCODE_BATCH` sentences (the last may be short),
    each with the document number of every sentence."""
    sentences: list[str] = []
    numbers: list[np.ndarray] = []
    for number, document in enumerate(documents):
        sentences += document[:1] + [" " + sentence for sentence in document[1:]]
        numbers.append(np.full(len(document), number, np.int64))
        while len(sentences) >= _ENCODE_BATCH:
            all_numbers = np.concatenate(numbers)
            yield sentences[:_ENCODE_BATCH], all_numbers[:_ENCODE_BATCH]
            sentences, numbers = sentences[_ENCODE_BATCH:], [all_numbers[_ENCODE_BATCH:]]
    if sentences:
        yield sentences, np.concatenate(numbers)


def _encode(engine: tokenizers.Tokenizer, sentences: list[str], dtype) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of `sentences` (no special tokens), end to end, and each sentence's length."""
    # encode_batch_fast skips the character offsets we do not need (2x faster).
    ids = [encoding.ids for encoding in engine.encode_batch_fast(sentences, add_special_tokens=False)]
    lengths = np.fromiter(map(len, ids), np.int64, len(ids))
    tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype, int(lengths.sum()))
    return tokens, lengths


class TokenizedCorpus:
    """A tokenized corpus in a cache folder written by `build_corpus`, read through memory maps.

    Tokens are numbered 0 .. num_tokens-1 across the shards, sentences and documents
    likewise. Attributes:
        sentence_offsets: (num_sentences + 1,) int64: sentence s is tokens
            sentence_offsets[s] .. sentence_offsets[s+1]-1 (memory-mapped).
        document_offsets: (num_documents + 1,) int64: document d is sentences
            document_offsets[d] .. document_offsets[d+1]-1.
        skipped_lines: lines skipped as invalid UTF-8 (or JSONL lines as not JSON objects) while building.
        control_characters: control characters replaced by spaces while building (see text.py).
        formats: the format each file was read in ("lines" or "file", a one-file corpus also "paragraphs" or
            "line per document"; for JSONL and Parquet the one asked for).
        reused: True when `build_corpus` found the cache already built.

    Raises (on opening):
        UserError: the folder holds no complete, consistent cache.
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        path = self.folder / MANIFEST
        if not path.is_file():
            raise UserError(f"{path}: no corpus manifest (build the corpus with build_corpus)")
        try:
            self.manifest = loads_json(path.read_text(encoding="utf-8"))
            self._shards = [np.load(self.folder / s["file"], mmap_mode="r") for s in self.manifest["shards"]]
            self.sentence_offsets = np.load(self.folder / "sentence_offsets.npy", mmap_mode="r")
            self.document_offsets = np.load(self.folder / "document_offsets.npy")
            self.num_tokens = int(self.manifest["num_tokens"])
            self.num_sentences = int(self.manifest["num_sentences"])
            self.num_documents = int(self.manifest["num_documents"])
            sizes = [len(shard) for shard in self._shards]
            consistent = (
                self.manifest["version"] == _CACHE_VERSION
                and sizes == [s["tokens"] for s in self.manifest["shards"]]
                and sum(sizes) == self.num_tokens
                and self.sentence_offsets.shape == (self.num_sentences + 1,)
                and self.sentence_offsets[-1] == self.num_tokens
                and self.document_offsets.shape == (self.num_documents + 1,)
                and self.document_offsets[-1] == self.num_sentences
            )
        except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
            raise UserError(f"{self.folder}: damaged corpus cache ({error}); delete the folder to rebuild") from None
        if not consistent:
            raise UserError(f"{self.folder}: inconsistent corpus cache; delete the folder to rebuild")
        self._shard_starts = [0, *itertools.accumulate(sizes)]
        self.skipped_lines = int(self.manifest.get("skipped_lines", 0))
        self.control_characters = int(self.manifest.get("control_characters", 0))
        self.formats = dict(self.manifest.get("formats", {}))
        self.reused = False

    def __reduce__(self):
        # Re-open the memory maps in the receiving process (DataLoader workers) rather than
        # pickling the token arrays themselves.
        return (TokenizedCorpus, (self.folder,))

    def __repr__(self) -> str:
        return (
            f"TokenizedCorpus({str(self.folder)!r}: {self.num_documents} documents, "
            f"{self.num_sentences} sentences, {self.num_tokens} tokens)"
        )

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Token ids start .. stop-1 of the whole corpus, (stop - start,); a view when in one shard."""
        shard = bisect.bisect_right(self._shard_starts, start) - 1
        base = self._shard_starts[shard]
        if stop <= self._shard_starts[shard + 1]:
            return self._shards[shard][start - base : stop - base]
        pieces = []
        while start < stop:
            end = min(stop, self._shard_starts[shard + 1])
            pieces.append(self._shards[shard][start - self._shard_starts[shard] : end - self._shard_starts[shard]])
            start, shard = end, shard + 1
        return np.concatenate(pieces)

    def document(self, index: int) -> list[np.ndarray]:
        """The sentences of document `index`, each a 1-D array of token ids."""
        first, last = self.document_offsets[index], self.document_offsets[index + 1]
        bounds = self.sentence_offsets[first : last + 1].tolist()
        return [self.tokens(a, b) for a, b in zip(bounds, bounds[1:])]

    def split(self, eval_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Hold out a random share of whole documents for evaluation.

        Args:
            eval_fraction: the share of documents held out, in [0, 1). When positive and
                the corpus has at least 2 documents, at least 1 is held out, and never all.
            seed: the same seed gives the same split.

        Returns:
            (train_doc_ids, eval_doc_ids): sorted int64 arrays of document indices.
        """
        if not 0 <= eval_fraction < 1:
            raise UserError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
        count = round(self.num_documents * eval_fraction)
        if eval_fraction > 0 and self.num_documents >= 2:
            count = min(max(count, 1), self.num_documents - 1)
        order = np.random.default_rng(seed).permutation(self.num_documents)
        return np.sort(order[count:]), np.sort(order[:count])


# How a tokenizer's pieces show where words start: WordPiece marks the pieces that continue a word
# ("##"); a byte-level BPE (GPT-2's, RoBERTa's) begins a word's first piece with the space's symbol
# "Ġ", SentencePiece (T5, XLNet, ALBERT) and bertology's unigram vocabularies with "▁".
WORD_START_MARKS = {"bpe": "\u0120", "sentencepiece": "\u2581", "unigram": "\u2581"}
END_OF_WORD = "</w>"  # the first GPT's BPE marks the last piece of a word instead


def continuation_table(tokenizer) -> np.ndarray:
    """(vocab_size,) bool: True for the tokens that continue a word, for whole-word masking:
    WordPiece's "##" pieces; for BPE and SentencePiece vocabularies, every token that does not
    begin with the word-start mark (`WORD_START_MARKS`), so that a whitespace-separated word
    ("running." as "Ġrunning" ".") is masked whole. Special tokens are never masked, whatever
    this says of them; the first token after one starts a word (data/pretraining.py).

    Raises:
        UserError: a vocabulary that marks where words end (the first GPT's "</w>"): which token
            continues a word depends on the one before it, not on the token alone.
    """
    tokens = tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))
    if tokenizer.kind == "wordpiece":
        return np.fromiter((token.startswith("##") for token in tokens), bool, len(tokens))
    if any(token.endswith(END_OF_WORD) for token in tokens):
        raise UserError(f"whole-word masking needs a vocabulary that marks where words start; this {tokenizer.kind} "
                        f"vocabulary marks where they end ({END_OF_WORD}, the first GPT's)")
    mark = WORD_START_MARKS[tokenizer.kind]
    return np.fromiter((not token.startswith(mark) for token in tokens), bool, len(tokens))
