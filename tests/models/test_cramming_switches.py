"""Cramming's model switches of BertConfig: no biases in the attention and feed-forward linears
(`use_bias`) and the gated-GELU feed-forward (`gated_feed_forward`): shapes, a loss that falls,
save/load round trips, and what transformers can still load."""

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from bertology import BertConfig, BertForMaskedLM, BertModel, UserError
from bertology.ops import IGNORE_INDEX


def config(**switches) -> BertConfig:
    return BertConfig.from_preset("tiny", vocab_size=97, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, **switches)


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 97, (4, 12), generator=g)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 3::4] = ids[:, 3::4]
    return ids.masked_fill(labels != IGNORE_INDEX, 4), labels


def test_no_bias_model_has_no_linear_biases_in_its_layers():
    model = BertModel(config(use_bias=False))
    names = {name for name, _ in model.named_parameters()}
    assert not any(name.startswith("layers.") and name.endswith(".bias") and "norm" not in name for name in names)
    assert {"embeddings.norm.bias", "layers.0.attention_norm.bias", "pooler.bias"} <= names
    with_bias = BertModel(config()).num_parameters()
    hidden, inner, layers = 128, 512, 2
    assert with_bias - model.num_parameters() == layers * (3 * hidden + hidden + inner + hidden)


def test_gated_feed_forward_halves_the_output_matrix_and_gates():
    model = BertModel(config(gated_feed_forward=True)).eval()
    layer = model.layers[0]
    assert layer.ffn_in.weight.shape == (512, 128) and layer.ffn_out.weight.shape == (128, 256)
    x = torch.randn(2, 5, 128)
    value, gate = layer.ffn_in(x).chunk(2, dim=-1)
    expected = layer.ffn_out(value * torch.nn.functional.gelu(gate))
    torch.testing.assert_close(layer.feed_forward(x), expected)
    assert model(torch.randint(5, 97, (2, 9))).last_hidden_state.shape == (2, 9, 128)


def test_gated_feed_forward_needs_an_even_width():
    with pytest.raises(UserError, match="gated_feed_forward.*even"):
        config(gated_feed_forward=True, intermediate_size=511)


@pytest.mark.slow
@pytest.mark.parametrize("switches", [{"use_bias": False}, {"gated_feed_forward": True},
                                      {"use_bias": False, "gated_feed_forward": True, "pre_layer_norm": True}])
def test_masked_lm_loss_falls_and_the_model_round_trips(tmp_path, switches):
    torch.manual_seed(0)
    model = BertForMaskedLM(config(**switches))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids, labels = batch()
    losses = []
    for _ in range(8):
        loss = model(ids, labels=labels).loss
        assert torch.isfinite(loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5
    model.eval().save_pretrained(tmp_path)
    reloaded = BertForMaskedLM.from_pretrained(tmp_path)
    assert reloaded.config.use_bias == switches.get("use_bias", True)
    assert torch.equal(reloaded(ids).logits, model(ids).logits)


@pytest.mark.slow
def test_no_bias_model_is_written_with_zero_biases_and_transformers_loads_it(tmp_path):
    torch.manual_seed(1)
    model = BertModel(config(use_bias=False)).eval()
    model.save_pretrained(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    assert not stored["encoder.layer.1.intermediate.dense.bias"].any()
    assert stored["encoder.layer.0.attention.self.query.bias"].shape == (128,)
    reference = transformers.BertModel.from_pretrained(tmp_path).eval()
    ids = torch.randint(5, 97, (2, 10))
    torch.testing.assert_close(reference(ids).last_hidden_state, model(ids).last_hidden_state, atol=1e-5, rtol=1e-5)


def test_a_non_zero_bias_under_use_bias_false_is_refused(tmp_path):
    BertModel(config()).save_pretrained(tmp_path)  # random weights, zero biases: set one
    stored = load_file(tmp_path / "model.safetensors")
    stored["encoder.layer.0.output.dense.bias"] += 0.5
    save_file(stored, tmp_path / "model.safetensors")
    text = (tmp_path / "config.json").read_text().replace('"use_bias": true', '"use_bias": false')
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(UserError, match="layers.0.ffn_out.bias is not zero.*use_bias false"):
        BertModel.from_pretrained(tmp_path)
    loaded_config = BertConfig.load(tmp_path)
    assert [problem for problem in BertModel.checkpoint_problems(tmp_path, loaded_config) if "is not zero" in problem]


def test_gated_model_is_beyond_transformers_and_the_no_bias_one_is_not():
    assert config(use_bias=False).transformers_incompatibility() is None
    assert config(gated_feed_forward=True).transformers_incompatibility() == "a gated feed-forward"
