"""What every task recipe shares (fine-tuning, the feature-based mode, distillation).

A task's data read from its official files and encoded once (all seeds share it), the
encoder with the task's head, epochs of length-bucketed batches through the one loop
(training/loop.py), evaluation on the dev splits after every epoch keeping the best model,
and the median of several seeds.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ..config import TaskConfig, TaskFiles, override, setting
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import write_json_atomic
from ..inference.modeldir import has_head_for, load_config
from ..inference.predict import predict, score
from ..models.awd_lstm import AWDLSTMConfig, AWDLSTMForSequenceClassification
from ..models.bert import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertForWordInContext,
    BertPreTrainedModel,
)
from ..models.gpt import GPTConfig, GPTForQuestionAnswering, GPTForSequenceClassification, GPTForTokenClassification
from ..models.xlnet import (
    XLNetConfig,
    XLNetForQuestionAnsweringSimple,
    XLNetForSequenceClassification,
    XLNetForTokenClassification,
)
from ..plots import plot_training_curves
from ..tasks.inputs import Encoded, InputSettings, bucketed_batches
from ..tasks.readers import (
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
from .loop import (
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


MODEL_FOR_KIND = {"sequence": BertForSequenceClassification, "token": BertForTokenClassification,
                  "span": BertForQuestionAnswering, "wic": BertForWordInContext}


# The families other than BERT's: their model class for each task kind they take, and what the
# refusal of any other kind says.
FAMILY_HEADS = {
    AWDLSTMConfig: ({"sequence": AWDLSTMForSequenceClassification},
                    "an AWD-LSTM is fine-tuned here as ULMFiT's classifier (classification, regression)"),
    GPTConfig: ({"sequence": GPTForSequenceClassification, "token": GPTForTokenClassification,
                 "span": GPTForQuestionAnswering}, "a GPT is fine-tuned here for sequence, token and span tasks"),
    XLNetConfig: ({"sequence": XLNetForSequenceClassification, "token": XLNetForTokenClassification,
                   "span": XLNetForQuestionAnsweringSimple},
                  "an XLNet is fine-tuned here for sequence, token and span tasks"),
}


def load_task_model(directory: str, spec: TaskSpec, drop_mult: float = 1.0, head_bilstm: bool = False) -> nn.Module:
    """The encoder in `directory` with `spec`'s head: kept if the directory already holds a
    head for this very task and label set (and, with `head_bilstm`, a BiLSTM under it), else freshly
    initialised. A BERT encoder given `head_bilstm` gets a randomly initialised BiLSTM between it and
    the head (models/bert.py's HeadBiLSTM: the BERT paper's Table 5 "+ BiLSTM"). A GPT takes sequence
    tasks (classification, regression) with the GPT paper's head on its last token, token tasks
    with a linear layer on every token and span tasks with start and end scores on every token
    (each token having read its left context only); an XLNet the same three, its sequence head
    transformers' summary of its last token; an AWD-LSTM sequence tasks only, with ULMFiT's
    concat-pooling head and its dropouts times `drop_mult`."""
    num_labels = len(spec.labels) if spec.labels else 1
    id2label = dict(enumerate(spec.labels)) if spec.labels else None
    config = load_config(directory)
    for config_class, (heads, what) in FAMILY_HEADS.items():
        if isinstance(config, config_class):
            if spec.kind not in heads:
                raise UserError(f"{directory}: {what}, not {spec.name}'s {spec.kind}-level labels; use a BERT")
            model_class = heads[spec.kind]
            if has_head_for(config, spec):
                return model_class.from_pretrained(directory)
            options = {"drop_mult": drop_mult} if model_class is AWDLSTMForSequenceClassification else {}
            return model_class.from_language_model(directory, num_labels, id2label, **options)
    keep = has_head_for(config, spec) and (config.head_bilstm or not head_bilstm)
    return MODEL_FOR_KIND[spec.kind].from_pretrained(directory, num_labels=num_labels, id2label=id2label,
                                                     head_bilstm=head_bilstm or (keep and config.head_bilstm),
                                                     drop_head=not keep)


def num_layers_of(model: nn.Module) -> int:
    """The number of layers under a task model's head (BERT's, a GPT's blocks, an XLNet's, an AWD-LSTM's LSTMs)."""
    config = getattr(model, "config", None)
    if isinstance(config, GPTConfig):
        return len(model.transformer.h)
    if isinstance(config, XLNetConfig):
        return len(model.transformer.layer)
    if isinstance(model, AWDLSTMForSequenceClassification):
        return len(model.awd_lstm.rnns)
    return len(model.bert.layers)


def layer_depth(name: str, num_layers: int) -> int:
    """0 for embeddings, i + 1 for layer i, num_layers + 1 for the pooler and head, a BiLSTM under the head
    included (BERT's names, a GPT's: blocks `h.i`, embeddings `wte` and `wpe`, an XLNet's: `layer.i`,
    `word_embedding` and `mask_emb`, or an AWD-LSTM's: LSTMs `rnns.i`, embedding `awd_lstm.encoder`:
    fastai's layer groups for ULMFiT's classifier)."""
    if name.startswith("classifier."):  # the head (ULMFiT's has `layers` of its own)
        return num_layers + 1
    match = re.search(r"\.(?:layers|h|rnns|layer)\.(\d+)\.", f".{name}")
    if match:
        return int(match.group(1)) + 1
    if re.search(r"\.(embeddings|wte|wpe|word_embedding)\.|\.mask_emb$|^\.awd_lstm\.encoder\.", f".{name}"):
        return 0
    return num_layers + 1


class TaskModule(nn.Module):
    """Adapts a task model to the loop: forward(batch) -> StepOutput with its loss."""

    def __init__(self, model: BertPreTrainedModel):
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


def gradual_unfreezer(model: BertPreTrainedModel):
    """ULMFiT's gradual unfreezing: in epoch e only the head and the top e + 1 layers train
    (the embeddings join once every layer has)."""
    num_layers = num_layers_of(model)

    def unfreeze(epoch: int) -> None:
        lowest = num_layers - epoch  # the lowest depth that trains this epoch
        for name, param in model.named_parameters():
            param.requires_grad_(layer_depth(name, num_layers) >= lowest)

    return unfreeze


@dataclass
class RunData:
    """A task's examples and their encodings, shared by the runs of several seeds."""

    spec: TaskSpec
    tokenizer: Tokenizer
    settings: InputSettings
    train: list
    dev: dict[str, list]  # split name -> examples ("dev", and "dev_mismatched" for MNLI)
    train_encoded: Encoded | Any  # text-to-text: recipes/text_to_text.py's TextPairs (None when only evaluating)


def evaluate_splits(model: BertPreTrainedModel, data: RunData, cfg: EpochLoop) -> dict[str, float]:
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
