"""`bertology explain`: attention maps and the contextual-vs-static picture of an ambiguous word."""

import numpy as np
import pytest
import torch
from helpers import run_cli
from matplotlib.image import imread

from bertology.inference.embedding import load_encoder
from bertology.uses.explain import (
    DEFAULT_SENTENCES,
    attention_maps,
    find_word,
    pca_2d,
    sense_vectors,
    separation,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"



def assert_one_line_error(status, out, err, *fragments):
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("bertology: error:"), err
    for fragment in fragments:
        assert fragment in err, err


def assert_png(path, min_side=200):
    assert path.read_bytes()[:8] == PNG_MAGIC
    height, width, channels = imread(path).shape
    assert min(height, width) >= min_side and channels in (3, 4)


def test_attention_weights_are_softmax_rows_and_do_not_change_the_output(tiny_model):
    model, tokenizer = load_encoder(tiny_model, device="cpu")
    maps = attention_maps(model, tokenizer, "The bank raised its rates.", "Why?")
    T = len(maps.tokens)
    assert maps.tokens[0] == "[CLS]" and maps.tokens.count("[SEP]") == 2
    assert maps.weights.shape == (2, 2, T, T)
    assert (maps.weights >= 0).all()
    np.testing.assert_allclose(maps.weights.sum(-1), 1.0, atol=1e-5)
    # Asking for the weights takes the explicit attention path; the encoding must be the same.
    ids = tokenizer("The bank raised its rates.", "Why?")
    plain = model(ids["input_ids"], token_type_ids=ids["token_type_ids"]).last_hidden_state
    weighed = model.stack(ids["input_ids"], token_type_ids=ids["token_type_ids"], output_attentions=True).last_hidden_state
    torch.testing.assert_close(weighed, plain, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("choice", [["--layer", "2", "--head", "1"], ["--layer", "all"], []])
def test_attention_command_writes_a_png(capsys, tmp_path, tiny_model, choice):
    out = tmp_path / "attention.png"
    status, stdout, err = run_cli(capsys, "explain", "attention", "--model", tiny_model, "--text",
                                  "The river bank flooded.", *choice, "--out", out)
    assert status == 0, err
    assert str(out) in stdout
    assert_png(out)


@pytest.mark.slow
def test_bank_vectors_separate_by_sense_only_in_context(minilm_dir):
    model, tokenizer = load_encoder(minilm_dir, device="cpu")
    examples = DEFAULT_SENTENCES["bank"]
    vectors = sense_vectors(model, tokenizer, "bank", examples, layer="last")
    assert vectors.contextual.shape == (16, 384) and vectors.senses.count("river") == 8
    contextual = separation(vectors.contextual, vectors.senses)
    assert contextual.within > contextual.across + 0.05  # the claim of the picture
    assert contextual.centroid_hits == contextual.count == 16
    # The static view: the same input-embedding row in every sentence, so no sense can show.
    assert all(np.array_equal(row, vectors.static[0]) for row in vectors.static)
    static = separation(vectors.static, vectors.senses)
    assert static.within == pytest.approx(1.0, abs=1e-6) and static.across == pytest.approx(1.0, abs=1e-6)
    assert "river" in vectors.context_words and "bank" not in vectors.context_words


@pytest.mark.slow
def test_senses_command_prints_the_separation_and_writes_a_png(capsys, tmp_path, minilm_dir):
    out = tmp_path / "senses.png"
    status, stdout, err = run_cli(capsys, "explain", "senses", "--model", minilm_dir, "--word", "bank", "--out", out)
    assert status == 0, err
    summary = stdout.splitlines()[0]
    assert summary.startswith("'bank' at layer 6 (last), 16 sentences") and "16/16" in summary
    assert_png(out)


@pytest.mark.slow
def test_own_sentences_file_and_whole_word_matching(capsys, tmp_path, tiny_model):
    file = tmp_path / "senses.tsv"
    file.write_text("fruit\tI ate an apple.\nfruit\tThe apple was sweet.\n\n"
                    "company\tApple sold more phones.\ncompany\tShares of Apple fell.\n", encoding="utf-8")
    out = tmp_path / "apple.png"
    status, stdout, err = run_cli(capsys, "explain", "senses", "--model", tiny_model, "--word", "apple",
                                  "--sentences", file, "--layer", "1", "--out", out)
    assert status == 0, err
    assert "4 sentences" in stdout
    assert_png(out)
    assert find_word(["[CLS]", "bank", "##s", "[SEP]"], ["bank"]) is None
    assert find_word(["[CLS]", "banks", "bank", "[SEP]"], ["bank"]) == slice(2, 3)
    assert find_word(["the", "river", "bank", "##ing"], ["river"]) == slice(1, 2)


def test_separation_and_projection_on_known_vectors():
    vectors = np.array([[1.0, 0.0], [1.0, 0.2], [0.0, 1.0], [0.2, 1.0]])
    result = separation(vectors, ["a", "a", "b", "b"])
    assert result.within == pytest.approx(np.cos(np.arctan(0.2)))
    assert result.across < result.within and result.centroid_hits == 4
    xy, shares = pca_2d(np.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [4.0, 0.1, 0.0]]))
    assert shares[0] > 0.99 and shares.sum() == pytest.approx(1.0)
    assert abs(xy[2, 0] - xy[0, 0]) == pytest.approx(4.0, abs=0.01)


@pytest.mark.slow
def test_user_mistakes_are_one_line_errors(capsys, tmp_path, tiny_model):
    senses = ["explain", "senses", "--model", tiny_model, "--word", "bank"]
    missing = tmp_path / "missing.tsv"
    missing.write_text("river\tThe bank was muddy.\nriver\tWe fished there.\nmoney\tThe bank closed.\n"
                       "money\tMy bank called.\n", encoding="utf-8")
    assert_one_line_error(*run_cli(capsys, *senses, "--sentences", missing, "--out", tmp_path / "a.png"),
                          "'We fished there.' does not contain the word 'bank'")
    malformed = tmp_path / "malformed.tsv"
    malformed.write_text("river\tThe bank was muddy.\nThe bank closed.\n", encoding="utf-8")
    assert_one_line_error(*run_cli(capsys, *senses, "--sentences", malformed, "--out", tmp_path / "a.png"),
                          f"{malformed}:2: expected 'sense<TAB>sentence'")
    one_sense = tmp_path / "one_sense.tsv"
    one_sense.write_text("river\tThe bank was muddy.\nriver\tA bank of reeds.\n", encoding="utf-8")
    assert_one_line_error(*run_cli(capsys, *senses, "--sentences", one_sense, "--out", tmp_path / "a.png"),
                          "need at least two senses")
    assert_one_line_error(*run_cli(capsys, *senses, "--layer", "3", "--out", tmp_path / "a.png"),
                          "out of range for a model with 2 layers")
    assert_one_line_error(*run_cli(capsys, "explain", "senses", "--model", tiny_model, "--word", "bat",
                                   "--out", tmp_path / "a.png"), "no built-in sentences for 'bat'")
    attention = ["explain", "attention", "--model", tiny_model, "--text", "The bank."]
    assert_one_line_error(*run_cli(capsys, *attention, "--layer", "3", "--out", tmp_path / "a.png"),
                          "--layer 3 is out of range: this model has 2 layers")
    assert_one_line_error(*run_cli(capsys, *attention, "--head", "x", "--out", tmp_path / "a.png"), "--head")
    assert_one_line_error(*run_cli(capsys, *attention, "--out", tmp_path / "a.pdf"), "ending in .png")
    assert not list(tmp_path.glob("a.*"))


@pytest.mark.slow
def test_senses_with_static_vectors_take_the_static_view_from_them(capsys, tmp_path, minilm_dir):
    from bertology.models.static import StaticConfig, StaticVectors
    from bertology.uses.explain import DEFAULT_SENTENCES, explain_senses

    rng = np.random.default_rng(0)
    words = ["bank", "river", "loan", "boats"]  # the only words with a vector
    vectors = tmp_path / "vectors"
    StaticVectors(StaticConfig("imported", 8, lowercase=True), words,
                  rng.normal(size=(4, 8)).astype(np.float32)).save_pretrained(vectors)
    report = explain_senses(minilm_dir, "bank", tmp_path / "static.png", static=vectors)
    assert_png(tmp_path / "static.png")
    # one static vector for every sentence: identical within and across senses
    assert report.static.within == pytest.approx(1.0) and report.static.across == pytest.approx(1.0)
    assert report.contextual.within > report.contextual.across
    status, stdout, err = run_cli(capsys, "explain", "senses", "--model", minilm_dir, "--word", "bank", "--out",
                                  tmp_path / "cli.png", "--vectors", vectors)
    assert status == 0, err
    missing = tmp_path / "no-bank"
    StaticVectors(StaticConfig("imported", 8, lowercase=True), ["river"], np.ones((1, 8), np.float32)).save_pretrained(missing)
    status, _, err = run_cli(capsys, "explain", "senses", "--model", minilm_dir, "--word", "bank", "--out",
                             tmp_path / "x.png", "--vectors", missing)
    assert status == 2 and "'bank' has no vector in the static vectors" in err
    # the other words of the sentences keep their places only where the static vectors have them
    from bertology.uses.explain import sense_vectors, with_static_vectors

    encoder, tokenizer = load_encoder(minilm_dir)
    contextual = sense_vectors(encoder, tokenizer, "bank", DEFAULT_SENTENCES["bank"])
    static = with_static_vectors(contextual, StaticVectors.from_pretrained(vectors))
    assert set(static.context_words) == {"river", "loan", "boats"} <= set(contextual.context_words)
    loaded = StaticVectors.from_pretrained(vectors)
    for word, row in zip(static.context_words, static.context_static):
        assert np.array_equal(row, loaded.vector(word).numpy())
