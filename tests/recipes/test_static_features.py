"""Static word vectors as features (recipes/static_features.py): `finetune --mode features` on a
vectors directory learns sentence and tagging tasks whose answer lies in the words' vectors."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli

from bertology.errors import UserError
from bertology.models.static import StaticConfig, StaticVectors
from bertology.recipes.finetune import FinetuneConfig, run_finetuning

# Four topics of four nouns each; the fillers carry no topic. CoNLL's entity types name the topics.
TOPICS = {"PER": ["park", "street", "dog", "morning"], "ORG": ["canvas", "brush", "colour", "wall"],
          "LOC": ["kitchen", "soup", "pan", "dinner"], "MISC": ["rock", "rope", "summit", "cliff"]}
FILLERS = ["the", "a", "and", "then", "we", "saw", "it"]


@pytest.fixture(scope="module")
def vectors_dir(tmp_path_factory) -> Path:
    """Hand-made 16-d vectors: a topic's nouns lie near the topic's own direction, fillers near 0."""
    rng = np.random.default_rng(0)
    directions = rng.normal(size=(len(TOPICS), 16))
    words, rows = [], []
    for direction, nouns in zip(directions, TOPICS.values()):
        for noun in nouns:
            words.append(noun)
            rows.append(direction + 0.3 * rng.normal(size=16))
    for filler in FILLERS:
        words.append(filler)
        rows.append(0.3 * rng.normal(size=16))
    out = tmp_path_factory.mktemp("vectors") / "hand-made"
    StaticVectors(StaticConfig("imported", 16, lowercase=True), words, np.array(rows, dtype=np.float32)).save_pretrained(out)
    return out


def sentence(rng: random.Random, topic: str) -> list[str]:
    words = rng.sample(TOPICS[topic], 2) + rng.sample(FILLERS, 3)
    rng.shuffle(words)
    return words


@pytest.fixture(scope="module")
def topic_task(tmp_path_factory) -> Path:
    """A classification task (label = the topic of a sentence's nouns, capitalised in the text to
    check that the vectors' lower-casing applies) and a tagging task (each noun tagged B-<its
    topic's type>, fillers and punctuation O), train and dev from different random sentences."""
    folder = tmp_path_factory.mktemp("topic_task")
    for split, seed, count in (("train", 0, 200), ("dev", 1, 80)):
        rng = random.Random(seed)
        rows, conll = [], []
        for _ in range(count):
            topic = rng.choice(list(TOPICS))
            words = sentence(rng, topic)
            rows.append(json.dumps({"text": " ".join(w.capitalize() for w in words) + ".", "label": topic}))
            conll += [f"{w} {'B-' + topic if w in TOPICS[topic] else 'O'}" for w in words] + [". O", ""]
        (folder / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
        (folder / ("train.txt" if split == "train" else "valid.txt")).write_text("\n".join(conll) + "\n")
    return folder


def settings(vectors_dir: Path, out: Path, **task) -> FinetuneConfig:
    return FinetuneConfig(**{"model": str(vectors_dir), "out": str(out), "mode": "features", "epochs": 15, "lr": 1e-2,
                             "batch_size": 16, "warmup": 0.0, "progress": False, **task})


@pytest.mark.slow
def test_a_sentence_head_on_pooled_static_vectors_learns_the_topic(vectors_dir, topic_task, tmp_path, capsys):
    for pooling in ("mean", "max"):
        out = tmp_path / pooling
        results = run_finetuning(settings(vectors_dir, out, task="classification", feature_pooling=pooling,
                                          train_file=str(topic_task / "train.jsonl"),
                                          dev_file=str(topic_task / "dev.jsonl")))
        assert results["accuracy"] >= 0.95, (pooling, results)  # chance is about 0.25
        saved = json.loads((out / "eval_results.json").read_text())
        assert saved["accuracy"] == results["accuracy"] and saved["mode"] == "features"
        # the output is a vectors directory with the head beside it
        assert StaticVectors.from_pretrained(out).words == StaticVectors.from_pretrained(vectors_dir).words
        assert {"feature_head.json", "feature_head.safetensors", "learning_curve.png"} <= {p.name for p in out.iterdir()}


@pytest.mark.slow
def test_a_bilstm_tagger_on_static_vectors_tags_each_word(vectors_dir, topic_task, tmp_path):
    results = run_finetuning(settings(vectors_dir, tmp_path / "tagger", task="conll2003", data=str(topic_task),
                                      feature_head="bilstm", seeds=2, epochs=3))  # a BiLSTM step is slow on a CPU
    assert results["seeds"] == 2 and results["f1_min"] >= 0.95, results  # entity-level F1 (seqeval)


def test_static_vectors_only_train_a_head(vectors_dir, topic_task, tmp_path, capsys):
    base = ["finetune", "--model", vectors_dir, "--task", "classification", "--train-file",
            topic_task / "train.jsonl", "--dev-file", topic_task / "dev.jsonl", "--no-progress"]
    status, _, err = run_cli(capsys, *base, "--out", tmp_path / "a")
    assert status == 2 and "is a fixed feature source: use --mode features" in err
    status, _, err = run_cli(capsys, *base, "--out", tmp_path / "b", "--mode", "features", "--feature-pooling", "cls")
    assert status == 2 and err.count("\n") == 1 and "mean or max" in err
    with pytest.raises(UserError, match="not span"):
        run_finetuning(settings(vectors_dir, tmp_path / "c", task="squad", data=str(tmp_path)))
