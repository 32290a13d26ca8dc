"""`bertology static`: train (or import) static word vectors, evaluate them, list nearest neighbours.

Training reads the corpus with bertology's readers (data/corpus.py: every format they read),
splits each sentence with the one word tokenizer of models/static.py, holds out a share of
whole documents (the rule of `pretrain`'s split), and keeps the words seen at least
`min_count` times in the rest. Then:

- word2vec (Mikolov et al. 2013) and fastText (Bojanowski et al. 2017): gensim's `Word2Vec`
  and `FastText`, their optimised C loops, reading the tokenized corpus from a file
  (`corpus_file`, so the threads do not share Python's lock), one epoch per call so that the
  curve gets a point per epoch and `max_time` can stop between epochs;
- GloVe (Pennington et al. 2014): co-occurrences counted by data/cooccurrence.py, then
  models/static.py's `GloVe` (AdaGrad on the weighted least-squares loss).

The output directory is built in a hidden folder beside it and renamed into place at the end
(files.py's `staging_directory`), so a failed or interrupted run leaves nothing that looks like a
finished model, a second run into the same --out is refused while the first writes, and a
killed run's folder is reused by the next. It holds the
vectors directory of models/static.py plus `metrics.jsonl` (one row per epoch),
`training_curves.png` and `results.json` (held-out OOV rates, timings, the evaluation).

Evaluation reads the three benchmarks gensim ships in its `test/test_data` folder: WordSim-353
and SimLex-999 (Spearman's rank correlation between human scores and cosine similarities) and
the Google analogy questions (3CosAdd: the answer to a:b :: c:? is the vocabulary word nearest
to b - a + c, the three question words excluded; Mikolov et al. 2013).
"""

from __future__ import annotations

import dataclasses
import math
import mmap
import os
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import gensim
import numpy as np
import torch
from gensim.models import FastText, Word2Vec
from gensim.models.fasttext import load_facebook_vectors
from scipy.stats import spearmanr
from tqdm.auto import tqdm

from ..config import Threads, check_settings, override, resolve_threads, setting
from ..data.cooccurrence import CooccurrenceCounter
from ..data.corpus import DOC_FORMATS, ReadStats, corpus_notes, read_documents, reading_notes
from ..errors import UserError
from ..files import staging_directory, write_json_atomic
from ..memory import FP32_BYTES, check_fits
from ..models.static import (
    IMPORTED,
    METHODS,
    GloVe,
    StaticConfig,
    StaticVectors,
    read_word2vec_format,
    tokenize_words,
)
from ..plots import plot_epoch_metrics
from ..training.loop import ESTIMATE_AFTER_SECONDS, MetricsLog, estimate_text, parse_duration

BENCHMARK_FILES = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt", "analogy": "questions-words.txt"}
_FASTTEXT_MAGIC = 793712314  # the first int32 of a file written by Facebook's fastText
# word2vec's and fastText's rates are 0.025-0.05; gensim's fastText crashed (SIGSEGV) from --lr 100
# on a small corpus, its word2vec at 1e308 (its float32 arithmetic overflows)
GENSIM_MAX_LR = 1.0


@dataclass
class StaticTrainConfig(Threads):
    """`bertology static train`: each field is a flag and a config-file key."""

    corpus: list[str] = setting([], metavar="PATH", help="text files, or folders of them (every format bertology "
                                                         "reads); not with --import-vectors")
    out: str = setting("", required=True, metavar="DIR", output="dir",
                       help="the vectors directory to create (must not exist, or be empty): the vectors, "
                            "metrics.jsonl, training_curves.png, results.json")
    method: str = setting("word2vec", choices=tuple(METHODS), help="word2vec and fasttext (gensim) or glove (bertology)")
    import_vectors: str | None = setting(None, metavar="FILE",
                                         help="instead of training, import this file: word2vec text or binary, "
                                              "GloVe text (no header line), or a fastText .bin (default: none)")
    binary: bool | None = setting(None, help="--import-vectors is in word2vec's binary format (default: told from "
                                             "the bytes)")
    doc_format: str = setting("auto", choices=DOC_FORMATS,
                              help="lines: a sentence or paragraph per line, blank lines between documents; "
                                   "file: one document per file; auto: decide per file")
    text_field: str = setting("text", help="JSONL / Parquet corpus files: the field that holds the text")
    skip_bad_lines: bool = setting(False, help="skip (and count) lines that are not UTF-8 instead of stopping")
    cased: bool = setting(False, formerly=("no_lowercase",),
                          help="keep case instead of lower-casing the words before training (imported vectors: "
                               "cased when a word has a capital)")
    vector_size: int = setting(100, positive=True, help="the vectors' dimension")
    window: int = setting(5, positive=True, maximum=10_000,
                          help="the largest distance between a word and a context word (on both sides; gensim cuts "
                               "sentences at 10,000 words)")
    min_count: int = setting(5, positive=True, help="words seen fewer times in the training documents get no vector")
    epochs: int | None = setting(None, positive=True, help="passes over the corpus (default: 5 for word2vec and "
                                                           "fasttext, 25 for glove, as their reference tools)")
    lr: float | None = setting(None, positive=True, help="initial learning rate (default: 0.025 for word2vec and "
                                                         "fasttext, 0.05 for glove's AdaGrad)")
    min_lr: float = setting(0.0001, minimum=0, help="word2vec, fasttext: the learning rate decays linearly to this")
    skip_gram: bool = setting(False, help="word2vec, fasttext: skip-gram instead of CBOW")
    negative: int = setting(5, positive=True, maximum=100, help="word2vec, fasttext: negative samples per context word "
                                                           "(the papers: 5-20; each one costs as much as the word)")
    sample: float = setting(1e-3, minimum=0, maximum=1e9,
                            help="word2vec, fasttext: down-sampling threshold of frequent words (a share; gensim reads "
                                 "1 and above as a count)")
    min_n: int = setting(3, positive=True, help="fasttext: the shortest character n-gram")
    max_n: int = setting(6, positive=True, help="fasttext: the longest character n-gram")
    bucket: int = setting(2_000_000, positive=True,
                          help="fasttext: hash buckets of the n-grams (rows of the n-gram matrix: 2M x 100 "
                               "dimensions is 800 MB)")
    x_max: float = setting(100.0, positive=True, help="glove: co-occurrence counts above this get full weight")
    alpha: float = setting(0.75, positive=True, help="glove: the weighting function's exponent")
    batch_size: int = setting(16384, positive=True, help="glove: co-occurrence entries per AdaGrad update")
    chunk_tokens: int = setting(1 << 20, positive=True,
                                help="glove: tokens counted per chunk (counting memory: about 12 bytes x this "
                                     "x window)")
    threads: int | None = override(Threads, "threads", None, formerly=("workers",))  # gensim's and GloVe's workers
    max_time: float | str | None = setting(None, metavar="DURATION",
                                           help="training budget, e.g. 90s, 20m, 1.5h or seconds: word2vec and "
                                                "fasttext stop after the last epoch that fits, glove after the "
                                                "last batch (reading and counting not included; default: none)")
    eval_fraction: float = setting(0.01, positive=True, below=1,
                                   help="share of the documents held out (pretrain's rule)")
    seed: int = setting(0, help="random seed (vectors' initial values, held-out documents, shuffling)")
    text_format: bool = setting(False, help="also write vectors.txt in word2vec's text format (about 3x the "
                                            "binary's size)")
    progress: bool = setting(True, help="show progress bars")

    def validate(self) -> None:
        """Everything that can be checked before reading the corpus."""
        check_settings(self)
        if self.import_vectors is not None:
            if self.corpus:
                raise UserError("give either --corpus (to train) or --import-vectors (to import), not both")
            return
        if not self.corpus:
            raise UserError("--corpus is required (or --import-vectors)")
        for path in self.corpus:
            if not Path(path).exists():
                raise UserError(f"{path}: no such file or directory")
        if self.max_n < self.min_n:
            raise UserError(f"--max-n ({self.max_n}) must be at least --min-n ({self.min_n})")
        if self.method != "glove" and self.method_defaults()["lr"] > GENSIM_MAX_LR:
            raise UserError(f"--lr must be at most {GENSIM_MAX_LR:g} for {self.method}, got {self.lr:g} (above it "
                            "gensim's training diverges, and its fastText crashes)")
        if self.method != "glove" and self.min_lr > self.method_defaults()["lr"]:
            raise UserError(f"--min-lr ({self.min_lr:g}) must be at most --lr ({self.method_defaults()['lr']:g}): "
                            "the learning rate decays to it")
        if self.max_time is not None and parse_duration(self.max_time) <= 0:
            raise UserError(f"--max-time must be positive, got {self.max_time!r}")
        if self.method == "fasttext":  # the n-gram matrix and its gradient's
            check_fits(2 * FP32_BYTES * self.bucket * self.vector_size, f"--bucket {self.bucket:,} x --vector-size "
                                                                        f"{self.vector_size:,}")
        if self.method == "glove":  # a chunk's pairs: 12 bytes each, a chunk's tokens x the window of them
            check_fits(12 * self.chunk_tokens * self.window, f"--chunk-tokens {self.chunk_tokens:,} x --window "
                                                               f"{self.window:,}")

    def settings(self) -> dict:
        """The training settings that config.json records, with the method's defaults filled in."""
        keep = ["doc_format", "vector_size", "window", "min_count", "epochs", "lr", "eval_fraction", "seed", "max_time"]
        keep += {"glove": ["x_max", "alpha", "batch_size"],
                 "word2vec": ["min_lr", "skip_gram", "negative", "sample"],
                 "fasttext": ["min_lr", "skip_gram", "negative", "sample", "min_n", "max_n", "bucket"]}[self.method]
        values = {**dataclasses.asdict(self), **self.method_defaults()}
        return {"corpus": [str(Path(p).resolve()) for p in self.corpus], **{k: values[k] for k in keep}}

    def method_defaults(self) -> dict:
        """epochs and lr, the method's defaults where not given."""
        return {"epochs": self.epochs or METHODS[self.method]["epochs"], "lr": self.lr or METHODS[self.method]["lr"]}


@dataclass
class StaticEvalConfig(Threads):
    """`bertology static evaluate`."""

    vectors: str = setting("", required=True, metavar="DIR", help="a vectors directory")
    benchmarks: list[str] = setting(list(BENCHMARK_FILES), metavar="NAME",
                                    help=f"any of {', '.join(BENCHMARK_FILES)} (default: all three)")
    analogy_vocab: int = setting(300_000, positive=True,
                                 help="analogy answers are searched among this many most frequent words "
                                      "(gensim's restrict_vocab)")


@dataclass
class StaticNeighborsConfig(Threads):
    """`bertology static neighbors`."""

    vectors: str = setting("", required=True, metavar="DIR", help="a vectors directory")
    words: list[str] = setting([], required=True, positional=True, metavar="WORD", help="the words to look up")
    k: int = setting(10, positive=True, help="neighbours per word")


# --- the public functions ---


def train(cfg: StaticTrainConfig) -> dict:
    """Train (or import) vectors into `cfg.out`; returns the summary also written as results.json."""
    cfg.validate()
    out = Path(cfg.out)
    with staging_directory(out) as work:
        if cfg.import_vectors is not None:
            model = import_vectors(cfg.import_vectors, cfg.binary)
            summary = {"method": IMPORTED, "source": str(Path(cfg.import_vectors).resolve()),
                       "vocab_size": len(model), "vector_size": model.hidden_size, "lowercase": model.config.lowercase}
        else:
            model, summary = _train_method(cfg, work)
        started = time.perf_counter()
        summary["evaluation"] = evaluate_vectors(model)
        summary["seconds"] = {**summary.get("seconds", {}), "evaluation": round(time.perf_counter() - started, 2)}
        model.save_pretrained(work)
        if cfg.text_format:
            model.save_word2vec_format(work / "vectors.txt", binary=False)
        write_json_atomic(work / "results.json", summary)
    return summary


def load(directory: str | os.PathLike) -> StaticVectors:
    """A vectors directory (written by `train`) as `StaticVectors`."""
    return StaticVectors.from_pretrained(directory)


def evaluate(cfg: StaticEvalConfig) -> dict:
    """Evaluate a vectors directory on the benchmarks; returns {benchmark: results} (see `evaluate_vectors`).

    Raises:
        UserError: an unknown benchmark, or no pair or question of any benchmark has vectors
            for its words.
    """
    check_settings(cfg)
    unknown = [b for b in cfg.benchmarks if b not in BENCHMARK_FILES]
    if unknown or not cfg.benchmarks:
        raise UserError(f"unknown benchmark(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(BENCHMARK_FILES)}")
    model = load(cfg.vectors)
    results = evaluate_vectors(model, cfg.benchmarks, cfg.analogy_vocab)
    if all(r["scored"] == 0 for r in results.values()):
        files = ", ".join(str(benchmark_path(b)) for b in cfg.benchmarks)
        raise UserError(f"{files}: no pair or question has all its words in the vocabulary of {cfg.vectors} "
                        f"({len(model)} words, lowercase={model.config.lowercase}); nothing to evaluate")
    return results


def neighbors(cfg: StaticNeighborsConfig) -> list[dict]:
    """The k nearest vocabulary words of each word, by cosine similarity.

    Returns:
        One dict per word: "word", "in_vocabulary", "has_vector" (an unseen word has one only
        with fastText's subwords) and "neighbors", a list of [word, cosine] pairs, best first.
    """
    check_settings(cfg)
    model = load(cfg.vectors)
    return [{"word": word, "in_vocabulary": model.normalize(word) in model.index,
             "has_vector": model.vector(word) is not None,
             "neighbors": [[w, round(s, 4)] for w, s in model.nearest(word, cfg.k)]} for word in cfg.words]


# --- the output directory ---


# --- importing ---


def import_vectors(path: str | os.PathLike, binary: bool | None = None) -> StaticVectors:
    """Vectors from someone else's file: word2vec text or binary, GloVe text (no header), or
    Facebook fastText's .bin (read by gensim's parser of that format, which is not a pickle;
    unseen words then get vectors from its n-grams). Words count as lower-cased when none has
    an upper-case letter."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    with open(path, "rb") as file:
        head = file.read(4)
    settings = {"source": str(path.resolve())}
    if len(head) == 4 and struct.unpack("<i", head)[0] == _FASTTEXT_MAGIC:
        check_fasttext_bin(path)
        try:
            kv = load_facebook_vectors(str(path))
        except Exception as err:  # gensim's parser of an untrusted file: AssertionError, NotImplementedError, ...
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"{path}: not a readable fastText .bin file ({reason})") from None
        if not np.isfinite(kv.vectors_vocab).all() or not np.isfinite(kv.vectors_ngrams).all():
            raise UserError(f"{path}: the fastText vectors hold inf or nan")
        config = StaticConfig(IMPORTED, kv.vector_size, _all_lower(kv.index_to_key), settings=settings)
        counts = np.array([kv.get_vecattr(w, "count") for w in kv.index_to_key], dtype=np.int64)
        return StaticVectors.from_gensim(kv, config, counts)
    words, vectors = read_word2vec_format(path, binary)
    return StaticVectors(StaticConfig(IMPORTED, vectors.shape[1], _all_lower(words), settings=settings), words, vectors)


# Facebook fastText's .bin (fasttext.cc's saveModel; gensim's models/_fasttext_bin.py reads it):
# magic and version, the arguments (12 int32, one float64), the dictionary (its sizes, then each
# word NUL-terminated with an int64 count and an int8 type), then two matrices (a quantisation
# flag, rows and columns as int64, float32 values).
_FASTTEXT_HEADER = struct.Struct("<2i12id")
_FASTTEXT_DICTIONARY = struct.Struct("<3i2q")  # words + labels, words, labels, tokens, prune index size
_FASTTEXT_ENTRY_TAIL = 9  # int64 count, int8 type
_FASTTEXT_MATRIX = struct.Struct("<?2q")


def check_fasttext_bin(path: Path) -> None:
    """Check a fastText .bin's structure against the file's size before gensim reads it: every size
    it states (words, pruned index, matrix rows and columns) must fit in the bytes there are, and
    every word must end. gensim's reader trusts them: one changed byte in the vocabulary's size sent
    it reading words past the end of the file for ever. A one-line error names what is wrong."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        def fail(what: str) -> None:
            raise UserError(f"{path}: not a readable fastText .bin file ({what})")

        if len(data) < _FASTTEXT_HEADER.size + _FASTTEXT_DICTIONARY.size:
            fail("shorter than its header")
        fields = _FASTTEXT_HEADER.unpack_from(data, 0)
        dim, bucket = fields[2], fields[10]
        entries, words, labels, _, pruned = _FASTTEXT_DICTIONARY.unpack_from(data, _FASTTEXT_HEADER.size)
        position = _FASTTEXT_HEADER.size + _FASTTEXT_DICTIONARY.size
        if labels:
            fail("a supervised model (labels), which has no word vectors to import")
        if not 0 < words <= entries or entries * (1 + _FASTTEXT_ENTRY_TAIL) > len(data) - position:
            fail(f"its dictionary claims {entries:,} entries and {words:,} words, more than its {len(data):,} bytes "
                 "hold")
        for number in range(entries):
            end = data.find(b"\0", position)
            if end < 0 or end + 1 + _FASTTEXT_ENTRY_TAIL > len(data):
                fail(f"the file ends inside word {number + 1} of {entries:,}")
            position = end + 1 + _FASTTEXT_ENTRY_TAIL
        if pruned > 0:
            position += 8 * pruned
        for name, rows in (("input", words + bucket), ("output", None)):
            if position + _FASTTEXT_MATRIX.size > len(data):
                fail(f"the file ends before its {name} matrix")
            _, count, columns = _FASTTEXT_MATRIX.unpack_from(data, position)
            position += _FASTTEXT_MATRIX.size
            if columns != dim or (rows is not None and count != rows) or count < 0 \
                    or count * columns * 4 > len(data) - position:
                fail(f"its {name} matrix claims {count:,} x {columns:,} values, which do not fit its header "
                     f"({dim} dimensions, {words:,} words, {bucket:,} buckets) or its {len(data):,} bytes")
            position += count * columns * 4
        if position != len(data):
            fail(f"{len(data) - position:,} bytes after the last matrix")


def _all_lower(words: list[str]) -> bool:
    return all(word == word.lower() for word in words)


# --- training ---


@dataclass
class WordCorpus:
    """The corpus after the word tokenizer: the training documents' sentences in a file, one per
    line with the words separated by spaces (gensim's `corpus_file` format), and word counts."""

    train_file: Path
    train_counts: Counter  # word -> count in the training documents
    held_out_counts: Counter  # word -> count in the held-out documents
    documents: int
    held_out_documents: int
    train_sentences: int


def split_documents(num_documents: int, eval_fraction: float, seed: int) -> np.ndarray:
    """(num_documents,) bool, True for the held-out documents: `pretrain`'s rule (data/shards.py,
    `WordCorpus.split`): round(N x fraction) documents chosen by a seeded permutation, at
    least one when N >= 2, never all."""
    count = round(num_documents * eval_fraction)
    if num_documents >= 2:
        count = min(max(count, 1), num_documents - 1)
    held_out = np.zeros(num_documents, dtype=bool)
    held_out[np.random.default_rng(seed).permutation(num_documents)[:count]] = True
    return held_out


def tokenize_corpus(cfg: StaticTrainConfig, work: Path) -> WordCorpus:
    """Read and tokenize the corpus into `work/train.tmp`, holding out documents (see the module docstring)."""
    everything, first_lines = work / "all.tmp", []  # first_lines[d]: document d's first line in all.tmp
    lines, stats = 0, ReadStats()
    documents = read_documents(cfg.corpus, doc_format=cfg.doc_format, skip_bad_lines=cfg.skip_bad_lines, stats=stats,
                               text_field=cfg.text_field)
    with open(everything, "w", encoding="utf-8") as file:
        for document in tqdm(documents, desc="reading", unit=" documents", disable=not cfg.progress):
            first_lines.append(lines)
            for sentence in document:
                words = tokenize_words(sentence, not cfg.cased)
                if words:
                    file.write(" ".join(words) + "\n")
                    lines += 1
    for notes in (corpus_notes(stats.formats), reading_notes(stats.skipped_lines, stats.control_characters)):
        if notes:
            print(notes, file=sys.stderr)
    held_out = split_documents(len(first_lines), cfg.eval_fraction, cfg.seed)
    document_of_line = np.repeat(np.arange(len(first_lines)), np.diff([*first_lines, lines]))  # (lines,)
    corpus = WordCorpus(work / "train.tmp", Counter(), Counter(), len(first_lines), int(held_out.sum()), 0)
    with open(everything, encoding="utf-8") as source, open(corpus.train_file, "w", encoding="utf-8") as train_file:
        for line, document in zip(source, document_of_line.tolist()):
            words = line.split()
            if held_out[document]:
                corpus.held_out_counts.update(words)
            else:
                corpus.train_counts.update(words)
                train_file.write(line)
                corpus.train_sentences += 1
    everything.unlink()
    if not corpus.train_counts:
        raise UserError(f"{_corpus_name(cfg)}: the training documents hold no words (letters or digits)")
    return corpus


def _corpus_name(cfg: StaticTrainConfig) -> str:
    return ", ".join(cfg.corpus[:3]) + (", ..." if len(cfg.corpus) > 3 else "")


def vocabulary(cfg: StaticTrainConfig, counts: Counter) -> list[str]:
    """The words seen at least `min_count` times, most frequent first (ties alphabetically).

    Raises:
        UserError: fewer than two words pass the threshold.
    """
    words = sorted((w for w, c in counts.items() if c >= cfg.min_count), key=lambda w: (-counts[w], w))
    if len(words) < 2:
        top = max(counts.values())
        raise UserError(f"{_corpus_name(cfg)}: only {len(words)} of {len(counts)} distinct words occur at least "
                        f"--min-count {cfg.min_count} times (the most frequent {top} times); need at least 2: "
                        "lower --min-count or give more text")
    return words


def _train_method(cfg: StaticTrainConfig, work: Path) -> tuple[StaticVectors, dict]:
    """Tokenize, train, and summarise one method's run in `work`."""
    started = time.perf_counter()
    corpus = tokenize_corpus(cfg, work)
    words = vocabulary(cfg, corpus.train_counts)
    # Each method keeps about four V x D matrices: word2vec's input and output vectors and their
    # copies, GloVe's W and W~ and their AdaGrad sums.
    check_fits(4 * FP32_BYTES * len(words) * cfg.vector_size, f"--vector-size {cfg.vector_size:,} over "
                                                               f"{len(words):,} words")
    counts = np.array([corpus.train_counts[w] for w in words], dtype=np.int64)
    seconds = {"reading": round(time.perf_counter() - started, 2)}
    budget = math.inf if cfg.max_time is None else parse_duration(cfg.max_time)
    config = StaticConfig(cfg.method, cfg.vector_size, not cfg.cased, settings=cfg.settings())
    log = MetricsLog(work / "metrics.jsonl", enabled=True)
    pairs = read_word_pairs(benchmark_path("wordsim353"))  # for the curve: WordSim-353 after each epoch
    trainer = _train_glove if cfg.method == "glove" else _train_gensim
    model, report = trainer(cfg, corpus, words, counts, config, budget, log, pairs)
    if not bool(torch.isfinite(model.vectors).all()):
        raise UserError(f"the trained vectors hold NaN or infinite values: training diverged (the learning rate "
                        f"--lr {cfg.method_defaults()['lr']:g} is most likely too high); lower --lr and start again")
    seconds.update(report.pop("seconds"))
    seconds["total"] = round(time.perf_counter() - started, 2)
    corpus.train_file.unlink()
    loss_label = "gensim's loss per word" if cfg.method == "word2vec" else "weighted least-squares loss per entry"
    plot_epoch_metrics(log.rows(), {"loss": loss_label, "wordsim353": "WordSim-353 Spearman"},
                       work / "training_curves.png", f"{cfg.method}, {cfg.vector_size} dimensions, window {cfg.window}")
    summary = {"method": cfg.method, "vector_size": cfg.vector_size, "window": cfg.window, "min_count": cfg.min_count,
               "lowercase": not cfg.cased, "vocab_size": len(words),
               "corpus": {"documents": corpus.documents, "held_out_documents": corpus.held_out_documents,
                          "train_sentences": corpus.train_sentences, "train_tokens": sum(corpus.train_counts.values()),
                          "held_out_tokens": sum(corpus.held_out_counts.values())},
               "held_out": held_out_oov(model, corpus.held_out_counts), "seconds": seconds, **report}
    return model, summary


def held_out_oov(model: StaticVectors, held_out: Counter) -> dict:
    """How much of the held-out text the vocabulary misses: tokens and distinct words."""
    missing = {w: c for w, c in held_out.items() if w not in model.index}
    tokens = sum(held_out.values())
    return {"tokens": tokens, "oov_tokens": sum(missing.values()),
            "oov_token_rate": round(sum(missing.values()) / tokens, 4) if tokens else None,
            "types": len(held_out), "oov_types": len(missing),
            "oov_type_rate": round(len(missing) / len(held_out), 4) if held_out else None}


def _epoch_row(log: MetricsLog, epoch: float, elapsed: float, loss: float | None, model: StaticVectors,
               pairs: list) -> dict:
    row = {"epoch": round(epoch, 3), "elapsed": round(elapsed, 2), "loss": loss,
           "wordsim353": word_similarity(model, pairs)["spearman"]}
    log.write(row)
    return row


def _announce_speed(epochs_per_second: float, epochs: int, budget: float) -> None:
    """The up-front estimate of the training commands (training/loop.py's), in epochs."""
    time_budget = None if budget == math.inf else budget
    tqdm.write(f"training at {estimate_text(epochs_per_second, epochs, 'epoch', time_budget)}", file=sys.stderr)


def _train_gensim(cfg, corpus, words, counts, config, budget, log, pairs) -> tuple[StaticVectors, dict]:
    """word2vec or fastText with gensim, one epoch per `train` call (see the module docstring).

    The learning rate decays linearly over the planned epochs, as in one gensim call. Under a
    time budget, after each epoch the plan is cut to the epochs that fit at the mean epoch
    time so far, and the decay is re-spread over it; an epoch is never cut short.
    """
    options = {"vector_size": cfg.vector_size, "window": cfg.window, "min_count": cfg.min_count,
               "sg": int(cfg.skip_gram), "negative": cfg.negative, "sample": cfg.sample,
               "workers": resolve_threads(cfg.threads),
               "seed": cfg.seed}
    if cfg.method == "fasttext":
        options.update(min_n=cfg.min_n, max_n=cfg.max_n, bucket=cfg.bucket)
    gensim_model = (FastText if cfg.method == "fasttext" else Word2Vec)(**options)
    gensim_model.build_vocab_from_freq({w: corpus.train_counts[w] for w in words}, corpus_count=corpus.train_sentences)
    total_words = sum(corpus.train_counts.values())
    lr, planned = cfg.method_defaults()["lr"], cfg.method_defaults()["epochs"]
    rate, done, started = lr, 0, time.perf_counter()
    bar = tqdm(total=planned, desc=cfg.method, unit=" epochs", disable=not cfg.progress)
    while done < planned:
        end_rate = rate - (rate - cfg.min_lr) / (planned - done)  # linear decay to min_lr at the planned end
        gensim_model.train(corpus_file=str(corpus.train_file), total_words=total_words, epochs=1, start_alpha=rate,
                           end_alpha=end_rate, compute_loss=cfg.method == "word2vec")
        rate, done = end_rate, done + 1
        elapsed = time.perf_counter() - started
        if done == 1 and planned > 1:  # gensim's epoch is the step it times
            _announce_speed(1 / elapsed, planned, budget)
        loss = gensim_model.get_latest_training_loss() / total_words if cfg.method == "word2vec" else None
        in_vocabulary = StaticVectors(config, gensim_model.wv.index_to_key, gensim_model.wv.vectors)
        row = _epoch_row(log, done, elapsed, loss, in_vocabulary, pairs)
        if budget < math.inf:
            planned = min(planned, max(done, int(min(budget / (elapsed / done), planned))))  # min: inf fits no int
        bar.total = planned
        bar.update(1)
        bar.set_postfix(wordsim353=row["wordsim353"])
    bar.close()
    seconds = time.perf_counter() - started
    model = StaticVectors.from_gensim(gensim_model.wv, config, np.array(
        [gensim_model.wv.get_vecattr(w, "count") for w in gensim_model.wv.index_to_key], dtype=np.int64))
    return model, {"epochs": done, "stopped_by_max_time": done < cfg.method_defaults()["epochs"],
                   "seconds": {"training": round(seconds, 2)},
                   "throughput": {"words_per_second": round(total_words * done / seconds),
                                  "epochs_per_second": round(done / seconds, 4)}}


def _train_glove(cfg, corpus, words, counts, config, budget, log, pairs) -> tuple[StaticVectors, dict]:
    """Count co-occurrences, then AdaGrad epochs over the shuffled entries, stopping when `budget` runs out.

    The entries are shuffled once (as glove.c's shuffle step) and cut into contiguous
    mini-batches; each epoch visits the batches in a fresh random order.
    """
    started = time.perf_counter()
    index = {w: i for i, w in enumerate(words)}
    counter = CooccurrenceCounter(len(words), cfg.window, cfg.chunk_tokens)
    with open(corpus.train_file, encoding="utf-8") as file:
        for line in tqdm(file, total=corpus.train_sentences, desc="counting", unit=" sentences", disable=not cfg.progress):
            counter.add([index[w] for w in line.split() if w in index])
    matrix = counter.matrix().tocoo()
    counting = time.perf_counter() - started
    if matrix.nnz == 0:
        raise UserError(f"{_corpus_name(cfg)}: no two vocabulary words occur within --window {cfg.window} of each other")
    order = np.random.default_rng(cfg.seed).permutation(matrix.nnz)
    rows = torch.from_numpy(matrix.row[order].astype(np.int32))  # int32 indices: 12 bytes per entry in all
    cols = torch.from_numpy(matrix.col[order].astype(np.int32))
    values = torch.from_numpy(matrix.data[order])
    del matrix, order
    epochs = cfg.method_defaults()["epochs"]
    glove = GloVe(len(words), cfg.vector_size, cfg.method_defaults()["lr"], cfg.x_max, cfg.alpha, cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    num_batches = math.ceil(len(values) / cfg.batch_size)
    trained, out_of_time, started = 0, False, time.perf_counter()
    bar = tqdm(total=epochs * num_batches, desc="glove", unit=" batches", disable=not cfg.progress)
    timed, lock = {"batches": 0, "announced": False}, threading.Lock()

    def on_batch() -> None:  # called by every worker thread
        bar.update(1)
        with lock:
            timed["batches"] += 1
            seconds = time.perf_counter() - started
            if seconds >= ESTIMATE_AFTER_SECONDS and not timed["announced"]:
                timed["announced"] = True
                _announce_speed(timed["batches"] / num_batches / seconds, epochs, budget)

    for _ in range(epochs):
        order = torch.randperm(num_batches, generator=generator).tolist()
        loss, entries, done = glove.train_batches(rows, cols, values, order, cfg.batch_size,
                                                  resolve_threads(cfg.threads), deadline=started + budget,
                                                  on_batch=on_batch)
        trained += done
        out_of_time = done < num_batches
        if done:
            row = _epoch_row(log, trained / num_batches, time.perf_counter() - started, loss / entries,
                             StaticVectors(config, words, glove.vectors()), pairs)
            bar.set_postfix(loss=f"{row['loss']:.4f}", wordsim353=row["wordsim353"])
        if out_of_time:
            break
    bar.close()
    seconds = time.perf_counter() - started
    model = StaticVectors(config, words, glove.vectors(), counts)
    return model, {"epochs": round(trained / num_batches, 3), "stopped_by_max_time": out_of_time,
                   "cooccurrence": {"tokens": counter.tokens, "pairs": counter.pairs, "nonzero_entries": len(values)},
                   "seconds": {"counting": round(counting, 2), "training": round(seconds, 2)},
                   "throughput": {"counting_tokens_per_second": round(counter.tokens / counting),
                                  "entries_per_second": round(trained / num_batches * len(values) / seconds),
                                  "epochs_per_second": round(trained / num_batches / seconds, 4)}}


# --- evaluation ---


def benchmark_path(name: str) -> Path:
    """The benchmark file that the installed gensim ships (its test/test_data folder)."""
    path = Path(gensim.__file__).parent / "test" / "test_data" / BENCHMARK_FILES[name]
    if not path.is_file():
        raise UserError(f"{path}: not found; the installed gensim does not ship its test data")
    return path


def read_word_pairs(path: Path) -> list[tuple[str, str, float]]:
    """(word, word, human score) per line of a WordSim-353 / SimLex-999 file; '#' lines are comments."""
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        try:
            pairs.append((fields[0], fields[1], float(fields[2])))
        except (IndexError, ValueError):
            raise UserError(f"{path}:{number}: expected 'word<TAB>word<TAB>score', found {line!r}") from None
    return pairs


def read_analogies(path: Path) -> list[tuple[str, list[str]]]:
    """(section, [a, b, c, d]) per question of the Google analogy file (": section" lines head sections)."""
    questions, section = [], ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith(":"):
            section = line[1:].strip()
        elif line.strip():
            words = line.split()
            if len(words) != 4:
                raise UserError(f"{path}:{number}: expected four words, found {line!r}")
            questions.append((section, words))
    return questions


def word_similarity(model: StaticVectors, pairs: list[tuple[str, str, float]]) -> dict:
    """Spearman's rank correlation between human scores and cosine similarities.

    A pair is scored when both words have vectors (for fastText, also an unseen word through
    its n-grams: `subword_pairs` counts those); `oov_pairs` counts pairs with a word outside the
    vocabulary. `spearman` is None when fewer than two pairs are scored.
    """
    human, cosine, oov, subword = [], [], 0, 0
    for first, second, score in pairs:
        unseen = [w for w in (first, second) if model.normalize(w) not in model.index]
        oov += bool(unseen)
        a, b = model.vector(first), model.vector(second)
        if a is None or b is None:
            continue
        subword += bool(unseen)
        human.append(score)
        cosine.append(float(a @ b / (a.norm() * b.norm()).clamp_min(1e-12)))
    rho = float(spearmanr(human, cosine).statistic) if len(human) >= 2 else None
    return {"spearman": None if rho is None or math.isnan(rho) else round(rho, 4), "pairs": len(pairs),
            "scored": len(human), "oov_pairs": oov, "subword_pairs": subword}


def analogy_accuracy(model: StaticVectors, questions: list[tuple[str, list[str]]], vocab_limit: int = 300_000) -> dict:
    """3CosAdd accuracy on analogy questions a:b :: c:d (answer: argmax over words w of cos(w, b - a + c)
    with unit-length vectors, a, b and c excluded).

    A question is scored when its four words are among the `vocab_limit` most frequent
    vocabulary words (gensim's rule); the others count in `oov_questions`. Sections whose name
    starts with "gram" are the syntactic ones. `accuracy` is None when no question is scored.
    """
    limit = min(vocab_limit, len(model))
    unit = model.vectors[:limit] / model.vectors[:limit].norm(dim=1, keepdim=True).clamp_min(1e-12)  # (W, D)
    ids, sections = [], []
    for section, words in questions:
        found = [model.index.get(model.normalize(w), limit) for w in words]
        if max(found) < limit:
            ids.append(found)
            sections.append(section)
    correct = torch.zeros(len(ids), dtype=torch.bool)
    table = torch.tensor(ids, dtype=torch.long).reshape(-1, 4)  # (Q, 4)
    batch_size = max(1, (1 << 25) // limit)  # a batch's (q, W) scores stay near 128 MB
    for start in range(0, len(table), batch_size):
        a, b, c, d = table[start:start + batch_size].T
        scores = (unit[b] - unit[a] + unit[c]) @ unit.T  # (q, W)
        rows = torch.arange(len(a))
        for excluded in (a, b, c):
            scores[rows, excluded] = -math.inf
        correct[start:start + batch_size] = scores.argmax(dim=1) == d
    syntactic = torch.tensor([s.startswith("gram") for s in sections], dtype=torch.bool)

    def share(mask: torch.Tensor) -> float | None:
        return round(float(correct[mask].float().mean()), 4) if mask.any() else None

    return {"accuracy": share(torch.ones_like(correct)), "semantic": share(~syntactic), "syntactic": share(syntactic),
            "questions": len(questions), "scored": len(ids), "oov_questions": len(questions) - len(ids)}


def evaluate_vectors(model: StaticVectors, benchmarks: list[str] | tuple[str, ...] = tuple(BENCHMARK_FILES),
                     analogy_vocab: int = 300_000) -> dict:
    """{benchmark: results} of `word_similarity` (wordsim353, simlex999) and `analogy_accuracy` (analogy)."""
    results = {}
    for name in benchmarks:
        path = benchmark_path(name)
        if name == "analogy":
            results[name] = analogy_accuracy(model, read_analogies(path), analogy_vocab)
        else:
            results[name] = word_similarity(model, read_word_pairs(path))
    return results


def format_evaluation(results: dict) -> str:
    """The evaluation as a few lines of text for the terminal."""
    lines = []
    for name, result in results.items():
        if name == "analogy":
            lines.append(f"{'analogy (3CosAdd)':<20} accuracy {_number(result['accuracy'])} (semantic "
                         f"{_number(result['semantic'])}, syntactic {_number(result['syntactic'])}) on "
                         f"{result['scored']}/{result['questions']} questions, {result['oov_questions']} with OOV words")
        else:
            lines.append(f"{name:<20} Spearman {_number(result['spearman'])} on {result['scored']}/{result['pairs']} "
                         f"pairs, {result['oov_pairs']} with OOV words"
                         + (f" ({result['subword_pairs']} scored through subwords)" if result["subword_pairs"] else ""))
    return "\n".join(lines)


def format_neighbors(results: list[dict]) -> str:
    """`neighbors`' results as one line per word for the terminal."""
    lines = []
    for result in results:
        if not result["has_vector"]:
            lines.append(f"{result['word']}: no vector (not in the vocabulary)")
            continue
        note = "" if result["in_vocabulary"] else " (not in the vocabulary: from its character n-grams)"
        lines.append(f"{result['word']}{note}: " + ", ".join(f"{w} {s:.3f}" for w, s in result["neighbors"]))
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def format_summary(summary: dict) -> str:
    """A `train` summary as a few lines of text for the terminal."""
    if summary["method"] == IMPORTED:
        lines = [(f"imported {summary['vocab_size']:,} vectors of {summary['vector_size']} dimensions "
                  f"from {summary['source']}")]
    else:
        held, stopped = summary["held_out"], " (stopped by --max-time)" if summary["stopped_by_max_time"] else ""
        lines = [(f"{summary['method']}: {summary['vocab_size']:,} words x {summary['vector_size']} dimensions, "
                  f"{summary['epochs']} epochs in {summary['seconds']['training']:.1f} s{stopped}, "
                  f"{summary['seconds']['total']:.1f} s in all")]
        if held["tokens"]:
            lines.append(f"held-out documents: {held['tokens']:,} tokens, {held['oov_token_rate']:.2%} outside the "
                         f"vocabulary ({held['oov_types']:,} of {held['types']:,} distinct words)")
    return "\n".join([*lines, format_evaluation(summary["evaluation"])])
