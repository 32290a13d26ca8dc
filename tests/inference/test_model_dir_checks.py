"""Every family's model directory is checked before it is used, as BERT's is: the vocabulary against
the embedding rows, the tokenizer against the model, the layer count against the weights, finite values.
Each broken directory is a one-line error naming the file, through the opener every command uses."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import GPT_TEXT, run_cli, save_tiny_elmo, save_tiny_gpt, save_tiny_t5
from safetensors.torch import load_file, save_file

from bertology import BertConfig, BertModel
from bertology.data.tokenizer import train_tokenizer
from bertology.errors import UserError
from bertology.inference.modeldir import open_model_dir
from bertology.models.awd_lstm import AWDLSTMConfig, AWDLSTMLMHeadModel
from bertology.models.xlnet import XLNetConfig, XLNetLMHeadModel

FAMILIES = ("bert", "gpt", "t5", "xlnet", "awd-lstm", "elmo")
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """One tiny directory of each tokenized family, as bertology saves them."""
    root = tmp_path_factory.mktemp("families")
    dirs = {"gpt": save_tiny_gpt(root / "gpt"), "t5": save_tiny_t5(root / "t5")}
    (root / "text.txt").write_text("\n".join(GPT_TEXT) + "\n")
    tokenizer = train_tokenizer([root / "text.txt"], vocab_size=160, out_dir=root / "tokenizer")
    torch.manual_seed(0)
    for name, model in (
            ("bert", BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=64))),
            ("xlnet", XLNetLMHeadModel(XLNetConfig(vocab_size=tokenizer.vocab_size, d_model=32, n_layer=2, n_head=4,
                                                   d_inner=64, pad_token_id=tokenizer.pad_token_id))),
            ("awd-lstm", AWDLSTMLMHeadModel(AWDLSTMConfig(vocab_size=tokenizer.vocab_size, emb_sz=16, n_hid=24)))):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        dirs[name] = root / name
    dirs["elmo"] = save_tiny_elmo(root / "elmo", tokenizer)
    return dirs


def broken_copy(models: dict[str, Path], family: str, tmp_path: Path) -> Path:
    copy = tmp_path / family
    shutil.copytree(models[family], copy)
    return copy


def edit_config(directory: Path, **changes) -> None:
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_healthy_directory_opens(models, family):
    opened = open_model_dir(models[family])
    assert len(opened.tokenizer()) == opened.config.vocab_size
    opened.load_model()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_vocabulary_shorter_than_the_embeddings_is_refused(models, family, tmp_path):
    directory = broken_copy(models, family, tmp_path)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(vocab.read_text().splitlines()[:-5]) + "\n")
    with pytest.raises(UserError, match=r"vocab\.txt: \d+ tokens, but .*config\.json has vocab_size"):
        open_model_dir(directory).tokenizer()


@pytest.mark.parametrize("family", FAMILIES)
def test_another_models_larger_tokenizer_is_refused(models, family, tmp_path):
    """A tokenizer.json alone, as transformers writes it, with more tokens than the embedding table has
    rows (here: the table cut by 3): their ids would index past it."""
    from transformers import PreTrainedTokenizerFast

    directory = broken_copy(models, family, tmp_path)
    rows = open_model_dir(directory).config.vocab_size
    tokenizer = PreTrainedTokenizerFast.from_pretrained(directory)
    for path in directory.iterdir():
        if path.name not in ("config.json", "model.safetensors"):
            path.unlink()
    tokenizer.save_pretrained(directory)
    edit_config(directory, vocab_size=rows - 3)
    with pytest.raises(UserError, match=f"the tokenizer has {rows:,} tokens, but config.json's vocab_size is "
                                        f"{rows - 3:,}: it is not this model's tokenizer"):
        open_model_dir(directory).tokenizer()


@pytest.mark.parametrize("family", ["bert", "t5", "awd-lstm", "elmo"])
def test_a_tokenizer_whose_pad_token_is_another_id_is_refused(models, family, tmp_path):
    directory = broken_copy(models, family, tmp_path)
    pad = open_model_dir(directory).tokenizer().pad_token_id
    edit_config(directory, pad_token_id=pad + 1)
    with pytest.raises(UserError, match=f"pad token .* is id {pad}, but config.json's pad_token_id is {pad + 1}"):
        open_model_dir(directory).tokenizer()


@pytest.mark.parametrize("family", FAMILIES)
def test_more_layers_than_the_weights_hold_is_refused(models, family, tmp_path):
    directory = broken_copy(models, family, tmp_path)
    config = json.loads((directory / "config.json").read_text())
    key = next(key for key in LAYER_KEYS if isinstance(config.get(key), int))
    edit_config(directory, **{key: config[key] + 1})
    with pytest.raises(UserError, match=r"model\.safetensors: (checkpoint has no weights for|shape mismatch for) "):
        open_model_dir(directory).load_model()


@pytest.mark.parametrize("family", FAMILIES)
def test_weights_holding_nan_are_refused(models, family, tmp_path):
    directory = broken_copy(models, family, tmp_path)
    weights = load_file(directory / "model.safetensors")
    name = sorted(weights)[len(weights) // 2]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"model\.safetensors: .*\S+ holds NaN or infinite values"):
        open_model_dir(directory).load_model()


def test_generate_with_a_mismatched_vocabulary_is_one_line(models, tmp_path, capsys):
    """T5 generated from a vocabulary 5 lines short with exit 0 before the check."""
    directory = broken_copy(models, "t5", tmp_path)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(vocab.read_text().splitlines()[:-5]) + "\n")
    status, out, err = run_cli(capsys, "generate", "--model", directory, "--prompt", "the", "--max-new-tokens", "3")
    assert status == 2 and out == ""
    assert err.strip().count("\n") == 0 and "vocab.txt" in err and "Traceback" not in err
