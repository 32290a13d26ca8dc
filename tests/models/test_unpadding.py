"""Unpadded encoders (ops.py's `Unpadding`): a padded batch runs on its real tokens alone, and every
real token's output, loss and gradient equals the padded computation's within fp32 1e-5."""

import pytest
import torch
import torch.nn.functional as F

from bertology import ops
from bertology.models.albert import AlbertConfig, AlbertModel
from bertology.models.bert import (
    BertConfig,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)
from bertology.models.distilbert import DistilBertConfig, DistilBertModel
from bertology.models.electra import ElectraConfig, ElectraModel
from bertology.models.roberta import RobertaConfig, RobertaModel
from bertology.ops import Unpadding

VOCAB = 120


def _batch(padding: str = "right", seed: int = 0):
    """ids and attention_mask (5, 12): rows of 12, 7, 3, 9 and 1 real tokens."""
    g = torch.Generator().manual_seed(seed)
    lengths = [12, 7, 3, 9, 1]
    ids = torch.randint(5, VOCAB, (len(lengths), 12), generator=g)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        if padding == "right":
            mask[row, :n] = 1
        elif padding == "left":
            mask[row, 12 - n:] = 1
        else:  # holes inside the row: any mask, not only a prefix or suffix
            mask[row, torch.randperm(12, generator=g)[:n]] = 1
    return ids, mask


ENCODERS = {
    "bert": lambda: BertModel(BertConfig.from_preset("tiny", vocab_size=VOCAB)),
    "bert causal": lambda: BertModel(BertConfig.from_preset("tiny", vocab_size=VOCAB, causal=True)),
    "bert pre-LN, no biases, gated": lambda: BertModel(BertConfig.from_preset(
        "tiny", vocab_size=VOCAB, pre_layer_norm=True, use_bias=False, gated_feed_forward=True)),
    "roberta": lambda: RobertaModel(RobertaConfig.from_preset("tiny", vocab_size=VOCAB)),
    "albert": lambda: AlbertModel(AlbertConfig.from_preset("tiny", vocab_size=VOCAB)),
    "electra": lambda: ElectraModel(ElectraConfig.from_preset("tiny", vocab_size=VOCAB)),
    "distilbert": lambda: DistilBertModel(DistilBertConfig.from_preset("tiny", vocab_size=VOCAB)),
}


def _both(model, ids, mask, **kwargs):
    """The model's output unpadded and padded (the class switch `unpad`)."""
    outputs = []
    for unpad in (True, False):
        model.unpad = unpad
        outputs.append(model(ids, attention_mask=mask, **kwargs))
    del model.unpad
    return outputs


@pytest.mark.parametrize("name", ENCODERS)
@pytest.mark.parametrize("padding", ["right", "left", "inside"])
def test_unpadded_encoder_equals_padded_at_every_real_token(name, padding):
    torch.manual_seed(0)
    model = ENCODERS[name]().eval()
    ids, mask = _batch(padding)
    with torch.no_grad():
        unpadded, padded = _both(model, ids, mask, output_hidden_states=True)
    real = mask.bool()
    torch.testing.assert_close(unpadded.last_hidden_state[real], padded.last_hidden_state[real], atol=1e-5, rtol=1e-5)
    assert unpadded.last_hidden_state[~real].abs().max() == 0  # padding comes back as zeros
    for ours, theirs in zip(unpadded.hidden_states, padded.hidden_states, strict=True):
        torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
    if padded.pooler_output is not None and padding == "right":
        torch.testing.assert_close(unpadded.pooler_output, padded.pooler_output, atol=1e-5, rtol=1e-5)


def test_unpadding_packs_the_real_tokens_row_by_row():
    ids, mask = _batch("inside")
    unpadding = Unpadding.of(mask, mask.bool()[:, None, None, :])
    assert unpadding.cu_seqlens.tolist() == [0, 12, 19, 22, 31, 32]
    assert unpadding.max_len == 12 and unpadding.shape == (5, 12)
    packed = unpadding.unpad(ids)  # (32,)
    assert packed.tolist() == ids[mask.bool()].tolist()
    back = unpadding.pad(packed)
    assert torch.equal(back, ids * mask)


def test_batches_with_little_padding_keep_the_padded_form():
    _, mask = _batch("right")
    assert Unpadding.applies(mask)
    assert not Unpadding.applies(torch.ones_like(mask))
    assert not Unpadding.applies(None)
    nearly_full = torch.ones(4, 10, dtype=torch.long)
    nearly_full[0, -3:] = 0  # 3 of 40 positions: below MIN_PADDING, packing would cost more than it saves
    assert not Unpadding.applies(nearly_full)
    nearly_full[1, -1:] = 0  # 4 of 40
    assert Unpadding.applies(nearly_full)


@pytest.mark.parametrize("cls, per_token", [(BertForSequenceClassification, False), (BertForTokenClassification, True)])
def test_unpadded_training_gives_the_padded_loss_and_gradients(cls, per_token):
    torch.manual_seed(0)
    config = BertConfig.from_preset("tiny", vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = cls(config)
    model.config.num_labels = 3
    ids, mask = _batch("right")
    labels = torch.randint(0, 2, ids.shape if per_token else ids.shape[:1])
    if per_token:
        labels = labels.masked_fill(mask == 0, -100)
    results = []
    for unpad in (True, False):
        model.zero_grad()
        model.bert.unpad = unpad
        loss = model(ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (loss_u, grads_u), (loss_p, grads_p) = results
    torch.testing.assert_close(loss_u, loss_p, atol=1e-5, rtol=1e-5)
    assert grads_u.keys() == grads_p.keys()
    for name in grads_p:
        torch.testing.assert_close(grads_u[name], grads_p[name], atol=1e-5, rtol=1e-4, msg=name)


def _reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, window_size=(-1, -1)):
    """PyTorch's varlen_attn, row by row with SDPA: what the CUDA kernel computes."""
    out = torch.empty_like(q)
    for start, end in zip(cu_q[:-1].tolist(), cu_q[1:].tolist(), strict=True):
        rows = [t[start:end].transpose(0, 1)[None] for t in (q, k, v)]  # (1, heads, n, hs)
        out[start:end] = F.scaled_dot_product_attention(*rows, is_causal=window_size == (-1, 0))[0].transpose(0, 1)
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_the_variable_length_kernel_path_packs_its_inputs_right(monkeypatch, causal):
    """The CUDA path (packed q, k, v straight into varlen_attn) checked on the CPU: the kernel is
    replaced by its row-by-row definition, and the encoder's outputs must equal the padded form's."""
    monkeypatch.setattr(ops, "_varlen_attn", _reference_varlen)
    monkeypatch.setattr(Unpadding, "has_kernel", lambda self, x, dropout_p: dropout_p == 0.0)
    torch.manual_seed(0)
    model = BertModel(BertConfig.from_preset("tiny", vocab_size=VOCAB, causal=causal)).eval()
    ids, mask = _batch("right")
    with torch.no_grad():
        unpadded, padded = _both(model, ids, mask)
    real = mask.bool()
    torch.testing.assert_close(unpadded.last_hidden_state[real], padded.last_hidden_state[real], atol=1e-5, rtol=1e-5)
