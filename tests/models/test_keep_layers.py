"""Cutting an encoder to some of its layers (DistilBERT's student initialisation): models/bert.py's
`keep_layers` and `evenly_spaced_layers`, for every BERT-family variant."""

import pytest
import torch

from bertology import BertConfig, BertForSequenceClassification, BertModel, UserError
from bertology.models.awd_lstm import AWDLSTMConfig, AWDLSTMForSequenceClassification
from bertology.models.base import evenly_spaced_layers
from bertology.models.bert import keep_layers

# The BERT-family variants, as config switches of a 4-layer, 64-wide encoder.
VARIANTS = {
    "bert": {},
    "roberta": {"type_vocab_size": 0},
    "albert": {"embedding_size": 32, "share_layers": True},
    "electra": {"embedding_size": 32},  # a discriminator: a BERT encoder, small embeddings projected up
    "pre-ln": {"pre_layer_norm": True},
}


def source_model(variant: str, seed: int = 0) -> BertForSequenceClassification:
    """A random 4-layer classifier of `variant`, in eval mode (no dropout)."""
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=97, hidden_size=64, num_hidden_layers=4, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=32, num_labels=3, initializer_range=0.2,
                        **VARIANTS[variant])
    return BertForSequenceClassification(config).eval()


def by_hand(model: BertForSequenceClassification, indices: list[int], ids, mask, types) -> torch.Tensor:
    """The classifier's logits through the embeddings, the layers at `indices` (the one shared layer as
    often, for ALBERT) and the pooler, applied one module at a time rather than by the model's forward."""
    encoder = model.bert
    x = encoder.embeddings(ids, types)
    attend = mask.bool()[:, None, None, :]  # (B, 1, 1, T): padding keys hidden
    for i in indices:
        x, _ = encoder.layers[0 if model.config.share_layers else i](x, attend)
    if encoder.final_norm is not None:
        x = encoder.final_norm(x)
    return model.classifier(torch.tanh(encoder.pooler(x[:, 0])))


def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 97, (3, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = mask[2, 4:] = 0
    return ids * mask, mask, (torch.arange(11) >= 5).long().expand(3, 11) * mask


def test_evenly_spaced_layers():
    assert evenly_spaced_layers(2, 4) == [0, 2]  # half: DistilBERT's one layer out of two
    assert evenly_spaced_layers(3, 6) == [0, 2, 4]
    assert evenly_spaced_layers(6, 12) == [0, 2, 4, 6, 8, 10]
    assert evenly_spaced_layers(2, 6) == [0, 3] and evenly_spaced_layers(4, 6) == [0, 1, 3, 4]
    assert evenly_spaced_layers(1, 4) == [0] and evenly_spaced_layers(1, 1) == [0]
    assert evenly_spaced_layers(4, 4) == [0, 1, 2, 3] and evenly_spaced_layers(6, 6) == list(range(6))
    for kept in (0, -1, 5):
        with pytest.raises(UserError, match="choose 1 to 4"):
            evenly_spaced_layers(kept, 4)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("indices", [[0, 2], [1], [0, 1, 3], [0, 1, 2, 3]])
def test_the_cut_keeps_those_layers_and_computes_the_same_function(variant, indices):
    source = source_model(variant)
    before = {k: v.clone() for k, v in source.state_dict().items()}
    cut = keep_layers(source, indices)
    assert type(cut) is BertForSequenceClassification and not cut.training
    assert cut.config.num_hidden_layers == len(indices) and cut.bert.config is cut.config
    assert source.config.num_hidden_layers == 4  # the source is untouched
    assert all(torch.equal(before[k], v) for k, v in source.state_dict().items())
    kept = [0] if source.config.share_layers else indices  # ALBERT: one set of weights, repeated
    assert len(cut.bert.layers) == len(kept)
    for new, old in enumerate(kept):
        new_layer, old_layer = cut.bert.layers[new].state_dict(), source.bert.layers[old].state_dict()
        assert new_layer.keys() == old_layer.keys()
        assert all(torch.equal(new_layer[k], old_layer[k]) for k in old_layer)
    for part in ("embeddings", "pooler"):
        new_part, old_part = getattr(cut.bert, part).state_dict(), getattr(source.bert, part).state_dict()
        assert all(torch.equal(new_part[k], old_part[k]) for k in old_part)
    # The cut's weights are its own: training it leaves the source as it was.
    with torch.no_grad():
        cut.bert.embeddings.word_embeddings.weight.add_(1.0)
    assert torch.equal(source.bert.embeddings.word_embeddings.weight, before["bert.embeddings.word_embeddings.weight"])
    cut = keep_layers(source, indices)

    ids, mask, types = batch()
    token_types = None if source.config.type_vocab_size == 0 else types
    with torch.no_grad():
        expected = by_hand(source, indices, ids, mask, token_types)
        got = cut(ids, mask, token_types).logits
        full = source(ids, mask, token_types).logits
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
    assert torch.allclose(full, by_hand(source, [0, 1, 2, 3], ids, mask, token_types), atol=1e-5)
    if len(indices) < 4:  # fewer layers compute another function: the check above can fail
        assert not torch.allclose(got, full, atol=1e-3)


def test_a_cut_saves_and_loads_at_its_depth_while_plain_loading_still_refuses_fewer_layers(tmp_path):
    source = source_model("bert")
    source.save_pretrained(tmp_path / "full")
    cut = keep_layers(source, [0, 2])
    cut.save_pretrained(tmp_path / "cut")
    loaded = BertForSequenceClassification.from_pretrained(tmp_path / "cut")
    assert loaded.config.num_hidden_layers == 2 and loaded.newly_initialized == []
    ids, mask, types = batch()
    with torch.no_grad():
        assert torch.equal(loaded(ids, mask, types).logits, cut(ids, mask, types).logits)
    with pytest.raises(UserError, match="the weights hold 4 layers, but config.json has 2"):
        BertForSequenceClassification.from_pretrained(tmp_path / "full", num_hidden_layers=2)


def test_the_bare_encoder_is_cut_too():
    torch.manual_seed(0)
    encoder = BertModel(BertConfig.from_preset("tiny", vocab_size=97, num_hidden_layers=4)).eval()
    cut = keep_layers(encoder, [3])
    assert type(cut) is BertModel and cut.config.num_hidden_layers == 1
    assert all(torch.equal(a, b) for a, b in zip(cut.layers[0].parameters(), encoder.layers[3].parameters()))


@pytest.mark.parametrize("indices", [[], [2, 1], [0, 0], [4], [-1, 0]])
def test_bad_indices_are_one_line_errors(indices):
    with pytest.raises(UserError, match=r"layers to keep must be distinct, increasing indices in 0\.\.3"):
        keep_layers(source_model("bert"), indices)


def test_other_families_are_refused():
    lstm = AWDLSTMForSequenceClassification(AWDLSTMConfig(vocab_size=30, emb_sz=8, n_hid=8))
    with pytest.raises(UserError, match="keep_layers cuts a BERT-family encoder; got AWDLSTMForSequenceClassification"):
        keep_layers(lstm, [0])
