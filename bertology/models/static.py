"""Static word vectors: one vector per word type, whatever its context, and GloVe's model.

The family before contextual encoders: word2vec (Mikolov et al. 2013, "Efficient Estimation of
Word Representations in Vector Space"; "Distributed Representations of Words and Phrases"),
fastText's subword vectors (Bojanowski et al. 2017, "Enriching Word Vectors with Subword
Information") and GloVe (Pennington et al. 2014, "GloVe: Global Vectors for Word
Representation"). word2vec and fastText are trained by gensim (recipes/static_vectors.py); GloVe's
weighted least-squares model and its AdaGrad updates are here (`GloVe`), counting its
co-occurrences is data/cooccurrence.py's job.

`StaticVectors` holds the vectors of a vocabulary (plus, for fastText, the character n-gram
vectors that give an unseen word a vector) and gives them as features: a batch of word
sequences -> (B, T, D). A vectors directory is a model directory:

    config.json            model_type "static", the method, the tokenizer settings, the training settings
    vectors.bin            word2vec's binary format (gensim `KeyedVectors.load_word2vec_format(binary=True)`)
    vocab.txt              "word count" per line, in the vectors' order (gensim's `fvocab` format)
    subwords.safetensors   fastText only: the word and n-gram matrices (see below)

fastText's model is not kept in gensim's native format, which is a pickle (loading a pickle runs
whatever code the file names): the two matrices gensim's `FastTextKeyedVectors` is made of are
stored in safetensors and the n-gram settings in config.json, and `to_gensim()` rebuilds the
gensim object from them, so bertology never unpickles anything. `save_gensim()` writes gensim's
native file for gensim users who want one; load such a file only if you wrote it yourself.

The word tokenizer (`tokenize_words`) is part of the model: every method trains on its output and
evaluation and features look words up through the same normalisation (`normalize`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from gensim.models.fasttext import FastTextKeyedVectors, ft_ngram_hashes
from gensim.models.keyedvectors import KeyedVectors
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from ..errors import UserError
from ..files import atomic_path, write_text_atomic
from ..text import sniff_encoding
from .base import ConfigFile, FamilySpec

MODEL_TYPE = "static"
CONFIG_NAME = "config.json"
VECTORS_NAME = "vectors.bin"
VOCAB_NAME = "vocab.txt"
SUBWORDS_NAME = "subwords.safetensors"

# Each method's defaults, where they differ (the papers' and the reference tools' values).
METHODS: dict[str, dict[str, Any]] = {
    "word2vec": {"epochs": 5, "lr": 0.025},  # word2vec.c and gensim
    "fasttext": {"epochs": 5, "lr": 0.025},  # gensim's FastText (fastText's own CLI: 0.05)
    "glove": {"epochs": 25, "lr": 0.05},  # glove.c: 25 iterations, eta 0.05 (the paper's 300-d runs use 50-100)
}
IMPORTED = "imported"  # the method recorded for vectors read from someone else's file


# A word is a maximal run of letters and digits (any script), keeping apostrophes inside it
# ("don't", "o'clock"); punctuation, hyphens, underscores (Project Gutenberg's _italics_)
# and WikiText's "@-@" markers separate words and are dropped.
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def tokenize_words(text: str, lowercase: bool) -> list[str]:
    """Split text into words, the one tokenizer of every static method and of their evaluation.

    >>> tokenize_words("The well-known _Mr._ O’Brien didn't pay £3.50.", lowercase=True)
    ['the', 'well', 'known', 'mr', "o'brien", "didn't", 'pay', '3', '50']

    Typographic apostrophes become ASCII ones, so "don’t" and "don't" are one word.
    """
    return _WORD.findall(normalize_word(text, lowercase))


def normalize_word(text: str, lowercase: bool) -> str:
    """Text as the tokenizer spells it: typographic apostrophes made ASCII, lower-cased if asked."""
    text = text.replace("\u2019", "'")
    return text.lower() if lowercase else text


@dataclass
class StaticConfig(ConfigFile):
    """What a vectors directory's config.json holds (besides `model_type`)."""

    MODEL_TYPE: ClassVar[str] = MODEL_TYPE
    WHAT: ClassVar[str] = "static word vectors"

    method: str  # word2vec | fasttext | glove | imported
    vector_size: int
    lowercase: bool  # words were lower-cased before training: look words up lower-cased too
    min_n: int = 0  # fastText's character n-gram lengths and hash buckets; bucket 0 = no subwords
    max_n: int = 0
    bucket: int = 0
    settings: dict[str, Any] = field(default_factory=dict)  # how the vectors were made (training flags, source file)
    vocab_size: int | None = None  # the words in vectors.bin (written by save_pretrained)
    has_counts: bool = False  # vocab.txt holds the training counts, not zeros

    @property
    def extra(self) -> dict[str, Any]:
        """Static vectors keep no unknown keys (an unknown key is an error)."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """The config.json contents."""
        return {"model_type": MODEL_TYPE, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str | os.PathLike) -> StaticConfig:
        """Read config.json's contents; a missing or unknown key is a one-line error naming `source`."""
        if not isinstance(data, dict):
            raise UserError(f"{source}: expected a JSON object")
        if data.get("model_type") != MODEL_TYPE:
            raise UserError(f"{source}: model_type is {data.get('model_type')!r}, not {MODEL_TYPE!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k != "model_type"}
        unknown = sorted(set(values) - names)
        if unknown:
            raise UserError(f"{source}: unknown key(s) {', '.join(unknown)} for a static-vectors config")
        try:
            config = cls(**values)
        except TypeError as err:
            raise UserError(f"{source}: {err}") from None
        if config.method not in (*METHODS, IMPORTED):
            raise UserError(f"{source}: unknown method {config.method!r}")
        for name in ("vector_size", "min_n", "max_n", "bucket"):
            value = getattr(config, name)
            if type(value) is not int or value < (1 if name == "vector_size" else 0):
                raise UserError(f"{source}: {name} must be a {'positive' if name == 'vector_size' else 'non-negative'} "
                                f"integer, got {value!r}")
        if type(config.lowercase) is not bool or not isinstance(config.settings, dict):
            raise UserError(f"{source}: lowercase must be true or false and settings an object")
        return config


class StaticVectors(nn.Module):
    """A vocabulary's vectors, nearest neighbours, and features of word sequences.

    Args:
        config: the method and tokenizer settings.
        words: the vocabulary, most frequent first when counts are known.
        vectors: (V, D) float32, row i is words[i]'s vector (for fastText: the word's own
            vector averaged with its n-grams', as gensim's `wv.vectors`).
        counts: (V,) int64 corpus frequencies, or None when unknown (imported vectors).
        vocab_vectors, ngram_vectors: fastText only, (V, D) and (bucket, D): gensim's
            `vectors_vocab` and `vectors_ngrams`, which give unseen words their vectors.
    """

    def __init__(self, config: StaticConfig, words: list[str], vectors: np.ndarray | torch.Tensor,
                 counts: np.ndarray | None = None, vocab_vectors: torch.Tensor | None = None,
                 ngram_vectors: torch.Tensor | None = None):
        super().__init__()
        self.config = dataclasses.replace(config, vocab_size=len(words), has_counts=counts is not None)
        self.words = list(words)
        self.index = {word: i for i, word in enumerate(self.words)}
        self.register_buffer("vectors", torch.as_tensor(vectors, dtype=torch.float32))  # (V, D)
        self.counts = None if counts is None else np.asarray(counts, dtype=np.int64)
        if config.bucket and (vocab_vectors is None or ngram_vectors is None):
            raise ValueError("fastText vectors need vocab_vectors and ngram_vectors")
        self.vocab_vectors = vocab_vectors  # (V, D) fastText only
        self.ngram_vectors = ngram_vectors  # (bucket, D) fastText only
        self._unit = None  # (V, D) unit-length rows, made on first use by `nearest`

    @property
    def hidden_size(self) -> int:
        """D, the width of a word's vector (transformers' name for a model's width)."""
        return self.config.vector_size

    def __len__(self) -> int:
        return len(self.words)

    def normalize(self, word: str) -> str:
        """A word as the vocabulary spells it (lower-cased when the vectors were trained so)."""
        return normalize_word(word, self.config.lowercase)

    def has_subwords(self) -> bool:
        """Whether unseen words get vectors from character n-grams (fastText)."""
        return self.config.bucket > 0

    def text_features(self, texts: list[list[str]]) -> list[torch.Tensor]:
        """Each text's (words, D) float32 vectors, zeros for a word without one (a text with no
        word: (0, D)); the word-feature heads' input (inference/static_heads.py)."""
        cache: dict[str, torch.Tensor] = {}
        zeros = torch.zeros(self.hidden_size)
        rows = []
        for words in texts:
            for word in words:
                if word not in cache:
                    vector = self.vector(word)
                    cache[word] = vector if vector is not None else zeros
            rows.append(torch.stack([cache[w] for w in words]) if words else torch.zeros(0, self.hidden_size))
        return rows

    def vector(self, word: str) -> torch.Tensor | None:
        """(D,) the vector of `word` (normalized first), or None when it has none.

        An unseen word has one only with fastText's subwords: the mean of its n-gram vectors
        (gensim's `FastTextKeyedVectors.get_vector`), None if it has no n-gram at all.
        """
        word = self.normalize(word)
        if word in self.index:
            return self.vectors[self.index[word]]
        if not self.has_subwords():
            return None
        hashes = ft_ngram_hashes(word, self.config.min_n, self.config.max_n, self.config.bucket)
        if not hashes:
            return None
        return self.ngram_vectors[torch.as_tensor(hashes, dtype=torch.long)].mean(0)

    def forward(self, sentences: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Features of a batch of word sequences, as contextual encoders give them.

        Args:
            sentences: B sequences of words (already split into words, e.g. by
                `tokenize_words` or a task's own tokens).
        Returns:
            features: (B, T, D) float32, T the longest sequence; zeros for words without a
                vector and for padding.
            mask: (B, T) bool, True at real words (with or without a vector).
        """
        length = max((len(s) for s in sentences), default=0)
        features = torch.zeros(len(sentences), length, self.hidden_size)  # (B, T, D)
        mask = torch.zeros(len(sentences), length, dtype=torch.bool)  # (B, T)
        for b, sentence in enumerate(sentences):
            mask[b, :len(sentence)] = True
            for t, word in enumerate(sentence):
                vector = self.vector(word)
                if vector is not None:
                    features[b, t] = vector
        return features, mask

    def nearest(self, query: str | torch.Tensor, k: int = 10, exclude: tuple[str, ...] = ()) -> list[tuple[str, float]]:
        """The k vocabulary words most cosine-similar to a word or a (D,) vector, best first.

        A word query excludes itself; `exclude` names more words to skip. Returns [] for a
        word without a vector.
        """
        if isinstance(query, str):
            exclude = (*exclude, query)
            query = self.vector(query)
            if query is None:
                return []
        if self._unit is None:
            self._unit = self.vectors / self.vectors.norm(dim=1, keepdim=True).clamp_min(1e-12)
        scores = self._unit @ (query / query.norm().clamp_min(1e-12))  # (V,)
        skip = [self.index[w] for w in map(self.normalize, exclude) if w in self.index]
        scores[skip] = -math.inf
        top = torch.topk(scores, min(k, len(self.words) - len(set(skip))))
        return [(self.words[i], float(s)) for s, i in zip(top.values.tolist(), top.indices.tolist())]

    # --- files ---

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write the model directory (see the module docstring); config.json is written last,
        so a directory without one is not a finished model."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.save_word2vec_format(directory / VECTORS_NAME, binary=True)
        counts = self.counts if self.counts is not None else np.zeros(len(self.words), dtype=np.int64)
        write_text_atomic(directory / VOCAB_NAME, "".join(f"{w} {c}\n" for w, c in zip(self.words, counts.tolist())))
        if self.has_subwords():
            with atomic_path(directory / SUBWORDS_NAME) as tmp:
                save_file({"vocab_vectors": self.vocab_vectors.contiguous(),
                           "ngram_vectors": self.ngram_vectors.contiguous()}, str(tmp))
        self.config.save(directory)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, config: StaticConfig | None = None) -> StaticVectors:
        """Open a vectors directory written by `save_pretrained` (no pickle is read); `config`: its
        config.json, already read."""
        directory = Path(directory)
        config = config if config is not None else StaticConfig.load(directory)
        vocab_size, has_counts = config.vocab_size, config.has_counts
        words, vectors = read_word2vec_format(directory / VECTORS_NAME, binary=True)
        if vectors.shape[1] != config.vector_size or len(words) != vocab_size:
            raise UserError(f"{directory / VECTORS_NAME}: holds {len(words)} x {vectors.shape[1]} vectors, "
                            f"config.json says {vocab_size} x {config.vector_size}")
        counts = read_counts(directory / VOCAB_NAME, words) if has_counts else None
        vocab_vectors = ngram_vectors = None
        if config.bucket:
            path = directory / SUBWORDS_NAME
            if not path.is_file():
                raise UserError(f"{path}: no such file (config.json says the vectors have subwords)")
            vocab_vectors, ngram_vectors = read_subwords(path, words, (len(words), config.vector_size),
                                                         (config.bucket, config.vector_size))
        return cls(config, words, vectors, counts, vocab_vectors, ngram_vectors)

    def save_word2vec_format(self, path: str | os.PathLike, binary: bool) -> None:
        """Write the vocabulary's vectors in word2vec's text or binary format (atomically).

        Both start with a "V D" header line. Text: one "word v1 ... vD" line per word, each
        number written with 9 significant digits, which a float32 needs to read back exactly.
        Binary: the word, a space, then D little-endian float32 (gensim's layout).
        """
        vectors = self.vectors.numpy()
        with atomic_path(path) as tmp, open(tmp, "wb") as file:
            file.write(f"{len(self.words)} {self.hidden_size}\n".encode())
            if binary:
                little_endian = vectors.astype("<f4")
                for word, row in zip(self.words, little_endian):
                    file.write(word.encode("utf-8") + b" " + row.tobytes())
            else:
                for word, row in zip(self.words, vectors.tolist()):
                    file.write((word + " " + " ".join([f"{value:.9g}" for value in row]) + "\n").encode("utf-8"))

    # --- gensim ---

    def to_gensim(self) -> KeyedVectors:
        """gensim's `KeyedVectors` (or `FastTextKeyedVectors`, rebuilt from the two stored
        matrices, for vectors with subwords) holding the same values."""
        if self.has_subwords():
            kv = FastTextKeyedVectors(self.hidden_size, self.config.min_n, self.config.max_n, self.config.bucket)
            kv.index_to_key = list(self.words)
            kv.key_to_index = dict(self.index)
            kv.vectors_vocab = self.vocab_vectors.numpy().copy()
            kv.vectors_ngrams = self.ngram_vectors.numpy().copy()
            kv.recalc_char_ngram_buckets()
            kv.vectors = self.vectors.numpy().copy()
        else:
            kv = KeyedVectors(self.hidden_size)
            kv.add_vectors(self.words, self.vectors.numpy())
        if self.counts is not None:
            kv.expandos["count"] = self.counts.copy()
        return kv

    @classmethod
    def from_gensim(cls, kv: KeyedVectors, config: StaticConfig, counts: np.ndarray | None = None) -> StaticVectors:
        """Wrap gensim's (FastText)KeyedVectors, e.g. right after training."""
        if isinstance(kv, FastTextKeyedVectors) and kv.bucket:
            config = dataclasses.replace(config, min_n=kv.min_n, max_n=kv.max_n, bucket=kv.bucket)
            return cls(config, kv.index_to_key, kv.vectors.copy(), counts,
                       torch.from_numpy(kv.vectors_vocab.copy()), torch.from_numpy(kv.vectors_ngrams.copy()))
        return cls(config, kv.index_to_key, kv.vectors.copy(), counts)

    def save_gensim(self, path: str | os.PathLike) -> None:
        """Write gensim's native file (`KeyedVectors.load(path)` opens it: a pickle, so only load
        it if you wrote it yourself). bertology itself never reads this format."""
        with atomic_path(path) as tmp:
            self.to_gensim().save(str(tmp), separately=[], sep_limit=0, pickle_protocol=4)


def read_subwords(path: Path, words: list[str], vocab_shape: tuple[int, int],
                  ngram_shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """fastText's two matrices from subwords.safetensors: vocab_vectors (V, D), one row per word of
    `words`, and ngram_vectors (bucket, D); damaged, misnamed, misshapen or non-finite ones are a
    one-line error naming the file (and the word or bucket row)."""
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise UserError(f"{path}: cannot read safetensors file, it may be truncated or corrupt ({err})") from None
    missing = sorted({"vocab_vectors", "ngram_vectors"} - set(tensors))
    if missing:
        held = ", ".join(sorted(tensors)) or "none"
        raise UserError(f"{path}: no tensor named {', '.join(missing)} (it holds {held})")
    vocab_vectors, ngram_vectors = tensors["vocab_vectors"], tensors["ngram_vectors"]
    if tuple(vocab_vectors.shape) != vocab_shape or tuple(ngram_vectors.shape) != ngram_shape:
        raise UserError(f"{path}: matrix shapes {tuple(vocab_vectors.shape)}, {tuple(ngram_vectors.shape)} do not "
                        f"match config.json ({vocab_shape[0]} words, {ngram_shape[0]} buckets, {vocab_shape[1]} dims)")
    for name, matrix in (("vocab_vectors", vocab_vectors), ("ngram_vectors", ngram_vectors)):
        if not matrix.is_floating_point():
            raise UserError(f"{path}: {name} is stored as {str(matrix.dtype).removeprefix('torch.')}, not as vectors")
        finite = torch.isfinite(matrix).all(dim=1)
        if not bool(finite.all()):
            row = int((~finite).nonzero()[0])
            what = f"the word {words[row]!r} (row {row + 1})" if name == "vocab_vectors" else f"bucket {row}"
            raise UserError(f"{path}: {name}: the vector of {what} holds inf or nan")
    return vocab_vectors.float(), ngram_vectors.float()


# --- word2vec / GloVe files ---


def read_word2vec_format(path: str | os.PathLike, binary: bool | None = None) -> tuple[list[str], np.ndarray]:
    """Read word vectors in word2vec's text or binary format, or GloVe's text format.

    Text files may lack the "V D" header line (GloVe's releases and many users' files do):
    a first line of exactly two integers is a header, anything else is the first word's
    line. Blank lines are skipped. `binary=None` decides from the bytes after the first line:
    text when they are UTF-8 without NUL bytes (float32 data almost never is).

    Returns:
        (words, vectors (V, D) float32).
    Raises:
        UserError naming the file and line (binary files: the word number and byte offset):
        an empty file, a header count that does not match, ragged rows, non-numeric fields,
        words that are not UTF-8, duplicate words.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    data = path.read_bytes()
    try:  # a byte order mark only: binary vectors hold NULs that read like UTF-16's
        encoding, mark = sniff_encoding(data[:4])
    except ValueError:
        encoding, mark = "utf-8", 0
    if encoding != "utf-8":  # a text file saved as UTF-16 or UTF-32 with its byte order mark
        try:
            data = data[mark:].decode(encoding).encode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{path}: not {encoding.upper()} text, though it starts with that byte order "
                            "mark") from None
    else:
        data = data[mark:]  # a UTF-8 byte order mark is no part of the first word
    first_end = data.find(b"\n") + 1 or len(data)
    if not data.strip():
        raise UserError(f"{path}: empty file (no vectors)")
    if binary is None:  # only word2vec's format is binary, and it always starts with its "V D" header
        binary = _header(path, data[:first_end]) is not None and _looks_binary(data[first_end:first_end + 4096])
    if binary:
        return _read_binary(path, data, first_end)
    return _read_text(path, data)


def _looks_binary(sample: bytes) -> bool:
    """Whether the bytes after a "V D" header are float32 vectors rather than text: those almost always
    hold a NUL byte, and many bytes no text has (a text file with a word in Latin-1 has a few)."""
    if b"\0" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start >= len(sample) - 3:  # a multi-byte character cut by the sample's end is still text
            return False
        odd = sum(1 for byte in sample if byte >= 0x80 or (byte < 0x20 and byte not in b"\t\n\r"))
        return odd > len(sample) // 10
    return False


def _header(path: Path, line: bytes) -> tuple[int, int] | None:
    """(V, D) from a "V D" header line, None when the line is not a header."""
    fields = line.split()
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None
    if any(len(f) > 18 for f in fields):  # beyond int64 (and beyond Python's 4,300 digits a ValueError)
        raise UserError(f"{path}:1: the header's numbers are too large for a vocabulary and a dimension")
    count, size = int(fields[0]), int(fields[1])
    if size == 0:
        raise UserError(f"{path}:1: the header says the vectors have 0 dimensions")
    return count, size


def _read_text(path: Path, data: bytes) -> tuple[list[str], np.ndarray]:
    lines = data.split(b"\n")
    header = _header(path, lines[0])
    size = header[1] if header else None
    words: list[str] = []
    rows: list[np.ndarray] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(lines[1:] if header else lines, start=2 if header else 1):
        try:
            text = raw.decode("utf-8").rstrip()
        except UnicodeDecodeError:
            raise UserError(f"{path}:{number}: not UTF-8 text") from None
        if not text:
            continue
        fields = text.split(" ")
        if size is None:
            size = len(fields) - 1  # a headerless file: the first row decides the width
            if size == 0:
                raise UserError(f"{path}:{number}: a word without numbers (expected 'word v1 v2 ...')")
        if len(fields) != size + 1:
            raise UserError(f"{path}:{number}: expected a word and {size} numbers, found {len(fields)} fields")
        try:
            rows.append(np.array(fields[1:], dtype=np.float32))
        except ValueError:
            bad = next(f for f in fields[1:] if not _is_number(f))
            raise UserError(f"{path}:{number}: {bad!r} is not a number") from None
        word = fields[0]
        if word in seen:
            raise UserError(f"{path}:{number}: the word {word!r} appears twice (first on line {seen[word]})")
        seen[word] = number
        words.append(word)
    if header and len(words) != header[0]:
        raise UserError(f"{path}:1: the header says {header[0]} words but the file holds {len(words)}")
    if not words:
        raise UserError(f"{path}: no vectors after the header")
    vectors = np.stack(rows)
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        word = words[int(np.argmin(finite))]
        raise UserError(f"{path}:{seen[word]}: the vector of {word!r} holds inf or nan")
    return words, vectors


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_binary(path: Path, data: bytes, start: int) -> tuple[list[str], np.ndarray]:
    header = _header(path, data[:start])
    if header is None:
        raise UserError(f"{path}:1: a binary vectors file must start with a 'V D' header line")
    count, size = header
    # Each word takes at least a byte, a space and its D float32: a header claiming more than the
    # file can hold is refused before its (count, size) matrix is allocated.
    if count * (size * 4 + 2) > len(data) - start:
        raise UserError(f"{path}:1: the header says {count:,} words of {size:,} dimensions, more than the file's "
                        f"{len(data):,} bytes can hold")
    vectors = np.empty((count, size), dtype=np.float32)
    words: list[str] = []
    seen: set[str] = set()
    position, row_bytes = start, 4 * size
    for number in range(count):
        while position < len(data) and data[position] in b"\n\r":  # word2vec.c ends each vector with a newline
            position += 1
        space = data.find(b" ", position)
        if space < 0 or space + 1 + row_bytes > len(data):
            raise UserError(f"{path}: the header says {count} words but the file ends after {number}")
        try:
            word = data[position:space].decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{path}: word {number + 1} (byte {position}) is not UTF-8; "
                            "is this a text file? (say binary=False)") from None
        if not word or word in seen:
            raise UserError(f"{path}: word {number + 1} (byte {position}) is {'empty' if not word else f'{word!r} again'}")
        seen.add(word)
        words.append(word)
        vectors[number] = np.frombuffer(data, dtype="<f4", count=size, offset=space + 1)
        position = space + 1 + row_bytes
    if data[position:].strip():
        raise UserError(f"{path}: the header says {count} words but more data follows (byte {position})")
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        number = int(np.argmin(finite))
        raise UserError(f"{path}: the vector of word {number + 1} ({words[number]!r}) holds inf or nan")
    return words, vectors


def read_counts(path: Path, words: list[str]) -> np.ndarray:
    """(V,) int64 counts from a vocab.txt ("word count" per line) that must list `words` in order."""
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    counts = np.zeros(len(words), dtype=np.int64)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text (byte {err.start})") from None
    if len(lines) != len(words):
        raise UserError(f"{path}: {len(lines)} lines for {len(words)} vectors")
    for number, (line, word) in enumerate(zip(lines, words), start=1):
        fields = line.split(" ")
        if len(fields) != 2 or fields[0] != word or not fields[1].isdigit():
            raise UserError(f"{path}:{number}: expected '{word} COUNT', found {line!r}")
        counts[number - 1] = int(fields[1])
    return counts


# --- GloVe ---


GLOVE_GRAD_CLIP = 100.0  # glove.c's grad_clip_value: each vector component's gradient is clipped to +-100


def earlier_sums(index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """(N,) for each entry k, the sum of values[j] over the entries j < k with index[j] == index[k]
    (a running sum per index, in batch order; vectorised: a stable sort by index and one cumsum)."""
    order = torch.argsort(index, stable=True)
    ordered, ordered_values = index[order], values[order]
    running = ordered_values.cumsum(0)
    first = torch.ones_like(ordered, dtype=torch.bool)  # the first entry of each index
    first[1:] = ordered[1:] != ordered[:-1]
    start = torch.cummax(torch.where(first, torch.arange(len(index)), 0), 0).values  # its index's first entry
    earlier = torch.empty_like(values)
    earlier[order] = running - ordered_values - (running[start] - ordered_values[start])
    return earlier


def glove_weight(x: torch.Tensor, x_max: float, alpha: float) -> torch.Tensor:
    """GloVe's weighting f(x) = min(1, (x / x_max)^alpha) of a co-occurrence count x > 0."""
    return (x / x_max).pow(alpha).clamp(max=1.0)


def glove_loss_and_gradients(words: torch.Tensor, contexts: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                             counts: torch.Tensor, x_max: float, alpha: float
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GloVe's loss over a batch of co-occurrence entries and its gradient for each entry.

    J = 1/2 * sum_k f(X_k) (w_{i_k} . w~_{j_k} + b_{i_k} + b~_{j_k} - log X_k)^2, the paper's
    weighted least squares with glove.c's factor 1/2 (so the learning rate means what glove.c's
    eta does).

    Args:
        words, contexts: (V, D + 1): row i holds a word's (context word's) vector and, in the
            last column, its bias (glove.c's layout: one gather fetches both).
        rows, cols, counts: (N,) the entries (i, j, X_ij) of the batch, X_ij > 0.
    Returns:
        loss: the scalar J of the batch;
        words_grad, contexts_grad: (N, D + 1), the gradient of J with respect to
            words[rows[k]] and contexts[cols[k]] in row k (an index repeated in the batch gets
            several rows; the caller adds them up).
    """
    wi, wj = words.index_select(0, rows), contexts.index_select(0, cols)  # (N, D + 1)
    diff = (wi[:, :-1] * wj[:, :-1]).sum(-1) + wi[:, -1] + wj[:, -1] - counts.log()  # (N,)
    weighted = glove_weight(counts, x_max, alpha) * diff  # (N,) f(X) * diff
    loss = 0.5 * (weighted * diff).sum()
    words_grad, contexts_grad = weighted[:, None] * wj, weighted[:, None] * wi
    words_grad[:, -1] = contexts_grad[:, -1] = weighted  # d diff / d bias = 1
    return loss, words_grad, contexts_grad


class GloVe:
    """GloVe's parameters and AdaGrad over shuffled mini-batches of co-occurrence entries.

    As glove.c: vectors and biases start uniform in [-0.5/D, 0.5/D]; AdaGrad's step on a vector
    component is lr * g / sqrt(G), where G starts at 1 and sums the squares of the steps'
    numerators lr * g (glove.c scales the gradient by eta before accumulating it, so G grows
    1/lr^2 times slower than the textbook sum of g^2), g clipped to [-100, 100] first; a bias
    steps by g / sqrt(G) with G summing g^2, no lr (glove.c's bias update has no eta: the biases
    move 1/lr times faster than the vectors). glove.c updates one entry at a time (Hogwild
    threads); here a mini-batch's gradients all come from the parameters before the batch and
    their steps are added (`index_add_`: one vectorised update per batch, no Python loop per
    entry), each vector step divided by G from before the batch. A bias step instead divides
    by G as glove.c has it at that entry's turn, G before the batch plus the squares of the same
    row's earlier steps in the batch (`earlier_sums`): a frequent word takes hundreds of
    entries in one batch, and at the biases' rate of 1 their steps added at full size diverge.
    The final vectors are W + W~, as the paper's.

    Args:
        vocab_size, vector_size: V and D.
        lr: AdaGrad's initial learning rate (glove.c's eta).
        x_max, alpha: the weighting function's cut-off and exponent (the paper: 100, 0.75).
        seed: for the initial values.
    """

    def __init__(self, vocab_size: int, vector_size: int, lr: float = 0.05, x_max: float = 100.0,
                 alpha: float = 0.75, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.lr, self.x_max, self.alpha = lr, x_max, alpha
        # rows 0..V-1: W and b; rows V..2V-1: W~ and b~ (the bias in the last column)
        self.table = (torch.rand(2 * vocab_size, vector_size + 1, generator=generator) - 0.5) / vector_size
        self.grad_squares = torch.ones_like(self.table)
        self.words, self.contexts = self.table[:vocab_size], self.table[vocab_size:]  # views

    def step(self, rows: torch.Tensor, cols: torch.Tensor, counts: torch.Tensor) -> float:
        """One AdaGrad update on a batch of entries (rows, cols, counts: (N,)); returns the batch's loss J."""
        rows, cols = rows.long(), cols.long()
        loss, words_grad, contexts_grad = glove_loss_and_gradients(self.words, self.contexts, rows, cols, counts,
                                                                   self.x_max, self.alpha)
        vocab_size = len(self.words)
        for index, gradient in ((rows, words_grad), (cols + vocab_size, contexts_grad)):
            scaled = gradient.clone()  # the bias column (last) as it is: glove.c's bias step has no eta
            scaled[:, :-1] = gradient[:, :-1].clamp(-GLOVE_GRAD_CLIP, GLOVE_GRAD_CLIP) * self.lr  # temp1 = clip(fdiff * w) * eta
            sums = self.grad_squares.index_select(0, index)  # (N, D + 1) G before the batch
            bias_squares = scaled[:, -1].double().square()
            sums[:, -1] += earlier_sums(index, bias_squares).float()  # a bias's G at its entry's turn
            self.table.index_add_(0, index, scaled * sums.rsqrt(), alpha=-1.0)
            self.grad_squares.index_add_(0, index, scaled.square())
        return float(loss)

    def train_batches(self, rows: torch.Tensor, cols: torch.Tensor, counts: torch.Tensor, batches: list[int],
                      batch_size: int, workers: int = 1, deadline: float = math.inf,
                      on_batch: Callable[[], None] | None = None) -> tuple[float, int, int]:
        """AdaGrad steps on the given mini-batches, shared among `workers` threads.

        Batch b is entries b*batch_size .. (b+1)*batch_size - 1 of rows, cols, counts (N,). The
        threads update the parameters without locks (Hogwild, as glove.c's threads do: a rare
        lost update costs less than locking). Each runs PyTorch's kernels on one core: PyTorch's
        multi-threaded index_add_ is many times slower than one thread when indices repeat, as
        they do in every batch. No batch starts after `deadline` (a time.perf_counter() value).

        Returns:
            (the summed loss J of the batches, the entries trained, the batches done).
        """
        def work(share: list[int]) -> tuple[float, int, int]:
            loss, entries, done = 0.0, 0, 0
            for batch in share:
                if time.perf_counter() > deadline:
                    break
                part = slice(batch * batch_size, (batch + 1) * batch_size)
                loss += self.step(rows[part], cols[part], counts[part])
                entries, done = entries + len(counts[part]), done + 1
                if on_batch is not None:
                    on_batch()
            return loss, entries, done

        previous = torch.get_num_threads()
        torch.set_num_threads(1)  # for the worker threads too: PyTorch applies it process-wide
        try:
            with ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(work, [batches[k::workers] for k in range(workers)]))
        finally:
            torch.set_num_threads(previous)
        loss, entries, done = (sum(values) for values in zip(*results))
        return loss, entries, done

    def vectors(self) -> np.ndarray:
        """(V, D) float32: W + W~, the paper's final word vectors."""
        return (self.words[:, :-1] + self.contexts[:, :-1]).numpy()


def _target_views(vectors: StaticVectors, targets: list[tuple[list[str], int]],
                  batch_size: int) -> tuple[dict[str, np.ndarray], int]:
    """WiC's one view: the target word's vector (zeros, and counted, for a word without one)."""
    found = [vectors.vector(words[position]) for words, position in targets]
    rows = [v.numpy() if v is not None else np.zeros(vectors.hidden_size, np.float32) for v in found]
    return {"static": np.stack(rows)}, sum(v is None for v in found)


SPEC = FamilySpec(
    config_class=StaticConfig,
    model_classes={},
    default_class=StaticVectors,
    describe=lambda c: f"{c.method} vectors ({c.vocab_size:,} words, {c.vector_size} dimensions)",
    runner="word_features",
    tokenized=False,
    word_vectors=True,
    finetune_modes=("features",),
    word_features=lambda directory, config: StaticVectors.from_pretrained(directory, config),
    word_views=_target_views,
    layer_names=("static", "static"),
)
