"""Sizes checked before anything is allocated (bertology/memory.py): each family counts its
parameters from its config, and a config the machine cannot hold is a one-line error naming the
field, at once (a config at the fields' old cap of 2^21 built for 60-90 s and 6-10 GB first)."""

import dataclasses
import time

import pytest
import torch

from bertology.errors import UserError
from bertology.memory import check_fits, machine_memory, parameters_of
from bertology.models.awd_lstm import AWDLSTMConfig, AWDLSTMLMHeadModel
from bertology.models.bert import BertConfig, BertModel
from bertology.models.cove import CoVeConfig, CoVeForTranslation
from bertology.models.elmo import ELMoConfig, ELMoLMHeadModel
from bertology.models.gpt import GPTConfig, GPTLMHeadModel
from bertology.models.t5 import T5Config, T5ForConditionalGeneration
from bertology.models.xlnet import XLNetConfig, XLNetLMHeadModel

TINY = {
    "gpt": (GPTConfig(vocab_size=300, n_positions=64, n_embd=32, n_layer=2, n_head=4), GPTLMHeadModel),
    "gpt2": (GPTConfig(vocab_size=300, n_positions=64, n_embd=32, n_layer=2, n_head=4, pre_layer_norm=True),
             GPTLMHeadModel),
    "t5": (T5Config(vocab_size=300, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4),
           T5ForConditionalGeneration),
    "t5 v1.1": (T5Config(vocab_size=300, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3, num_heads=4,
                         feed_forward_proj="gated-gelu", tie_word_embeddings=False), T5ForConditionalGeneration),
    "xlnet": (XLNetConfig(vocab_size=300, d_model=32, n_layer=2, n_head=4, d_inner=64), XLNetLMHeadModel),
    "awd-lstm": (AWDLSTMConfig(vocab_size=300, emb_sz=32, n_hid=48), AWDLSTMLMHeadModel),
    "bert": (BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64), BertModel),
    "albert": (BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                          intermediate_size=64, max_position_embeddings=64, embedding_size=16, share_layers=True),
               BertModel),
}


@pytest.mark.parametrize("family", list(TINY))
def test_each_family_counts_its_parameters_from_its_config(family):
    config, model_class = TINY[family]
    model = model_class(config)
    real = sum(p.numel() for p in model.parameters())
    assert abs(parameters_of(config) - real) <= 0.02 * real, (parameters_of(config), real)


def test_lstm_families_with_buffers_count_their_parameters_too():
    elmo = ELMoConfig(vocab_size=300, filters=[[1, 8], [2, 8], [3, 16]], n_highway=1, projection_dim=16, lstm_dim=32)
    parameters = sum(p.numel() for p in ELMoLMHeadModel(elmo).parameters())
    assert parameters <= parameters_of(elmo) <= parameters + 2 * 300 * elmo.max_characters_per_token  # + char ids
    cove = CoVeConfig(input_size=16, hidden_size=16, source_vocab_size=50, decoder_vocab_size=30,
                      target_embedding_size=12)
    model = CoVeForTranslation(cove, [f"s{i}" for i in range(50)], [f"t{i}" for i in range(30)])
    real = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    assert abs(parameters_of(cove) - real) <= 0.05 * real


HUGE = 2**21  # the old cap of most size fields; each case below needs terabytes
OVERSIZED = [
    (GPTConfig, {"n_layer": HUGE}, "n_layer"),
    (GPTConfig, {"n_embd": HUGE, "n_head": 1}, "n_embd"),
    (T5Config, {"d_model": HUGE}, "d_model"),
    (T5Config, {"num_layers": HUGE}, "num_layers"),
    (XLNetConfig, {"n_layer": HUGE}, "n_layer"),
    (AWDLSTMConfig, {"n_hid": HUGE}, "n_hid"),
    (ELMoConfig, {"lstm_dim": 2**24, "projection_dim": 2**20}, "lstm_dim"),
    (CoVeConfig, {"hidden_size": HUGE}, "hidden_size"),
    (BertConfig, {"num_hidden_layers": 2**10, "hidden_size": 2**15, "num_attention_heads": 2**9,
                  "intermediate_size": 2**17}, "num_hidden_layers"),
]


@pytest.mark.parametrize("config_class, fields, culprit", OVERSIZED, ids=[f"{c.__name__}-{n}" for c, _, n in OVERSIZED])
def test_a_config_the_machine_cannot_hold_is_refused_at_once_naming_the_field(config_class, fields, culprit):
    start = time.perf_counter()
    with pytest.raises(UserError, match=rf"^config field '{culprit}' \({fields[culprit]}\) makes a model of [\d,]+ "
                                        r"parameters: [\d,.]+ GiB in fp32, more than this machine's"):
        config_class(**fields)
    assert time.perf_counter() - start < 0.5


def test_check_fits_names_what_needs_the_memory():
    check_fits(machine_memory() // 2, "half")
    with pytest.raises(UserError, match=r"^--beams 9 needs about [\d,.]+ GiB of memory, more than this machine's"):
        check_fits(machine_memory() + 1, "--beams 9")


def test_a_family_config_file_at_the_cap_is_refused_by_generate_before_loading(tmp_path, capsys):
    from helpers import run_cli, save_tiny_gpt

    model = save_tiny_gpt(tmp_path)
    config = GPTConfig.load(model)
    (model / "config.json").write_text((model / "config.json").read_text().replace(f'"n_layer": {config.n_layer}',
                                                                                     f'"n_layer": {HUGE}'))
    start = time.perf_counter()
    status, out, err = run_cli(capsys, "generate", "--model", model, "--prompt", "the cat")
    assert status == 2 and not out and "config field 'n_layer' (2097152) makes a model of" in err
    assert time.perf_counter() - start < 5 and torch.get_num_threads()  # no build of 2^21 layers
    assert dataclasses.is_dataclass(config)
