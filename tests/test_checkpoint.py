"""Checkpoint files: safe loading, clear errors, key table, atomic writes."""

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from bertology import (
    BertConfig,
    BertForPreTraining,
    BertForSequenceClassification,
    BertModel,
    UserError,
)
from bertology.checkpoint import from_transformers, to_transformers


def tiny_config(**overrides):
    return BertConfig.from_preset("tiny", vocab_size=97, max_position_embeddings=32, **overrides)


@pytest.fixture
def saved(tmp_path):
    """A saved random BertForPreTraining directory."""
    torch.manual_seed(0)
    BertForPreTraining(tiny_config()).save_pretrained(tmp_path / "model")
    return tmp_path / "model"


class CodeOnLoad:
    """Pickling this makes the unpickler call os.system: the classic poisoned checkpoint."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_runs_code_is_refused(saved, tmp_path):
    marker = tmp_path / "pwned"
    (saved / "model.safetensors").unlink()
    state = {"embeddings.word_embeddings.weight": torch.zeros(97, 128), "payload": CodeOnLoad(marker)}
    torch.save(state, saved / "pytorch_model.bin")
    with pytest.raises(UserError, match="pytorch_model.bin: refused to load"):
        BertModel.from_pretrained(saved)
    assert not marker.exists()


def test_legacy_tensor_checkpoint_loads(saved):
    model = BertForPreTraining.from_pretrained(saved)
    tensors = load_file(saved / "model.safetensors")
    (saved / "model.safetensors").unlink()
    torch.save(tensors, saved / "pytorch_model.bin")
    legacy = BertForPreTraining.from_pretrained(saved)
    for (name, a), b in zip(model.state_dict().items(), legacy.state_dict().values()):
        assert torch.equal(a, b), name


def test_truncated_safetensors_is_a_clear_error(saved):
    path = saved / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(UserError, match="model.safetensors: cannot read safetensors file"):
        BertModel.from_pretrained(saved)


def test_missing_files_are_clear_errors(saved, tmp_path):
    with pytest.raises(UserError, match="no such model directory"):
        BertModel.from_pretrained(tmp_path / "absent")
    (saved / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no model.safetensors"):
        BertModel.from_pretrained(saved)
    (saved / "config.json").unlink()
    with pytest.raises(UserError, match="config.json"):
        BertModel.from_pretrained(saved)


def test_config_and_weights_shape_mismatch_names_the_tensor(saved):
    config = json.loads((saved / "config.json").read_text())
    config["intermediate_size"] = 256
    (saved / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match=r"shape mismatch for layers\.0\.ffn_in\.weight"):
        BertModel.from_pretrained(saved)


def test_vocab_size_disagreeing_with_embeddings_is_an_error(saved):
    config = json.loads((saved / "config.json").read_text())
    config["vocab_size"] = 120
    (saved / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="vocab_size 97 in the weights"):
        BertModel.from_pretrained(saved)
    config["vocab_size"] = 97
    (saved / "config.json").write_text(json.dumps(config))
    (saved / "vocab.txt").write_text("\n".join(f"tok{i}" for i in range(150)) + "\n")
    with pytest.raises(UserError, match="vocab.txt: 150 tokens.*vocab_size 97"):
        BertModel.from_pretrained(saved)


def test_invalid_config_json_names_the_line(saved):
    (saved / "config.json").write_text('{\n  "hidden_size": 128,\n  oops\n}')
    with pytest.raises(UserError, match=r"config.json: invalid JSON at line 3"):
        BertModel.from_pretrained(saved)


def test_checkpoint_without_a_head_initialises_only_the_head(saved, tmp_path):
    encoder = BertModel.from_pretrained(saved)  # "bert."-prefixed checkpoint into the bare encoder
    encoder.save_pretrained(tmp_path / "encoder")  # unprefixed, no heads
    classifier = BertForSequenceClassification.from_pretrained(tmp_path / "encoder", num_labels=3)
    assert classifier.newly_initialized == ["classifier.dense.weight", "classifier.dense.bias"]
    for name, tensor in encoder.state_dict().items():
        assert torch.equal(classifier.bert.state_dict()[name], tensor), name


def test_checkpoint_missing_encoder_weights_is_an_error(saved):
    tensors = load_file(saved / "model.safetensors")
    del tensors["bert.encoder.layer.1.output.dense.weight"]
    from safetensors.torch import save_file
    save_file(tensors, saved / "model.safetensors")
    with pytest.raises(UserError, match=r"no weights for 'layers\.1\.ffn_out\.weight'"):
        BertModel.from_pretrained(saved)


def test_key_table_round_trips_and_splits_qkv():
    model = BertForPreTraining(tiny_config())
    theirs = to_transformers(model.state_dict())
    assert "bert.encoder.layer.0.attention.self.query.weight" in theirs
    assert theirs["bert.encoder.layer.0.attention.self.key.weight"].shape == (128, 128)
    assert "cls.predictions.bias" in theirs and "cls.seq_relationship.weight" in theirs
    ours, unknown = from_transformers(theirs, source="test")
    assert unknown == []
    for key, tensor in model.state_dict().items():
        assert torch.equal(ours[key.removeprefix("bert.")], tensor), key


def test_save_overwrites_atomically(saved):
    first = (saved / "model.safetensors").read_bytes()
    torch.manual_seed(1)
    BertForPreTraining(tiny_config()).save_pretrained(saved)
    assert (saved / "model.safetensors").read_bytes() != first
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.slow
def test_real_checkpoint_directory_loads_with_its_vocab(minilm_dir, tmp_path):
    copy = shutil.copytree(minilm_dir, tmp_path / "minilm")
    model = BertModel.from_pretrained(copy)
    assert model.config.hidden_size == 384 and model.num_parameters() == 22_713_216
