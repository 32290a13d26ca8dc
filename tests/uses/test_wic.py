"""The Word-in-Context probe (`bertology wic`): reading WiC's files, the target word's vectors,
the pair features, and the command on a small WiC-format set; then the same for every other family
(GPT in both layouts, XLNet, T5's encoder, AWD-LSTM and ULMFiT's classifier): the probe's vectors are
each model's own states at the target's tokens, context reaches them only from where the model
reads, and every layer gets its name."""

import json

import numpy as np
import pytest
import torch

from bertology import Tokenizer, UserError
from bertology.cli import main
from bertology.data.tokenizer import train_tokenizer
from bertology.inference.embedding import load_encoder
from bertology.inference.modeldir import load_model, open_model_dir
from bertology.models.awd_lstm import AWDLSTMConfig, AWDLSTMForSequenceClassification, AWDLSTMLMHeadModel
from bertology.models.gpt import GPTConfig, GPTLMHeadModel
from bertology.models.t5 import T5Config, T5ForConditionalGeneration
from bertology.models.xlnet import XLNetConfig, XLNetLMHeadModel
from bertology.tasks.readers import read_wic
from bertology.uses.wic import WicConfig, contextual_vectors, pair_features, run_wic, word_spans

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
    vectors = np.stack(contextual_vectors(model, tokenizer, [(words, 1), (words, 3)], batch_size=2,
                                          precision="fp32"), axis=1)
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
    assert main(["wic", "--data", str(folder), "--model", str(tiny_model), "--max-train-examples", "8",
                 "--out", str(tmp_path / "s.json")]) == 0
    subset = json.loads((tmp_path / "s.json").read_text())
    assert subset["train_pairs"] == 8 and subset["dev_pairs"] == 4


# ----- the other families: GPT (both layouts), XLNet, T5's encoder, AWD-LSTM ---------------------------------------

# Text for the tiny vocabularies: WiC's sentences above and a few more, so that some words are one
# token and others several (the vocabulary is too small to hold them all).
FAMILY_TEXT = [sentence for pair in PAIRS for sentence in pair[3:5]] + [
    "the river bank flooded after the rain", "she sat on the bank and watched the river",
    "he runs the program every morning", "they approved a small loan for the hotel"] * 10 + [
    "bankers banking watchers rivers riverside hotels programs mornings loans approving watching flooding "
    "hotelier bankrupt runner rerun smaller smallest downtown downstream downriver"] * 2
FAMILIES = ("gpt", "gpt2", "xlnet", "t5", "awd-lstm", "awd-lstm-classifier")  # gpt: GPT-1's layout
LEFT_TO_RIGHT = ("gpt", "gpt2", "awd-lstm", "awd-lstm-classifier")
LAYER_NAMES = {  # 2 Transformer layers, 3 LSTMs
    **dict.fromkeys(("gpt", "gpt2", "xlnet"), ["embeddings", "layer 1", "layer 2"]),
    "t5": ["encoder embeddings", "encoder layer 1", "encoder layer 2"],
    **dict.fromkeys(("awd-lstm", "awd-lstm-classifier"), ["embeddings", "LSTM 1", "LSTM 2", "LSTM 3"]),
}


def save_family(root, name):
    """A tiny random model of family `name` (weights std 0.3, so that the states differ clearly from
    text to text) with a vocabulary of FAMILY_TEXT, saved in root/name; returns that directory."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "text.txt").write_text("\n".join(FAMILY_TEXT) + "\n")
    out = root / name
    if name == "t5":
        tokenizer = train_tokenizer([root / "text.txt"], vocab_size=140, out_dir=out, model="unigram", sentinels=4)
    else:
        tokenizer = train_tokenizer([root / "text.txt"], vocab_size=130, out_dir=out)
    torch.manual_seed(0)
    vocab = tokenizer.vocab_size
    if name in ("gpt", "gpt2"):
        model = GPTLMHeadModel(GPTConfig(vocab_size=vocab, n_positions=40, n_embd=32, n_layer=2, n_head=4,
                                         initializer_range=0.3, pre_layer_norm=name == "gpt2"))
    elif name == "xlnet":
        model = XLNetLMHeadModel(XLNetConfig(vocab_size=vocab, d_model=32, n_layer=2, n_head=4, d_inner=64,
                                             initializer_range=0.3, pad_token_id=tokenizer.pad_token_id))
    elif name == "t5":
        model = T5ForConditionalGeneration(T5Config(
            vocab_size=vocab, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, n_positions=64,
            initializer_factor=3.0, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id,
            decoder_start_token_id=tokenizer.pad_token_id))
    else:
        config = AWDLSTMConfig(vocab_size=vocab, emb_sz=16, n_hid=24, n_layers=3, pad_token_id=tokenizer.pad_token_id)
        model = AWDLSTMLMHeadModel(config)
        if name == "awd-lstm-classifier":  # ULMFiT's classifier: the same encoder under a pooling head
            classifier = AWDLSTMForSequenceClassification(config.for_task(2, None))
            classifier.awd_lstm.load_state_dict(model.awd_lstm.state_dict())
            model = classifier
    model.eval().save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {name: save_family(root, name) for name in FAMILIES}


def probe_vectors(model_dir, sentences):
    """The probe's target vectors, (N, H) per layer, read on the CPU in one padded batch."""
    opened = open_model_dir(model_dir)
    model, tokenizer = opened.feature_encoder(device="cpu")
    return contextual_vectors(model, tokenizer, sentences, batch_size=len(sentences), precision="fp32",
                              leading_cls=opened.spec.leading_summary_token)


def reference_states(model_dir, ids):
    """Every layer's states (T, H) of one unpadded row of ids, computed by transformers' own
    classes from the saved directory (an AWD-LSTM: its language model's LSTM outputs under its
    embedding rows), independently of the probe and of bertology's output_hidden_states."""
    transformers = pytest.importorskip("transformers")  # the reference (tests/test_references.py)
    name = model_dir.name
    batch = torch.tensor([ids])
    with torch.no_grad():
        if name.startswith("awd-lstm"):
            model = load_model(model_dir)
            outputs, _ = model.awd_lstm(batch)
            return [state[0] for state in (model.awd_lstm.encoder.weight[batch], *outputs)]
        reference = {"gpt": transformers.OpenAIGPTModel, "gpt2": transformers.GPT2Model,
                     "xlnet": transformers.XLNetModel, "t5": transformers.T5EncoderModel}[name]
        model = reference.from_pretrained(model_dir).eval()
        return [state[0] for state in model(batch, output_hidden_states=True).hidden_states]


@pytest.mark.parametrize("name", FAMILIES)
def test_each_familys_target_vector_is_its_own_states_at_the_words_tokens(family_dirs, name):
    model_dir = family_dirs[name]
    tokenizer = Tokenizer.from_pretrained(model_dir)
    words = "the banker smiled and watched the river".split()
    # The word's tokens found without offsets: a text's tokens are its words' tokens one after another.
    pieces = [tokenizer.encode(word, add_special_tokens=False) for word in words]
    assert sum(pieces, []) == tokenizer.encode(" ".join(words), add_special_tokens=False)
    # As each family was trained: [CLS] text [SEP], and for T5's encoder text [SEP].
    first = [] if name == "t5" else [tokenizer.cls_token_id]
    ids = first + sum(pieces, []) + [tokenizer.sep_token_id]
    target = 1  # "banker": bank ##er, or ▁bank er
    assert len(pieces[target]) == 2
    start = len(first) + sum(len(p) for p in pieces[:target])
    positions = list(range(start, start + len(pieces[target])))
    # In a batch with a longer and a shorter sentence: padding must not move or change the target's states.
    sentences = [(words, target), ("he sat by the bank of the river and watched it flood".split(), 4), (words[:3], 1)]
    vectors = probe_vectors(model_dir, sentences)
    states = reference_states(model_dir, ids)
    assert len(vectors) == len(states) == len(LAYER_NAMES[name])
    for layer, state in zip(vectors, states):
        assert layer.shape == (3, state.shape[-1])
        np.testing.assert_allclose(layer[0], state[positions].mean(0).numpy(), rtol=1e-4, atol=1e-5)


def test_a_t5_targets_tokens_include_its_word_start_marker(family_dirs):
    """A unigram vocabulary may split "▁bank" into "▁" + "bank"; the "▁" is the word's first piece
    (its offsets are the space's), at the text's start as anywhere else."""
    tokenizer = Tokenizer.from_pretrained(family_dirs["t5"])
    words = "zebra quux the bank".split()
    encoded = tokenizer(" ".join(words), return_offsets_mapping=True)
    assert encoded.tokens(0)[1:3] == ["▁", "z"] and encoded.tokens(0)[7:9] == ["▁", "q"]  # split off, twice
    vectors = probe_vectors(family_dirs["t5"], [(words, 0), (words, 1)])
    states = reference_states(family_dirs["t5"], encoded["input_ids"][0, 1:].tolist())  # T5 reads no [CLS]
    for row, tokens in ((0, slice(0, 6)), (1, slice(6, 11))):  # "▁ z e b r a", "▁ q u u x"
        assert "".join(encoded.tokens(0)[1:][tokens]).replace("▁", "") == words[row]
        for layer, state in zip(vectors, states):
            np.testing.assert_allclose(layer[row], state[tokens].mean(0).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", FAMILIES)
def test_context_reaches_the_target_only_from_where_the_model_reads(family_dirs, name):
    """A left-to-right model (GPT, AWD-LSTM) has not read the words after the target; XLNet's
    content stream and T5's encoder read both sides. Layer 0 reads no context at all."""
    words = "the bank approved the loan for the hotel".split()
    after = words[:6] + ["river", "hotel"]  # a word after "bank" changed
    before = ["a"] + words[1:]  # a word before it changed (one token, as "the": no position moves)
    vectors = probe_vectors(family_dirs[name], [(words, 1), (after, 1), (before, 1)])
    np.testing.assert_allclose(vectors[0][1], vectors[0][0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(vectors[0][2], vectors[0][0], rtol=0, atol=1e-6)
    for layer in vectors[1:]:
        assert not np.allclose(layer[2], layer[0], atol=1e-3)  # every model reads leftwards
        if name in LEFT_TO_RIGHT:
            np.testing.assert_allclose(layer[1], layer[0], rtol=0, atol=1e-5)
        else:
            assert not np.allclose(layer[1], layer[0], atol=1e-3)


@pytest.mark.parametrize("name", FAMILIES)
def test_run_wic_and_the_command_probe_every_layer_of_each_family(family_dirs, name, tmp_path, capsys):
    folder = write_wic(tmp_path / "wic", PAIRS * 5)
    write_wic(folder, PAIRS, split="dev")
    summary = run_wic(WicConfig(data=str(folder), model=str(family_dirs[name]), max_train_examples=8,
                                precision="fp32"))
    # An AWD-LSTM's LSTMs (24 wide) are wider than its embedding and last LSTM (16): no mean of them.
    names = LAYER_NAMES[name] + ([] if name.startswith("awd-lstm") else ["mean of all layers"])
    assert [row["layer"] for row in summary["layers"]] == names
    assert summary["train_pairs"] == 8 and summary["dev_pairs"] == 4
    assert all(0.0 <= row["dev_accuracy"] <= 1.0 for row in summary["layers"])
    assert main(["wic", "--data", str(folder), "--model", str(family_dirs[name]), "--max-train-examples", "8",
                 "--out", str(tmp_path / "r.json")]) == 0
    assert names[-1] in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["layers"] == summary["layers"]


def test_a_target_past_a_gpts_context_is_a_one_line_error(family_dirs):
    words = ["the"] * 50 + ["bank"]  # 53 tokens with [CLS] and [SEP]; the tiny GPT reads 40
    with pytest.raises(UserError, match=r"the target word 'bank' has no token .* the model's 40-token limit"):
        probe_vectors(family_dirs["gpt"], [(words, 50)])
    assert [layer.shape for layer in probe_vectors(family_dirs["gpt"], [(words, 30)])] == [(1, 32)] * 3  # read
