"""The LSTM language models through `bertology pretrain`: ULMFiT's stages (`--arch awd-lstm`: the
token stream, learning, exact resume with the carried state, target-LM fine-tuning with --init,
bad input) and ELMo's biLM (`--arch elmo`: both directions over the stream and its reverse)."""

import json

import numpy as np
import pytest
import torch
from helpers import assert_resumed_run_matches, wikitext_corpus

from bertology import UserError
from bertology.data.shards import build_corpus
from bertology.data.token_stream import StreamBatches, TokenStream
from bertology.data.tokenizer import Tokenizer
from bertology.models import family_named
from bertology.models.awd_lstm import AWDLSTMLMHeadModel
from bertology.models.elmo import ELMoModel
from bertology.recipes.pretrain import PretrainConfig, discriminative_rates, run_pretraining

TINY = {"emb_sz": 32, "n_hid": 64, "n_layers": 3}


@pytest.fixture(scope="module")
def corpus(data_dir, tmp_path_factory):
    """The first 200 KB of WikiText-2 valid and a 2,000-token vocabulary."""
    return wikitext_corpus(data_dir, tmp_path_factory.mktemp("awd"), 200_000, vocab_size=2000)


def settings(root, out, **overrides):
    values = dict(arch="awd-lstm", corpus=[str(root / "wiki.txt")], tokenizer=str(root / "tokenizer"), out=str(out),
                  cache_dir=str(root / "cache"), model=TINY, max_seq_len=32, batch_size=8, lr=3e-3, eval_fraction=0.1,
                  eval_batches=4, eval_every=0, log_every=1, save_every=0, precision="fp32", progress=False, seed=0)
    values.update(overrides)
    return PretrainConfig(**values)


def rows(out, split=None):
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if (r.get("split") == split if split else "split" not in r)]


def test_stream_rows_continue_from_batch_to_batch(corpus):
    tokenizer = Tokenizer.from_pretrained(corpus / "tokenizer")
    tokenized = build_corpus([corpus / "wiki.txt"], tokenizer, corpus / "cache")
    docs = np.arange(tokenized.num_documents)
    stream = TokenStream(tokenized, docs, rows=4, bptt=10, seed=3, bos_id=tokenizer.cls_token_id)
    first, second = stream.batch(0), stream.batch(1)
    assert bool(first["new_stream"]) and not bool(second["new_stream"])
    assert torch.equal(first["labels"][:, :-1], first["input_ids"][:, 1:])  # labels: the next token
    assert torch.equal(first["labels"][:, -1], second["input_ids"][:, 0])  # row r of batch 1 continues row r of batch 0
    # An epoch holds every document once, each opened by [CLS]; the next epoch orders them afresh.
    grid = stream.epoch_grid(0)
    assert stream.num_tokens - grid.size < 4  # only the remainder of the division into 4 rows is cut
    assert (grid == tokenizer.cls_token_id).sum() == len(docs)
    assert stream.num_tokens == tokenized.num_tokens + len(docs)
    assert not np.array_equal(stream.epoch_grid(1), grid)
    backward = TokenStream(tokenized, docs, rows=4, bptt=10, seed=3, bos_id=tokenizer.cls_token_id, reverse=True)
    assert np.array_equal(backward.epoch_grid(0), grid[:, ::-1])  # ELMo's backward LM: the same rows, from the end
    again = TokenStream(tokenized, docs, rows=4, bptt=10, seed=3, bos_id=tokenizer.cls_token_id)
    assert torch.equal(again.batch(stream.batches_per_epoch + 5)["input_ids"],
                       stream.batch(stream.batches_per_epoch + 5)["input_ids"])  # a pure function of the index
    # Two ranks of 2 rows read the two halves of the 4-row stream; accumulation reads consecutive batches.
    halves = [StreamBatches(stream, 2, 2, rank)(3) for rank in (0, 1)]
    assert torch.equal(torch.cat([halves[0][1]["input_ids"], halves[1][1]["input_ids"]]), stream.batch(7)["input_ids"])


@pytest.mark.slow
def test_the_language_model_learns_and_saves_a_loadable_model(corpus, tmp_path):
    cfg = settings(corpus, tmp_path, model={}, preset="tiny", lr=1e-2, batch_size=16, max_seq_len=64, max_steps=150, eval_every=75,
                   log_every=10)
    assert run_pretraining(cfg) == "completed"
    evals = rows(tmp_path, "eval")
    assert [r["step"] for r in evals] == [75, 150]
    # Predicting the held-out document's most frequent token scores 0.037, and a model stuck at
    # unigram statistics has perplexity 700-750 (measured at the plateau); this run: 0.075, 570.
    assert evals[-1]["lm_accuracy"] > 0.06 and evals[-1]["perplexity"] < 600
    assert evals[-1]["perplexity"] < evals[0]["perplexity"]
    model = AWDLSTMLMHeadModel.from_pretrained(tmp_path)
    assert (model.config.emb_sz, model.config.n_hid) == (64, 192)  # the tiny preset
    assert Tokenizer.from_pretrained(tmp_path).vocab_size == model.config.vocab_size


def test_interrupted_and_resumed_run_matches_an_uninterrupted_one(corpus, tmp_path):
    """The carried LSTM state and the dropout masks continue exactly: the same losses step by step."""
    def run(out, resume):
        return run_pretraining(settings(corpus, out, max_steps=16, save_every=5, resume=resume))

    assert_resumed_run_matches(run, tmp_path / "straight", tmp_path / "resumed", interrupt_at=9, steps=16)


def test_target_lm_fine_tuning_starts_from_the_given_model(corpus, tmp_path):
    run_pretraining(settings(corpus, tmp_path / "general", max_steps=30))
    general = AWDLSTMLMHeadModel.from_pretrained(tmp_path / "general")
    cfg = settings(corpus, tmp_path / "target", tokenizer=None, model={}, init=str(tmp_path / "general"),
                   max_steps=1, lr=1e-7, layer_lr_decay=1 / 2.6, schedule="slanted_triangular")
    run_pretraining(cfg)
    target = AWDLSTMLMHeadModel.from_pretrained(tmp_path / "target")
    assert target.config.emb_sz == 32  # --init's config, not the preset's
    for (name, a), b in zip(general.state_dict().items(), target.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0, msg=name)
    assert (tmp_path / "target" / "vocab.txt").read_text() == (tmp_path / "general" / "vocab.txt").read_text()


def test_discriminative_rates_divide_by_the_factor_per_layer_down():
    scale = discriminative_rates(family_named("awd-lstm").spec, TINY["n_layers"], 1 / 2.6)
    assert scale("model.awd_lstm.rnns.2.module.weight_ih_l0") == 1.0
    assert scale("model.awd_lstm.rnns.1.weight_hh_l0_raw") == pytest.approx(1 / 2.6)
    assert scale("model.awd_lstm.rnns.0.module.bias_hh_l0") == pytest.approx(1 / 2.6 ** 2)
    assert scale("model.awd_lstm.encoder.weight") == 1.0  # tied to the output layer: fastai's top group


def test_bad_input_is_a_one_line_error(corpus, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("A few words only .\n\nAnd another document .\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"short\.txt: .* too few for one batch"):
        run_pretraining(settings(corpus, tmp_path / "a", corpus=[str(short)], max_steps=5))
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(UserError, match="a bert model; --init continues a model of --arch awd-lstm"):
        run_pretraining(settings(corpus, tmp_path / "b", init=str(bert), max_steps=5))
    with pytest.raises(UserError, match="--layer-lr-decay scales the rates of a stack of layers; --arch t5 declares"):
        run_pretraining(settings(corpus, tmp_path / "c", arch="t5", model={}, layer_lr_decay=0.5, max_steps=5))
    assert not (tmp_path / "c" / "metrics.jsonl").exists()
    with pytest.raises(UserError, match=r"not --objective bilm \(which trains --arch elmo\)"):
        run_pretraining(settings(corpus, tmp_path / "d", arch="bert", model={}, objective="bilm", max_steps=5))
    with pytest.raises(UserError, match="--arch elmo trains with bilm, not --objective clm"):
        run_pretraining(settings(corpus, tmp_path / "e", arch="elmo", model={}, objective="clm", max_steps=5))


@pytest.mark.slow
def test_elmo_trains_both_directions_and_its_layers_are_features(corpus, tmp_path):
    small = {"filters": [[1, 8], [2, 8], [3, 16]], "n_highway": 1, "projection_dim": 32, "lstm_dim": 64}
    cfg = settings(corpus, tmp_path, arch="elmo", model=small, max_steps=40, eval_every=20, log_every=10)
    assert run_pretraining(cfg) == "completed" and cfg.objective == "bilm"
    evals = rows(tmp_path, "eval")
    assert {"forward_perplexity", "backward_perplexity", "forward_lm_accuracy", "backward_lm_accuracy"} <= set(evals[-1])
    for direction in ("forward", "backward"):
        assert evals[-1][f"{direction}_perplexity"] < evals[0][f"{direction}_perplexity"] < 2000
    tokenizer = Tokenizer.from_pretrained(tmp_path)
    model = ELMoModel.from_pretrained(tmp_path)
    assert model.bilm.token_encoder.char_ids[tokenizer.convert_tokens_to_ids("the"), 1] == ord("t") + 1
    ids = torch.tensor([tokenizer.encode("the river bank flooded .")])
    with torch.no_grad():
        layers = model(ids).hidden_states
    assert len(layers) == 3 and all(layer.shape == (1, ids.shape[1], 64) for layer in layers)
