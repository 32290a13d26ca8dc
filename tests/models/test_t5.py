"""T5 against transformers' T5ForConditionalGeneration on the same random weights (v1.0 and v1.1
configs): logits, the loss, greedy and beam generation token for token, the cache, the position
buckets, and directories loading both ways; then the config's errors."""

import pytest
import torch
from transformers import T5Config as ReferenceConfig
from transformers import T5ForConditionalGeneration as Reference
from transformers.models.t5.modeling_t5 import T5Attention as ReferenceAttention

from bertology.errors import UserError
from bertology.inference.generation import GenerationConfig, generate
from bertology.inference.modeldir import load_model
from bertology.models import family_of
from bertology.models.t5 import T5Config, T5ForConditionalGeneration, shift_right
from bertology.ops import relative_position_bucket

# Odd sizes (d_ff 37, heads x d_kv != d_model) and few buckets, so that distances of a 30-token
# input reach the logarithmic buckets and the last one.
SMALL = dict(vocab_size=99, d_model=32, d_kv=6, d_ff=37, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
             relative_attention_max_distance=20, dropout_rate=0.0)
VERSIONS = {"v1.0": dict(feed_forward_proj="relu", tie_word_embeddings=True),
            "v1.1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)}


def reference(version: str, seed: int = 0, **sizes) -> Reference:
    """transformers' model with every tensor random (norm weights included), std 0.3."""
    torch.manual_seed(seed)
    model = Reference(ReferenceConfig(**{**SMALL, **VERSIONS[version], **sizes}, decoder_start_token_id=0)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model


def padded_inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three inputs of 30, 20 and 5 tokens (right-padded) and decoder inputs of 25 tokens."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 99, (3, 30), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 20:], mask[2, 5:] = 0, 0
    ids[mask == 0] = 0
    return ids, mask, torch.randint(2, 99, (3, 25), generator=generator)


@pytest.fixture(params=list(VERSIONS))
def pair(request, tmp_path):
    """(transformers' model with 3 decoder layers, ours loaded from the directory it saved)."""
    theirs = reference(request.param, num_decoder_layers=3)
    theirs.save_pretrained(tmp_path / "theirs")
    ours = load_model(tmp_path / "theirs")
    assert type(ours) is T5ForConditionalGeneration and ours.config.num_decoder_layers == 3
    assert ours.config.is_gated == (request.param == "v1.1")
    return theirs, ours


def test_logits_and_loss_match_transformers(pair):
    theirs, ours = pair
    ids, mask, decoder_ids = padded_inputs()
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        got = ours(ids, mask, decoder_ids).logits
        assert expected.abs().mean() > 0.03  # far above the tolerance: a wrong wiring shows
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        labels = decoder_ids.clone()
        labels[0, 20:] = -100
        expected = theirs(input_ids=ids, attention_mask=mask, labels=labels)
        got = ours(ids, mask, labels=labels)
    torch.testing.assert_close(got.loss, expected.loss, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.logits, expected.logits[labels != -100], rtol=0, atol=1e-5)


def test_saved_directory_loads_in_transformers_with_every_key(pair, tmp_path):
    theirs, ours = pair
    if not ours.config.tie_word_embeddings:  # an output matrix of its own, as T5 v1.1 trains one
        with torch.no_grad():
            ours.lm_head.weight.normal_(0.0, 0.3)
    ours.save_pretrained(tmp_path / "ours")
    back, info = Reference.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids, mask, decoder_ids = padded_inputs(seed=2)
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits,
                                   ours(ids, mask, decoder_ids).logits, rtol=0, atol=1e-5)
    assert family_of(tmp_path / "ours").name == "t5"
    again = load_model(tmp_path / "ours")
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), ours.state_dict().values()))


def until_eos(sequences: torch.Tensor, eos: int) -> torch.Tensor:
    """Each row up to its first eos, the rest -1 (transformers 5's beam search fills finished rows
    with eos rather than the padding id; the tokens generated are what is compared)."""
    after = (sequences == eos).long().cumsum(1) - (sequences == eos).long() > 0
    return sequences.masked_fill(after, -1)


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("num_beams", [1, 4])
def test_generation_matches_transformers_token_for_token(version, num_beams, tmp_path):
    theirs = reference(version)  # equal stacks: transformers 5's cache needs num_decoder_layers == num_layers
    theirs.save_pretrained(tmp_path)
    ours = load_model(tmp_path)
    ids, mask, _ = padded_inputs()
    ids, mask = ids[:, :12], mask[:, :12]
    special = dict(eos_token_id=5, pad_token_id=0)
    expected = theirs.generate(input_ids=ids, attention_mask=mask, max_new_tokens=32, num_beams=num_beams,
                               do_sample=False, decoder_start_token_id=0, **special)
    got = generate(ours, ids, mask, GenerationConfig(max_new_tokens=32, num_beams=num_beams, **special))
    assert got.shape[1] > 10 and torch.equal(until_eos(got, 5), until_eos(expected, 5))
    without_cache = generate(ours, ids, mask, GenerationConfig(max_new_tokens=32, num_beams=num_beams,
                                                               use_cache=False, **special))
    assert torch.equal(without_cache, got)


def test_a_cached_step_gives_the_full_forward_logits():
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(**SMALL)).eval()
    ids, mask, decoder_ids = padded_inputs()
    with torch.no_grad():
        full = model(ids, mask, decoder_ids).logits
        first = model(ids, mask, decoder_ids[:, :10])
        rest = model(attention_mask=mask, decoder_input_ids=decoder_ids[:, 10:], encoder_outputs=first.encoder_last_hidden_state,
                     past_key_values=first.past_key_values).logits
    torch.testing.assert_close(torch.cat([first.logits, rest], dim=1), full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_position_buckets_are_transformers(bidirectional):
    distance = torch.arange(-300, 301)[None, :]
    for buckets, max_distance in ((32, 128), (8, 20)):
        expected = ReferenceAttention._relative_position_bucket(distance, bidirectional, buckets, max_distance)
        got = relative_position_bucket(distance, bidirectional, buckets, max_distance)
        assert torch.equal(got, expected)
    got = relative_position_bucket(distance, bidirectional, 32, 128)
    assert got.max() == 31 and (got[0, :150] == got[0, 0]).all()  # everything beyond 128 shares one bucket
    if not bidirectional:
        assert (got[0, 301:] == 0).all()  # a causal query sees no later key: one bucket for all of them


def test_shift_right_starts_with_the_start_id_and_pads_ignored_labels():
    labels = torch.tensor([[7, 8, -100, -100], [9, 10, 11, 1]])
    assert shift_right(labels, 0, 0).tolist() == [[0, 7, 8, 0], [0, 9, 10, 11]]


@pytest.mark.parametrize("field, value, message", [
    ("feed_forward_proj", "gated-silu", "'feed_forward_proj' 'gated-silu' is not one of relu, gated-gelu"),
    ("d_kv", 0, "'d_kv' must be a positive integer"),
    ("eos_token_id", 99, "'eos_token_id' must be a token id below vocab_size (99)"),
    ("relative_attention_num_buckets", 2, "must be at least 4"),
    ("dropout_rate", 1.0, "'dropout_rate' must be a number in [0, 1)"),
])
def test_config_errors_name_the_field(field, value, message):
    with pytest.raises(UserError) as error:
        T5Config(**{**SMALL, field: value})
    assert message in str(error.value)


def test_presets_and_config_round_trip(tmp_path):
    config = T5Config.from_preset("mini", vocab_size=500, feed_forward_proj="gated-gelu")
    assert (config.num_layers, config.num_decoder_layers, config.d_model, config.num_heads, config.d_ff) == (4, 4, 256, 4, 1024)
    config.save(tmp_path)
    assert T5Config.load(tmp_path) == config
    with pytest.raises(UserError, match="model_type 'bert' is not a T5"):
        T5Config.from_dict({"model_type": "bert"})
