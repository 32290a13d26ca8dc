"""The model families, one file each in this folder, registered here by name.

A family is chosen by name when a model is trained (`--arch bert`) and recognised from a
model directory's `config.json` (`model_type`, transformers' key) when one is loaded, so the
commands dispatch on the family without knowing each one. This module imports no PyTorch:
the command line lists the families without loading it, and a family's module is imported
on first use.

Adding a family: one module in this folder with its config dataclass, its presets, its
transformers key table where transformers has the family, and a function
`load_pretrained(directory) -> nn.Module` that opens a directory it wrote (or transformers'
equivalent); then one `Family(...)` line in `FAMILIES` below.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import UserError

CONFIG_NAME = "config.json"


@dataclass(frozen=True)
class Family:
    """A model family: its name, the module that implements it, and the `model_type`s it reads."""

    name: str  # the --arch value
    module: str  # imported on first use
    model_types: tuple[str, ...]  # config.json `model_type` values this family loads
    description: str

    def load(self) -> ModuleType:
        """The family's module (imports PyTorch)."""
        return import_module(self.module)


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family("bert", "bertology.models.bert", ("bert", "bertology"),
               "bidirectional Transformer encoder (BERT; RoBERTa, ALBERT, ELECTRA and LTR variants by config)"),
    )
}
ARCHITECTURES = tuple(FAMILIES)


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
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: invalid JSON at line {err.lineno}: {err.msg}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def family_of(directory: str | os.PathLike) -> Family:
    """The family that reads a model directory, from its config.json's `model_type`
    (a directory without one is taken as BERT, as the original release's configs are)."""
    model_type = read_config(directory).get("model_type", "bert")
    for family in FAMILIES.values():
        if model_type in family.model_types:
            return family
    known = ", ".join(t for family in FAMILIES.values() for t in family.model_types)
    raise UserError(f"{Path(directory) / CONFIG_NAME}: model_type {model_type!r} is not a family bertology "
                    f"knows ({known})")
