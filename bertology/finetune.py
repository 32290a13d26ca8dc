"""Fine-tuning and evaluation: one small head on a pre-trained encoder, trained through the shared loop.

`run_finetuning(config)` reads a task's official files, encodes them (task_inputs.py), puts
the head the task needs on the encoder (model.py: [CLS]-pooled linear head for sentences
and pairs, a per-token head for tagging, a start/end head for spans) and trains with the
BERT recipe (AdamW, warmup then linear decay, dropout 0.1), evaluating on the dev set after
every epoch and keeping the best model. ULMFiT's tricks are switches: discriminative
learning rates (`layer_lr_decay`), the slanted triangular schedule (`schedule`) and
gradual unfreezing. The BERT paper's feature-based mode (`mode="features"`, in
feature_mode.py) freezes the encoder and trains only a head on cached layer features.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from . import metrics as task_metrics
from . import tasks as task_files
from .config import EpochLoop
from .errors import UserError
from .export import CPU_FORMATS, EXPORT_KEY, OnnxModel
from .files import write_json_atomic
from .model import (BertConfig, BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification,
                    BertPreTrainedModel, load_model)
from .objectives import StepOutput
from .plots import plot_training_curves
from .task_inputs import (Encoded, InputSettings, bucketed_batches, collate, decode_sequences, decode_spans, decode_tokens,
                          encode, in_row_order)
from .tasks import TaskSpec
from .tokenizer import Tokenizer
from .train import TrainConfig, Trainer, autocast, check_no_earlier_run, check_writable, resolve_precision

RESULTS_NAME = "eval_results.json"
CONFIG_NAME = "finetune_config.json"
MODES = ("finetune", "features")


@dataclass
class FinetuneConfig(EpochLoop):
    """Everything a fine-tuning run needs; each field is also a command-line flag and a config-file key."""

    task: str = ""
    data: str = ""  # a task folder (GLUE's train.tsv/dev.tsv, CoNLL's train.txt/valid.txt, SQuAD JSON) or file
    model: str = ""  # a bertology or transformers BERT directory
    out: str = ""
    # users' own data (tasks classification, regression, pair-classification)
    train_file: str | None = None
    dev_file: str | None = None
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    labels: list[str] | None = None
    # inputs
    max_seq_len: int | None = None  # None: 128, or 384 for SQuAD
    max_train_examples: int | None = None  # a reproducible random subset (seeded)
    long_inputs: str = "truncate"  # or "window": overlapping windows, aggregated
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20
    null_score_threshold: float = 0.0
    # optimisation: EpochLoop's fields, and
    layer_lr_decay: float = 1.0  # ULMFiT's discriminative rates: each layer down gets this factor
    gradual_unfreezing: bool = False  # ULMFiT: top layer first, one more each epoch
    seeds: int = 1  # > 1: run seed, seed+1, ... and report median and spread
    # the BERT paper's feature-based mode
    mode: str = "finetune"  # or "features"
    feature_layers: str = "sum_last_four"  # see features.LAYER_CHOICES
    feature_head: str = "linear"  # or "bilstm"
    feature_pooling: str = "mean"  # sentence tasks: cls, mean or max over the token features
    cache_dir: str | None = None  # where features are cached; default $BERTOLOGY_CACHE

    def __post_init__(self) -> None:
        for name in ("data", "model", "out", "train_file", "dev_file", "cache_dir"):  # Paths welcome from Python
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, str(value))

    def validate(self) -> None:
        """Check everything that needs no file reading."""
        for name in ("task", "model", "out"):
            if not getattr(self, name):
                raise UserError(f"no --{name} given")
        if self.mode not in MODES:
            raise UserError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.long_inputs not in ("truncate", "window"):
            raise UserError(f"long_inputs must be truncate or window, got {self.long_inputs!r}")
        if self.feature_head not in ("linear", "bilstm"):
            raise UserError(f"feature_head must be linear or bilstm, got {self.feature_head!r}")
        self.validate_loop()
        if self.seeds <= 0:
            raise UserError(f"seeds must be positive, got {self.seeds}")
        if not 0 < self.layer_lr_decay <= 1:
            raise UserError(f"layer_lr_decay must be in (0, 1], got {self.layer_lr_decay}")
        if self.max_train_examples is not None and self.max_train_examples <= 0:
            raise UserError(f"max_train_examples must be positive, got {self.max_train_examples}")
        if not Path(self.model).is_dir():
            raise UserError(f"{self.model}: no such model directory")

    def input_settings(self, spec: TaskSpec) -> InputSettings:
        """Length limits and SQuAD's search settings."""
        default_len = 384 if spec.kind == "span" else 128
        return InputSettings(self.max_seq_len or default_len, self.long_inputs, self.doc_stride, self.max_query_length,
                             self.max_answer_length, self.n_best, self.null_score_threshold)


# ----- task, data, model ----------------------------------------------------------------------

def resolve_task(cfg: FinetuneConfig) -> TaskSpec:
    """The TaskSpec named by cfg.task (a built-in task or one of the generic kinds over the user's columns)."""
    if cfg.task in task_files.TASKS:
        return task_files.TASKS[cfg.task]
    if cfg.task in task_files.GENERIC_KINDS:
        return task_files.generic_task(cfg.task, cfg.labels, cfg.text_column, cfg.text_pair_column, cfg.label_column,
                                       name=cfg.task)
    names = ", ".join([*task_files.TASKS, *task_files.GENERIC_KINDS])
    raise UserError(f"unknown task {cfg.task!r}; choose one of {names}")


def read_split(cfg: FinetuneConfig, spec: TaskSpec, split: str, data: str | None = None) -> list:
    """The examples of one split ("train", "dev", "dev_mismatched", "test") from the official files;
    SQuAD training questions whose answer offsets do not match are skipped and reported."""
    own = {"train": cfg.train_file, "dev": cfg.dev_file}.get(split) if spec.format == "table" else None
    source = own or data or cfg.data
    if not source:
        raise UserError("no --data given (the task's folder or file)"
                        + (" or --train-file / --dev-file" if spec.format == "table" else ""))
    file = task_files.task_files(spec, Path(source), [split])[split]
    skipped: list[str] = []
    examples = task_files.read_examples(spec, file, split, skipped)
    if skipped:
        print(f"{file}: skipped {len(skipped)} question(s) whose answer_start does not match their answer text "
              f"(first: {skipped[0]})", file=sys.stderr)
    return examples


def subset(examples: list, size: int | None, seed: int) -> list:
    """A reproducible random subset of `size` examples, in their original order."""
    if size is None or size >= len(examples):
        return examples
    keep = np.random.default_rng(seed).choice(len(examples), size, replace=False)
    return [examples[i] for i in sorted(keep)]


MODEL_FOR_KIND = {"sequence": BertForSequenceClassification, "token": BertForTokenClassification,
                  "span": BertForQuestionAnswering}


def load_task_model(directory: str, spec: TaskSpec) -> BertPreTrainedModel:
    """The encoder in `directory` with `spec`'s head: kept if the directory already holds a
    head for this very task and label set, else freshly initialised."""
    saved = BertConfig.load(directory)
    num_labels = len(spec.labels) if spec.labels else 1
    id2label = dict(enumerate(spec.labels)) if spec.labels else None
    same_head = saved.extra.get("finetuning_task") == spec.name and saved.id2label == id2label
    model = MODEL_FOR_KIND[spec.kind].from_pretrained(directory, num_labels=num_labels, id2label=id2label,
                                                       drop_head=not same_head)
    return model


def describe_task(config: BertConfig, spec: TaskSpec, settings: InputSettings) -> None:
    """Record the task and input settings in the model's config.json, for evaluate and predict."""
    config.extra["finetuning_task"] = spec.name
    config.extra["bertology_task"] = dataclasses.asdict(spec)
    config.extra["bertology_inputs"] = dataclasses.asdict(settings)


def task_of(config: BertConfig, directory: str) -> tuple[TaskSpec, InputSettings]:
    """The task and input settings a fine-tuned model directory was trained with (see `describe_task`)."""
    saved = config.extra.get("bertology_task")
    if not saved:
        raise UserError(f"{directory}: not a fine-tuned model (its config.json has no bertology_task; "
                        "make one with `bertology finetune`)")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()}
    if values.get("columns"):
        values["columns"] = task_files.Columns(**{k: tuple(v) if isinstance(v, list) else v
                                                  for k, v in values["columns"].items()})
    values["files"] = {split: tuple(names) for split, names in (values.get("files") or {}).items()}
    return TaskSpec(**values), InputSettings(**config.extra.get("bertology_inputs", {}))


def layer_depth(name: str, num_layers: int) -> int:
    """0 for embeddings, i + 1 for transformer layer i, num_layers + 1 for the pooler and head."""
    match = re.search(r"\.layers\.(\d+)\.", name)
    if match:
        return int(match.group(1)) + 1
    if ".embeddings." in f".{name}":
        return 0
    return num_layers + 1


# ----- the training module --------------------------------------------------------------------

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
    num_layers = len(model.bert.layers)

    def unfreeze(epoch: int) -> None:
        lowest = num_layers - epoch  # the lowest depth that trains this epoch
        for name, param in model.named_parameters():
            param.requires_grad_(layer_depth(name, num_layers) >= lowest)

    return unfreeze


# ----- prediction and scoring -----------------------------------------------------------------

def model_device(model: nn.Module) -> torch.device:
    """Where a model computes: its parameters' device, or the CPU for an ONNX Runtime model (it has none)."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def precision_for(model: nn.Module, precision: str, device: torch.device) -> str:
    """The resolved precision to run `model` in. Exported int8 and ONNX models compute in fp32
    only (their `inference_precision`; quantized linears take fp32 input), so for them "auto"
    is fp32 and bf16 is refused."""
    fixed = getattr(model, "inference_precision", None)
    if fixed is None:
        return resolve_precision(precision, device)
    if precision not in ("auto", fixed):
        raise UserError(f"this exported model computes in {fixed} only; use --precision auto or {fixed}")
    return fixed


@torch.no_grad()
def run_rows(model: BertPreTrainedModel, encoded: Encoded, spec: TaskSpec, pad_id: int, batch_size: int,
             precision: str = "auto", progress: bool = False) -> list:
    """Model outputs for every row, in row order: logits, or (start, end) score pairs for spans."""
    from tqdm.auto import tqdm

    device = model_device(model)
    precision = precision_for(model, precision, device)
    model.eval()
    bar = tqdm(total=len(encoded.features), disable=not progress, unit="row", desc="predicting", leave=False)

    def outputs(rows: list[int]) -> list:
        batch = collate([encoded.features[i] for i in rows], "none", pad_id)
        with autocast(precision, device):
            out = model(**{k: v.to(device) for k, v in batch.items()})
        bar.update(len(rows))
        if spec.kind == "span":
            return list(zip(out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()))
        return list(out.logits.float().cpu().numpy())

    results = in_row_order([len(f.input_ids) for f in encoded.features], batch_size, outputs)
    bar.close()
    return results


def decode(spec: TaskSpec, encoded: Encoded, outputs: list, examples: list, settings: InputSettings):
    """Row outputs -> one prediction per example (label, score, tag list) or {qid: answer} for spans."""
    if spec.kind == "sequence":
        return decode_sequences(spec, encoded, outputs)
    if spec.kind == "token":
        return decode_tokens(spec, encoded, outputs, examples)
    return decode_spans(encoded, [o[0] for o in outputs], [o[1] for o in outputs], examples, settings,
                        allow_no_answer=spec.unanswerable)


def predict(model: BertPreTrainedModel, tokenizer: Tokenizer, spec: TaskSpec, examples: list,
            settings: InputSettings, batch_size: int = 128, precision: str = "auto", progress: bool = False):
    """Predictions for `examples` (see `decode`)."""
    encoded = encode(spec, examples, tokenizer, settings, training=False)
    outputs = run_rows(model, encoded, spec, tokenizer.pad_token_id, batch_size, precision, progress)
    return decode(spec, encoded, outputs, examples, settings)


def score(spec: TaskSpec, examples: list, predictions, split: str = "dev") -> dict[str, float]:
    """The task's metrics (fractions in [0, 1]) for predictions of `examples` (see `decode`);
    a split other than "dev" names them "<metric>_<split>" (MNLI's `accuracy_mismatched`)."""
    if spec.kind == "span":
        gold = examples
    elif spec.kind == "token":
        gold = [e.tags for e in examples]
    elif spec.regression:
        gold = [float(e.label) for e in examples]
    else:
        gold = [spec.labels.index(str(e.label)) for e in examples]
        predictions = [spec.labels.index(p) for p in predictions]
    if any(g is None for g in gold):
        raise UserError(f"{examples[0].where.split(':')[0]}: this split has no gold labels to score against")
    return task_metrics.compute_metrics(spec, gold, predictions, split)


# ----- one run --------------------------------------------------------------------------------

@dataclass
class RunData:
    """A task's examples and their encodings, shared by the runs of several seeds."""

    spec: TaskSpec
    tokenizer: Tokenizer
    settings: InputSettings
    train: list
    dev: dict[str, list]  # split name -> examples ("dev", and "dev_mismatched" for MNLI)
    train_encoded: Encoded


def prepare_data(cfg: FinetuneConfig) -> RunData:
    """Read and encode the task's data once (all seeds share it), reporting what was cut."""
    spec = resolve_task(cfg)
    tokenizer = Tokenizer.from_pretrained(cfg.model)
    settings = cfg.input_settings(spec)
    train = subset(read_split(cfg, spec, "train"), cfg.max_train_examples, cfg.seed)
    if spec.format == "table" and not spec.regression and spec.labels is None:
        spec = task_files.generic_task(cfg.task, task_files.labels_from_examples(train), cfg.text_column,
                                       cfg.text_pair_column, cfg.label_column, name=cfg.task)
    dev = {split: read_split(cfg, spec, split) for split in spec.eval_splits}
    encoded = encode(spec, train, tokenizer, settings, training=True)
    if encoded.too_long:
        action = "covered by overlapping windows" if cfg.long_inputs == "window" or spec.kind == "span" else "cut"
        print(f"{encoded.too_long:,} of {len(train):,} training examples are longer than {settings.max_seq_len} "
              f"tokens and were {action}" + (" (--long-inputs window keeps all of them)" if action == "cut" else ""),
              file=sys.stderr)
    return RunData(spec, tokenizer, settings, train, dev, encoded)


def evaluate_splits(model: BertPreTrainedModel, data: RunData, cfg: FinetuneConfig) -> dict[str, float]:
    """Metrics on every dev split (MNLI's mismatched one as `accuracy_mismatched`)."""
    results = {}
    for split, examples in data.dev.items():
        predictions = predict(model, data.tokenizer, data.spec, examples, data.settings, cfg.eval_batch_size, cfg.precision)
        results.update(score(data.spec, examples, predictions, split))
    return results


def epoch_train_config(cfg: EpochLoop, steps_per_epoch: int, seed: int, precision: str) -> TrainConfig:
    """The loop's settings for `cfg.epochs` epochs, evaluating (and checkpointing) after each."""
    return TrainConfig(lr=cfg.lr, weight_decay=cfg.weight_decay, warmup=cfg.warmup, schedule=cfg.schedule,
                       max_steps=max(1, round(cfg.epochs * steps_per_epoch)), max_grad_norm=cfg.max_grad_norm,
                       precision=precision, log_every=max(1, min(50, steps_per_epoch // 4)),
                       eval_every=steps_per_epoch, save_every=steps_per_epoch, keep_last=1, seed=seed,
                       progress=cfg.progress)


def fit_and_finish(trainer: Trainer, cfg: FinetuneConfig, spec: TaskSpec, out: Path) -> None:
    """Train; once complete, drop the resume checkpoints (the best model and metrics are the
    results) and draw the learning curve. An interrupted run keeps its checkpoint for --resume."""
    if trainer.fit(resume=cfg.resume) != "completed":
        raise KeyboardInterrupt
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    plot_training_curves({spec.name: trainer.log.rows()}, out / "learning_curve.png", accuracy_keys=spec.metrics)


def finetune_once(cfg: FinetuneConfig, data: RunData, seed: int, out: Path) -> dict:
    """Train one seed into `out`; returns the best dev results (with the step they came from)."""
    torch.manual_seed(seed)
    model = load_task_model(cfg.model, data.spec)
    describe_task(model.config, data.spec, data.settings)
    num_layers = len(model.bert.layers)
    features = data.train_encoded.features

    def make_batch(rows: list[int]) -> dict:
        return collate([features[i] for i in rows], data.spec.kind, data.tokenizer.pad_token_id, data.spec.regression)

    unfreeze = gradual_unfreezer(model) if cfg.gradual_unfreezing else None
    batches = EpochBatches([len(f.input_ids) for f in features], cfg.batch_size, seed, make_batch, unfreeze)
    best = BestModel(out, data, cfg.resume)

    def evaluate(module: TaskModule) -> dict:
        return best.update(evaluate_splits(module.model, data, cfg), module.model, trainer.step)

    def lr_scale(name: str) -> float:  # ULMFiT's discriminative rates: the head at lr, each layer below x decay
        return cfg.layer_lr_decay ** (num_layers + 1 - layer_depth(name.removeprefix("model."), num_layers))

    trainer = Trainer(TaskModule(model), epoch_train_config(cfg, batches.steps_per_epoch, seed, cfg.precision), out,
                      batches, evaluate, lr_scale=lr_scale if cfg.layer_lr_decay < 1 else None)
    fit_and_finish(trainer, cfg, data.spec, out)
    return best.results


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
            model.save_pretrained(self.out)
            self.data.tokenizer.save_pretrained(self.out)
            write_json_atomic(self.out / RESULTS_NAME, self.results)
        return values


# ----- several seeds --------------------------------------------------------------------------

def summarize(spec: TaskSpec, runs: list[dict]) -> dict:
    """Median of each metric over the seeds (under the metric's own key) with min, max and std."""
    summary = {"task": spec.name, "split": "dev", "seeds": len(runs)}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if key in ("task", "split", "step") or not all(isinstance(v, (int, float)) for v in values):
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


def run_finetuning(cfg: FinetuneConfig) -> dict:
    """Fine-tune (or train a feature-based head) for cfg.seeds seeds; write and return the dev results."""
    cfg.validate()
    out = Path(cfg.out)
    check_output_dir(out, cfg.resume)
    data = prepare_data(cfg)
    write_json_atomic(out / CONFIG_NAME, {**dataclasses.asdict(cfg), "task_spec": dataclasses.asdict(data.spec),
                                          "train_examples": len(data.train),
                                          "train_examples_longer_than_max_seq_len": data.train_encoded.too_long})
    if cfg.mode == "features":
        from .feature_mode import train_feature_head as train_one
    else:
        train_one = finetune_once
    seeds = [cfg.seed + k for k in range(cfg.seeds)]
    if len(seeds) == 1:
        return train_one(cfg, data, seeds[0], out)
    runs = [{"seed": seed, **train_one(cfg, data, seed, out / f"seed-{seed}")} for seed in seeds]
    summary = summarize(data.spec, runs)
    write_json_atomic(out / RESULTS_NAME, summary)
    return summary


def load_finetuned(model_dir: str) -> tuple[nn.Module, Tokenizer, TaskSpec, InputSettings]:
    """A fine-tuned (feature-based, or exported) model directory -> model, tokenizer, task, input settings.

    An `onnx` export comes back as an ONNX Runtime model and an `int8` export quantized
    (export.py); both are called like the PyTorch models and stay on the CPU.
    """
    from .feature_mode import FeatureModel, is_feature_model

    config = BertConfig.load(model_dir)
    spec, settings = task_of(config, model_dir)
    exported = config.extra.get(EXPORT_KEY)
    if is_feature_model(model_dir):
        model = FeatureModel.from_pretrained(model_dir)
    elif exported == "onnx":
        model = OnnxModel(model_dir)
    else:
        model = load_model(model_dir)
    if torch.cuda.is_available() and exported not in CPU_FORMATS:
        model = model.cuda()
    return model, Tokenizer.from_pretrained(model_dir), spec, settings


def run_evaluation(task: str | None, data: str, model_dir: str, split: str = "dev", batch_size: int = 128,
                   precision: str = "auto") -> dict:
    """`bertology evaluate`: a fine-tuned model's metrics on a split of its task's files."""
    model, tokenizer, spec, settings = load_finetuned(model_dir)
    if task and task != spec.name:
        raise UserError(f"{model_dir} was fine-tuned for {spec.name}, not {task}")
    examples = read_split(FinetuneConfig(task=spec.name, model=model_dir), spec, split, data)
    predictions = predict(model, tokenizer, spec, examples, settings, batch_size, precision, progress=True)
    return {"task": spec.name, "split": split, **score(spec, examples, predictions, split)}


def read_inputs(spec: TaskSpec, path: Path) -> list:
    """`predict`'s input: the task's official format, or plain text (one example per line)."""
    if path.suffix != ".txt" or spec.kind == "span":
        return task_files.read_examples(spec, path, "test")
    lines = task_files.read_text_lines(path)
    if spec.kind == "token":
        return [task_files.TokenExample(f"{path.name}-{n}", line.split(), None, f"{path}:{n}") for n, line in lines]
    examples = []
    for n, line in lines:
        parts = line.split("\t")
        if spec.pair and len(parts) != 2:
            raise UserError(f"{path}:{n}: expected two texts separated by a tab (this is a pair task)")
        examples.append(task_files.SequenceExample(str(n - 1), parts[0], parts[1] if spec.pair else None, None, f"{path}:{n}"))
    return examples


def run_prediction(model_dir: str, input_path: Path, out_path: Path, batch_size: int = 128, precision: str = "auto") -> int:
    """`bertology predict`: predictions for every example of a file, written in the task's format."""
    model, tokenizer, spec, settings = load_finetuned(model_dir)
    examples = read_inputs(spec, Path(input_path))
    predictions = predict(model, tokenizer, spec, examples, settings, batch_size, precision, progress=True)
    if spec.kind == "span":
        task_files.write_squad_predictions(predictions, out_path)
    elif spec.kind == "token":
        task_files.write_conll_predictions(examples, predictions, out_path)
    else:
        ids = predictions if spec.regression else [spec.labels.index(label) for label in predictions]
        task_files.write_glue_predictions(spec, examples, ids, out_path)
    return len(examples)
