"""`bertology embed`: parity with sentence-transformers, layer and pooling choices, word vectors, user errors."""

import json

import numpy as np
import pytest
import torch

from bertology.data.tokenizer import SPECIAL_TOKENS, Tokenizer
from bertology.errors import UserError
from bertology.inference.embedding import (
    EmbedStats,
    embed_texts,
    embed_tokens,
    load_encoder,
)
from bertology.models.bert import BertConfig, BertForSequenceClassification

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "un", "##aff", "##able", "##s", ".", ","]
TEXTS = ["the cat sat on the mat .", "a dog", "unaffable cats , unaffable dogs sat on a mat .", "the", "dog sat ."]


def run_cli(capsys, *argv):
    """Run `bertology ARGV...` in-process; return (exit status, stdout, stderr)."""
    from bertology.cli import main

    status = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A random 4-layer classifier with a small vocabulary: load_encoder must drop its head."""
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny")
    vocab = [*SPECIAL_TOKENS, *WORDS, *"abcdefghijklmnopqrstuvwxyz"]
    config = BertConfig.from_preset("tiny", vocab_size=len(vocab), num_hidden_layers=4, max_position_embeddings=64,
                                    num_labels=2)
    BertForSequenceClassification(config).save_pretrained(directory)
    Tokenizer(vocab).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return load_encoder(tiny_dir, device="cpu")


def reference_states(model, tokenizer, text):
    """Every layer's (T, H) states of one text, unpadded."""
    ids = torch.tensor([tokenizer.encode(text)])
    with torch.no_grad():
        return [h[0] for h in model(ids, output_hidden_states=True).hidden_states]


@pytest.mark.slow
def test_minilm_matches_sentence_transformers(capsys, tmp_path, minilm_dir, data_dir):
    st = pytest.importorskip("sentence_transformers")
    # The README's command as it stands, with no precision flag: vectors are fp32 by default on any CPU.
    lines = (data_dir / "wikitext-2-raw/wiki.valid.raw").read_text(encoding="utf-8").splitlines()
    sentences = [line.strip() for line in lines if line.strip()][:100]  # long lines too: 256-token truncation
    (tmp_path / "wiki.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    status, out, err = run_cli(capsys, "embed", "--model", "all-MiniLM-L6-v2", "--input", tmp_path / "wiki.txt",
                               "--out", tmp_path / "vectors.npy", "--pooling", "mean", "--normalize", "--no-progress")
    assert status == 0, err
    assert out.count("\n") == 1 and "100 lines -> 100 x 384 vectors" in out
    ours = np.load(tmp_path / "vectors.npy")
    assert ours.shape == (100, 384) and ours.dtype == np.float32

    reference = st.SentenceTransformer(str(minilm_dir), device="cpu")
    assert isinstance(reference[-1], st.models.Normalize)  # its vectors are unit length, as ours with --normalize
    theirs = reference.encode(sentences, convert_to_numpy=True)
    assert np.abs(ours - theirs).max() < 1e-5


def test_load_encoder_drops_the_head(tiny_dir, tiny):
    model, tokenizer = tiny
    classifier = BertForSequenceClassification.from_pretrained(tiny_dir)
    assert type(model.stack).__name__ == "BertModel" and not model.training
    assert torch.equal(model.stack.layers[3].ffn_out.weight, classifier.bert.layers[3].ffn_out.weight)
    assert tokenizer.tokenize("unaffable") == ["un", "##aff", "##able"]


@pytest.mark.parametrize("layers, index, width", [("last", [4], 1), ("second_to_last", [3], 1),
                                                  ("embeddings", [0], 1), ("1,-1", [1, 4], 1),
                                                  ("sum_last_four", [1, 2, 3, 4], 1),
                                                  ("concat_last_four", [1, 2, 3, 4], 4)])
def test_layer_choices(tiny, layers, index, width):
    model, tokenizer = tiny
    vectors = embed_texts(model, tokenizer, TEXTS, layers=layers, pooling="cls", precision="fp32")
    assert vectors.shape == (len(TEXTS), width * model.config.hidden_size) and vectors.dtype == np.float32
    for text, vector in zip(TEXTS, vectors):
        states = reference_states(model, tokenizer, text)
        chosen = [states[i][0] for i in index]  # cls: the vector at position 0
        expected = torch.cat(chosen) if width > 1 else torch.stack(chosen).sum(0)
        np.testing.assert_allclose(vector, expected.numpy(), atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "max", "cls"])
def test_pooling_ignores_padding_and_keeps_input_order(tiny, pooling):
    model, tokenizer = tiny
    batched = embed_texts(model, tokenizer, TEXTS, pooling=pooling, batch_size=8, precision="fp32")
    alone = np.stack([embed_texts(model, tokenizer, [t], pooling=pooling, precision="fp32")[0] for t in TEXTS])
    np.testing.assert_allclose(batched, alone, atol=1e-5)
    states = reference_states(model, tokenizer, TEXTS[1])[-1]
    expected = {"mean": states.mean(0), "max": states.max(0).values, "cls": states[0]}[pooling]
    np.testing.assert_allclose(batched[1], expected.numpy(), atol=1e-5)


def test_normalize_and_truncation(tiny):
    model, tokenizer = tiny
    stats = EmbedStats()
    vectors = embed_texts(model, tokenizer, TEXTS, normalize=True, max_seq_len=6, stats=stats, precision="fp32")
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-6)
    assert stats.truncated == 2  # the two texts of more than four pieces
    cut = embed_texts(model, tokenizer, ["the cat sat on"], normalize=True, precision="fp32")
    np.testing.assert_allclose(vectors[0], cut[0], atol=1e-5)  # "[CLS] the cat sat on [SEP]"


def test_mix_is_refused(tiny):
    with pytest.raises(UserError, match="mix"):
        embed_texts(*tiny, TEXTS, layers="mix")


@pytest.mark.parametrize("word_pieces", ["first", "mean"])
def test_word_vectors(tiny, word_pieces):
    model, tokenizer = tiny
    text = TEXTS[2]
    result = embed_tokens(model, tokenizer, TEXTS, word_pieces=word_pieces, precision="fp32", batch_size=2)
    assert [r.words for r in result] == [t.split() for t in TEXTS]
    _, vectors = result[2]
    assert vectors.shape == (len(text.split()), model.config.hidden_size)
    states = reference_states(model, tokenizer, text)[-1]  # [CLS] un ##aff ##able cat ##s , ...
    unaffable = states[1:4].mean(0) if word_pieces == "mean" else states[1]
    np.testing.assert_allclose(vectors[0], unaffable.numpy(), atol=1e-5)
    np.testing.assert_allclose(vectors[1], (states[4:6].mean(0) if word_pieces == "mean" else states[4]).numpy(),
                               atol=1e-5)
    np.testing.assert_allclose(vectors[2], states[6].numpy(), atol=1e-5)


def test_word_pieces_none_and_words_cut_whole(tiny):
    model, tokenizer = tiny
    (pieces,) = embed_tokens(model, tokenizer, ["unaffable cat"], word_pieces="none", precision="fp32")
    assert pieces.words == ["un", "##aff", "##able", "cat"] and pieces.vectors.shape[0] == 4
    stats = EmbedStats()
    # Room for 4 pieces: "un ##aff ##able cat | ##s": "cats" would lose its "##s", so it is left out whole.
    (cut,) = embed_tokens(model, tokenizer, ["unaffable cats sat"], max_seq_len=6, stats=stats)
    assert cut.words == ["unaffable"] and stats.dropped_words == 2 and stats.truncated == 1
    (odd,) = embed_tokens(model, tokenizer, ["the \x07 cat"], stats=stats)  # a control character: no piece
    assert odd.words == ["the", "cat"] and odd.vectors.shape == (2, 128) and stats.dropped_words == 3


def test_token_level_files(capsys, tiny_dir, tmp_path):
    source = tmp_path / "in.jsonl"
    lines = [json.dumps({"id": i, "text": t}) for i, t in enumerate(TEXTS)]
    source.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")  # a byte order mark, as some editors write
    status, _, err = run_cli(capsys, "embed", "--model", tiny_dir, "--input", source, "--out", tmp_path / "w.jsonl",
                             "--level", "token", "--word-pieces", "mean", "--no-progress")
    assert status == 0, err
    rows = [json.loads(line) for line in (tmp_path / "w.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["words"] for r in rows] == [t.split() for t in TEXTS]
    assert all(np.array(r["embeddings"]).shape == (len(r["words"]), 128) for r in rows)

    status, _, err = run_cli(capsys, "embed", "--model", tiny_dir, "--input", source, "--out", tmp_path / "w.npy",
                               "--level", "token", "--word-pieces", "mean", "--no-progress")
    assert status == 0, err
    vectors = np.load(tmp_path / "w.npy")
    index = [json.loads(line) for line in (tmp_path / "w.index.jsonl").read_text(encoding="utf-8").splitlines()]
    assert vectors.shape == (sum(len(t.split()) for t in TEXTS), 128) and index[-1]["end"] == len(vectors)
    for entry, row in zip(index, rows):
        np.testing.assert_allclose(vectors[entry["start"]: entry["end"]], row["embeddings"], atol=1e-6)


def test_sentence_jsonl_and_blank_lines(capsys, tiny_dir, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("the cat\n\n  \na dog\n", encoding="utf-8")
    status, out, err = run_cli(capsys, "embed", "--model", tiny_dir, "--input", source, "--out", tmp_path / "s.jsonl",
                               "--skip-empty", "--pooling", "max", "--no-progress")
    assert status == 0, err
    assert "2 blank skipped" in out
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in rows] == [1, 4] and len(rows[0]["embedding"]) == 128


@pytest.mark.parametrize("content, flags, message", [
    (b"", [], "in.txt: no text to embed"),
    (b"the cat\n\na dog\n", [], "in.txt:2: empty line"),
    (b"the cat\n\xff dog\n", [], "in.txt:2: not valid UTF-8"),
    (b'{"text": "the cat"}\n{"text": "a dog"\n', ["--text-field", "text"], "in.txt:2: not valid JSON"),
    (b'{"text": "the cat"}\n{"body": "a dog"}\n', ["--text-field", "text"], "in.txt:2: no field 'text' (fields: body"),
    (b'{"text": 3}\n', ["--text-field", "text"], "in.txt:1: field 'text' must be a string"),
    (b'{"text": " "}\n', ["--text-field", "text"], "in.txt:1: empty text in field 'text'"),
    (b"the cat\n", ["--layers", "mix"], "layers: 'mix' is learned"),
    (b"the cat\n", ["--layers", "9"], "out of range"),
])
def test_user_errors_are_one_line(capsys, tiny_dir, tmp_path, content, flags, message):
    (tmp_path / "in.txt").write_bytes(content)
    status, out, err = run_cli(capsys, "embed", "--model", tiny_dir, "--input", tmp_path / "in.txt",
                               "--out", tmp_path / "out.npy", "--no-progress", *flags)
    assert status == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]  # nothing half-written


@pytest.mark.slow
def test_bad_paths_are_one_line(capsys, tiny_dir, tmp_path):
    (tmp_path / "in.txt").write_text("the cat\n", encoding="utf-8")
    cases = [(tmp_path / "nope", tmp_path / "in.txt", "out.npy", "nope: no such model directory"),
             (tmp_path, tmp_path / "in.txt", "out.npy", "a model directory needs a config.json"),
             (tiny_dir, tmp_path / "missing.txt", "out.npy", "missing.txt: no such input file"),
             (tiny_dir, tmp_path / "in.txt", "out.csv", "must end in .npy or .jsonl")]
    for model, source, out_name, message in cases:
        status, _, err = run_cli(capsys, "embed", "--model", model, "--input", source, "--out", tmp_path / out_name)
        assert status == 2 and err.count("\n") == 1 and message in err, err
