"""The Word-in-Context probe (`bertology wic`): reading WiC's files, the target word's vectors,
the pair features, and the command on a small WiC-format set."""

import json

import numpy as np
import pytest
import torch

from bertology import UserError
from bertology.cli import main
from bertology.inference.embedding import load_encoder
from bertology.tasks.readers import read_wic
from bertology.uses.wic import contextual_vectors, pair_features, word_spans

PAIRS = [  # word, pos, i1-i2, sentence 1, sentence 2, same sense
    ("bank", "N", "4-1", "He sat by the bank of the river .", "The bank raised its rates .", "F"),
    ("bank", "N", "1-4", "The bank approved the loan .", "She works at a bank downtown .", "T"),
    ("run", "V", "0-2", "Run the program again .", "They run a small hotel .", "F"),
    ("runs", "V", "1-1", "She runs every morning .", "He runs five miles a day .", "T"),
]


def write_wic(folder, pairs=PAIRS, split="train"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.data.txt").write_text("".join("\t".join(p[:5]) + "\n" for p in pairs))
    (folder / f"{split}.gold.txt").write_text("".join(p[5] + "\n" for p in pairs))
    return folder


def test_reader_and_its_one_line_errors(tmp_path, data_dir):
    examples = read_wic(*(write_wic(tmp_path / "a") / name for name in ("train.data.txt", "train.gold.txt")))
    assert [e.same_sense for e in examples] == [False, True, False, True]
    assert examples[0].sentences[0][examples[0].positions[0]] == "bank" and examples[0].source.endswith(":1")
    folder = write_wic(tmp_path / "b")
    (folder / "train.gold.txt").write_text("F\nT\nF\n")
    with pytest.raises(UserError, match=r"train\.gold\.txt: 3 labels for the 4 pairs of train\.data\.txt"):
        read_wic(folder / "train.data.txt", folder / "train.gold.txt")
    folder = write_wic(tmp_path / "c", [("bank", "N", "9-1", "the bank", "a bank", "T")])
    with pytest.raises(UserError, match=r"train\.data\.txt:1: '9-1' is not two token indexes"):
        read_wic(folder / "train.data.txt", folder / "train.gold.txt")
    if (data_dir / "wic").is_dir():
        dev = read_wic(data_dir / "wic/dev.data.txt", data_dir / "wic/dev.gold.txt")
        assert len(dev) == 638 and sum(e.same_sense for e in dev) == 319  # the official dev set is balanced


def test_the_target_vector_is_the_mean_of_its_tokens_at_each_layer(tiny_model):
    model, tokenizer = load_encoder(tiny_model, device="cpu")
    words = "the unaffable banker smiled".split()
    text, start, end = word_spans(words, 1)
    assert text[start:end] == "unaffable"
    vectors = contextual_vectors(model, tokenizer, [(words, 1), (words, 3)], batch_size=2, precision="fp32")
    assert vectors.shape == (2, 3, 128)  # embeddings + 2 layers
    encoded = tokenizer(text)
    pieces = [i for i, w in enumerate(encoded.word_ids(0)) if w == 1]
    assert len(pieces) > 1  # a word of several WordPieces
    with torch.no_grad():
        states = model(encoded["input_ids"], output_hidden_states=True).hidden_states
    np.testing.assert_allclose(vectors[0, 2], states[2][0, pieces].mean(0).numpy(), rtol=1e-5, atol=1e-6)
    features = pair_features(vectors[:, 0], vectors[:, 1])
    assert features.shape == (2, 4 * 128)
    np.testing.assert_allclose(features[:, 3 * 128:], np.abs(vectors[:, 0] - vectors[:, 1]))


def test_the_command_probes_every_layer(tmp_path, tiny_model, capsys):
    folder = write_wic(tmp_path / "wic", PAIRS * 5)
    write_wic(folder, PAIRS, split="dev")
    assert main(["wic", "--data", str(folder), "--model", str(tiny_model), "--out", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "embeddings" in out and "layer 2" in out and "mean of all layers" in out
    results = json.loads((tmp_path / "r.json").read_text())
    assert [row["layer"] for row in results["layers"]] == ["embeddings", "layer 1", "layer 2", "mean of all layers"]
    assert results["train_pairs"] == 20 and results["dev_pairs"] == 4 and results["majority"] == 0.5
    assert main(["wic", "--data", str(folder), "--model", str(tiny_model), "--max-train-pairs", "8",
                 "--out", str(tmp_path / "s.json")]) == 0
    subset = json.loads((tmp_path / "s.json").read_text())
    assert subset["train_pairs"] == 8 and subset["dev_pairs"] == 4
