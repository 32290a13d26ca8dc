"""What the machine can hold: sizes checked before anything is allocated.

A config field at a limit that passes every type check (a GPT of 2^21 layers, a vectors file
whose header claims 100,000,000 words) would otherwise allocate for a minute and many
gigabytes before failing, or be killed by the system without a word. Each family's config
counts its parameters from its fields, and `check_model_size` refuses a model whose fp32 weights
exceed the machine's memory, naming the field that makes it so; commands that allocate more
than the weights (training's gradients and optimizer moments, beam search's logits, a vectors
file) check their own estimate with `check_fits`. The limit is the physical memory, or the
control group's limit when that is lower (a container); it is a bound, not a promise: a model
just under it may still not fit beside everything else. This module imports no PyTorch.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any

from .errors import UserError

FP32_BYTES = 4
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@functools.cache
def machine_memory() -> int:
    """The bytes of memory this process can use: physical memory, or a lower control-group limit."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: no bound known
        total = 2**62
    for path in _CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def gib(size: float) -> str:
    """A byte count as a user reads it: "37.3 GiB"."""
    return f"{size / 2**30:,.1f} GiB"


def check_fits(needed_bytes: float, what: str) -> None:
    """A one-line UserError when `what` (e.g. "--num-beams 1000 over 30,522 tokens") needs more
    bytes than the machine has."""
    if needed_bytes > machine_memory():
        raise UserError(f"{what} needs about {gib(needed_bytes)} of memory, more than this machine's "
                        f"{gib(machine_memory())}")


def field_values(config: Any) -> dict[str, Any]:
    """A config dataclass's fields, by name."""
    return {field.name: getattr(config, field.name) for field in dataclasses.fields(config)}


def parameters_of(config: Any) -> int:
    """About how many parameters a model of `config` has, as its family counts them (the config's
    `count_parameters`, over its fields)."""
    return type(config).count_parameters(field_values(config))


def check_model_size(config: Any) -> None:
    """Refuse a config whose model's fp32 weights do not fit in the machine's memory.

    `config` is a family's config dataclass, checked when it is made (from a preset, a file or
    Python). Its class states `count_parameters` (the parameter count from a dict of the fields'
    values; it may overestimate, never by much) and `size_fields` (the fields that set the size):
    the error names the one whose value, put back to its default, shrinks the model most.
    """
    values = field_values(config)
    parameters = parameters_of(config)
    if parameters * FP32_BYTES <= machine_memory():
        return
    defaults = {field.name: field.default if field.default is not dataclasses.MISSING else field.default_factory()
                for field in dataclasses.fields(config)}
    count = type(config).count_parameters
    culprit = min(config.size_fields, key=lambda name: count({**values, name: defaults[name]}))
    raise UserError(f"config field {culprit!r} ({values[culprit]!r}) makes a model of {parameters:,.0f} parameters: "
                    f"{gib(parameters * FP32_BYTES)} in fp32, more than this machine's {gib(machine_memory())} "
                    "of memory")
