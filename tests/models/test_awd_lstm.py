"""AWD-LSTM (models/awd_lstm.py) against fastai's AWD_LSTM, and the structure ULMFiT relies on."""

import warnings

import pytest
import torch

from bertology import checkpoint
from bertology.errors import UserError
from bertology.models.awd_lstm import (
    AWDLSTMConfig,
    AWDLSTMForSequenceClassification,
    AWDLSTMLMHeadModel,
    from_fastai,
)
from bertology.models.base import load_pretrained

# fastai is the reference; when it cannot be imported the skip says why (its import error), and
# tests/test_references.py fails
fastai_core = pytest.importorskip("fastai.text.models.core")
from fastai.text.models.awdlstm import AWD_LSTM  # noqa: E402

SIZES = dict(emb_sz=16, n_hid=24, n_layers=3)


def fastai_config(config: AWDLSTMConfig, **extra) -> dict:
    return dict(emb_sz=config.emb_sz, n_hid=config.n_hid, n_layers=config.n_layers, pad_token=config.pad_token_id,
                bidir=False, hidden_p=config.hidden_p, input_p=config.input_p, embed_p=config.embed_p,
                weight_p=config.weight_p, **extra)


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Draw every tensor (biases and the padding row too), so that no parity hides behind zeros."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)


def test_language_model_matches_fastai_across_two_chunks():
    config = AWDLSTMConfig(vocab_size=50, **SIZES)
    theirs = fastai_core.get_language_model(AWD_LSTM, 50, fastai_config(config, output_p=config.output_p,
                                                                        tie_weights=True, out_bias=True))
    randomize(theirs, 0)
    theirs.eval()
    theirs.reset()
    ours = AWDLSTMLMHeadModel(config)
    checkpoint.load_checked(ours, from_fastai(theirs.state_dict()), "fastai", "an AWD-LSTM", skip=ours.tied_keys())
    ours.eval()
    ids = torch.randint(1, 50, (3, 20), generator=torch.Generator().manual_seed(1))
    state = None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for chunk in (ids[:, :11], ids[:, 11:]):  # fastai carries its state inside the module; ours is passed
            expected = theirs(chunk)[0]
            out = ours(chunk, state)
            state = out.recurrent_state
            torch.testing.assert_close(out.logits, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("length, max_len", [(20, 14), (30, 210), (7, 14)])
def test_classifier_matches_fastai_including_bptt_chunks(length, max_len):
    config = AWDLSTMConfig(vocab_size=50, **{**SIZES, "n_layers": 2}, bptt=7, max_len=max_len)
    config = config.for_task(3, None)
    theirs = fastai_core.get_text_classifier(AWD_LSTM, 50, 3, seq_len=7, max_len=max_len, pad_idx=0,
                                             config=fastai_config(config, output_p=config.output_p))
    randomize(theirs, 2)
    theirs.eval()
    ours = AWDLSTMForSequenceClassification(config)
    checkpoint.load_checked(ours, from_fastai(theirs.state_dict()), "fastai", "an AWD-LSTM", skip=ours.tied_keys())
    ours.eval()
    ids = torch.randint(1, 50, (4, length), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = theirs(ids)[0]
        logits = ours(ids, torch.ones_like(ids)).logits
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_right_padding_gives_each_text_its_own_result():
    """A text in a padded batch is classified as it is alone (its last state, its pools)."""
    config = AWDLSTMConfig(vocab_size=40, **SIZES, bptt=5, max_len=10)
    model = AWDLSTMForSequenceClassification(config.for_task(2, None)).eval()
    randomize(model, 4)
    model.classifier.eval()
    long_text = torch.randint(1, 40, (1, 23), generator=torch.Generator().manual_seed(5))
    short_text = long_text[:, :6]
    batch = torch.zeros(2, 23, dtype=torch.long)
    batch[0], batch[1, :6] = long_text[0], short_text[0]
    mask = (batch != 0).long()
    with torch.no_grad():
        together = model(batch, mask).logits
        alone = torch.cat([model(long_text).logits, model(short_text).logits])
    torch.testing.assert_close(together, alone, atol=1e-6, rtol=1e-5)


def test_weight_drop_keeps_the_raw_matrix_and_draws_a_new_mask_each_step():
    torch.manual_seed(0)
    model = AWDLSTMLMHeadModel(AWDLSTMConfig(vocab_size=30, **SIZES, weight_p=0.5)).train()
    rnn = model.awd_lstm.rnns[0]
    raw_before = rnn.weight_hh_l0_raw.detach().clone()
    ids = torch.randint(0, 30, (2, 6))
    model(ids)
    first = rnn.module.weight_hh_l0.detach().clone()
    model(ids)
    second = rnn.module.weight_hh_l0.detach().clone()
    assert torch.equal(rnn.weight_hh_l0_raw.detach(), raw_before)  # the trained matrix is untouched
    assert not torch.equal(first, second)  # a fresh DropConnect mask per call
    zeros = first == 0
    assert 0.4 < zeros.float().mean() < 0.6  # about weight_p of the matrix dropped
    torch.testing.assert_close(first[~zeros], raw_before[~zeros] * 2)  # the rest scaled by 1 / (1 - p)
    assert "awd_lstm.rnns.0.weight_hh_l0_raw" in dict(model.named_parameters())
    model.eval()
    model(ids)
    assert torch.equal(rnn.module.weight_hh_l0, raw_before)


def test_loss_adds_ar_and_tar_in_training_only():
    config = AWDLSTMConfig(vocab_size=30, **SIZES, output_p=0, hidden_p=0, input_p=0, embed_p=0, weight_p=0)
    model = AWDLSTMLMHeadModel(config)
    ids = torch.randint(0, 30, (2, 8), generator=torch.Generator().manual_seed(0))
    labels = torch.roll(ids, -1, 1)
    model.train()
    out = model(ids, labels=labels)
    raw = out.hidden_states[-1]
    expected = out.masked_lm_loss + 2.0 * raw.pow(2).mean() + 1.0 * (raw[:, 1:] - raw[:, :-1]).pow(2).mean()
    torch.testing.assert_close(out.loss, expected)
    model.eval()
    out = model(ids, labels=labels)
    torch.testing.assert_close(out.loss, out.masked_lm_loss)


def test_base_preset_is_ulmfits_size():
    """fastai's WikiText-103 AWD-LSTM (60,000 tokens, 400/1152/3, tied): the same parameter count."""
    ours = AWDLSTMLMHeadModel(AWDLSTMConfig.from_preset("base", vocab_size=60000))
    theirs = fastai_core.get_language_model(AWD_LSTM, 60000)
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters())


def test_save_and_load_round_trip(tmp_path):
    model = AWDLSTMLMHeadModel(AWDLSTMConfig(vocab_size=30, **SIZES)).eval()
    model.save_pretrained(tmp_path / "lm")
    loaded = load_pretrained(tmp_path / "lm")
    assert isinstance(loaded, AWDLSTMLMHeadModel)
    ids = torch.randint(0, 30, (2, 9))
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    classifier = AWDLSTMForSequenceClassification.from_language_model(tmp_path / "lm", 3, {0: "a", 1: "b", 2: "c"})
    assert classifier.config.weight_p == 0.5 and classifier.config.input_p == 0.4  # the classifier's dropouts
    classifier.eval().save_pretrained(tmp_path / "clf")
    again = load_pretrained(tmp_path / "clf")
    assert isinstance(again, AWDLSTMForSequenceClassification) and again.config.id2label == {0: "a", 1: "b", 2: "c"}
    torch.testing.assert_close(again(ids).logits, classifier(ids).logits)


def test_bad_weights_are_one_line_errors(tmp_path):
    from safetensors.torch import load_file, save_file
    model = AWDLSTMLMHeadModel(AWDLSTMConfig(vocab_size=30, **SIZES))
    model.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["awd_lstm.rnns.1.weight_hh_l0_raw"] = torch.full_like(state["awd_lstm.rnns.1.weight_hh_l0_raw"], float("nan"))
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(UserError, match="rnns.1.weight_hh_l0_raw holds NaN"):
        load_pretrained(tmp_path)
    del state["awd_lstm.encoder.weight"]
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(UserError, match="no weights for 'awd_lstm.encoder.weight'"):
        load_pretrained(tmp_path)
