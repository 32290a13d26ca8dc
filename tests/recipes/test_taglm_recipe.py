"""`finetune --arch taglm`: TagLM's tagger trained on a CoNLL-format task, with and without a biLM,
then evaluated, predicted and served from its directory; and its one-line errors."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, save_tiny_elmo

from bertology import Tokenizer
from bertology.inference.predictor import Predictor
from bertology.models.static import StaticConfig, StaticVectors

FIRST = ["john", "mary", "peter", "anna", "paul", "lucy"]
LAST = ["smith", "jones", "brown", "miller"]
CITIES = ["paris", "london", "berlin", "rome", "madrid"]
VERBS = ["visited", "left", "saw", "loved"]


def sentence(rng: random.Random) -> list[tuple[str, str]]:
    """'<First> <Last> <verb> <City> .' or '<City> <verb> <First> .', tagged."""
    first, last, city, verb = (rng.choice(FIRST).title(), rng.choice(LAST).title(), rng.choice(CITIES).title(),
                               rng.choice(VERBS))
    if rng.random() < 0.5:
        return [(first, "B-PER"), (last, "I-PER"), (verb, "O"), (city, "B-LOC"), (".", "O")]
    return [(city, "B-LOC"), (verb, "O"), (first, "B-PER"), (".", "O")]


def write_conll(path: Path, count: int, seed: int) -> None:
    rng = random.Random(seed)
    blocks = ["\n".join(f"{word} NNP B-NP {tag}" for word, tag in sentence(rng)) for _ in range(count)]
    path.write_text("-DOCSTART- -X- -X- O\n\n" + "\n\n".join(blocks) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def names_task(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("names")
    write_conll(folder / "train.txt", 160, seed=0)
    write_conll(folder / "valid.txt", 40, seed=1)
    return folder


@pytest.fixture(scope="module")
def tiny_elmo(tmp_path_factory, minilm_dir) -> Path:
    return save_tiny_elmo(tmp_path_factory.mktemp("elmo"), Tokenizer.from_pretrained(minilm_dir))


def train(capsys, names_task, out, *extra) -> tuple[int, str, str]:
    return run_cli(capsys, "finetune", "--task", "conll2003", "--data", names_task, "--arch", "taglm", "--out", out,
                   "--lr", "1e-2", "--epochs", "6", "--batch-size", "16", "--no-progress", *extra)


def test_the_tagger_learns_names_and_places_without_a_biLM(capsys, names_task, tmp_path):
    status, out, err = train(capsys, names_task, tmp_path / "run")
    assert status == 0, err
    results = json.loads((tmp_path / "run" / "eval_results.json").read_text())
    assert results["f1"] > 0.9  # every word's tag follows from its word and position
    assert "trained TagLM's tagger without a biLM" in out
    assert not (tmp_path / "run" / "lm").exists()


def test_with_a_biLM_and_static_vectors_then_evaluate_predict_and_serve(capsys, names_task, tiny_elmo, tmp_path):
    vectors = tmp_path / "vectors"
    words = ["john", "paris", "visited"]
    StaticVectors(StaticConfig("imported", 8, lowercase=True), words,
                  np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)).save_pretrained(vectors)
    run = tmp_path / "run"
    status, out, err = train(capsys, names_task, run, "--lm", tiny_elmo, "--vectors", vectors)
    assert status == 0, err
    assert "reading the biLM" in out
    config = json.loads((run / "config.json").read_text())
    assert config["lm_size"] == 32 and config["word_embedding_dim"] == 8  # both ELMo directions; the vectors' width
    assert (run / "lm" / "model.safetensors").is_file() and (run / "lm" / "vocab.txt").is_file()
    recorded = json.loads((run / "eval_results.json").read_text())
    status, out, err = run_cli(capsys, "evaluate", "--model", run, "--data", names_task, "--out", tmp_path / "e.json")
    assert status == 0, err
    assert json.loads((tmp_path / "e.json").read_text())["f1"] == pytest.approx(recorded["f1"])
    (tmp_path / "in.txt").write_text("Mary Jones visited Rome .\nBerlin saw Paul .\n", encoding="utf-8")
    status, _, err = run_cli(capsys, "predict", "--model", run, "--input", tmp_path / "in.txt", "--out",
                             tmp_path / "out.conll")
    assert status == 0, err
    rows = [line.split() for line in (tmp_path / "out.conll").read_text().splitlines() if line]
    assert [r[0] for r in rows] == "Mary Jones visited Rome . Berlin saw Paul .".split()
    predictor = Predictor.load(str(run))
    served = predictor.predict(["Mary Jones visited Rome ."])
    assert served == [{"tokens": "Mary Jones visited Rome .".split(), "tags": [r[-1] for r in rows[:5]]}]
    assert predictor.kind == "tagging" and predictor.describe()["parameters"] > 0


def test_one_line_errors(capsys, names_task, tiny_model, tmp_path):
    status, _, err = train(capsys, names_task, tmp_path / "a", "--lm", tiny_model)
    assert status != 0 and f"{tiny_model}: a bert model, but TagLM's --lm is a bidirectional LM" in err
    assert len(err.strip().splitlines()) == 1
    status, _, err = train(capsys, names_task, tmp_path / "b", "--model", tiny_model)
    assert status != 0 and "--model is not an option of --arch taglm" in err
    status, _, err = run_cli(capsys, "finetune", "--task", "conll2003", "--data", names_task, "--out", tmp_path / "c",
                             "--model", tiny_model, "--lm", tmp_path)
    assert status != 0 and "--lm belongs to --arch taglm" in err
    status, _, err = run_cli(capsys, "finetune", "--task", "conll2003", "--data", names_task, "--out", tmp_path / "d")
    assert status != 0 and "--model is required" in err
    (tmp_path / "sst").mkdir()
    (tmp_path / "sst" / "train.tsv").write_text("sentence\tlabel\ngood\t1\n", encoding="utf-8")
    (tmp_path / "sst" / "dev.tsv").write_text("sentence\tlabel\nbad\t0\n", encoding="utf-8")
    status, _, err = run_cli(capsys, "finetune", "--task", "sst2", "--data", tmp_path / "sst", "--arch", "taglm",
                             "--out", tmp_path / "e")
    assert status != 0 and "--arch taglm is a sequence tagger" in err
    assert not any((tmp_path / name).exists() for name in "abcde")  # no empty output folder left behind


def test_biLM_states_stay_with_their_sentences_when_one_has_no_words(tiny_elmo):
    from bertology.recipes.tagger import prepare_tagger_data
    from bertology.tasks.readers import TASKS, TokenExample

    train = [TokenExample("0", [], [], "t:1"), TokenExample("1", ["John", "ran"], ["B-PER", "O"], "t:3"),
             TokenExample("2", ["Rome"], ["B-LOC"], "t:6")]
    data = prepare_tagger_data(TASKS["conll2003"], train, {"dev": train[1:]}, str(tiny_elmo), None)
    assert [e.guid for e in data.train] == ["1", "2"]
    assert [len(s) for s in data.train_states] == [2, 1]
