"""Checkpoint files: safe loading, clear errors, key table, atomic writes."""

import json
import os
import shutil
from typing import Callable

import pytest
import safetensors.torch
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


def as_one_flat_buffer(module: torch.nn.Module, kinds: tuple[type, ...] = (torch.nn.LSTM,)) -> torch.Tensor:
    """Make every parameter of `module`'s submodules of `kinds` a view into one flat buffer, as cuDNN
    keeps nn.LSTM's weights on CUDA (one after the other, none covering the whole buffer; a tied
    parameter stays one parameter); returns the buffer."""
    owners = [m for m in module.modules() if isinstance(m, kinds)]
    params = list({id(p): p for m in owners for p in m._parameters.values() if p is not None}.values())
    flat = torch.empty(sum(p.numel() for p in params))
    views, offset = {}, 0
    for param in params:
        view = flat[offset: offset + param.numel()].view_as(param)
        view.copy_(param.detach())
        views[id(param)] = torch.nn.Parameter(view, requires_grad=param.requires_grad)
        offset += param.numel()
    for owner in owners:
        for name, param in list(owner._parameters.items()):
            if param is not None:
                owner._parameters[name] = views[id(param)]
    for lstm in module.modules():
        if isinstance(lstm, torch.nn.LSTM):
            lstm._init_flat_weights()  # its forward reads the new views
    return flat


def test_lstm_weights_in_one_flat_buffer_are_saved_exactly(tmp_path):
    """On CUDA nn.LSTM's weights are views into cuDNN's one buffer, which safetensors refuses; what
    is written must be exactly the weights, whatever the layout."""
    from safetensors.torch import save_model

    from bertology.checkpoint import load_module_state, save_module_state, standalone, write_weights

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True)
    flat = as_one_flat_buffer(lstm)
    state = lstm.state_dict()
    assert all(t.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr() for t in state.values())
    with pytest.raises(RuntimeError, match="None is covering the entire storage"):  # the failure this fixes
        save_model(lstm, str(tmp_path / "refused.safetensors"))

    save_module_state(lstm, tmp_path / "module.safetensors")
    again = torch.nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True)
    load_module_state(again, tmp_path / "module.safetensors")
    assert all(torch.equal(again.state_dict()[k], v) for k, v in state.items())
    x = torch.randn(2, 3, 6)
    assert torch.equal(again(x)[0], lstm(x)[0])

    write_weights(state, tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    assert stored.keys() == state.keys() and all(torch.equal(stored[k], v) for k, v in state.items())
    assert (tmp_path / "model.safetensors").stat().st_size < flat.numel() * 4 + 4096  # each weight once, no buffer
    own = torch.randn(3, 4)
    assert standalone({"own": own})["own"].data_ptr() == own.data_ptr()  # a tensor of its own is not copied


def test_a_bilstm_head_in_one_flat_buffer_saves_and_loads(tmp_path):
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config(head_bilstm=True)).eval()
    as_one_flat_buffer(model)
    model.save_pretrained(tmp_path / "model")
    loaded = BertForSequenceClassification.from_pretrained(tmp_path / "model")
    ids = torch.randint(5, 97, (2, 7))
    assert torch.equal(loaded(ids).logits, model(ids).logits)


def tiny_of_every_family() -> dict[str, Callable[[], torch.nn.Module]]:
    """How to build one small model of each family, the LSTM ones among them."""
    from bertology.models.awd_lstm import AWDLSTMConfig, AWDLSTMForSequenceClassification, AWDLSTMLMHeadModel
    from bertology.models.cove import CoVeConfig, CoVeForTranslation
    from bertology.models.elmo import ELMoConfig, ELMoLMHeadModel
    from bertology.models.gpt import GPTConfig, GPTLMHeadModel
    from bertology.models.t5 import T5Config, T5ForConditionalGeneration
    from bertology.models.xlnet import XLNetConfig, XLNetLMHeadModel

    awd = dict(vocab_size=50, emb_sz=16, n_hid=24, n_layers=3)
    words = [f"w{i}" for i in range(20)]
    return {
        "bert": lambda: BertForPreTraining(tiny_config()),
        "bert-bilstm-head": lambda: BertForSequenceClassification(tiny_config(head_bilstm=True)),
        "gpt": lambda: GPTLMHeadModel(GPTConfig(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4)),
        "t5": lambda: T5ForConditionalGeneration(T5Config(vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2,
                                                          num_heads=4)),
        "xlnet": lambda: XLNetLMHeadModel(XLNetConfig(vocab_size=99, d_model=32, n_layer=2, n_head=4, d_inner=37)),
        "elmo": lambda: ELMoLMHeadModel(ELMoConfig(vocab_size=40, filters=[[1, 4], [2, 8]], n_highway=1,
                                                   projection_dim=8, lstm_dim=16, max_characters_per_token=10)),
        "awd-lstm": lambda: AWDLSTMLMHeadModel(AWDLSTMConfig(**awd)),
        "awd-lstm-classifier": lambda: AWDLSTMForSequenceClassification(AWDLSTMConfig(**awd, num_labels=3)),
        "cove": lambda: CoVeForTranslation(CoVeConfig(input_size=8, hidden_size=8, target_embedding_size=8,
                                                      source_vocab_size=20, decoder_vocab_size=20), words, words),
    }


LSTM_FAMILIES = ["bert-bilstm-head", "elmo", "awd-lstm", "awd-lstm-classifier", "cove"]
# what each model computes from ids (B, T) alone, where that is one call
OUTPUT_OF_IDS = {
    "bert-bilstm-head": lambda model, ids: model(ids).logits,
    "gpt": lambda model, ids: model(ids).logits,
    "elmo": lambda model, ids: model.direction_loss(ids, ids, True, None).loss,
    "awd-lstm": lambda model, ids: model(ids).logits,
    "awd-lstm-classifier": lambda model, ids: model(ids).logits,
}


def tied_groups(module: torch.nn.Module) -> set[tuple[str, ...]]:
    """The names of each parameter held under more than one name."""
    names: dict[int, list[str]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return {tuple(group) for group in names.values() if len(group) > 1}


@pytest.mark.parametrize("family, kinds",
                         [pytest.param(f, (torch.nn.LSTM,), id=f"lstm-buffer-{f}") for f in LSTM_FAMILIES]
                         + [pytest.param(f, (torch.nn.Module,), id=f"all-one-buffer-{f}")
                            for f in tiny_of_every_family()])
def test_every_family_saves_exactly_its_weights_whatever_their_layout(family, kinds, tmp_path):
    """A model whose weights are views into one flat buffer (its LSTMs' as on CUDA, or every weight)
    writes exactly its weights, as a model directory and as a training checkpoint, and they load back,
    ties kept."""
    from bertology.checkpoint import load_module_state, save_module_state
    from bertology.models.base import load_pretrained

    build = tiny_of_every_family()[family]
    torch.manual_seed(0)
    model = build()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param))  # no weight is left at an initial value a fresh model shares
    flat = as_one_flat_buffer(model, kinds)
    assert any(t.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr() for t in model.state_dict().values())
    with pytest.raises(RuntimeError, match="None is covering the entire storage"):  # as on CUDA before the fix
        safetensors.torch.save_model(model, str(tmp_path / "refused.safetensors"))
    state = model.state_dict()
    model.save_pretrained(tmp_path / "model")
    loaded = load_pretrained(tmp_path / "model")
    assert type(loaded) is type(model) and loaded.state_dict().keys() == state.keys()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in state.items())
    assert tied_groups(loaded) == tied_groups(model)
    if family in OUTPUT_OF_IDS:  # the LSTMs run on the views as on weights of their own
        ids = torch.randint(4, 20, (2, 7), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            assert torch.equal(OUTPUT_OF_IDS[family](loaded, ids), OUTPUT_OF_IDS[family](model.eval(), ids))

    torch.manual_seed(1)
    fresh = build()
    save_module_state(model, tmp_path / "module.safetensors")
    load_module_state(fresh, tmp_path / "module.safetensors")
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in state.items())


def test_tied_weights_are_written_once_and_tied_again(tmp_path):
    from bertology.checkpoint import load_module_state, save_module_state

    torch.manual_seed(0)
    tied = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3), "b": torch.nn.Linear(3, 3)})
    tied["b"].weight = tied["a"].weight
    save_module_state(tied, tmp_path / "tied.safetensors")
    assert set(load_file(tmp_path / "tied.safetensors")) == {"a.weight", "a.bias", "b.bias"}
    fresh = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3), "b": torch.nn.Linear(3, 3)})
    fresh["b"].weight = fresh["a"].weight
    load_module_state(fresh, tmp_path / "tied.safetensors")
    assert torch.equal(fresh["b"].weight, tied["a"].weight)
    untied = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3), "b": torch.nn.Linear(3, 3)})
    load_module_state(untied, tmp_path / "tied.safetensors")
    assert torch.equal(untied["b"].weight, tied["a"].weight)
    with pytest.raises(ValueError, match="tensors missing: c.weight, c.bias; not the module's: b.bias"):
        load_module_state(torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3), "c": torch.nn.Linear(3, 3)}),
                          tmp_path / "tied.safetensors")
