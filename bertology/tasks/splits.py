"""Which examples a task run reads: the task named by a config, a split's file and examples, a
held-out dev set when the task has none of its own, reproducible subsets, and `predict`'s inputs.

What every task recipe (fine-tuning, the feature-based mode, distillation, the claims) and the WiC
probe share before any model is involved.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..config import TaskConfig, TaskFiles
from ..errors import UserError
from .readers import (
    GENERIC_KINDS,
    TASKS,
    SequenceExample,
    TaskSpec,
    TokenExample,
    generic_task,
    read_examples,
    read_text_lines,
    task_files,
)


def resolve_task(cfg: TaskConfig) -> TaskSpec:
    """The TaskSpec named by cfg.task (a built-in task or one of the generic kinds over the user's columns)."""
    if cfg.task in TASKS:
        return TASKS[cfg.task]
    if cfg.task in GENERIC_KINDS:
        return generic_task(cfg.task, cfg.labels, cfg.text_column, cfg.text_pair_column, cfg.label_column,
                                       name=cfg.task)
    names = ", ".join([*TASKS, *GENERIC_KINDS])
    raise UserError(f"unknown task {cfg.task!r}; choose one of {names}")


def split_file(cfg: TaskConfig, spec: TaskSpec, split: str, data: str | None = None) -> Path:
    """The file that holds one split ("train", "dev", "dev_mismatched", "test") of the task."""
    own = {"train": cfg.train_file, "dev": cfg.dev_file}.get(split) if spec.format == "table" else None
    # Users' own files with no dev file: "dev" is the training file, which hold_out_dev then splits.
    fallback = cfg.train_file if spec.format == "table" and split == "dev" else None
    source = own or data or cfg.data or fallback
    if not source:
        raise UserError("no --data given (the task's folder or file)"
                        + (" or --train-file / --dev-file" if spec.format == "table" else ""))
    return task_files(spec, Path(source), [split])[split]


def read_split(cfg: TaskFiles, spec: TaskSpec, split: str, data: str | None = None) -> list:
    """The examples of one split from the official files; SQuAD training questions whose answer
    offsets do not match are skipped and reported."""
    file = split_file(cfg, spec, split, data)
    skipped: list[str] = []
    examples = read_examples(spec, file, split, skipped)
    if skipped:
        print(f"{file}: skipped {len(skipped)} question(s) whose answer_start does not match their answer text "
              f"(first: {skipped[0]})", file=sys.stderr)
    return examples


# Held out of the training file when the task is given no separate dev file, so that the "dev"
# scores (and the best-model choice) are never measured on the examples the model trained on.
DEV_FRACTION = 0.1


def hold_out_dev(cfg: TaskConfig, spec: TaskSpec, train: list, seed: int) -> tuple[list, dict[str, list] | None]:
    """(training examples, None) when the task has a dev file of its own; else the training
    examples less a held-out, seeded DEV_FRACTION of them, and {"dev": the held-out ones}.

    An evaluation split read from the training file itself (one file given as --data, or a
    --train-file with no --dev-file) would score the model on what it trained on; the run
    says what it held out instead.
    """
    train_file = split_file(cfg, spec, "train")
    if all(split_file(cfg, spec, split).resolve() != train_file.resolve() for split in spec.eval_splits):
        return train, None
    if len(train) < 2:
        raise UserError(f"{train_file}: {len(train)} example(s), too few to hold out a dev set; give a dev file")
    held = max(1, round(DEV_FRACTION * len(train)))
    chosen = set(np.random.default_rng([seed, 1]).choice(len(train), held, replace=False).tolist())
    print(f"{train_file}: no separate dev file, so {held:,} of its {len(train):,} examples ({DEV_FRACTION:.0%}, "
          f"seed {seed}) are held out as the dev set and not trained on", file=sys.stderr)
    return ([e for i, e in enumerate(train) if i not in chosen],
            {"dev": [e for i, e in enumerate(train) if i in chosen]})


def subset(examples: list, size: int | None, seed: int) -> list:
    """A reproducible random subset of `size` examples, in their original order."""
    if size is None or size >= len(examples):
        return examples
    keep = np.random.default_rng(seed).choice(len(examples), size, replace=False)
    return [examples[i] for i in sorted(keep)]


def read_inputs(spec: TaskSpec, path: Path) -> list:
    """`predict`'s input: the task's official format, or plain text (one example per line). Some
    official files are .txt too: WiC's, and CoNLL's when named as the task's files (`valid.txt`)
    or starting with `-DOCSTART-`."""
    if path.suffix != ".txt" or spec.kind in ("span", "wic"):
        return read_examples(spec, path, "test")
    lines = read_text_lines(path)
    if spec.kind == "token":
        if any(path.name in names for names in spec.files.values()) or lines[0][1].startswith("-DOCSTART-"):
            return read_examples(spec, path, "test")
        return [TokenExample(f"{path.name}-{n}", line.split(), None, f"{path}:{n}") for n, line in lines]
    examples = []
    for n, line in lines:
        parts = line.split("\t")
        if spec.pair and len(parts) != 2:
            raise UserError(f"{path}:{n}: expected two texts separated by a tab (this is a pair task)")
        examples.append(SequenceExample(str(n - 1), parts[0], parts[1] if spec.pair else None, None, f"{path}:{n}"))
    return examples
