"""`bertology pretrain`'s Cramming settings: each switch reaches the model, the saved model is what
fine-tuning and transformers expect, the padded vocabulary keeps every id, and --recipe fills
only the settings left at their defaults."""

import json
import re

import pytest
import torch
from helpers import wikitext_corpus

from bertology import BertConfig, BertForMaskedLM, UserError
from bertology.data.tokenizer import Tokenizer, train_tokenizer
from bertology.models import family_named
from bertology.recipes.pretrain import (
    RECIPE_PRESETS,
    RECIPES,
    PretrainConfig,
    padded_tokenizer,
    recipe_refusal,
    run_pretraining,
    saved_config,
)


@pytest.fixture(scope="module")
def corpus(data_dir, tmp_path_factory):
    """The first 150 KB of WikiText-2 valid and a 1,000-token vocabulary."""
    return wikitext_corpus(data_dir, tmp_path_factory.mktemp("cramming"), 150_000, vocab_size=1000)


def settings(root, out, **overrides) -> PretrainConfig:
    values = dict(corpus=[str(root / "wiki.txt")], tokenizer=str(root / "tokenizer"), out=str(out),
                  cache_dir=str(root / "cache"), preset="tiny", objective="roberta", max_seq_len=32, batch_size=8,
                  lr=2e-3, eval_fraction=0.1, eval_batches=4, eval_every=0, log_every=5, save_every=0,
                  precision="fp32", progress=False, seed=0)
    return PretrainConfig(**{**values, **overrides})


@pytest.mark.slow
def test_every_switch_reaches_the_model_and_the_saved_model_is_for_fine_tuning(corpus, tmp_path):
    cfg = settings(corpus, tmp_path, max_steps=40, pre_layer_norm=True, bias=False, gated_gelu=True, dropout=0.0,
                   vocab_multiple=64, grad_accum=3, batch_ramp=0.5, schedule="linear", warmup=0.5)
    assert run_pretraining(cfg) == "completed"
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [row for row in rows if "split" not in row]
    assert all(map(torch.isfinite, torch.tensor([row["loss"] for row in train])))
    assert train[-1]["loss"] < train[0]["loss"] - 0.5
    assert [row["micro_batches_per_step"] for row in train] == [1, 2, 2, 3, 3, 3, 3, 3]
    config = BertConfig.load(tmp_path)
    assert (config.pre_layer_norm, config.use_bias, config.gated_feed_forward) == (True, False, True)
    # trained without dropout, saved with the model's own for fine-tuning
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.1
    tokens = (tmp_path / "vocab.txt").read_text().splitlines()
    assert config.vocab_size == len(tokens) == 1024 and tokens[-1].startswith("[unused")
    model = BertForMaskedLM.from_pretrained(tmp_path)
    assert model.bert.layers[0].ffn_out.weight.shape == (128, 256) and model.bert.layers[0].ffn_in.bias is None


def test_dropout_is_the_pre_trainings_and_the_saved_config_keeps_the_models(tmp_path):
    spec = family_named("bert").spec
    cfg = PretrainConfig(corpus=[], out=str(tmp_path), max_steps=1, dropout=0.0, pre_layer_norm=True)
    assert cfg.model_overrides(spec) == {"pre_layer_norm": True}  # the saved model's fields: no dropout among them
    assert cfg.training_overrides(spec) == {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    model_config = BertConfig.from_preset("tiny", vocab_size=100, **cfg.model_overrides(spec))
    training = BertConfig.from_preset("tiny", vocab_size=100, pre_layer_norm=True, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
    # what the objective's model holds (here with a head's fields of its own) gets the model's dropout back
    trained_with = BertConfig.from_preset("tiny", vocab_size=100, pre_layer_norm=True, hidden_dropout_prob=0.0,
                                          attention_probs_dropout_prob=0.0, num_labels=3)
    saved = saved_config(trained_with, model_config, training)
    assert (saved.hidden_dropout_prob, saved.attention_probs_dropout_prob, saved.num_labels) == (0.1, 0.1, 3)
    assert saved.pre_layer_norm
    assert saved_config(model_config, model_config, model_config) is model_config
    assert PretrainConfig(corpus=[], out=str(tmp_path), max_steps=1).training_overrides(spec) == {}


def test_padded_vocabulary_keeps_every_id_and_adds_unused_tokens(corpus):
    tokenizer = Tokenizer.from_pretrained(corpus / "tokenizer")
    padded = padded_tokenizer(tokenizer, 64)
    assert padded.vocab_size % 64 == 0 and padded.vocab_size - tokenizer.vocab_size < 64
    text = "The [unused0] tower, built in 1889, is 330 metres tall."
    assert padded.encode(text) == tokenizer.encode(text)
    added = padded.convert_ids_to_tokens(range(tokenizer.vocab_size, padded.vocab_size))
    assert added[0] == "[unused0]" and all(re.fullmatch(r"\[unused\d+\]", token) for token in added)
    assert padded_tokenizer(padded, 64) is padded and padded_tokenizer(tokenizer, 1) is tokenizer


def test_recipe_fills_defaults_only_and_picks_the_size_for_the_time(tmp_path):
    cfg = bare(tmp_path, max_time="5m", recipe="cramming", lr=3e-3)
    cfg.validate()
    recipe = RECIPES["cramming"]
    assert cfg.lr == 3e-3  # given: kept
    assert all(getattr(cfg, name) == value for name, value in recipe.items() if name != "lr")
    assert cfg.preset == next(preset for limit, preset in RECIPE_PRESETS if 300 <= limit)
    given = bare(tmp_path, max_time="5m", recipe="cramming", preset="small")
    given.validate()
    assert given.preset == "small"
    steps = bare(tmp_path, max_steps=10, recipe="cramming")
    steps.validate()
    assert steps.preset == "mini"  # no time budget: the size is the preset's
    with pytest.raises(UserError, match="--recipe cramming sets --no-bias, --gated-gelu, --dropout 0.0, which --arch gpt "
                                        "does not take"):
        bare(tmp_path, max_steps=1, recipe="cramming", arch="gpt").validate()
    assert recipe_refusal("cramming", "bert") is None


def bare(tmp_path, **flags) -> PretrainConfig:
    """Settings over a one-line corpus, for checks that stop before any reading."""
    (tmp_path / "c.txt").write_text("One sentence.\n")
    return PretrainConfig(corpus=[str(tmp_path / "c.txt")], out=str(tmp_path / "o"), **flags)


@pytest.mark.parametrize("flags, message", [
    (dict(arch="gpt", bias=False), "--no-bias is a switch of --arch bert, not of --arch gpt"),
    (dict(arch="t5", dropout=0.0), "--dropout 0.0 is a switch of --arch bert, not of --arch t5"),
    (dict(dropout=1.0), "--dropout must be below 1"),
    (dict(batch_ramp=0.5), "--batch-ramp grows the micro-batches per step up to --grad-accum")])
def test_cramming_flags_are_checked(tmp_path, flags, message):
    with pytest.raises(UserError, match=re.escape(message)):
        bare(tmp_path, max_steps=1, **flags).validate()


def test_vocab_multiple_pads_only_a_wordpiece_vocabulary(corpus, tmp_path):
    train_tokenizer([corpus / "wiki.txt"], vocab_size=300, out_dir=tmp_path / "unigram", model="unigram")
    with pytest.raises(UserError, match="--vocab-multiple pads a WordPiece vocabulary; this tokenizer is a unigram one"):
        padded_tokenizer(Tokenizer.from_pretrained(tmp_path / "unigram"), 64)
