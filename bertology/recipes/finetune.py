"""Fine-tuning and evaluation: one small head on a pre-trained encoder, trained through the shared loop.

`run_finetuning(config)` reads a task's official files, encodes them (tasks/inputs.py), puts
the head the task needs on the encoder (models/bert.py: [CLS]-pooled linear head for sentences
and pairs, a per-token head for tagging, a start/end head for spans) and trains with the
BERT recipe (AdamW, warmup then linear decay, dropout 0.1), evaluating on the dev set after
every epoch and keeping the best model. ULMFiT's tricks are switches: discriminative
learning rates (`layer_lr_decay`), the slanted triangular schedule (`schedule`) and
gradual unfreezing. The BERT paper's feature-based mode (`mode="features"`, in
recipes/feature_mode.py) freezes the encoder and trains only a head on cached layer features."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import EpochLoop, TaskConfig
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import write_json_atomic
from ..inference.modeldir import describe_task, load_finetuned
from ..inference.predict import predict, score
from ..tasks.inputs import InputSettings, collate, encode
from ..tasks.readers import (
    TaskSpec,
    generic_task,
    labels_from_examples,
    write_conll_predictions,
    write_glue_predictions,
    write_squad_predictions,
)
from ..training.loop import Trainer
from ..training.tasks import (
    RESULTS_NAME,
    BestModel,
    EpochBatches,
    RunData,
    TaskModule,
    check_output_dir,
    epoch_train_config,
    evaluate_splits,
    fit_and_finish,
    gradual_unfreezer,
    hold_out_dev,
    layer_depth,
    load_task_model,
    read_inputs,
    read_split,
    resolve_task,
    subset,
    summarize,
)
from .feature_mode import train_feature_head

CONFIG_NAME = "finetune_config.json"


MODES = ("finetune", "features")


@dataclass
class FinetuneConfig(TaskConfig, EpochLoop):
    """Everything a fine-tuning run needs: the task (TaskConfig), the loop (EpochLoop), and the
    fields below; each field is also a command-line flag and a config-file key."""

    model: str = ""  # a bertology or transformers BERT directory
    out: str = ""
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


def prepare_data(cfg: FinetuneConfig) -> RunData:
    """Read and encode the task's data once (all seeds share it), reporting what was cut."""
    spec = resolve_task(cfg)
    tokenizer = Tokenizer.from_pretrained(cfg.model)
    settings = cfg.input_settings(spec)
    train = read_split(cfg, spec, "train")
    if spec.format == "table" and not spec.regression and spec.labels is None:  # the whole file's label set
        spec = generic_task(cfg.task, labels_from_examples(train), cfg.text_column,
                            cfg.text_pair_column, cfg.label_column, name=cfg.task)
    train, dev = hold_out_dev(cfg, spec, train, cfg.seed)
    dev = dev or {split: read_split(cfg, spec, split) for split in spec.eval_splits}
    train = subset(train, cfg.max_train_examples, cfg.seed)
    encoded = encode(spec, train, tokenizer, settings, training=True)
    if encoded.too_long:
        action = "covered by overlapping windows" if cfg.long_inputs == "window" or spec.kind == "span" else "cut"
        print(f"{encoded.too_long:,} of {len(train):,} training examples are longer than {settings.max_seq_len} "
              f"tokens and were {action}" + (" (--long-inputs window keeps all of them)" if action == "cut" else ""),
              file=sys.stderr)
    return RunData(spec, tokenizer, settings, train, dev, encoded)


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
        train_one = train_feature_head
    else:
        train_one = finetune_once
    seeds = [cfg.seed + k for k in range(cfg.seeds)]
    if len(seeds) == 1:
        return train_one(cfg, data, seeds[0], out)
    runs = [{"seed": seed, **train_one(cfg, data, seed, out / f"seed-{seed}")} for seed in seeds]
    summary = summarize(data.spec, runs)
    write_json_atomic(out / RESULTS_NAME, summary)
    return summary


def run_evaluation(task: str | None, data: str, model_dir: str, split: str = "dev", batch_size: int = 128,
                   precision: str = "auto") -> dict:
    """`bertology evaluate`: a fine-tuned model's metrics on a split of its task's files."""
    model, tokenizer, spec, settings = load_finetuned(model_dir)
    if task and task != spec.name:
        raise UserError(f"{model_dir} was fine-tuned for {spec.name}, not {task}")
    examples = read_split(FinetuneConfig(task=spec.name, model=model_dir), spec, split, data)
    predictions = predict(model, tokenizer, spec, examples, settings, batch_size, precision, progress=True)
    return {"task": spec.name, "split": split, **score(spec, examples, predictions, split)}


def run_prediction(model_dir: str, input_path: Path, out_path: Path, batch_size: int = 128, precision: str = "auto") -> int:
    """`bertology predict`: predictions for every example of a file, written in the task's format."""
    model, tokenizer, spec, settings = load_finetuned(model_dir)
    examples = read_inputs(spec, Path(input_path))
    predictions = predict(model, tokenizer, spec, examples, settings, batch_size, precision, progress=True)
    if spec.kind == "span":
        write_squad_predictions(predictions, out_path)
    elif spec.kind == "token":
        write_conll_predictions(examples, predictions, out_path)
    else:
        ids = predictions if spec.regression else [spec.labels.index(label) for label in predictions]
        write_glue_predictions(spec, examples, ids, out_path)
    return len(examples)
