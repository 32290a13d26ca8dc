"""XLNet against transformers' XLNetLMHeadModel, XLNetForSequenceClassification,
XLNetForTokenClassification and XLNetForQuestionAnsweringSimple on the same random weights,
converted through the key table: plain forward with segments and padding, two-stream with a
permutation mask and target mapping, memory from a previous segment (and a mask hiding it), the
config switches; the token and span heads' outputs at real positions whatever the padding; then
directories both ways, and the config's errors."""

import json

import pytest
import torch
from transformers import XLNetConfig as ReferenceConfig
from transformers import XLNetForQuestionAnsweringSimple as ReferenceQuestionAnswering
from transformers import XLNetForSequenceClassification as ReferenceClassifier
from transformers import XLNetForTokenClassification as ReferenceTagger
from transformers import XLNetLMHeadModel as ReferenceLM

from bertology.errors import UserError
from bertology.inference.modeldir import load_model
from bertology.models import family_of
from bertology.models.xlnet import (
    XLNetConfig,
    XLNetForQuestionAnsweringSimple,
    XLNetForSequenceClassification,
    XLNetForTokenClassification,
    XLNetLMHeadModel,
    XLNetModel,
    from_transformers,
    rel_shift,
    to_transformers,
)

SMALL = dict(vocab_size=99, d_model=32, n_layer=2, n_head=4, d_inner=37, mem_len=5)
TOLERANCE = dict(rtol=0, atol=1e-5)


def reference(model_class=ReferenceLM, seed: int = 0, **switches):
    """transformers' model with every tensor random (std 0.3, LayerNorms and biases included), so
    that a wrong wiring shows."""
    torch.manual_seed(seed)
    model = model_class(ReferenceConfig(**{**SMALL, **switches})).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model


def ours_from(theirs, model_class=XLNetLMHeadModel, **switches):
    """Our model of the same config, holding transformers' weights converted through the key table."""
    config = XLNetConfig(**{**SMALL, **switches})
    model = model_class(config).eval()
    state = from_transformers(theirs.state_dict(), config, "test")
    assert set(model.state_dict()) - set(state) <= {"lm_loss.weight"}  # the tied matrix, stored once
    assert not set(state) - set(model.state_dict())
    model.load_state_dict(state, strict=False)
    return model


def inputs(length: int = 9, seed: int = 1):
    """Two rows of `length` tokens, two segments (the last four tokens segment 1), the second row
    left-padded by 3 (XLNet's tokenizer pads on the left)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 99, (2, length), generator=generator)
    segments = torch.zeros_like(ids)
    segments[:, -4:] = 1
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    return ids, segments, mask


def two_stream(length: int, seed: int = 2):
    """A random permutation mask (B, T, T) and a target mapping of three targets (B, 3, T)."""
    perm_mask = (torch.rand(2, length, length, generator=torch.Generator().manual_seed(seed)) > 0.5).float()
    target_mapping = torch.zeros(2, 3, length)
    for row, positions in enumerate(([2, 5, length - 1], [3, 4, length - 1])):
        target_mapping[row, torch.arange(3), torch.tensor(positions)] = 1.0
    return perm_mask, target_mapping


@pytest.fixture(scope="module")
def pair():
    theirs = reference()
    return theirs, ours_from(theirs)


def test_plain_forward_with_segments_and_padding_matches_transformers(pair):
    theirs, ours = pair
    ids, segments, mask = inputs()
    with torch.no_grad():
        expected = theirs(ids, attention_mask=mask, token_type_ids=segments).logits
        got = ours(ids, mask, segments).logits
    assert expected.abs().mean() > 0.1  # not a near-zero output that anything would match
    torch.testing.assert_close(got, expected, **TOLERANCE)


def test_two_stream_with_permutation_mask_and_target_mapping_matches_transformers(pair):
    theirs, ours = pair
    ids, segments, mask = inputs()
    perm_mask, target_mapping = two_stream(ids.shape[1])
    with torch.no_grad():
        expected = theirs(ids, attention_mask=mask, token_type_ids=segments, perm_mask=perm_mask,
                          target_mapping=target_mapping).logits
        got = ours(ids, mask, segments, perm_mask, target_mapping).logits
        plain = ours(ids, mask, segments).logits
    assert got.shape == (2, 3, 99)
    torch.testing.assert_close(got, expected, **TOLERANCE)
    assert (got[0] - plain[0, [2, 5, 8]]).abs().max() > 0.1  # the query stream is not the content stream


def test_memory_from_a_previous_segment_matches_transformers(pair):
    theirs, ours = pair
    first, segments, _ = inputs(9, seed=3)
    second, _, _ = inputs(7, seed=4)
    perm_mask, target_mapping = two_stream(7)
    with torch.no_grad():
        their_mems = theirs(first, token_type_ids=segments, use_mems=True).mems
        our_mems = ours(first, token_type_ids=segments, use_mems=True).mems
        assert [tuple(m.shape) for m in our_mems] == [(2, 5, 32)] * 2  # mem_len 5 of the 9 tokens
        for our_mem, their_mem in zip(our_mems, their_mems):  # theirs are sequence-first
            torch.testing.assert_close(our_mem, their_mem.transpose(0, 1), **TOLERANCE)
        for two_streams in ({}, dict(perm_mask=perm_mask, target_mapping=target_mapping)):
            expected = theirs(second, mems=their_mems, token_type_ids=segments[:, :7], **two_streams).logits
            got = ours(second, token_type_ids=segments[:, :7], mems=our_mems, **two_streams).logits
            torch.testing.assert_close(got, expected, **TOLERANCE)
        without = ours(second, token_type_ids=segments[:, :7]).logits
    assert (without - ours(second, token_type_ids=segments[:, :7], mems=our_mems).logits).abs().max() > 0.01


def test_a_perm_mask_over_memory_and_segment_hides_memory_positions(pair):
    """perm_mask (B, T, M + T): zeros over the memory are the (B, T, T) mask (transformers' layout, the
    memory visible); ones over all of it are no memory at all."""
    _, ours = pair
    first, _, _ = inputs(9, seed=3)
    second, _, _ = inputs(7, seed=4)
    perm_mask, target_mapping = two_stream(7)
    perm_mask[:, :, 0] = 0  # every query sees a token of the segment: none is left with nothing to see
    with torch.no_grad():
        mems = ours(first, use_mems=True).mems
        visible = ours(second, perm_mask=perm_mask, target_mapping=target_mapping, mems=mems).logits
        hidden = ours(second, perm_mask=perm_mask, target_mapping=target_mapping).logits
        for memory_columns, expected in ((torch.zeros(2, 7, 5), visible), (torch.ones(2, 7, 5), hidden)):
            widened = torch.cat([memory_columns, perm_mask], dim=2)
            got = ours(second, perm_mask=widened, target_mapping=target_mapping, mems=mems).logits
            torch.testing.assert_close(got, expected, **TOLERANCE)
    assert (visible - hidden).abs().max() > 0.01


@pytest.mark.parametrize("switches", [dict(attn_type="uni", same_length=True), dict(attn_type="uni"),
                                      dict(bi_data=True, clamp_len=3), dict(reuse_len=4, mem_len=None)],
                         ids=["uni-same-length", "uni", "bi-data-clamp", "reuse-len"])
def test_config_switches_match_transformers_with_memory(switches):
    theirs = reference(**switches)
    ours = ours_from(theirs, **switches)
    first, _, _ = inputs(9, seed=5)
    second, _, _ = inputs(6, seed=6)
    with torch.no_grad():
        their_mems, our_mems = theirs(first, use_mems=True).mems, ours(first, use_mems=True).mems
        torch.testing.assert_close(ours(second, mems=our_mems).logits, theirs(second, mems=their_mems).logits,
                                   **TOLERANCE)


def test_sequence_classifier_matches_transformers_on_the_last_token():
    theirs = reference(ReferenceClassifier, num_labels=3)
    ours = ours_from(theirs, XLNetForSequenceClassification, num_labels=3)
    ids, segments, mask = inputs()
    with torch.no_grad():
        expected = theirs(ids, attention_mask=mask, token_type_ids=segments).logits
        got = ours(ids, mask, segments).logits
        torch.testing.assert_close(got, expected, **TOLERANCE)
        # bertology's batches pad on the right: the summary reads the last real token all the same
        right_ids = torch.cat([ids[1:, 3:], ids[1:, :3]], dim=1)
        right_mask = torch.cat([mask[1:, 3:], mask[1:, :3]], dim=1)
        alone = theirs(ids[1:, 3:], token_type_ids=segments[1:, 3:]).logits
        padded = ours(right_ids, right_mask, torch.cat([segments[1:, 3:], segments[1:, :3]], dim=1)).logits
    torch.testing.assert_close(padded, alone, **TOLERANCE)


# The token and span heads: (transformers' class, ours, config switches, the outputs compared).
HEADS = {"token": (ReferenceTagger, XLNetForTokenClassification, dict(num_labels=5), ("logits",)),
         "span": (ReferenceQuestionAnswering, XLNetForQuestionAnsweringSimple, dict(num_labels=2),
                  ("start_logits", "end_logits"))}


def head_outputs(out, names: tuple[str, ...]) -> torch.Tensor:
    """The named outputs of a token or span head, stacked: (outputs, B, T[, labels])."""
    return torch.stack([getattr(out, name) for name in names])


@pytest.mark.parametrize("head", list(HEADS))
def test_token_and_span_heads_match_transformers_both_ways(head, tmp_path):
    reference_class, our_class, switches, names = HEADS[head]
    theirs = reference(reference_class, **switches)
    ours = ours_from(theirs, our_class, **switches)
    ids, segments, mask = inputs()  # left-padded, as XLNet's tokenizer pads
    with torch.no_grad():
        expected = head_outputs(theirs(ids, attention_mask=mask, token_type_ids=segments), names)
        assert expected.abs().mean() > 0.1  # not a near-zero output that anything would match
        torch.testing.assert_close(head_outputs(ours(ids, mask, segments), names), expected, **TOLERANCE)
    ours.save_pretrained(tmp_path / "ours")
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"] == [reference_class.__name__]
    back, info = reference_class.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    theirs.save_pretrained(tmp_path / "theirs")
    again = load_model(tmp_path / "theirs")
    assert type(again) is our_class
    with torch.no_grad():
        torch.testing.assert_close(head_outputs(back.eval()(ids, attention_mask=mask, token_type_ids=segments), names),
                                   expected, **TOLERANCE)
        torch.testing.assert_close(head_outputs(again(ids, mask, segments), names), expected, **TOLERANCE)


@pytest.mark.parametrize("head", list(HEADS))
def test_token_and_span_heads_ignore_padding_on_either_side(head):
    """A row alone, right-padded with a mask (bertology's batches) and left-padded (transformers'
    tokenizer): the same outputs at its real positions, since XLNet's positions are relative."""
    reference_class, our_class, switches, names = HEADS[head]
    ours = ours_from(reference(reference_class, **switches), our_class, **switches)
    ids, segments, _ = inputs()
    row, row_segments = ids[:1, :6], segments[:1, :6]
    pad = torch.full((1, 3), 5)
    mask = torch.cat([torch.ones(1, 6, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        alone = head_outputs(ours(row, token_type_ids=row_segments), names)
        right = head_outputs(ours(torch.cat([row, pad], 1), mask, torch.cat([row_segments, pad * 0], 1)), names)
        left = head_outputs(ours(torch.cat([pad, row], 1), mask.flip(1), torch.cat([pad * 0, row_segments], 1)), names)
        unmasked = head_outputs(ours(torch.cat([row, pad], 1), token_type_ids=torch.cat([row_segments, pad * 0], 1)),
                                names)
    torch.testing.assert_close(right[:, :, :6], alone, **TOLERANCE)
    torch.testing.assert_close(left[:, :, 3:], alone, **TOLERANCE)
    assert (unmasked[:, :, :6] - alone).abs().max() > 0.01  # the mask is what hides the padding


def test_a_task_model_starts_from_any_xlnet_directory_with_a_fresh_head(tmp_path):
    tagger = XLNetForTokenClassification(XLNetConfig(**SMALL, num_labels=5))
    tagger.save_pretrained(tmp_path / "tagger")
    reader = XLNetForQuestionAnsweringSimple.from_language_model(tmp_path / "tagger", 1, None)
    assert reader.config.num_labels == 2 and reader.qa_outputs.weight.shape == (2, 32)
    assert all(torch.equal(a, b) for a, b in zip(reader.transformer.state_dict().values(),
                                                 tagger.transformer.state_dict().values()))


def test_rel_shift_puts_each_distance_under_its_key():
    """Entry [i, j] after the shift is encoding number T - i + j: the distance (M + i) - j."""
    length, mem_length = 4, 3
    key_length = mem_length + length
    width = key_length + length
    scores = torch.arange(length * width, dtype=torch.float).reshape(1, 1, length, width)
    shifted = rel_shift(scores, key_length)
    expected = torch.tensor([[scores[0, 0, i, length - i + j] for j in range(key_length)] for i in range(length)])
    assert torch.equal(shifted[0, 0], expected)


def test_saved_directory_loads_here_and_in_transformers_with_every_key(pair, tmp_path):
    theirs, ours = pair
    ours.save_pretrained(tmp_path / "ours")
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert config["model_type"] == "xlnet" and config["architectures"] == ["XLNetLMHeadModel"]
    assert config["d_head"] == 8 and config["mem_len"] == 5
    assert family_of(tmp_path / "ours").name == "xlnet"
    again = load_model(tmp_path / "ours")
    assert type(again) is XLNetLMHeadModel and not again.training
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), ours.state_dict().values()))
    loaded, info = ReferenceLM.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids, segments, mask = inputs()
    perm_mask, target_mapping = two_stream(ids.shape[1])
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(ids, attention_mask=mask, token_type_ids=segments, perm_mask=perm_mask,
                                                 target_mapping=target_mapping).logits,
                                   ours(ids, mask, segments, perm_mask, target_mapping).logits, **TOLERANCE)


def test_transformers_directories_load_here_and_a_classifier_round_trips(tmp_path):
    theirs = reference(ReferenceClassifier, num_labels=2)
    theirs.save_pretrained(tmp_path / "theirs")
    ours = load_model(tmp_path / "theirs")
    assert type(ours) is XLNetForSequenceClassification
    ids, segments, mask = inputs()
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, mask, segments).logits,
                                   theirs(ids, attention_mask=mask, token_type_ids=segments).logits, **TOLERANCE)
    ours.save_pretrained(tmp_path / "ours")
    back = ReferenceClassifier.from_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        torch.testing.assert_close(back(ids, attention_mask=mask).logits, ours(ids, mask).logits, **TOLERANCE)
    ReferenceLM(ReferenceConfig(**SMALL)).transformer.save_pretrained(tmp_path / "bare")  # keys without `transformer.`
    bare = XLNetModel.from_pretrained(tmp_path / "bare")
    assert bare.word_embedding.weight.shape == (99, 32)


def test_key_table_round_trips_and_reshapes_the_projections():
    config = XLNetConfig(**SMALL)
    model = XLNetLMHeadModel(config)
    theirs = to_transformers(model.state_dict(), config)
    assert theirs["transformer.layer.0.rel_attn.q"].shape == (32, 4, 8) and "lm_loss.weight" not in theirs
    # transformers' einsum("ibh,hnd->ibnd") with its tensor = our Linear on the same input
    x = torch.randn(3, 32)
    projected = torch.einsum("bh,hnd->bnd", x, theirs["transformer.layer.1.rel_attn.k"]).reshape(3, 32)
    torch.testing.assert_close(projected, model.transformer.layer[1].rel_attn.k(x), **TOLERANCE)
    back = from_transformers(theirs, config, "test")
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items() if k != "lm_loss.weight")


def test_training_loss_on_scored_predictions_and_a_step_learns():
    torch.manual_seed(0)
    model = XLNetLMHeadModel(XLNetConfig.from_preset("tiny", vocab_size=50, dropout=0.0)).train()
    ids = torch.randint(0, 50, (2, 12))
    perm_mask, target_mapping = two_stream(12)
    labels = ids[torch.arange(2)[:, None], target_mapping.argmax(-1)]
    labels[1, 2] = -100
    out = model(ids, perm_mask=perm_mask, target_mapping=target_mapping, labels=labels)
    assert out.logits.shape == (5, 50) and 0 <= int(out.masked_lm_correct) <= 5 and out.mems is None
    expected = torch.nn.functional.cross_entropy(model(ids, perm_mask=perm_mask, target_mapping=target_mapping).logits[
        labels != -100], labels[labels != -100])
    torch.testing.assert_close(out.loss, expected)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(5):
        optimizer.zero_grad()
        model(ids, perm_mask=perm_mask, target_mapping=target_mapping, labels=labels).loss.backward()
        optimizer.step()
    assert model(ids, perm_mask=perm_mask, target_mapping=target_mapping, labels=labels).loss < out.loss


def test_presets_and_config_errors():
    base = XLNetConfig.from_preset("base", vocab_size=32000)
    assert (base.n_layer, base.d_model, base.n_head, base.d_inner, base.d_head) == (12, 768, 12, 3072, 64)
    assert XLNetConfig.from_preset("tiny", vocab_size=10).d_model == 128
    for fields, message in ((dict(n_head=5), "must be divisible by 'n_head'"),
                            (dict(attn_type="both"), "'attn_type' must be one of bi, uni"),
                            (dict(summary_type="mean"), "'summary_type' must be 'last'"),
                            (dict(untie_r=False), "'untie_r' must be true"),
                            (dict(mem_len=-1), "'mem_len' must be a non-negative integer or null"),
                            (dict(ff_activation="swish"), "'ff_activation' 'swish' is not known")):
        with pytest.raises(UserError, match=message):
            XLNetConfig(**{**SMALL, **fields})
    with pytest.raises(UserError, match="unknown preset 'huge'"):
        XLNetConfig.from_preset("huge")
    with pytest.raises(UserError, match=r"'d_head' \(7\) must be d_model / n_head \(8\)"):
        XLNetConfig.from_dict({**SMALL, "model_type": "xlnet", "d_head": 7})
    with pytest.raises(UserError, match="model_type 'gpt2' is not an XLNet"):
        XLNetConfig.from_dict({**SMALL, "model_type": "gpt2"})


def test_a_checkpoint_of_another_size_is_a_one_line_error(tmp_path):
    XLNetLMHeadModel(XLNetConfig(**SMALL)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_head": 8, "d_head": 4}))
    with pytest.raises(UserError, match=r"model.safetensors: shape mismatch for transformer.layer.0.rel_attn.k: "
                                        r"checkpoint \(32, 4, 8\), config.json expects \(32, 8, 4\)"):
        load_model(tmp_path)
