"""ELMo's biLM (models/elmo.py): the published size, the character ids, and what each direction may see."""

import pytest
import torch

from bertology.errors import UserError
from bertology.models.base import load_pretrained
from bertology.models.elmo import (
    BEGIN_OF_WORD,
    END_OF_WORD,
    ELMoConfig,
    ELMoLMHeadModel,
    ELMoModel,
    character_ids,
)

SMALL = dict(filters=[[1, 4], [2, 8], [3, 8]], n_highway=1, projection_dim=8, lstm_dim=16, max_characters_per_token=10)


def small_model(cls=ELMoModel, seed=0):
    torch.manual_seed(seed)
    config = ELMoConfig(vocab_size=40, dropout=0.0, **SMALL)
    model = cls(config)
    tokens = [f"t{i}" if i % 3 else f"##x{i}" for i in range(40)]
    model.bilm.token_encoder.char_ids.copy_(character_ids(tokens, 10))
    return model.eval()


def test_the_base_preset_has_the_published_elmo_size():
    """The ELMo paper: 93.6M parameters in the original biLM, without its softmax."""
    with torch.device("meta"):
        model = ELMoLMHeadModel(ELMoConfig.from_preset("base", vocab_size=30522))
    assert abs(model.num_parameters(softmax=False) / 93.6e6 - 1) < 0.01, model.num_parameters(softmax=False)
    assert model.num_parameters() - model.num_parameters(softmax=False) == 30522 * 512 + 30522


def test_character_ids_mark_the_word_and_cut_long_tokens():
    table = character_ids(["ab", "##é", "x" * 20], max_characters=8)
    assert table[0].tolist() == [BEGIN_OF_WORD, ord("a") + 1, ord("b") + 1, END_OF_WORD, 0, 0, 0, 0]
    assert table[1, :6].tolist() == [BEGIN_OF_WORD, ord("#") + 1, ord("#") + 1, 0xC3 + 1, 0xA9 + 1, END_OF_WORD]
    assert table[2, 0] == BEGIN_OF_WORD and table[2, -1] == END_OF_WORD and (table[2, 1:-1] == ord("x") + 1).all()


def test_each_direction_sees_only_its_side_and_padding_changes_nothing():
    model = small_model()
    ids = torch.randint(1, 40, (1, 9), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[0, 4] = (ids[0, 4] + 1) % 39 + 1
    with torch.no_grad():
        a, b = model(ids).hidden_states, model(changed).hidden_states
    width = model.config.projection_dim
    for layer in (1, 2):
        forward_a, backward_a = a[layer][0, :, :width], a[layer][0, :, width:]
        forward_b, backward_b = b[layer][0, :, :width], b[layer][0, :, width:]
        torch.testing.assert_close(forward_a[:4], forward_b[:4])  # the forward LM has not read token 4 yet
        torch.testing.assert_close(backward_a[5:], backward_b[5:])  # the backward LM reads from the end
        assert not torch.allclose(forward_a[4:], forward_b[4:]) and not torch.allclose(backward_a[:5], backward_b[:5])
    # A text in a right-padded batch gets the states it gets alone (the backward LM starts at its own end).
    batch = torch.zeros(2, 9, dtype=torch.long)
    batch[0], batch[1, :5] = ids[0], ids[0, :5]
    with torch.no_grad():
        together = model(batch, (batch != 0).long()).hidden_states
        alone = model(ids[:, :5]).hidden_states
    for layer in range(3):
        torch.testing.assert_close(together[layer][1, :5], alone[layer][0], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(together[layer][0], a[layer][0], atol=1e-6, rtol=1e-5)
    assert [h.shape[-1] for h in together] == [16, 16, 16]  # [x; x], [f1; b1], [f2; b2]


def test_a_carried_state_reads_two_windows_as_one():
    model = small_model(ELMoLMHeadModel)
    ids = torch.randint(1, 40, (2, 12), generator=torch.Generator().manual_seed(2))
    labels = torch.roll(ids, -1, 1)
    with torch.no_grad():
        whole = model.direction_loss(ids, labels, backward=True, state=None)
        first = model.direction_loss(ids[:, :5], labels[:, :5], backward=True, state=None)
        second = model.direction_loss(ids[:, 5:], labels[:, 5:], backward=True, state=first.recurrent_state)
    torch.testing.assert_close((first.loss * 10 + second.loss * 14) / 24, whole.loss, atol=1e-6, rtol=1e-5)


def test_save_load_and_bad_weights(tmp_path):
    from safetensors.torch import load_file, save_file
    model = small_model(ELMoLMHeadModel)
    model.save_pretrained(tmp_path)
    features = ELMoModel.from_pretrained(tmp_path)  # the language model's directory, its softmax left out
    assert torch.equal(features.bilm.token_encoder.char_ids, model.bilm.token_encoder.char_ids)
    assert isinstance(load_pretrained(tmp_path), ELMoLMHeadModel)
    state = load_file(tmp_path / "model.safetensors")
    state["bilm.forward_lstms.1.weight_hr_l0"] = state["bilm.forward_lstms.1.weight_hr_l0"][:, :3].contiguous()
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(UserError, match="shape mismatch for bilm.forward_lstms.1.weight_hr_l0"):
        load_pretrained(tmp_path)
    with pytest.raises(UserError, match="'filters' must be a list of"):
        ELMoConfig(filters=[[3]])
    with pytest.raises(UserError, match="'projection_dim' \\(64\\) must be below 'lstm_dim' \\(64\\)"):
        ELMoConfig(projection_dim=64, lstm_dim=64)
