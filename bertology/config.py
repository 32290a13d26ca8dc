"""Settings that several commands share, and reading settings from TOML or JSON config files.

Each run's settings are a dataclass; a `--config` file holds any of its fields (checked
against the field's type, one-line errors) and command-line flags win over the file.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UserError


@dataclass
class EpochLoop:
    """The loop settings fine-tuning and distillation share: epochs over a training set with the
    BERT paper's recipe (AdamW, warmup then linear decay, clipping). Kept here, free of PyTorch,
    so the command line can show the defaults; each field is a flag and a config-file key."""

    epochs: float = 3.0
    lr: float = 5e-5
    batch_size: int = 32
    eval_batch_size: int = 128
    warmup: float = 0.1  # a fraction of the steps (< 1) or a step count
    weight_decay: float = 0.01
    schedule: str = "linear"  # or "slanted_triangular" (ULMFiT), "constant"
    max_grad_norm: float = 1.0
    precision: str = "auto"
    seed: int = 42
    progress: bool = True
    resume: bool = False

    def validate_loop(self) -> None:
        """The checks every epoch loop needs."""
        if self.epochs <= 0 or self.lr <= 0 or self.batch_size <= 0:
            raise UserError("epochs, lr and batch_size must be positive")


@dataclass
class TaskConfig:
    """Which task, and where its labelled files are: what every task recipe (fine-tuning, the
    feature-based mode, distillation) reads its splits with (training/tasks.py)."""

    task: str = ""  # a built-in task (sst2, conll2003, squad, ...) or classification / regression / pair-classification
    data: str = ""  # a task folder (GLUE's train.tsv/dev.tsv, CoNLL's train.txt/valid.txt, SQuAD JSON) or file
    # users' own data (tasks classification, regression, pair-classification)
    train_file: str | None = None
    dev_file: str | None = None
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    labels: list[str] | None = None  # None: the labels found in the training file


def _has_type(value: Any, annotation: str) -> bool:
    """Whether a config-file value fits a field annotation such as "int", "str | None", "list[str]"."""
    if value is None:
        return "None" in annotation
    base = annotation.replace(" | None", "")
    if base.startswith(("list", "dict")):
        return isinstance(value, list if base.startswith("list") else dict)
    if isinstance(value, bool):
        return base == "bool"
    return isinstance(value, {"int": int, "float": (int, float), "str": str, "bool": bool}[base])


def read_settings(cls: type, path: str | os.PathLike) -> dict[str, Any]:
    """Read a TOML or JSON config file into a dict of values for the dataclass `cls`,
    each checked against its field's type (unknown keys and wrong types are one-line errors)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such config file")
    text = path.read_bytes()
    try:
        if path.suffix == ".toml":
            import tomllib

            values = tomllib.loads(text.decode("utf-8"))
        else:
            values = json.loads(text)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    except Exception as err:  # tomllib.TOMLDecodeError names the line in its message
        raise UserError(f"{path}: invalid TOML: {err}") from None
    types = {f.name: f.type for f in dataclasses.fields(cls)}  # annotations as strings, e.g. "int | None"
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise UserError(f"{path}: unknown setting(s) {', '.join(unknown)}")
    for key, value in values.items():
        if not _has_type(value, types[key]):
            raise UserError(f"{path}: setting {key!r} must be {types[key]}, got {value!r}")
    return values
