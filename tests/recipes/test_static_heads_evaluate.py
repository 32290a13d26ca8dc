"""`evaluate` and `predict` on a feature head over static vectors or CoVe (recipes/static_features.py):
they score a split exactly as the training's dev evaluation did (eval_results.json), `predict`'s
file scores the same, and the run directory reads its own copy of the vectors."""

import collections
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import WORDS, keyword_sentence, run_cli, save_tiny_vectors

from bertology.errors import UserError
from bertology.inference.predict import score
from bertology.inference.runners import load_finetuned
from bertology.inference.static_heads import load_static_head
from bertology.models.cove import SOURCE_SPECIALS, TARGET_SPECIALS, CoVeConfig, CoVeForTranslation
from bertology.models.static import StaticConfig, StaticVectors
from bertology.tasks.readers import read_examples

KEYWORD_WORDS = [*WORDS, "excellent"]


def train_head(capsys, model: Path, out: Path, *task_args, epochs: int = 4) -> dict:
    """`finetune --mode features` on `model` (a small linear head, one seed); returns eval_results.json."""
    status, _, err = run_cli(capsys, "finetune", "--mode", "features", "--model", model, *task_args,
                             "--epochs", epochs, "--lr", "1e-1", "--batch-size", "16", "--warmup", "0",
                             "--out", out, "--no-progress")
    assert status == 0, err
    return json.loads((out / "eval_results.json").read_text())


def evaluate(capsys, run_dir: Path, data: Path, tmp_path: Path) -> dict:
    """`bertology evaluate` on the dev split, its results as written by --out."""
    status, _, err = run_cli(capsys, "evaluate", "--model", run_dir, "--data", data, "--out", tmp_path / "scores.json")
    assert status == 0, err
    return json.loads((tmp_path / "scores.json").read_text())


def predicted_scores(capsys, run_dir: Path, dev_file: Path, tmp_path: Path) -> dict:
    """`bertology predict` over the dev file, its written predictions scored against the file's gold labels."""
    out = tmp_path / "predictions.txt"
    status, _, err = run_cli(capsys, "predict", "--model", run_dir, "--input", dev_file, "--out", out)
    assert status == 0, err
    _, _, spec = load_static_head(run_dir)
    examples = read_examples(spec, dev_file, "dev")
    if spec.kind == "token":  # CoNLL columns: word gold predicted, a blank line after each sentence
        sentences = out.read_text().split("\n\n")
        predictions = [[line.split()[-1] for line in block.splitlines()] for block in sentences if block.strip()]
    else:  # GLUE TSV: index, prediction
        rows = [line.split("\t")[1] for line in out.read_text().splitlines()[1:]]
        predictions = [float(row) for row in rows] if spec.regression else rows
    assert len(predictions) == len(examples)
    return score(spec, examples, predictions)


def check_same_metrics(saved: dict, scores: dict, metrics: tuple[str, ...]) -> None:
    """Each metric equal to the last bit."""
    for metric in metrics:
        assert scores[metric] == saved[metric], (metric, scores, saved)


@pytest.fixture(scope="module")
def keyword_vectors(tmp_path_factory) -> Path:
    return save_tiny_vectors(tmp_path_factory.mktemp("vectors") / "keyword", KEYWORD_WORDS, dim=16)


@pytest.mark.slow
def test_evaluate_and_predict_reproduce_a_sentence_heads_dev_scores(keyword_vectors, keyword_task, tmp_path, capsys):
    run_dir = tmp_path / "head"
    saved = train_head(capsys, keyword_vectors, run_dir, "--task", "classification", "--train-file", keyword_task / "train.csv", "--dev-file", keyword_task / "dev.csv")
    assert saved["accuracy"] > 0.75, saved  # it learnt something: the equalities below are not trivial
    scores = evaluate(capsys, run_dir, keyword_task / "dev.csv", tmp_path)
    assert scores["task"] == "classification" and scores["split"] == "dev"
    check_same_metrics(saved, scores, ("accuracy", "mcc"))
    check_same_metrics(saved, predicted_scores(capsys, run_dir, keyword_task / "dev.csv", tmp_path), ("accuracy", "mcc"))
    # plain text in: one prediction a line
    (tmp_path / "texts.txt").write_text("the film was excellent\nthe plot\n")
    status, out, err = run_cli(capsys, "predict", "--model", run_dir, "--input", tmp_path / "texts.txt",
                               "--out", tmp_path / "texts.tsv")
    assert status == 0 and "wrote 2 predictions" in out, err
    assert len((tmp_path / "texts.tsv").read_text().splitlines()) == 3


@pytest.mark.slow
def test_evaluate_and_predict_reproduce_a_pair_regression_heads_dev_scores(keyword_vectors, tmp_path, capsys):
    """A pair task scored by correlations: the exact floats must match, not just the argmax."""
    rng = random.Random(0)
    folder = tmp_path / "pairs"
    folder.mkdir()
    for split, size in (("train", 160), ("dev", 60)):
        rows = []
        for _ in range(size):
            a, b = rng.random() < 0.5, rng.random() < 0.5
            rows.append(json.dumps({"text": keyword_sentence(rng, a), "text_pair": keyword_sentence(rng, b),
                                    "label": a + b + rng.random() / 2}))
        (folder / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    run_dir = tmp_path / "head"
    saved = train_head(capsys, keyword_vectors, run_dir, "--task", "pair-regression", "--data", folder)
    assert saved["pearson"] > 0.5, saved
    scores = evaluate(capsys, run_dir, folder, tmp_path)
    check_same_metrics(saved, scores, ("spearman", "pearson"))
    # predict writes scores with 3 decimals: their correlations agree to that precision
    predicted = predicted_scores(capsys, run_dir, folder / "dev.jsonl", tmp_path)
    assert predicted["pearson"] == pytest.approx(saved["pearson"], abs=1e-3)


@pytest.mark.slow
def test_evaluate_and_predict_reproduce_a_conll_taggers_dev_scores(data_dir, tmp_path, capsys):
    """A few sentences of CoNLL-2003 (train and dev); each lower-cased word's vector points along
    its most frequent tag's axis (plus noise), so that a linear tagger learns in two epochs."""
    folder = tmp_path / "conll"
    folder.mkdir()
    tags = collections.defaultdict(collections.Counter)
    for name, count in (("train.txt", 200), ("valid.txt", 80)):
        blocks = (data_dir / "conll2003" / name).read_text().split("\n\n")[1: count + 1]  # after -DOCSTART-
        (folder / name).write_text("\n\n".join(blocks) + "\n")
        for fields in (line.split() for block in blocks for line in block.splitlines() if line.strip()):
            tags[fields[0].lower()][fields[-1]] += 1
    names = sorted({tag for counts in tags.values() for tag in counts})
    rng = np.random.default_rng(0)
    words = sorted(tags)
    rows = [2 * np.eye(16)[names.index(tags[w].most_common(1)[0][0])] + 0.3 * rng.normal(size=16) for w in words]
    vectors = tmp_path / "vectors"
    StaticVectors(StaticConfig("imported", 16, lowercase=True), words, np.array(rows, dtype=np.float32)).save_pretrained(vectors)
    run_dir = tmp_path / "tagger"
    saved = train_head(capsys, vectors, run_dir, "--task", "conll2003", "--data", folder, epochs=2)
    assert saved["f1"] > 0.5, saved  # entity-level F1 (seqeval)
    metrics = ("f1", "precision", "recall", "accuracy")
    check_same_metrics(saved, evaluate(capsys, run_dir, folder, tmp_path), metrics)
    check_same_metrics(saved, predicted_scores(capsys, run_dir, folder / "valid.txt", tmp_path), metrics)


def save_tiny_cove(directory: Path) -> Path:
    """A random tiny CoVe translation model (8-d English vectors, 6 per direction) over the keyword task's words."""
    torch.manual_seed(0)
    german = ["ein", "Film"]
    config = CoVeConfig.from_preset("tiny", input_size=8, hidden_size=6, target_embedding_size=5,
                                    source_vocab_size=len(SOURCE_SPECIALS) + len(KEYWORD_WORDS),
                                    decoder_vocab_size=len(TARGET_SPECIALS) + len(german))
    model = CoVeForTranslation(config, [*SOURCE_SPECIALS, *KEYWORD_WORDS], [*TARGET_SPECIALS, *german])
    with torch.no_grad():
        model.encoder.source_vectors[len(SOURCE_SPECIALS):] = torch.randn(len(KEYWORD_WORDS), 8)
    model.save_pretrained(directory)
    return directory


@pytest.mark.slow
def test_evaluate_reproduces_a_head_over_cove(keyword_task, tmp_path, capsys):
    cove = save_tiny_cove(tmp_path / "cove")
    run_dir = tmp_path / "head"
    saved = train_head(capsys, cove, run_dir, "--task", "classification", "--train-file", keyword_task / "train.csv",
                       "--dev-file", keyword_task / "dev.csv", epochs=2)
    check_same_metrics(saved, evaluate(capsys, run_dir, keyword_task / "dev.csv", tmp_path), ("accuracy", "mcc"))
    check_same_metrics(saved, predicted_scores(capsys, run_dir, keyword_task / "dev.csv", tmp_path), ("accuracy", "mcc"))
    # distill does not take such a head yet, and says so in one line
    with pytest.raises(UserError, match="`predict` and `serve` run it; distill does not take one yet"):
        load_finetuned(str(run_dir))


@pytest.mark.slow
def test_a_run_reads_its_own_vectors_and_a_missing_copy_is_a_one_line_error(keyword_task, tmp_path, capsys):
    vectors = save_tiny_vectors(tmp_path / "vectors", KEYWORD_WORDS)
    run_dir = tmp_path / "head"
    saved = train_head(capsys, vectors, run_dir, "--task", "classification", "--train-file", keyword_task / "train.csv",
                       "--dev-file", keyword_task / "dev.csv", epochs=1)
    # the vectors the head trained from moved away: the run holds its own copy
    shutil.move(vectors, tmp_path / "moved")
    check_same_metrics(saved, evaluate(capsys, run_dir, keyword_task / "dev.csv", tmp_path), ("accuracy", "mcc"))
    # the run's copy missing: one line naming the file
    (run_dir / "vectors.bin").unlink()
    for command in (("evaluate", "--data", keyword_task / "dev.csv"),
                    ("predict", "--input", keyword_task / "dev.csv", "--out", tmp_path / "p.tsv")):
        status, _, err = run_cli(capsys, command[0], "--model", run_dir, *command[1:])
        assert status == 2 and err.count("\n") == 1 and str(run_dir / "vectors.bin") in err, err
    # a vectors directory without a head: one line saying how to train one
    status, _, err = run_cli(capsys, "evaluate", "--model", tmp_path / "moved", "--data", keyword_task / "dev.csv")
    assert status == 2 and err.count("\n") == 1 and "without a feature head" in err, err
