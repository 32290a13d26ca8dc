"""Settings: one dataclass per command, each field a command-line flag and a config-file key.

A command's settings are a dataclass composed of shared groups of fields (the task's and its
files' below, the loop's in training/loop.py, the epoch recipes' in recipes/task_training.py) and
its own. Each field is declared once with `setting(default, help=..., choices=...)`: its
default, help text and checks live in the field's metadata. From it the command line makes the flag
(cli.py), `read_settings` checks a TOML or JSON `--config` file (flags win over the file),
and `check_settings` checks a config built in Python, so a new setting is a flag, a
config-file key and a documented default in one edit. One name for one thing on every command:
a renamed setting keeps its old names (`formerly`) for one release, as hidden flags and
config-file keys that say so in a one-line note. This module imports no PyTorch.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import os
import sys
import types
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, Union, get_args, get_origin, get_type_hints

from .errors import UserError
from .files import loads_json

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli before it joined the standard library
    import tomli as tomllib


def setting(default: Any = MISSING, *, help: str, default_factory: Callable[[], Any] | None = None,
            choices: Sequence | Callable[[], Sequence] | None = None, metavar: str | tuple[str, ...] | None = None,
            required: bool = False, positive: bool = False, minimum: float | None = None, maximum: float | None = None,
            below: float | None = None, positional: bool = False, output: str | None = None, model_dir: bool = False,
            formerly: Sequence[str] = (), was_positional: bool = False) -> Any:
    """A dataclass field that is also a flag and a config-file key.

    Args:
        default: the value when neither a flag nor the config file gives one (a list or
            dict is copied for each config); leave it out for a field every caller must give.
        help: what the setting does, for `--help`; the default is appended unless the text
            already says what it is ("default: ..."), as it must for a None default.
        default_factory: instead of `default`, a function computing it when a config is made
            (e.g. a folder from an environment variable).
        choices: the allowed values (listed in `--help`, checked by `check_settings`), or a function
            giving them when asked (a registry that plug-ins may add to: `models.architectures`).
        metavar: the value's name in `--help` (e.g. DIR, FILE).
        required: `--help` shows the flag as required; the command line asks for it unless
            the config file has it, and `check_settings` refuses an empty value.
        positive: the value must be > 0; minimum: >= this; maximum: <= this; below: < this.
            Every number, and each number of a list, must be finite as well, an integer must
            fit in 64 bits, and a setting named `seed` (or `..._seed`) must be in the random
            generators' range, 0 .. MAX_SEED.
        positional: a positional argument instead of a --flag.
        output: "dir" or "file" when the setting is where the command writes (a run that
            fails before writing there leaves no empty folder behind).
        model_dir: the setting names a model: a directory, or the name of a model an installed
            pip package ships (`all-MiniLM-L6-v2`), which the command line resolves to its folder.
        formerly: the setting's old names, accepted until the next release with a note: as
            flags (`seq_len`: --seq-len) and config-file keys. A switch that was on by default
            and is now off (`no_lowercase` for `cased`) was the flag --no-lowercase and the key
            `lowercase`, negated.
        was_positional: the setting was a positional argument, still accepted so with a note.
    """
    if choices is not None and not callable(choices):
        choices = tuple(choices)
    metadata = {"help": help, "choices": choices, "metavar": metavar,
                "required": required, "positive": positive, "minimum": minimum, "maximum": maximum, "below": below,
                "positional": positional, "output": output, "model_dir": model_dir, "formerly": tuple(formerly),
                "was_positional": was_positional}
    if isinstance(default, (list, dict)):
        default_factory = functools.partial(copy.deepcopy, default)
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def override(cls: type, name: str, default: Any, **changes: Any) -> Any:
    """The setting `name` of dataclass `cls` with another default, its help and checks kept:
    how a recipe changes a shared default (fine-tuning's lr of 5e-5 against the loop's).
    `changes`: other `setting` arguments for this command only (e.g. its own `formerly`)."""
    return setting(default, **{**setting_fields(cls)[name].metadata, **changes})


def renamed_note(old: str, new: str) -> str:
    """The one-line note an old name of a setting gets (see `setting`'s `formerly`)."""
    return f"note: {old} is now {new}; the old name works until the next release"


def former_keys(field: dataclasses.Field) -> dict[str, bool]:
    """A setting's old config-file keys -> whether the old value is the negation of the new one."""
    keys = {}
    for old in field.metadata["formerly"]:
        negated = old.startswith("no_") and field.type in (bool, "bool")
        keys[old.removeprefix("no_") if negated else old] = negated
    return keys


def setting_fields(cls_or_config: Any) -> dict[str, dataclasses.Field]:
    """The fields declared with `setting`, by name, in declaration order."""
    return {f.name: f for f in dataclasses.fields(cls_or_config) if "help" in f.metadata}


@functools.cache
def setting_types(cls: type) -> dict[str, Any]:
    """Each field's type annotation, evaluated (`int | None` -> the union object)."""
    return get_type_hints(cls)


def default_of(field: dataclasses.Field) -> Any:
    """A field's default value (MISSING when it has none)."""
    return field.default_factory() if field.default_factory is not MISSING else field.default


def option_name(name: str) -> str:
    """The flag of a setting: max_seq_len -> --max-seq-len."""
    return "--" + name.replace("_", "-")


def alternatives(hint: Any) -> tuple:
    """The types a union allows (`int | None` -> (int, NoneType)); any other type alone."""
    return get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)


def fits(value: Any, hint: Any) -> bool:
    """Whether a config-file value fits a type annotation (an int fits float; a list fits a list or tuple)."""
    if hint is Any:
        return True
    if len(alternatives(hint)) > 1:
        return any(fits(value, part) for part in alternatives(hint))
    if hint is type(None):
        return value is None
    origin, args = get_origin(hint) or hint, get_args(hint)
    if origin in (list, tuple):
        if not isinstance(value, list) or (origin is tuple and len(value) != len(args)):
            return False
        return all(fits(item, args[0]) for item in value) if args else True
    if origin is dict:
        return isinstance(value, dict)
    if isinstance(value, bool) or hint is bool:
        return isinstance(value, bool) and hint is bool
    return isinstance(value, (int, float) if hint is float else hint)


def type_name(hint: Any) -> str:
    """A type annotation as a user reads it: "int", "str | None", "list[str]"."""
    if len(alternatives(hint)) > 1:
        return " | ".join(type_name(part) for part in alternatives(hint))
    if hint is type(None):
        return "None"
    if get_origin(hint) is None:
        return getattr(hint, "__name__", str(hint))
    return str(hint).replace("typing.", "")


def choices_of(field: dataclasses.Field) -> tuple | None:
    """A setting's allowed values, None when any value goes."""
    choices = field.metadata["choices"]
    return tuple(choices()) if callable(choices) else choices


def value_problem(field: dataclasses.Field, value: Any) -> str | None:
    """What is wrong with a setting's value by its choices and bounds ("must be positive, got 0"), or None."""
    choices = choices_of(field)
    if value is not None and choices is not None and value not in choices:
        return f"must be one of {', '.join(map(str, choices))}, got {value!r}"
    return bounds_problem(field, value)


MAX_SEED = 2**32 - 1  # every generator takes it: numpy's legacy RandomState (and what uses it) stops here
_INT64 = 2**63  # what a tensor, numpy and the C libraries below them hold


def bounds_problem(field: dataclasses.Field, value: Any) -> str | None:
    """What is wrong with a number (or each number of a list) by the setting's bounds, or None.

    `nan <= 0` is False, so a bound alone lets NaN through: every number must be finite first.
    """
    if isinstance(value, (list, tuple)):
        return next(filter(None, (bounds_problem(field, item) for item in value)), None)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    meta = field.metadata
    if not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        return f"must fit in 64 bits (at most {_INT64 - 1:,}), got {value}"
    if (field.name == "seed" or field.name.endswith("_seed")) and not 0 <= value <= MAX_SEED:
        return f"must be a seed from 0 to {MAX_SEED:,} (the random generators' range), got {value}"
    if meta["positive"] and value <= 0:
        return f"must be positive, got {value}"
    if meta["minimum"] is not None and value < meta["minimum"]:
        return f"must be at least {meta['minimum']:g}, got {value}"
    if meta.get("maximum") is not None and value > meta["maximum"]:
        return f"must be at most {meta['maximum']:g}, got {value}"
    if meta.get("below") is not None and value >= meta["below"]:
        return f"must be below {meta['below']:g}, got {value}"
    return None


def output_problem(field: dataclasses.Field, value: Any) -> str | None:
    """What stops a command from writing where an output setting says, seen before any work: a
    folder where a file goes, a file where a folder goes, a file on the way to either; or None."""
    if not field.metadata["output"] or not value:
        return None
    path = Path(value)
    if field.metadata["output"] == "file" and path.is_dir():
        return f"{value}: is a folder; give a file name"
    if field.metadata["output"] == "dir" and path.exists() and not path.is_dir():
        return f"{value}: is a file, not a folder"
    parent = next((folder for folder in path.parents if folder.exists()), None)
    if parent is not None and not parent.is_dir():
        return f"{value}: cannot be made, {parent} is a file, not a folder"
    return None


def check_settings(config: Any) -> None:
    """Raise a one-line UserError naming the flag of the first setting that is missing, out of
    bounds, or an output that cannot be written where it says."""
    for name, field in setting_fields(config).items():
        value = getattr(config, name)
        if field.metadata["required"] and value in (None, "", []):
            raise UserError(f"{option_name(name)} is required")
        problem = value_problem(field, value) or output_problem(field, value)
        if problem:
            raise UserError(f"{option_name(name)} {problem}")


def read_settings(cls: type, path: str | os.PathLike) -> dict[str, Any]:
    """Read a TOML or JSON config file into a dict of values for the dataclass `cls`, each checked
    against its field's type, choices and bounds (unknown keys and bad values are one-line errors)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such config file")
    text = path.read_bytes()
    try:
        if path.suffix == ".toml":
            values = tomllib.loads(text.decode("utf-8"))
        else:
            values = loads_json(text)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    except tomllib.TOMLDecodeError as err:  # its message names the line and column
        raise UserError(f"{path}: invalid TOML: {err}") from None
    if not isinstance(values, dict):
        raise UserError(f"{path}: expected an object of settings (key: value)")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, field in setting_fields(cls).items():
        for old, negated in former_keys(field).items():
            if old in values and old not in fields:
                print(f"{path}: {renamed_note(f'setting {old!r}', repr(name))}", file=sys.stderr)
                value = values.pop(old)
                values.setdefault(name, not value if negated and isinstance(value, bool) else value)
    annotations = setting_types(cls)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise UserError(f"{path}: unknown setting(s) {', '.join(unknown)}")
    for key, value in values.items():
        if not fits(value, annotations[key]):
            raise UserError(f"{path}: setting {key!r} must be {type_name(annotations[key])}, got {value!r}")
        problem = value_problem(fields[key], value) if "help" in fields[key].metadata else None
        if problem:
            raise UserError(f"{path}: setting {key!r} {problem}")
    return values


# ----- settings that several commands share (the loop's are in training/loop.py) -----------------

THREADS_ENV = "BERTOLOGY_THREADS"


@dataclass(kw_only=True)  # keyword-only: composed before a command's own required fields
class Threads:
    """CPU threads.

    Every command that computes is composed with this setting; the command line applies it
    (ops.use_threads) before the command runs.
    """

    threads: int | None = setting(None, positive=True, maximum=256, metavar="N",
                                  help=f"CPU threads for PyTorch (default: ${THREADS_ENV}, else every core this "
                                       "process may use: the fastest choice on a free machine, and on a busy one "
                                       "too, since idle threads sleep instead of spinning)")


DEVICES = ("auto", "cpu", "cuda")


@dataclass(kw_only=True)
class Device(Threads):
    """The device.

    With Threads's CPU threads, where it computes: every command that places a model (trains, runs
    or checks one) is composed with this setting; the command line checks it (ops.resolve_device)
    before the command runs, and each place that puts a model on a device asks
    `resolve_device(cfg.device)`.
    """

    device: str = setting("auto", choices=DEVICES,
                          help="where models compute: auto is the GPU when PyTorch sees one (CUDA), else the CPU; "
                               "cuda without a GPU is an error")


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, e.g. under taskset or a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity masks
        return os.cpu_count() or 1


def resolve_threads(requested: int | None) -> int:
    """How many CPU threads a command runs with: `requested`, else $BERTOLOGY_THREADS, else every
    core the process may use (see `Threads`; bench/threads.py measures the choice).

    Raises:
        UserError: $BERTOLOGY_THREADS is not a positive integer.
    """
    if requested is not None:
        return requested
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return available_cores()
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"${THREADS_ENV} must be a positive number of threads, got {text!r}")
    return int(text)



@dataclass
class TaskFiles:
    """The task's labelled files."""

    data: str = setting("", metavar="PATH",
                        help="the task's folder (or file) in its official format: GLUE's train.tsv and dev.tsv, "
                             "CoNLL's train.txt and valid.txt, SQuAD's JSON (default: none; or --train-file and "
                             "--dev-file)")
    train_file: str | None = setting(None, metavar="FILE",
                                     help="your own task: the training CSV, TSV or JSONL (default: none)")
    dev_file: str | None = setting(None, metavar="FILE", help="your own task: the dev CSV, TSV or JSONL (default: none)")


@dataclass
class TaskConfig(TaskFiles):
    """The task.

    With TaskFiles's fields, what every task recipe (fine-tuning, the feature-based mode,
    distillation) reads its splits with (tasks/splits.py).
    """

    task: str = setting("", required=True,
                        help="a built-in task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, conll2003, squad, "
                             "squad_v2, ...) or, for your own files, classification, regression or pair-classification")
    text_column: str = setting("text", help="your own task: the column (JSONL: field) holding the text")
    text_pair_column: str | None = setting(None, help="your own pair task: the column holding the second text "
                                                      "(default: none)")
    label_column: str = setting("label", help="your own task: the column holding the label")
    labels: list[str] | None = setting(None, help="your own task: the label set (default: the labels found in the "
                                                  "training file)")
