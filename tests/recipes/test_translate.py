"""`bertology translate` (recipes/translate.py) and CoVe features in `finetune --mode features`: a tiny model
on a toy parallel corpus in Multi30k's layout, trained, scored with BLEU and used as a feature source."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from helpers import TOY_LEXICON, WORDS, keyword_sentence, run_cli, save_tiny_vectors, write_toy_parallel

from bertology.cli import main
from bertology.inference.modeldir import open_model_dir
from bertology.models.cove import CoVeModel
from bertology.models.static import StaticVectors
from bertology.uses.wic import WicConfig, run_wic, target_views


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> dict[str, Path]:
    """The toy corpus, random 32-d English vectors for its words and the keyword task's, and a tiny
    CoVe model trained for 2 epochs on the corpus (through the CLI, as a user runs it)."""
    root = tmp_path_factory.mktemp("translate")
    data = write_toy_parallel(root / "data")
    vectors = save_tiny_vectors(root / "vectors", list(dict.fromkeys([*TOY_LEXICON, *WORDS, "excellent"])), dim=32)
    return {"root": root, "data": data, "vectors": vectors}


@pytest.fixture(scope="module")
def trained(toy) -> Path:
    """A tiny CoVe model trained for 6 epochs (150 steps) on the toy corpus, through the CLI as a user runs it."""
    out = toy["root"] / "model"
    assert main(["translate", "train", "--data", str(toy["data"]), "--vectors", str(toy["vectors"]), "--out", str(out),
                 "--preset", "tiny", "--epochs", "6", "--batch-size", "16", "--lr", "1e-2", "--dropout", "0",
                 "--no-progress"]) == 0
    return out


def test_training_writes_a_model_its_metrics_and_curve(trained):
    names = {p.name for p in trained.iterdir()}
    assert {"config.json", "model.safetensors", "source_words.txt", "target_words.txt", "metrics.jsonl",
            "eval_results.json", "training_curves.png"} <= names and "checkpoints" not in names
    rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    evals = [row for row in rows if row.get("split") == "eval"]
    assert len(evals) == 6 and all(row["perplexity"] >= 1 for row in evals)  # one per epoch
    assert evals[0]["perplexity"] < 24  # below a uniform guess over the 16 words, "." and </s> after one epoch
    assert evals[-1]["perplexity"] < evals[0]["perplexity"] / 2
    best = json.loads((trained / "eval_results.json").read_text())
    assert best["perplexity"] == min(row["perplexity"] for row in evals) and best["split"] == "val"
    assert "Mann" in (trained / "target_words.txt").read_text().split()


def test_evaluate_reports_bleu_for_greedy_and_beam_search(trained, toy, tmp_path, capsys):
    status, out, err = run_cli(capsys, "translate", "evaluate", "--model", trained, "--data", toy["data"],
                               "--split", "test", "--beam-size", "3", "--out", tmp_path)
    assert status == 0, err
    results = json.loads((tmp_path / "bleu.json").read_text())
    assert results["sentences"] == 40 and set(results) >= {"greedy", "beam3"}
    for name in ("greedy", "beam3"):  # the word-for-word toy language is learnt (a few epochs more: BLEU 100)
        assert 30 < results[name]["bleu"] <= 100 and "BLEU" in out
        assert results[name]["signature"].startswith("nrefs:1")
        assert len((tmp_path / f"test.{name}.de").read_text().splitlines()) == 40
    text = tmp_path / "in.txt"
    text.write_text("A man runs.\n\nThe dog sleeps here.\n")
    status, out, err = run_cli(capsys, "translate", "text", "--model", trained, "--input", text, "--beam-size", "2")
    assert status == 0, err
    assert len(out.splitlines()) == 2


def test_mismatched_line_counts_and_a_missing_split_are_one_line_errors(toy, tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "train.en").write_text("A man runs.\nA dog sits.\nA cat sleeps.\n")
    (broken / "train.de").write_text("Ein Mann rennt.\nEin Hund sitzt.\n")
    base = ["translate", "train", "--data", broken, "--vectors", toy["vectors"], "--preset", "tiny",
            "--epochs", "1", "--no-progress"]
    status, _, err = run_cli(capsys, *base, "--out", tmp_path / "a")
    assert status != 0 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{broken / 'train.en'}: 3 lines, but {broken / 'train.de'}: 2 lines" in err
    (broken / "train.de").write_text("Ein Mann rennt.\nEin Hund sitzt.\nEine Katze schläft.\n")
    status, _, err = run_cli(capsys, *base, "--out", tmp_path / "b")
    assert status != 0 and err.count("\n") == 1 and f"{broken / 'val.en'}: no such file" in err
    assert not (tmp_path / "b").exists()  # nothing written before the error
    status, _, err = run_cli(capsys, "translate", "evaluate", "--model", toy["vectors"], "--data", toy["data"],
                             "--split", "test", "--out", tmp_path / "c")
    assert status != 0 and err.count("\n") == 1 and "not a translation model" in err


@pytest.fixture(scope="module")
def keyword_sst2(tmp_path_factory) -> Path:
    """SST-2's format (sentence<TAB>label, a header) with the keyword task: 1 exactly when "excellent" is said."""
    folder = tmp_path_factory.mktemp("sst2")
    rng = random.Random(1)
    for split, size in (("train", 160), ("dev", 60)):
        rows = ["sentence\tlabel"] + [f"{keyword_sentence(rng, i % 2 == 0)}\t{int(i % 2 == 0)}" for i in range(size)]
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return folder


def test_finetune_features_trains_a_head_over_glove_and_cove(trained, keyword_sst2, tmp_path, capsys):
    out = tmp_path / "head"
    status, _, err = run_cli(capsys, "finetune", "--mode", "features", "--model", trained, "--task", "sst2",
                             "--data", keyword_sst2, "--epochs", "12", "--lr", "1e-2", "--batch-size", "16",
                             "--warmup", "0", "--feature-pooling", "max", "--out", out, "--no-progress")
    assert status == 0, err
    results = json.loads((out / "eval_results.json").read_text())
    assert results["accuracy"] >= 0.9, results  # "excellent" has a vector of its own: max pooling finds it
    head = json.loads((out / "feature_head.json").read_text())
    encoder = CoVeModel.from_pretrained(out)  # the output is the encoder (no decoder) with the head beside it
    assert head["head"]["width"] == encoder.hidden_size == 32 + 2 * 16
    assert json.loads((out / "config.json").read_text())["architectures"] == ["CoVeModel"]
    assert encoder.source_words[2:] == StaticVectors.from_pretrained(trained.parent / "vectors").words
    status, _, err = run_cli(capsys, "evaluate", "--model", out, "--data", keyword_sst2, "--out", tmp_path / "e.json")
    assert status == 0, err
    assert json.loads((tmp_path / "e.json").read_text())["accuracy"] == results["accuracy"]
    status, _, err = run_cli(capsys, "finetune", "--model", trained, "--task", "sst2", "--data", keyword_sst2,
                             "--out", tmp_path / "whole", "--no-progress")
    assert status == 2 and err.count("\n") == 1 and "is a fixed feature source: use --mode features" in err


def test_wic_probe_reads_cove_and_its_glove_half(trained, tmp_path):
    words = list(TOY_LEXICON)[:6]
    sentences = [" ".join(words[i:] + words[:i]) for i in range(6)]
    folder = tmp_path / "wic"
    folder.mkdir()
    for split in ("train", "dev"):
        rows = [f"{words[k]}\tN\t0-{k}\t{sentences[0]}\t{sentences[k]}" for k in range(1, 6)] * 2
        (folder / f"{split}.data.txt").write_text("\n".join(rows) + "\n")
        (folder / f"{split}.gold.txt").write_text("\n".join("TF"[k % 2] for k in range(len(rows))) + "\n")
    results = run_wic(WicConfig(data=str(folder), model=str(trained)))
    assert [row["layer"] for row in results["layers"]] == ["GloVe (context-free)", "CoVe", "[GloVe; CoVe]"]
    assert results["family"] == "cove" and results["train_pairs"] == 10
    # the views are the model's own features at the target word
    model = CoVeModel.from_pretrained(trained)
    views, _ = target_views(open_model_dir(trained), [(sentences[2].split(), 0)], WicConfig(data="", model=""), "dev")
    features, _ = model([sentences[2].split()])
    np.testing.assert_allclose(views["[GloVe; CoVe]"][0], features[0, 0].numpy(), rtol=1e-6)
    width = model.config.input_size
    np.testing.assert_allclose(views["CoVe"][0], features[0, 0, width:].numpy(), rtol=1e-6)


@pytest.mark.slow
def test_a_validation_perplexity_that_is_not_finite_stops_the_run_and_keeps_no_model(toy, tmp_path, capsys,
                                                                                   monkeypatch):
    import bertology.recipes.translate

    monkeypatch.setattr(bertology.recipes.translate, "perplexity", lambda *args: {"loss": float("nan"),
                                                                                  "perplexity": float("nan")})
    status, _, err = run_cli(capsys, "translate", "train", "--data", toy["data"], "--vectors", toy["vectors"],
                             "--out", tmp_path / "m", "--preset", "tiny", "--epochs", "0.1", "--no-progress")
    assert status == 2 and err.strip().splitlines()[-1].startswith("bertology: error: the held-out loss became nan at")
    assert not (tmp_path / "m" / "model.safetensors").exists() and not (tmp_path / "m" / "eval_results.json").exists()


def test_beams_and_lengths_are_bounded_before_decoding(tmp_path, capsys):
    """translate text --beam-size 100000 and --max-length 1e9 hung."""
    from bertology.errors import UserError
    from bertology.models.cove import CoVeConfig, CoVeForTranslation

    config = CoVeConfig(input_size=8, hidden_size=8, num_layers=1, target_embedding_size=8, source_vocab_size=4,
                        decoder_vocab_size=6)
    model = CoVeForTranslation(config, ["<pad>", "<unk>", "a", "man"], ["<pad>", "<s>", "</s>", "<unk>", "ein", "Mann"])
    with pytest.raises(UserError, match="--beam-size 100000 is more than the model's 6 German words"):
        model.translate(["a man"], beam_size=100_000)
    (tmp_path / "in.txt").write_text("a man\n")
    status, _, err = run_cli(capsys, "translate", "text", "--model", tmp_path, "--input", tmp_path / "in.txt",
                             "--max-length", str(10**9))
    assert status == 2 and "--max-length: must be at most 1024, got 1000000000" in err
