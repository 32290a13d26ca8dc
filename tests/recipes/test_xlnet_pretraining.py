"""XLNet through the commands: `bertology pretrain --arch xlnet` (permutation LM) on a tiny text
written here, on independent sequences and, with `--mem-len`, on the token stream with memory
(an exact resume included), then `bertology finetune --task sst2` on a tiny SST-2 folder,
evaluate and predict; and the settings XLNet refuses."""

import contextlib
import io
import json
import random

import pytest
import torch
import transformers
from helpers import assert_resumed_run_matches

from bertology.cli import main
from bertology.errors import UserError
from bertology.recipes.pretrain import PretrainConfig, run_pretraining
from bertology.recipes.task_training import layer_depth, load_task_model, num_layers_of
from bertology.tasks.readers import TASKS

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "her sister", "the teacher", "a small bird", "the river"]
VERBS = ["sees", "likes", "follows", "paints", "finds", "remembers", "watches", "carries"]
OBJECTS = ["the house", "a red ball", "the green tree", "an open door", "the long road", "a quiet song",
           "the blue sky", "a warm bread"]
POSITIVE = ["a wonderful film", "truly excellent acting", "a great and moving story", "excellent and fun"]
NEGATIVE = ["a dull film", "truly awful acting", "a boring and empty story", "awful and slow"]


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"


def sst2_rows(count: int, seed: int) -> str:
    """An SST-2 file (sentence, label) whose label is said by its first words."""
    rng = random.Random(seed)
    rows = ["sentence\tlabel"]
    for _ in range(count):
        label = rng.randint(0, 1)
        rows.append(f"{rng.choice(POSITIVE if label else NEGATIVE)} {rng.choice(OBJECTS)}\t{label}")
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A 40-document corpus of generated sentences (a line each, blank lines between documents)
    and an SST-2 folder of 64 training and 24 dev sentences."""
    root = tmp_path_factory.mktemp("xlnet")
    rng = random.Random(0)
    documents = ["\n".join(f"{sentence(rng)} and {sentence(rng)} ." for _ in range(8)) for _ in range(40)]
    (root / "corpus.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    (root / "sst").mkdir()
    (root / "sst" / "train.tsv").write_text(sst2_rows(64, 1))
    (root / "sst" / "dev.tsv").write_text(sst2_rows(24, 2))
    return root


def run(*argv) -> tuple[int, str]:
    """`bertology ARGV...` in-process: (exit status, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main([str(arg) for arg in argv])
    return status, out.getvalue()


@pytest.fixture(scope="module")
def pretrained(files):
    """A tiny XLNet pre-trained for 20 steps: (its directory, the command's stdout)."""
    out = files / "xlnet"
    status, stdout = run("pretrain", "--arch", "xlnet", "--corpus", files / "corpus.txt", "--out", out,
                         "--preset", "tiny", "--max-steps", 20, "--max-seq-len", 32, "--batch-size", 8, "--vocab-size", 200,
                         "--cache-dir", files / "cache", "--doc-format", "lines", "--eval-fraction", 0.2,
                         "--eval-every", 10, "--lr", 1e-3, "--precision", "fp32", "--no-progress")
    assert status == 0
    return out, stdout


def test_pretrain_arch_xlnet_writes_a_transformers_model_and_held_out_plm_metrics(pretrained):
    out, stdout = pretrained
    assert "XLNet (two-stream; 2 layers, 128 wide" in stdout
    assert "permutation_lm_accuracy" in stdout
    evals = [row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
             if row.get("split") == "eval"]
    assert [row["step"] for row in evals] == [10, 20]
    assert evals[-1]["permutation_lm_loss"] < evals[0]["permutation_lm_loss"]  # it learns
    assert 0 < evals[-1]["permutation_lm_accuracy"] <= 1 and (out / "training_curves.png").stat().st_size > 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "xlnet" and config["architectures"] == ["XLNetLMHeadModel"]
    assert (config["n_layer"], config["d_model"], config["n_head"], config["d_inner"]) == (2, 128, 2, 512)
    assert config["vocab_size"] == len((out / "vocab.txt").read_text().splitlines())
    reference, info = transformers.XLNetLMHeadModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    from bertology.inference.modeldir import load_model

    ids = torch.tensor([[2, 30, 40, 50, 60, 3]])
    perm_mask = torch.zeros(1, 6, 6)
    perm_mask[:, :, 3] = 1.0
    target_mapping = torch.zeros(1, 1, 6)
    target_mapping[0, 0, 3] = 1.0
    with torch.no_grad():
        torch.testing.assert_close(load_model(out)(ids, perm_mask=perm_mask, target_mapping=target_mapping).logits,
                                   reference.eval()(ids, perm_mask=perm_mask, target_mapping=target_mapping).logits,
                                   rtol=0, atol=1e-5)


def test_finetune_sst2_builds_the_xlnet_classifier_and_evaluate_and_predict_agree(pretrained, files, tmp_path):
    model_dir, _ = pretrained
    status, stdout = run("finetune", "--task", "sst2", "--data", files / "sst", "--model", model_dir, "--out",
                         tmp_path / "ft", "--epochs", 8, "--batch-size", 8, "--lr", 1e-3, "--precision", "fp32",
                         "--no-progress")
    assert status == 0 and "sst2 dev" in stdout
    results = json.loads((tmp_path / "ft" / "eval_results.json").read_text())
    assert results["accuracy"] > 0.8, results  # the label is in the first words: learnable in seconds
    config = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert config["architectures"] == ["XLNetForSequenceClassification"] and config["finetuning_task"] == "sst2"
    assert run("evaluate", "--data", files / "sst", "--model", tmp_path / "ft", "--out", tmp_path / "e.json")[0] == 0
    assert json.loads((tmp_path / "e.json").read_text())["accuracy"] == pytest.approx(results["accuracy"])
    assert run("predict", "--model", tmp_path / "ft", "--input", files / "sst" / "dev.tsv", "--out",
               tmp_path / "p.tsv")[0] == 0
    predictions = (tmp_path / "p.tsv").read_text().splitlines()
    assert predictions[0] == "index\tprediction" and len(predictions) == 25
    gold = [line.split("\t")[1] for line in (files / "sst" / "dev.tsv").read_text().splitlines()[1:]]
    hits = sum(line.split("\t")[1] == label for line, label in zip(predictions[1:], gold))
    assert hits / 24 == pytest.approx(results["accuracy"])


def test_xlnet_task_heads_and_its_layers_have_depths(pretrained):
    model_dir, _ = pretrained
    assert type(load_task_model(str(model_dir), TASKS["conll2003"])).__name__ == "XLNetForTokenClassification"
    assert type(load_task_model(str(model_dir), TASKS["squad"])).__name__ == "XLNetForQuestionAnsweringSimple"
    with pytest.raises(UserError, match="an XLNet is fine-tuned here for sequence, token and span tasks"):
        load_task_model(str(model_dir), TASKS["wic"])
    model = load_task_model(str(model_dir), TASKS["sst2"])
    assert num_layers_of(model) == 2
    depths = {name: layer_depth(model, name) for name, _ in model.named_parameters()}
    assert depths["transformer.word_embedding.weight"] == depths["transformer.mask_emb"] == 0
    assert depths["transformer.layer.1.rel_attn.r_w_bias"] == 2 and depths["logits_proj.weight"] == 3


def settings(files, out, **overrides) -> PretrainConfig:
    """A tiny XLNet with memory on the generated corpus: 8 rows x 32 tokens, remembering 32 positions."""
    values = dict(arch="xlnet", corpus=[str(files / "corpus.txt")], out=str(out), cache_dir=str(files / "cache"),
                  doc_format="lines", preset="tiny", vocab_size=200, max_seq_len=32, batch_size=8, mem_len=32, lr=1e-3,
                  eval_fraction=0.2, eval_every=0, log_every=1, save_every=0, precision="fp32", progress=False, seed=0)
    return PretrainConfig(**{**values, **overrides})


def test_pretrain_xlnet_with_memory_reads_the_stream_and_evaluates_with_memory(files):
    out = files / "xlnet-memory"
    status, stdout = run("pretrain", "--arch", "xlnet", "--mem-len", 48, "--corpus", files / "corpus.txt", "--out",
                         out, "--preset", "tiny", "--max-steps", 12, "--max-seq-len", 32, "--batch-size", 8,
                         "--vocab-size", 200, "--cache-dir", files / "cache", "--doc-format", "lines",
                         "--eval-fraction", 0.2, "--eval-every", 6, "--lr", 1e-3, "--precision", "fp32",
                         "--no-progress")
    assert status == 0 and "permutation_lm_accuracy" in stdout
    evals = [row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
             if row.get("split") == "eval"]
    assert [row["step"] for row in evals] == [6, 12] and 0 <= evals[-1]["permutation_lm_accuracy"] <= 1
    assert evals[-1]["permutation_lm_loss"] < evals[0]["permutation_lm_loss"]
    assert json.loads((out / "config.json").read_text())["mem_len"] == 48  # the model's own field
    assert json.loads((out / "pretrain_config.json").read_text())["mem_len"] == 48
    reference, info = transformers.XLNetLMHeadModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and reference.config.mem_len == 48


def test_an_interrupted_and_resumed_run_with_memory_matches_an_uninterrupted_one(files, tmp_path):
    """The carried memory is in the checkpoint: the same losses step by step, through an epoch's end."""
    def run(out, resume):
        return run_pretraining(settings(files, out, max_steps=16, save_every=5, resume=resume))

    assert_resumed_run_matches(run, tmp_path / "straight", tmp_path / "resumed", interrupt_at=9, steps=16)


def test_a_bad_mem_len_is_a_one_line_error(files, tmp_path, capsys):
    for flags, message in ((["--arch", "xlnet", "--mem-len", "-1"], "--mem-len: must be at least 0, got -1"),
                           (["--arch", "bert", "--mem-len", "8"], "--mem-len 8 is a switch of --arch xlnet, not of --arch bert")):
        code = main(["pretrain", *flags, "--corpus", str(files / "corpus.txt"), "--out", str(tmp_path / "o"),
                     "--max-steps", "1", "--no-progress"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("flags, message", [
    (dict(objective="bert"), r"--arch xlnet trains with plm, not --objective bert \(which trains --arch bert\)"),
    (dict(pre_layer_norm=True), "--pre-layer-norm is a switch of --arch bert or gpt, not of --arch xlnet"),
    (dict(arch="bert", objective="plm"), r"not --objective plm \(which trains --arch xlnet\)"),
])
def test_settings_xlnet_refuses(files, tmp_path, flags, message):
    with pytest.raises(UserError, match=message):
        PretrainConfig(**{"corpus": [str(files / "corpus.txt")], "out": str(tmp_path / "o"), "arch": "xlnet",
                          "max_steps": 1, **flags}).validate()
