"""`bertology static` (recipes/static_vectors.py): training each method on a small made-up corpus, importing
vectors, evaluation on hand-made vectors with known answers, neighbours, and bad input."""

import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import gensim
import numpy as np
import pytest
import torch
from gensim.models import FastText
from gensim.models.fasttext import save_facebook_model
from gensim.models.keyedvectors import KeyedVectors

import bertology
from bertology.data.shards import TokenizedCorpus
from bertology.errors import UserError
from bertology.models.static import GloVe, StaticConfig, StaticVectors, tokenize_words
from bertology.recipes.static_vectors import (
    StaticEvalConfig,
    StaticNeighborsConfig,
    StaticTrainConfig,
    evaluate,
    format_evaluation,
    format_neighbors,
    format_summary,
    load,
    neighbors,
    split_documents,
    train,
)

TEST_DATA = Path(gensim.__file__).parent / "test" / "test_data"

# A made-up language: four verbs, each inflected six ways and used with its own four nouns.
TOPICS = {"walk": ["park", "street", "dog", "morning"], "paint": ["canvas", "brush", "colour", "wall"],
          "cook": ["kitchen", "soup", "pan", "dinner"], "climb": ["rock", "rope", "summit", "cliff"]}
SUFFIXES = ["", "s", "ed", "ing", "er", "ers"]


def write_corpus(path: Path, documents: int = 20, sentences: int = 40) -> Path:
    """Documents separated by blank lines, one sentence per line: a verb form, three of its nouns, a
    function word, shuffled."""
    rng = random.Random(0)
    lines = []
    for _ in range(documents):
        for _ in range(sentences):
            stem = rng.choice(list(TOPICS))
            words = [stem + rng.choice(SUFFIXES), *rng.sample(TOPICS[stem], 3), rng.choice(["The", "a", "and"])]
            rng.shuffle(words)
            lines.append(" ".join(words) + ".")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "verbs.txt")


def settings(corpus: Path, out: Path, method: str, **changes) -> StaticTrainConfig:
    base = {"corpus": [str(corpus)], "out": str(out), "method": method, "vector_size": 16, "window": 3,
            "min_count": 2, "epochs": 15, "bucket": 2000, "threads": 1, "eval_fraction": 0.1, "progress": False}
    return StaticTrainConfig(**{**base, **changes})


TOY_SETTINGS = {"glove": {"x_max": 10.0}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus) -> dict:
    """Each method trained once: method -> (output directory, summary). About 4 s on 2 idle
    cores: the tests that use it are marked slow."""
    root = tmp_path_factory.mktemp("trained")
    # GloVe at glove.c's small-corpus x_max (its demo.sh): at 100, every count of this toy corpus
    # (at most a few dozen) would weigh little
    return {method: (root / method, train(settings(corpus, root / method, method, **TOY_SETTINGS.get(method, {}))))
            for method in ("word2vec", "fasttext", "glove")}


def no_partial_output(parent: Path) -> bool:
    return not any(p.name.startswith(".") and ".partial-" in p.name for p in parent.iterdir())


# --- training ---


@pytest.mark.slow
@pytest.mark.parametrize("method", ["word2vec", "fasttext", "glove"])
def test_train_writes_a_vectors_directory(trained, corpus, method):
    out, summary = trained[method]
    expected = {"config.json", "vectors.bin", "vocab.txt", "metrics.jsonl", "training_curves.png", "results.json"}
    assert {p.name for p in out.iterdir()} == expected | ({"subwords.safetensors"} if method == "fasttext" else set())
    assert no_partial_output(out.parent)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "static" and config["method"] == method and config["settings"]["window"] == 3
    # the vocabulary: words seen twice or more in the training documents (pretrain's held-out rule)
    documents = corpus.read_text(encoding="utf-8").split("\n\n")
    held_out = split_documents(len(documents), 0.1, seed=0)
    counts, held = {}, {}
    for document, out_of_training in zip(documents, held_out):
        for word in tokenize_words(document, lowercase=True):
            target = held if out_of_training else counts
            target[word] = target.get(word, 0) + 1
    model = load(out)
    assert set(model.words) == {w for w, c in counts.items() if c >= 2}
    assert dict(zip(model.words, model.counts.tolist())) == {w: c for w, c in counts.items() if c >= 2}
    assert summary["held_out"]["tokens"] == sum(held.values())
    assert summary["held_out"]["oov_tokens"] == sum(c for w, c in held.items() if w not in model.index)
    assert summary["corpus"]["held_out_documents"] == 2 and summary["corpus"]["documents"] == 20
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == list(range(1, 16)) and summary["epochs"] == 15
    kv = KeyedVectors.load_word2vec_format(str(out / "vectors.bin"), binary=True)
    assert np.array_equal(kv.vectors, model.vectors.numpy())


@pytest.mark.slow
@pytest.mark.parametrize("method", ["word2vec", "glove"])
def test_nouns_of_one_verb_are_neighbours(trained, method):
    found = {x["word"]: [w for w, _ in x["neighbors"]]
             for x in neighbors(StaticNeighborsConfig(vectors=str(trained[method][0]), words=["kitchen", "rock"], k=3))}
    kitchen_words = {"soup", "pan", "dinner", *(f"cook{s}" for s in SUFFIXES)}
    rock_words = {"rope", "summit", "cliff", *(f"climb{s}" for s in SUFFIXES)}
    assert set(found["kitchen"]) <= kitchen_words and set(found["rock"]) <= rock_words


@pytest.mark.slow
def test_glove_loss_falls(trained):
    rows = [json.loads(line) for line in (trained["glove"][0] / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["loss"] < rows[0]["loss"] / 2


@pytest.mark.slow
def test_fasttext_gives_an_unseen_inflection_a_vector_near_its_stem(trained):
    out = trained["fasttext"][0]
    words = ["walkingly", "paintings", "cookery", "climbable"]  # none occurs in the corpus
    for result, stem in zip(neighbors(StaticNeighborsConfig(vectors=str(out), words=words, k=3)),
                            ["walk", "paint", "cook", "climb"]):
        assert not result["in_vocabulary"] and result["has_vector"]
        assert all(word.startswith(stem) for word, _ in result["neighbors"]), result
    assert "walkingly (not in the vocabulary: from its character n-grams): walk" in format_neighbors(
        neighbors(StaticNeighborsConfig(vectors=str(out), words=["walkingly"], k=1)))
    vector = load(out).vector("walkingly")
    assert vector.norm() > 0


@pytest.mark.slow
def test_word2vec_has_no_vector_for_an_unseen_word(trained):
    results = neighbors(StaticNeighborsConfig(vectors=str(trained["word2vec"][0]), words=["walkingly", "Kitchen"], k=2))
    assert results[0] == {"word": "walkingly", "in_vocabulary": False, "has_vector": False, "neighbors": []}
    assert results[1]["in_vocabulary"] and len(results[1]["neighbors"]) == 2  # looked up lower-cased
    (first, s1), (second, s2) = results[1]["neighbors"]
    assert format_neighbors(results) == (f"walkingly: no vector (not in the vocabulary)\n"
                                         f"Kitchen: {first} {s1:.3f}, {second} {s2:.3f}")
    with pytest.raises(UserError, match="--words is required"):
        neighbors(StaticNeighborsConfig(vectors=str(trained["word2vec"][0])))


def test_split_documents_is_pretrains_split():
    for count, fraction, seed in [(20, 0.1, 0), (7, 0.01, 3), (2, 0.5, 1), (1, 0.3, 0), (1000, 0.05, 9)]:
        _, expected = TokenizedCorpus.split(SimpleNamespace(num_documents=count), fraction, seed)
        assert np.flatnonzero(split_documents(count, fraction, seed)).tolist() == expected.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("method", ["word2vec", "glove"])
def test_max_time_stops_training(tmp_path, corpus, method):
    summary = train(settings(corpus, tmp_path / "out", method, max_time="1e-9", batch_size=64))
    assert summary["stopped_by_max_time"]
    assert summary["epochs"] == (1 if method == "word2vec" else 0)  # gensim cannot stop inside an epoch
    assert load(tmp_path / "out").vectors.shape[1] == 16


@pytest.mark.slow
@pytest.mark.parametrize("method", ["word2vec", "glove"])
def test_training_says_up_front_how_long_it_takes(tmp_path, corpus, method, monkeypatch, capsys):
    import bertology.recipes.static_vectors

    monkeypatch.setattr(bertology.recipes.static_vectors, "ESTIMATE_AFTER_SECONDS", 0.0)  # glove: after its first batch
    train(settings(corpus, tmp_path / "out", method, epochs=3, batch_size=64))
    err = capsys.readouterr().err
    assert err.count("training at ") == 1 and re.search(r"epochs/s.*: 3 epochs take about \d+ s", err), err


def test_glove_threads_train_every_batch_once():
    """Two Hogwild threads run each batch of the order once (counted by entries and batches)."""
    glove = GloVe(5, 3, seed=0)
    rows, cols = torch.tensor([0, 1, 2, 3, 4, 0, 1]), torch.tensor([1, 2, 3, 4, 0, 2, 3])
    counts = torch.full((7,), 5.0)
    loss, entries, done = glove.train_batches(rows, cols, counts, [3, 0, 2, 1], batch_size=2, workers=2)
    assert (entries, done) == (7, 4) and loss > 0
    alone = GloVe(5, 3, seed=0)
    expected = sum(alone.step(rows[b * 2:b * 2 + 2], cols[b * 2:b * 2 + 2], counts[b * 2:b * 2 + 2]) for b in [1, 0])
    assert GloVe(5, 3, seed=0).train_batches(rows, cols, counts, [1, 0], 2)[0] == pytest.approx(expected)


@pytest.mark.slow
def test_format_summary(trained):
    text = format_summary(trained["glove"][1])
    assert text.startswith(f"glove: {trained['glove'][1]['vocab_size']} words x 16 dimensions, 15.0 epochs")
    assert "held-out documents: " in text and "wordsim353" in text and "analogy (3CosAdd)" in text


# --- bad input ---


def check_fails(cfg: StaticTrainConfig, message: str) -> None:
    with pytest.raises(UserError, match=message):
        train(cfg)
    out = Path(cfg.out)
    assert not out.exists() and no_partial_output(out.parent)


def test_empty_corpus(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n  \n", encoding="utf-8")
    check_fails(settings(tmp_path / "empty.txt", tmp_path / "out", "glove"), r"empty.txt: the corpus has no text")


def test_corpus_without_words(tmp_path):
    (tmp_path / "dots.txt").write_text("... !!!\n-- ?\n", encoding="utf-8")
    check_fails(settings(tmp_path / "dots.txt", tmp_path / "out", "word2vec"),
                r"dots.txt: the training documents hold no words")


def test_min_count_lets_too_few_words_through(tmp_path, corpus):
    check_fails(settings(corpus, tmp_path / "out", "glove", min_count=10_000),
                r"verbs.txt: only 0 of \d+ distinct words occur at least --min-count 10000 times "
                r"\(the most frequent \d+ times\); need at least 2")


def test_unknown_method_and_bad_settings(tmp_path, corpus):
    check_fails(settings(corpus, tmp_path / "out", "bert"), r"--method must be one of word2vec, fasttext, glove, got 'bert'")
    check_fails(settings(corpus, tmp_path / "out", "glove", window=0), r"--window must be positive, got 0")
    check_fails(settings(corpus, tmp_path / "out", "fasttext", min_n=5, max_n=3), r"--max-n \(3\) must be at least")
    check_fails(settings(tmp_path / "missing.txt", tmp_path / "out", "glove"), r"missing.txt: no such file")
    check_fails(settings(corpus, tmp_path / "out", "glove", max_time="0"), r"--max-time must be positive, got '0'")
    check_fails(StaticTrainConfig(out=str(tmp_path / "out")), r"--corpus is required \(or --import-vectors\)")


def test_glove_that_diverges_writes_no_vectors(tmp_path, corpus):
    """--lr 1e30 (finite, so within its bounds): the vectors overflow; 634 of 634 NaN vectors were written."""
    check_fails(settings(corpus, tmp_path / "out", "glove", lr=1e30, epochs=2),
                r"the trained vectors hold NaN or infinite values: training diverged \(the learning rate --lr 1e\+30")


@pytest.mark.parametrize("method, changes, message", [
    ("glove", {"window": 10**9}, r"--window must be at most 10000, got 1000000000"),
    ("word2vec", {"negative": 10**6}, r"--negative must be at most 100, got 1000000"),
    ("word2vec", {"threads": 10**5}, r"--threads must be at most 256, got 100000"),
    # found by the fuzz tier: gensim's own ValueError, a SIGSEGV, an OverflowError of its and one of ours
    ("word2vec", {"negative": 0}, r"--negative must be positive, got 0"),
    ("fasttext", {"lr": 100.0}, r"--lr must be at most 1 for fasttext, got 100 \(above it gensim's"),
    ("word2vec", {"lr": 1e308}, r"--lr must be at most 1 for word2vec"),
    ("word2vec", {"sample": 1e308}, r"--sample must be at most 1e\+09, got 1e\+308"),
    ("glove", {"window": 10_000, "chunk_tokens": 2**30}, r"--chunk-tokens 1,073,741,824 x --window 10,000 needs about"),
    ("fasttext", {"bucket": 2**40}, r"--bucket 1,099,511,627,776 x --vector-size 16 needs about [\d,.]+ GiB"),
    ("glove", {"vector_size": 2**40}, r"--vector-size 1,099,511,627,776 over \d+ words needs about"),
])
def test_sizes_and_loops_are_bounded_before_they_start(tmp_path, corpus, method, changes, message):
    """GloVe's --window 1e9, word2vec's --negative 1000000 and --workers 100000 hung; the sizes
    below would have allocated terabytes."""
    check_fails(settings(corpus, tmp_path / "out", method, **changes), message)


@pytest.mark.slow
def test_a_time_budget_of_1e308_seconds_trains_the_planned_epochs(tmp_path, corpus):
    """Found by the fuzz tier: the epochs that fit 1e308 s, inf, were made an int (OverflowError)."""
    summary = train(settings(corpus, tmp_path / "out", "word2vec", max_time=1e308, epochs=2))
    assert summary["epochs"] == 2 and not summary["stopped_by_max_time"]


def test_existing_output_is_refused(tmp_path, corpus):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"out already exists and is not empty"):
        train(settings(corpus, tmp_path / "out", "word2vec"))
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_interrupted_training_leaves_nothing(tmp_path, corpus, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(GloVe, "step", interrupt)
    with pytest.raises(KeyboardInterrupt):
        train(settings(corpus, tmp_path / "out", "glove"))
    assert list(tmp_path.iterdir()) == []


def test_import_of_a_bad_file_leaves_nothing(tmp_path):
    (tmp_path / "glove.txt").write_text("the 1 2\ncat 3\n", encoding="utf-8")
    check_fails(StaticTrainConfig(import_vectors=str(tmp_path / "glove.txt"), out=str(tmp_path / "out")),
                r"glove.txt:2: expected a word and 2 numbers, found 2 fields")


# --- importing ---


def test_import_a_glove_file(tmp_path):
    (tmp_path / "glove.txt").write_text("king 1 0.5\nqueen 0.9 0.6\nQueen 0 1\n", encoding="utf-8")
    summary = train(StaticTrainConfig(import_vectors=str(tmp_path / "glove.txt"), out=str(tmp_path / "out")))
    assert summary["method"] == "imported" and summary["vocab_size"] == 3 and summary["lowercase"] is False
    model = load(tmp_path / "out")
    assert model.words == ["king", "queen", "Queen"] and model.counts is None
    assert torch.equal(model.vectors, torch.tensor([[1, 0.5], [0.9, 0.6], [0, 1]]))
    assert model.nearest("king", k=1)[0][0] == "queen"


def test_import_a_facebook_fasttext_bin(tmp_path):
    sentences = [["walking", "walked", "walks", "slowly"], ["talking", "talked", "talks", "loudly"]] * 20
    ft = FastText(sentences, vector_size=8, min_count=1, epochs=3, bucket=300, workers=1, seed=1)
    save_facebook_model(ft, str(tmp_path / "ft.bin"))
    train(StaticTrainConfig(import_vectors=str(tmp_path / "ft.bin"), out=str(tmp_path / "out")))
    model = load(tmp_path / "out")
    assert model.has_subwords() and model.config.bucket == 300
    assert np.allclose(model.vector("walkable").numpy(), ft.wv["walkable"], atol=1e-6)


@pytest.fixture(scope="module")
def fasttext_bin(tmp_path_factory) -> Path:
    sentences = [["walking", "walked", "walks", "slowly"], ["talking", "talked", "talks", "loudly"]] * 20
    ft = FastText(sentences, vector_size=8, min_count=1, epochs=3, bucket=300, workers=1, seed=1)
    path = tmp_path_factory.mktemp("fasttext") / "ft.bin"
    save_facebook_model(ft, str(path))
    return path


def damaged(data: bytes, where: int, value: bytes) -> bytes:
    return data[:where] + value + data[where + len(value):]


DICTIONARY = 8 + 48 + 8  # magic, version, 12 int32 arguments, a float64: the vocabulary's sizes follow
FASTTEXT_DAMAGE = {
    "vocabulary size": (lambda d: damaged(d, DICTIONARY, struct.pack("<i", 1_000_000)), "its dictionary claims"),
    "vocabulary size, one byte": (lambda d: damaged(d, DICTIONARY + 2, b"\x01"), "its dictionary claims"),
    "word count": (lambda d: damaged(d, DICTIONARY + 4, struct.pack("<i", -3)), "its dictionary claims"),
    "labels": (lambda d: damaged(d, DICTIONARY + 8, struct.pack("<i", 2)), "a supervised model"),
    "dimension": (lambda d: damaged(d, 8, struct.pack("<i", 9)), "matrix claims"),
    "buckets": (lambda d: damaged(d, 8 + 32, struct.pack("<i", 10**9)), "matrix claims"),
    "truncated": (lambda d: d[: len(d) // 2], "matrix claims"),
    "cut in the vocabulary": (lambda d: d[: DICTIONARY + 24 + 100], "the file ends inside word"),
    "trailing bytes": (lambda d: d + b"\0" * 12, "12 bytes after the last matrix"),
    "header only": (lambda d: d[:30], "shorter than its header"),
}


@pytest.mark.parametrize("damage", list(FASTTEXT_DAMAGE))
def test_a_damaged_fasttext_bin_is_one_line_at_once(tmp_path, fasttext_bin, damage):
    """One changed byte in the vocabulary's size hung gensim's reader for over 600 s (it reads words
    past the end of the file); other damage escaped as AssertionError, NotImplementedError, OverflowError."""
    change, message = FASTTEXT_DAMAGE[damage]
    (tmp_path / "ft.bin").write_bytes(change(fasttext_bin.read_bytes()))
    start = time.perf_counter()
    check_fails(StaticTrainConfig(import_vectors=str(tmp_path / "ft.bin"), out=str(tmp_path / "out")),
                f"ft.bin: not a readable fastText .bin file \\(.*{message}")
    assert time.perf_counter() - start < 5


def test_a_binary_header_bigger_than_its_file_is_refused_before_allocating(tmp_path):
    """A header of 100,000,000 x 100 in a small file allocated 37 GiB before reading any data."""
    (tmp_path / "big.bin").write_bytes(b"100000000 100\nthe " + np.ones(100, dtype="<f4").tobytes())
    check_fails(StaticTrainConfig(import_vectors=str(tmp_path / "big.bin"), out=str(tmp_path / "out")),
                r"big.bin:1: the header says 100,000,000 words of 100 dimensions, more than the file's 418 bytes")


@pytest.mark.parametrize("content, message", [
    ("the 1 2\ncat 3 nan\n".encode(), r"vectors.txt:2: the vector of 'cat' holds inf or nan"),
    (b"the 1 2\ncaf\xe9 3 4\n", r"vectors.txt:2: not UTF-8 text"),  # a Latin-1 word, no header: GloVe's text
    (b"2 2\nthe 1 2\ncaf\xe9 3 4\n", r"vectors.txt:3: not UTF-8 text"),  # with word2vec's header
])
def test_a_bad_vectors_file_names_its_line_and_word(tmp_path, content, message):
    (tmp_path / "vectors.txt").write_bytes(content)
    check_fails(StaticTrainConfig(import_vectors=str(tmp_path / "vectors.txt"), out=str(tmp_path / "out")), message)


def test_a_byte_order_mark_is_no_part_of_the_first_word(tmp_path):
    for encoding, text in (("utf-8-sig", "the 1 2\ncat 3 4\n"), ("utf-16", "the 1 2\ncat 3 4\n")):
        (tmp_path / "glove.txt").write_bytes(text.encode(encoding))
        train(StaticTrainConfig(import_vectors=str(tmp_path / "glove.txt"), out=str(tmp_path / encoding)))
        assert load(tmp_path / encoding).words == ["the", "cat"]


@pytest.fixture(scope="module")
def fasttext_dir(tmp_path_factory, fasttext_bin) -> Path:
    out = tmp_path_factory.mktemp("ftdir") / "vectors"
    train(StaticTrainConfig(import_vectors=str(fasttext_bin), out=str(out)))
    return out


@pytest.mark.parametrize("damage, message", [
    ("truncated", r"subwords.safetensors: cannot read safetensors file"),
    ("renamed", r"subwords.safetensors: no tensor named ngram_vectors \(it holds ngrams, vocab_vectors\)"),
    ("nan", r"subwords.safetensors: ngram_vectors: the vector of bucket 7 holds inf or nan"),
    ("nan word", r"subwords.safetensors: vocab_vectors: the vector of the word '\w+' \(row 2\) holds inf or nan"),
    ("vocab", r"vocab.txt: not UTF-8 text"),
])
def test_a_damaged_vectors_directory_is_one_line(tmp_path, fasttext_dir, damage, message):
    """A truncated subwords.safetensors, wrong tensor names or a non-UTF-8 vocab.txt gave tracebacks,
    and NaN sub-word vectors were served (`neighbors` printed nan)."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "vectors"
    shutil.copytree(fasttext_dir, folder)
    subwords = folder / "subwords.safetensors"
    tensors = load_file(str(subwords))
    if damage == "truncated":
        subwords.write_bytes(subwords.read_bytes()[:100])
    elif damage == "renamed":
        save_file({"vocab_vectors": tensors["vocab_vectors"], "ngrams": tensors["ngram_vectors"]}, str(subwords))
    elif damage.startswith("nan"):
        name, row = ("vocab_vectors", 1) if damage == "nan word" else ("ngram_vectors", 7)
        tensors[name][row, 3] = float("nan")
        save_file(tensors, str(subwords))
    else:
        (folder / "vocab.txt").write_bytes(b"\xff" + (folder / "vocab.txt").read_bytes())
    with pytest.raises(UserError, match=message) as error:
        neighbors(StaticNeighborsConfig(vectors=str(folder), words=["walking"]))
    assert "\n" not in str(error.value)


# --- evaluation ---


def read_pairs(name: str) -> list[tuple[str, str, float]]:
    lines = (TEST_DATA / name).read_text(encoding="utf-8").splitlines()
    return [(a.lower(), b.lower(), float(s)) for a, b, s in (line.split("\t")[:3] for line in lines
                                                             if line.strip() and not line.startswith("#"))]


ANALOGY_WORDS = ["athens", "greece", "baghdad", "iraq", "bangkok", "thailand"]


def hand_made_vectors(directory: Path, reverse: bool = False) -> tuple[list, int]:
    """Six WordSim-353 pairs, each in its own plane at an angle that shrinks as the human score
    grows (grows, with `reverse`), so Spearman is 1 (-1); and capitals and countries with
    country = capital + one shared offset, so 3CosAdd answers every capital-country question.

    Returns the chosen pairs and the number of analogy questions whose words all have vectors.
    """
    all_pairs = read_pairs("wordsim353.tsv")
    vocab, chosen = set(ANALOGY_WORDS), []
    for a, b, score in all_pairs:  # pairs of new words that bring no other pair of the file along
        grown = vocab | {a, b}
        if a == b or {a, b} & vocab or score in [s for *_, s in chosen]:
            continue
        if sum(x in grown and y in grown for x, y, _ in all_pairs) == len(chosen) + 1:
            vocab, chosen = grown, [*chosen, (a, b, score)]
        if len(chosen) == 6:
            break
    size = 2 * len(chosen) + 4
    rows = {}
    for rank, (a, b, _) in enumerate(sorted(chosen, key=lambda p: p[2])):
        angle = math.radians(10 * (rank + 1) if reverse else 80 - 10 * rank)
        rows[a], rows[b] = np.zeros(size), np.zeros(size)
        rows[a][2 * rank] = 1
        rows[b][2 * rank], rows[b][2 * rank + 1] = math.cos(angle), math.sin(angle)
    for k, (capital, country) in enumerate(zip(ANALOGY_WORDS[::2], ANALOGY_WORDS[1::2])):
        rows[capital], rows[country] = np.zeros(size), np.zeros(size)
        rows[capital][size - 4 + k] = rows[country][size - 4 + k] = 1
        rows[country][size - 1] = 1  # the offset shared by every country
    words = sorted(rows)
    StaticVectors(StaticConfig("imported", size, True), words, np.stack([rows[w] for w in words]).astype(np.float32)
                  ).save_pretrained(directory)
    lines = (TEST_DATA / "questions-words.txt").read_text(encoding="utf-8").lower().splitlines()
    answerable = sum(1 for line in lines if not line.startswith(":") and all(w in rows for w in line.split()))
    return chosen, answerable


@pytest.mark.slow
def test_evaluation_of_hand_made_vectors(tmp_path):
    chosen, answerable = hand_made_vectors(tmp_path / "v")
    assert len(chosen) == 6 and answerable >= 6  # at least the capital-common-countries section's ordered pairs
    results = evaluate(StaticEvalConfig(vectors=str(tmp_path / "v")))
    assert results["wordsim353"] == {"spearman": 1.0, "pairs": 353, "scored": 6, "oov_pairs": 347, "subword_pairs": 0}
    assert results["analogy"] == {"accuracy": 1.0, "semantic": 1.0, "syntactic": None, "questions": 19544,
                                  "scored": answerable, "oov_questions": 19544 - answerable}
    assert results["simlex999"]["pairs"] == 999
    hand_made_vectors(tmp_path / "reversed", reverse=True)
    assert evaluate(StaticEvalConfig(vectors=str(tmp_path / "reversed"), benchmarks=["wordsim353"]))["wordsim353"][
        "spearman"] == -1.0
    restricted = evaluate(StaticEvalConfig(vectors=str(tmp_path / "v"), analogy_vocab=4))  # 4 words: no question left
    assert restricted["analogy"]["scored"] == 0 and restricted["analogy"]["accuracy"] is None
    text = format_evaluation(results)
    assert "wordsim353           Spearman 1.000 on 6/353 pairs, 347 with OOV words" in text
    assert f"accuracy 1.000 (semantic 1.000, syntactic n/a) on {answerable}/19544 questions" in text


def test_evaluation_with_every_pair_oov(tmp_path):
    StaticVectors(StaticConfig("imported", 2, True), ["zzyzx", "qwxv"], np.eye(2, dtype=np.float32)).save_pretrained(tmp_path)
    with pytest.raises(UserError, match=r"wordsim353.tsv, .*questions-words.txt: no pair or question has all its words "
                                        r"in the vocabulary of .* \(2 words, lowercase=True\); nothing to evaluate"):
        evaluate(StaticEvalConfig(vectors=str(tmp_path)))
    with pytest.raises(UserError, match=r"unknown benchmark\(s\) men3000"):
        evaluate(StaticEvalConfig(vectors=str(tmp_path), benchmarks=["men3000"]))


# --- the command line ---


@pytest.mark.slow
def test_cli_trains_evaluates_and_lists_neighbours(tmp_path, corpus, capsys):
    from helpers import run_cli

    out = tmp_path / "vectors"
    status, stdout, err = run_cli(capsys, "static", "train", "--corpus", corpus, "--out", out, "--method", "fasttext",
                                  "--vector-size", "16", "--window", "3", "--min-count", "2", "--epochs", "15",
                                  "--bucket", "2000", "--threads", "1", "--no-progress")
    assert status == 0, err
    assert "fasttext:" in stdout and "wordsim353" in stdout and str(out) in stdout
    status, stdout, err = run_cli(capsys, "static", "evaluate", "--vectors", out, "--benchmarks", "simlex999")
    assert status == 0, err
    assert stdout.startswith("simlex999") and "analogy" not in stdout
    status, stdout, err = run_cli(capsys, "static", "neighbors", "--vectors", out, "--k", "3", "walkings")
    assert status == 0, err
    line = stdout.strip()
    assert line.startswith("walkings (not in the vocabulary: from its character n-grams): ")
    assert "walk" in line.split(": ", 1)[1].split(",")[0]  # the nearest neighbour shares the stem


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    from helpers import run_cli

    status, _, err = run_cli(capsys, "static", "train", "--corpus", tmp_path / "missing.txt", "--out", tmp_path / "v")
    assert status == 2 and err.count("\n") == 1 and "missing.txt: no such file or directory" in err
    assert not (tmp_path / "v").exists()
    status, _, err = run_cli(capsys, "static", "train", "--corpus", tmp_path, "--out", tmp_path / "v",
                             "--method", "bow")
    assert status == 2 and "bow" in err and "word2vec" in err


# --- kill, SIGTERM, two runs at once: each one a process, as a user's would be ---


def start_training(corpus: Path, out: Path, *flags: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(bertology.__file__).parents[1]), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "bertology", "static", "train", "--corpus", str(corpus), "--out",
                             str(out), "--method", "glove", "--vector-size", "16", "--min-count", "1", "--workers", "1",
                             "--no-progress", *flags], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for_staging(out: Path, process: subprocess.Popen) -> None:
    """Until the run writes into its hidden folder beside `out` (a file there newer than the
    process: a killed run's folder may be there already), and a second more."""
    started, deadline = time.time() - 1, time.monotonic() + 60

    def writing() -> bool:
        for folder in (p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.partial")):
            try:
                if any(f.stat().st_mtime >= started for f in folder.iterdir()):
                    return True
            except FileNotFoundError:  # being emptied
                pass
        return False

    while not writing():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    time.sleep(1.0)  # reading and counting done: GloVe's epochs are running


@pytest.fixture(scope="module")
def long_corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("long") / "verbs.txt", documents=60)


@pytest.mark.slow
def test_killed_and_terminated_runs_leave_nothing_and_the_next_run_succeeds(tmp_path, long_corpus):
    """A killed static train left a hidden .NAME.partial-* folder each time."""
    out = tmp_path / "vectors"
    for _ in range(2):  # killed twice: nothing piles up
        run = start_training(long_corpus, out, "--epochs", "500")
        wait_for_staging(out, run)
        run.kill()
        run.wait()
    run = start_training(long_corpus, out, "--epochs", "500")
    wait_for_staging(out, run)
    run.terminate()  # SIGTERM: cleaned up on the way out, as Ctrl-C
    assert run.wait(30) == 130 and "interrupted" in run.communicate()[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    train(settings(long_corpus, out, "glove", epochs=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors"] and (out / "config.json").is_file()


RACE_LOST = ("is being written by another run (its .vectors.partial is locked); wait for it to finish, or choose "
             "another --out", "already exists and is not empty; choose another --out")


@pytest.mark.slow
def test_two_runs_into_one_out_one_wins_the_other_is_refused_in_one_line(tmp_path, long_corpus):
    """Two static train into one --out ended in OSError: [Errno 39] Directory not empty. Started
    together, whichever locks the folder first wins; the other is refused while it writes (or, if
    it comes late, because the folder is there)."""
    out = tmp_path / "vectors"
    runs = [start_training(long_corpus, out, "--epochs", "100000", "--max-time", "4") for _ in range(2)]
    errors = [run.communicate(timeout=300)[1] for run in runs]
    results = sorted(zip((run.returncode for run in runs), errors))
    assert [status for status, _ in results] == [0, 2], results
    lost = results[1][1].strip()
    assert lost.startswith(f"bertology: error: {out} ") and lost.endswith(RACE_LOST) and "\n" not in lost, lost
    assert load(out).words and sorted(p.name for p in tmp_path.iterdir()) == ["vectors"]
