"""What the task recipes share (fine-tuning, the feature-based mode, distillation, TagLM, text to text).

The task model a directory gives for a task (its family's head), the layers under its head (for
ULMFiT's discriminative rates and gradual unfreezing), epochs of length-bucketed batches through
the one loop (training/loop.py), evaluation on the dev splits after every epoch keeping the best
model, and the median of several seeds. Which examples a run reads is tasks/splits.py's.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ..config import override, setting
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import write_json_atomic
from ..inference.modeldir import has_head_for, open_model_dir
from ..inference.predict import predict, score
from ..models import spec_for
from ..plots import plot_training_curves
from ..tasks.inputs import Encoded, InputSettings, bucketed_batches
from ..tasks.readers import TaskSpec
from ..training.loop import (
    LoopConfig,
    StepOutput,
    TrainConfig,
    Trainer,
    check_no_earlier_run,
    check_writable,
    loop_settings,
)

RESULTS_NAME = "eval_results.json"


@dataclass
class EpochLoop(LoopConfig):
    """Epochs over the training set.

    The loop settings fine-tuning and distillation share, with the BERT paper's defaults.
    """

    epochs: float = setting(3.0, positive=True, help="passes over the training set")
    batch_size: int = setting(32, positive=True, help="examples per step")
    eval_batch_size: int = setting(128, positive=True, help="examples per forward pass when evaluating")
    lr: float = override(LoopConfig, "lr", 5e-5)  # the BERT paper's fine-tuning rates: 5e-5, 3e-5, 2e-5
    warmup: float = override(LoopConfig, "warmup", 0.1)
    seed: int = override(LoopConfig, "seed", 42)
    learning_curve: bool = setting(True, help="draw learning_curve.png when a run ends (about half a second each; "
                                              "a sweep of many short runs may skip it)")


def load_task_model(directory: str, spec: TaskSpec, **options: Any) -> nn.Module:
    """The model in `directory` with the head its family's spec gives for `spec`'s kind: the
    directory's own head when it was trained for this very task and label set (and the model class
    can keep it with these `options`), else a fresh head on its pre-trained stack.

    `options` are the family's own fine-tuning options (its spec's `finetune_options`: BERT's
    `head_bilstm`, the BERT paper's Table 5 "+ BiLSTM"; an AWD-LSTM's `drop_mult`, ULMFiT's one
    dropout knob); an option the family does not take is a one-line error, at its default as well.
    """
    model_dir = open_model_dir(directory)
    family_spec = model_dir.spec
    if spec.kind not in family_spec.heads:
        what = family_spec.heads_note or f"a {model_dir.family.name} model has no task heads here"
        raise UserError(f"{directory}: {what}, not {spec.name}'s {spec.kind}-level labels; use a BERT")
    head_class = family_spec.heads[spec.kind]
    config = model_dir.config
    if has_head_for(config, spec) and head_class.keeps_head(config, **options):
        return head_class.from_pretrained(directory, config=config)
    num_labels = len(spec.labels) if spec.labels else 1
    id2label = dict(enumerate(spec.labels)) if spec.labels else None
    return head_class.from_language_model(directory, num_labels, id2label, config=config, **options)


def num_layers_of(model: nn.Module) -> int:
    """The number of layers under a task model's head (its family's spec says where they are)."""
    return spec_for(model.config).num_layers(model)


def layer_depth(model: nn.Module, name: str) -> int:
    """A task model's parameter `name` -> 0 for the embeddings, i + 1 for layer i, and num_layers + 1
    for the pooler and head (a BiLSTM under the head included): its family's `layer_of`, as ULMFiT's
    discriminative rates and gradual unfreezing read it (fastai's layer groups for an AWD-LSTM)."""
    depth = spec_for(model.config).layer_of(name)
    return num_layers_of(model) + 1 if depth is None else depth


class TaskModule(nn.Module):
    """Adapts a task model to the loop: forward(batch) -> StepOutput with its loss."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """The task model's own loss (cross-entropy, MSE, or the span loss)."""
        return StepOutput(self.model(**batch).loss, {})


class EpochBatches:
    """Step -> micro-batches: each epoch a fresh length-bucketed shuffle of the training rows.

    `make_batch(row indices)` builds one batch (padded inputs, or cached features). With
    gradual unfreezing it also sets which layers train, since it is called at the start of
    every step.
    """

    def __init__(self, lengths: list[int], batch_size: int, seed: int, make_batch: Callable[[list[int]], dict],
                 unfreeze: Callable[[int], None] | None = None):
        self.lengths = lengths
        self.batch_size = batch_size
        self.seed = seed
        self.make_batch = make_batch
        self.steps_per_epoch = math.ceil(len(lengths) / batch_size)
        self.unfreeze = unfreeze
        self._epoch, self._batches = -1, []

    def __call__(self, step: int) -> list[dict[str, torch.Tensor]]:
        epoch, index = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:  # the epoch's batches are drawn once, not at every step
            rng = np.random.default_rng([self.seed, epoch])
            self._epoch, self._batches = epoch, bucketed_batches(self.lengths, self.batch_size, rng)
            if self.unfreeze is not None:
                self.unfreeze(epoch)
        return [self.make_batch(self._batches[index])]


def gradual_unfreezer(model: nn.Module):
    """ULMFiT's gradual unfreezing: in epoch e only the head and the top e + 1 layers train
    (the embeddings join once every layer has)."""
    depths = {name: layer_depth(model, name) for name, _ in model.named_parameters()}
    num_layers = num_layers_of(model)

    def unfreeze(epoch: int) -> None:
        lowest = num_layers - epoch  # the lowest depth that trains this epoch
        for name, param in model.named_parameters():
            param.requires_grad_(depths[name] >= lowest)

    return unfreeze


@dataclass
class RunData:
    """A task's examples and their encodings, shared by the runs of several seeds."""

    spec: TaskSpec
    tokenizer: Tokenizer
    settings: InputSettings
    train: list
    dev: dict[str, list]  # split name -> examples ("dev", and "dev_mismatched" for MNLI)
    train_encoded: Encoded | Any  # text-to-text: recipes/text_to_text_finetuning.py's TextPairs (None when only evaluating)


def evaluate_splits(model: nn.Module, data: RunData, cfg: EpochLoop) -> dict[str, float]:
    """Metrics on every dev split (MNLI's mismatched one as `accuracy_mismatched`)."""
    results = {}
    for split, examples in data.dev.items():
        predictions = predict(model, data.tokenizer, data.spec, examples, data.settings, cfg.eval_batch_size, cfg.precision)
        results.update(score(data.spec, examples, predictions, split))
    return results


def epoch_train_config(cfg: EpochLoop, steps_per_epoch: int, seed: int, precision: str) -> TrainConfig:
    """The Trainer's settings for `cfg.epochs` epochs: cfg's loop settings (with this run's seed
    and precision), evaluating and checkpointing after each epoch."""
    return TrainConfig(**{**loop_settings(cfg), "seed": seed, "precision": precision},
                       max_steps=max(1, round(cfg.epochs * steps_per_epoch)),
                       log_every=max(1, min(50, steps_per_epoch // 4)), eval_every=steps_per_epoch,
                       save_every=steps_per_epoch, keep_last=1)


def fit_and_finish(trainer: Trainer, cfg: EpochLoop, spec: TaskSpec, out: Path) -> None:
    """Train (resuming when cfg.resume, which `epoch_train_config` passed on to the trainer); once
    complete, drop the resume checkpoints (the best model and metrics are the results) and draw
    the learning curve (unless cfg.learning_curve is off). An interrupted run keeps its checkpoint
    for --resume."""
    if trainer.fit() != "completed":
        raise KeyboardInterrupt
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    if cfg.learning_curve:
        plot_training_curves({spec.name: trainer.log.rows()}, out / "learning_curve.png", accuracy_keys=spec.metrics)


class BestModel:
    """Keeps the model with the best main dev metric so far in `out`, with eval_results.json."""

    def __init__(self, out: Path, data: RunData, resume: bool, **labels):
        self.out, self.data, self.labels = out, data, labels
        saved = out / RESULTS_NAME
        self.results: dict = json.loads(saved.read_text(encoding="utf-8")) if resume and saved.is_file() else {}

    def update(self, values: dict[str, float], model: nn.Module, step: int) -> dict[str, float]:
        """Record this evaluation's `values`; save `model` (anything with save_pretrained) if they
        beat the best so far. Returns `values`, for the metrics log."""
        main = self.data.spec.main_metric
        if not self.results or values[main] > self.results[main]:
            self.results = {"task": self.data.spec.name, "split": "dev", **self.labels, **values, "step": step}
            self.save(model)
            write_json_atomic(self.out / RESULTS_NAME, self.results)
        return values

    def save(self, model: nn.Module) -> None:
        """Write the best model so far, and its tokenizer (a TagLM tagger has none), into the output folder."""
        model.save_pretrained(self.out)
        if self.data.tokenizer is not None:
            self.data.tokenizer.save_pretrained(self.out)


def summarize(spec: TaskSpec, runs: list[dict]) -> dict:
    """Median of each metric over the seeds (under the metric's own key) with min, max and std."""
    summary = {"task": spec.name, "split": "dev", "seeds": len(runs)}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if key in ("task", "split", "step", "seed") or not all(isinstance(v, (int, float)) for v in values):
            continue
        summary[key] = statistics.median(values)
        summary[f"{key}_min"], summary[f"{key}_max"] = min(values), max(values)
        summary[f"{key}_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
    summary["runs"] = runs
    return summary


def check_output_dir(out: Path, resume: bool) -> None:
    """Before any work: `out` is writable and, unless resuming, holds no earlier run or results."""
    check_writable(out, needed_bytes=0)
    if not resume:
        check_no_earlier_run(out)
        if (out / RESULTS_NAME).exists():
            raise UserError(f"{out} already holds results; choose another output directory")


