"""A model directory is checked as a whole before anything is allocated: config types and bounds,
the weights against the config, the vocabulary against the embedding table. Each corrupted variant
of a real directory (all-MiniLM-L6-v2) is a one-line error naming the file and the field or tensor."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertology.errors import UserError
from bertology.files import loads_json
from bertology.inference.modeldir import load_model
from bertology.tasks.readers import json_object


@pytest.fixture
def copy_of_minilm(minilm_dir, tmp_path):
    """A writable copy of the real model directory (weights, config, vocabulary)."""
    target = tmp_path / "model"
    shutil.copytree(minilm_dir, target)
    return target


def edit_config(directory, **changes):
    config = json.loads((directory / "config.json").read_text())
    config.update(changes)
    (directory / "config.json").write_text(json.dumps(config))


def edit_weights(directory, change):
    path = directory / "model.safetensors"
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


CONFIG_CASES = [
    ({"id2label": ["a", "b"]}, "config field 'id2label' must be an object from label ids to names"),
    ({"id2label": 3}, "config field 'id2label' must be an object"),
    ({"vocab_size": 10**12}, "config field 'vocab_size' must be a positive integer of at most"),
    ({"num_hidden_layers": 10**12}, "config field 'num_hidden_layers' must be a positive integer of at most"),
    ({"initializer_range": None}, "config field 'initializer_range' must be a number in \\(0, 1\\)"),
    ({"causal": "gelu"}, "config field 'causal' must be true or false"),
    ({"share_layers": 1e30}, "config field 'share_layers' must be true or false"),
    ({"num_hidden_layers": 3}, "the weights hold 6 layers, but config.json has 3"),
]


@pytest.mark.parametrize("changes,message", CONFIG_CASES, ids=[next(iter(c)) + str(i) for i, (c, _) in enumerate(CONFIG_CASES)])
def test_corrupted_configs_are_one_line_errors(copy_of_minilm, changes, message):
    edit_config(copy_of_minilm, **changes)
    with pytest.raises(UserError, match=message) as caught:
        load_model(copy_of_minilm)
    assert "\n" not in str(caught.value) and str(copy_of_minilm) in str(caught.value)


def test_a_nan_in_one_bias_is_refused(copy_of_minilm):
    def poison(tensors):
        tensors["encoder.layer.2.output.dense.bias"][7] = float("nan")
    edit_weights(copy_of_minilm, poison)
    with pytest.raises(UserError, match="layers.2.ffn_out.bias holds NaN or infinite values"):
        load_model(copy_of_minilm)


@pytest.mark.slow
def test_weights_stored_as_integers_or_with_the_wrong_rank_are_refused(copy_of_minilm):
    name = "encoder.layer.0.intermediate.dense.weight"
    edit_weights(copy_of_minilm, lambda t: t.__setitem__(name, t[name].to(torch.int8)))
    with pytest.raises(UserError, match="layers.0.ffn_in.weight is stored as int8, not as floating-point weights"):
        load_model(copy_of_minilm)
    edit_weights(copy_of_minilm, lambda t: t.__setitem__(name, torch.zeros(1536)))
    with pytest.raises(UserError, match="shape mismatch for layers.0.ffn_in.weight: checkpoint \\(1536,\\)"):
        load_model(copy_of_minilm)


def test_a_vocabulary_one_line_short_is_refused(copy_of_minilm):
    vocab = copy_of_minilm / "vocab.txt"
    lines = vocab.read_text(encoding="utf-8").splitlines(keepends=True)
    vocab.write_text("".join(lines[:1000] + lines[1001:]), encoding="utf-8")
    with pytest.raises(UserError, match="vocab.txt: 30521 tokens, but .* has vocab_size 30522"):
        load_model(copy_of_minilm)


@pytest.mark.slow
def test_the_real_directory_still_loads(minilm_dir):
    assert load_model(minilm_dir).num_parameters() == 22_713_216


@pytest.mark.parametrize("text", ['{"text": "b", "label": ' + "9" * 5000 + "}", "[" * 100_000 + "]" * 100_000])
def test_json_past_pythons_limits_is_a_parse_error_with_file_and_line(text, tmp_path):
    with pytest.raises(UserError, match="train.jsonl:3: not valid JSON"):
        json_object(text, "train.jsonl:3")
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(UserError, match="config.json: invalid JSON at line 1"):
        load_model(tmp_path)
    with pytest.raises(json.JSONDecodeError):
        loads_json(text)


def test_a_query_weight_of_the_wrong_rank_is_refused(copy_of_minilm):
    name = "encoder.layer.1.attention.self.query.weight"
    edit_weights(copy_of_minilm, lambda t: t.__setitem__(name, torch.zeros(384)))
    with pytest.raises(UserError, match="the parts of 'layers.1.attention.qkv.weight' .* do not fit together"):
        load_model(copy_of_minilm)


@pytest.mark.slow
def test_info_check_reports_every_problem_and_a_healthy_directory_as_such(minilm_dir, copy_of_minilm, capsys):
    from bertology.inference.modeldir import check_model_dir

    assert check_model_dir(minilm_dir) == []

    def corrupt(tensors):
        tensors["encoder.layer.2.output.dense.bias"][7] = float("nan")
        tensors["encoder.layer.0.intermediate.dense.weight"] = tensors["encoder.layer.0.intermediate.dense.weight"].half().to(torch.int8)
    edit_weights(copy_of_minilm, corrupt)
    problems = check_model_dir(copy_of_minilm)
    assert len(problems) == 2 and all("\n" not in p for p in problems)
    assert "layers.0.ffn_in.weight is stored as int8" in problems[0] + problems[1]
    assert "layers.2.ffn_out.bias holds NaN" in problems[0] + problems[1]

    # the command line: `bertology info --check DIR`
    from helpers import run_cli

    status, out, err = run_cli(capsys, "info", "all-MiniLM-L6-v2", "--check")
    assert status == 0 and out == f"{minilm_dir.resolve()}: healthy (config, every tensor's shape, dtype and values, " \
                                  "vocabulary, tokenizer)\n"
    status, out, err = run_cli(capsys, "info", copy_of_minilm, "--check")
    assert status == 2 and out.splitlines() == problems and err == f"bertology: error: {copy_of_minilm}: 2 problem(s)\n"


@pytest.mark.slow
def test_checking_the_weights_before_allocating_costs_no_torch_dynamo_import(minilm_dir):
    # Building the model on the meta device once filled it at random through torch._refs, which
    # imports torch._dynamo: 0.7 s added to every model load (embed start-up 1.17 s -> 2.1 s).
    code = (f"import sys; from bertology.inference.embedding import load_encoder; load_encoder({str(minilm_dir)!r}); "
            "print('torch._dynamo' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("family", ["gpt", "t5"])
def test_info_check_reads_gpt_and_t5_directories(family, tmp_path):
    """`bertology info --check` on the other families: healthy as saved, then a NaN and a missing
    weight each reported on one line."""
    from helpers import save_tiny_gpt, save_tiny_t5

    from bertology.inference.modeldir import check_model_dir

    directory = (save_tiny_gpt if family == "gpt" else save_tiny_t5)(tmp_path)
    assert check_model_dir(directory) == []
    state = load_file(directory / "model.safetensors")
    name = next(key for key in state if key.endswith("weight") and "embed" not in key and "wte" not in key)
    state[name][0] = float("nan")
    save_file(state, directory / "model.safetensors")
    problems = check_model_dir(directory)
    assert len(problems) == 1 and f"tensor {name} holds NaN or infinite values" in problems[0]
    with pytest.raises(UserError, match="holds NaN or infinite values"):  # and loading refuses it
        load_model(directory)
    del state[name]
    save_file(state, directory / "model.safetensors")
    problems = check_model_dir(directory)
    assert len(problems) == 1 and "checkpoint has no weights for" in problems[0]
