"""Fine-tuning and evaluation: one small head on a pre-trained encoder, trained through the shared loop.

`run_finetuning(config)` reads a task's official files, encodes them (tasks/inputs.py), puts
the head the task needs on the encoder (models/bert.py: [CLS]-pooled linear head for sentences
and pairs, a per-token head for tagging, a start/end head for spans, a head on [CLS] and the
two target words for WiC; with `head_bilstm`, the BERT paper's randomly initialised BiLSTM between
a BERT-family encoder and its sequence, token or span head) and trains with the
BERT recipe (AdamW, warmup then linear decay, dropout 0.1), evaluating on the dev set after
every epoch and keeping the best model. ULMFiT's tricks are switches: discriminative
learning rates (`layer_lr_decay`), the slanted triangular schedule (`schedule`) and
gradual unfreezing. The BERT paper's feature-based mode (`mode="features"`, in
recipes/feature_mode.py) freezes the encoder and trains only a head on cached layer features."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Callable

import torch

from ..config import Device, TaskConfig, default_of, setting, setting_fields
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import write_json_atomic
from ..inference.embedding import POOLINGS
from ..inference.modeldir import ModelDir, describe_task, open_model_dir
from ..inference.runners import open_runner
from ..inference.static_heads import open_word_features
from ..models import family_named, resolve_model_dir, trained_by
from ..models.features import LAYER_CHOICES
from ..ops import PRECISION_HELP, PRECISIONS
from ..tasks.inputs import InputSettings, collate, encode
from ..tasks.readers import (
    TaskSpec,
    generic_task,
    labels_from_examples,
    write_conll_predictions,
    write_glue_predictions,
    write_squad_predictions,
    write_wic_predictions,
)
from ..tasks.splits import hold_out_dev, read_inputs, read_split, resolve_task, subset
from ..training.loop import Trainer, check_resumed_record
from .feature_mode import train_feature_head
from .static_features import check_task, prepare_static_data, train_static_head
from .task_training import (
    RESULTS_NAME,
    BestModel,
    EpochBatches,
    EpochLoop,
    RunData,
    TaskModule,
    check_output_dir,
    epoch_train_config,
    evaluate_splits,
    fit_and_finish,
    gradual_unfreezer,
    layer_depth,
    load_task_model,
    num_layers_of,
    summarize,
)
from .text_to_text_finetuning import finetune_text_to_text, prepare_text_to_text

CONFIG_NAME = "finetune_config.json"


MODES = ("finetune", "features")
LONG_INPUTS = ("truncate", "window")
FEATURE_HEADS = ("linear", "bilstm")



@dataclass
class FinetuneConfig(TaskConfig, EpochLoop):
    """Fine-tuning: the model, its inputs, ULMFiT's options and the feature-based mode."""

    model: str = setting("", metavar="MODEL", model_dir=True,
                         help="the pre-trained model directory (bertology or transformers BERT) or an installed model's "
                              "name (e.g. all-MiniLM-L6-v2) (default: none; required unless --arch taglm)")
    out: str = setting("", required=True, metavar="DIR", output="dir",
                       help="output directory: the best model, eval_results.json, metrics.jsonl, learning_curve.png")
    max_seq_len: int | None = setting(None, positive=True, help="tokens per row (default: 128; SQuAD 384)")
    max_train_examples: int | None = setting(None, positive=True,
                                             help="train on a reproducible random subset of this many examples "
                                                  "(default: all)")
    long_inputs: str = setting("truncate", choices=LONG_INPUTS,
                               help="inputs longer than --max-seq-len: cut (counted and reported) or covered by "
                                    "overlapping windows")
    doc_stride: int = setting(128, positive=True, help="windows: tokens between window starts")
    max_query_length: int = setting(64, positive=True, help="SQuAD: question tokens kept")
    max_answer_length: int = setting(30, positive=True, help="SQuAD: the longest answer in tokens")
    n_best: int = setting(20, positive=True, help="SQuAD: start and end candidates searched")
    null_score_threshold: float = setting(0.0, help="SQuAD 2.0: answer nothing when the no-answer score beats "
                                                    "the best span's by more than this")
    layer_lr_decay: float = setting(1.0, positive=True,
                                    help="ULMFiT's discriminative learning rates: each layer down gets this factor "
                                         "of the rate above it (1: off)")
    gradual_unfreezing: bool = setting(False, help="ULMFiT: train the top layer first, one more layer each epoch")
    head_bilstm: bool = setting(False, help="the BERT paper's Table 5 '+ BiLSTM': a randomly initialised BiLSTM (one "
                                            "layer, hidden_size / 2 each way) between a BERT-family encoder and its "
                                            "head, trained with it (as part of the head for --layer-lr-decay and "
                                            "--gradual-unfreezing)")
    drop_mult: float = setting(1.0, positive=True, help="--model an AWD-LSTM: ULMFiT's one dropout knob, every "
                                                       "dropout of the classifier (fastai's) times this")
    arch: str = setting("head", choices=lambda: ("head", *trained_by("finetune")),
                        help="head: one small head on --model (the BERT paper); taglm: Peters et al. 2017's "
                             "BiLSTM-CRF tagger trained here, reading --lm's biLM states")
    lm: str | None = setting(None, metavar="DIR", help="--arch taglm: the frozen biLM (an ELMo from `pretrain --arch "
                                                       "elmo`) whose top states join after the first BiLSTM "
                                                       "(default: none, the tagger without a biLM)")
    vectors: str | None = setting(None, metavar="DIR", formerly=("word_vectors",),
                                  help="the task model's own word vectors (`bertology static train`): --arch "
                                       "taglm starts its word embeddings from them; --mode features puts each "
                                       "token's word vector in front of its features, as ELMo's paper feeds "
                                       "[x_k; ELMo_k] to its task models (default: none)")
    seeds: int = setting(1, positive=True, help="run N seeds (--seed, --seed + 1, ...) and report the median "
                                                "and spread")
    mode: str = setting("finetune", choices=MODES,
                        help="finetune the whole encoder, or the BERT paper's feature-based mode (features): "
                             "the encoder frozen, only a head trains")
    feature_layers: str = setting("sum_last_four",
                                  help=f"features mode: {', '.join(LAYER_CHOICES)}, or layer numbers like 4,5,6 "
                                       "(summed; 0 = embeddings, -1 = last)")
    feature_head: str = setting("linear", choices=FEATURE_HEADS,
                                help="features mode: the head (bilstm: the paper's two-layer BiLSTM)")
    feature_pooling: str = setting("mean", choices=POOLINGS,
                                   help="features mode, sentence tasks: how the token features become one vector")
    cache_dir: str | None = setting(None, metavar="DIR", output="dir",
                                    help="features mode: where computed features are kept (default: "
                                         "$BERTOLOGY_CACHE/features)")

    def __post_init__(self) -> None:
        for name in ("data", "model", "out", "train_file", "dev_file", "cache_dir", "lm", "vectors"):  # Paths welcome from Python
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, str(value))

    def validate(self) -> None:
        """Check everything that needs no file reading (a model given by name becomes its folder)."""
        super().validate()
        if self.layer_lr_decay > 1:
            raise UserError(f"--layer-lr-decay must be at most 1, got {self.layer_lr_decay}")
        if self.arch != "head":
            given = [flag for flag, value in (("--model", self.model), ("--mode features", self.mode == "features"),
                                              ("--layer-lr-decay", self.layer_lr_decay < 1),
                                              ("--gradual-unfreezing", self.gradual_unfreezing),
                                              ("--head-bilstm", self.head_bilstm)) if value]
            if given:
                recipe = import_module(family_named(self.arch).recipe)
                raise UserError(f"{given[0]} is not an option of --arch {self.arch}, which trains its own model "
                                f"({recipe.OPTIONS})")
            for flag, path in (("--lm", self.lm), ("--vectors", self.vectors)):
                if path is not None and not Path(path).is_dir():
                    raise UserError(f"{flag} {path}: no such directory")
            return
        if self.lm is not None:
            archs = " or ".join(trained_by("finetune"))
            raise UserError(f"--lm belongs to --arch {archs}; give --arch {archs}, or leave it out")
        if self.vectors is not None:
            if self.mode != "features":
                raise UserError("--vectors goes with --mode features (each token's word vector beside its "
                                "features) or --arch taglm (the tagger's word embeddings); fine-tuning has none")
            if not Path(self.vectors).is_dir():
                raise UserError(f"--vectors {self.vectors}: no such directory")
        if not self.model:
            raise UserError("--model is required: the pre-trained model directory (only --arch taglm trains a "
                            "tagger without one)")
        self.model = str(resolve_model_dir(self.model))

    def family_options(self) -> dict:
        """The model family's own fine-tuning options given (FAMILY_OPTIONS away from their defaults;
        `check_model_setup` refuses one the family does not take)."""
        return {name: getattr(self, name) for name in FAMILY_OPTIONS
                if getattr(self, name) != default_finetune_setting(name)}

    def input_settings(self, spec: TaskSpec) -> InputSettings:
        """Length limits and SQuAD's search settings."""
        default_len = 384 if spec.kind == "span" else 128
        return InputSettings(self.max_seq_len or default_len, self.long_inputs, self.doc_stride, self.max_query_length,
                             self.max_answer_length, self.n_best, self.null_score_threshold)


def read_task(cfg: FinetuneConfig) -> tuple[TaskSpec, list, dict[str, list]]:
    """The task, its training examples (a seeded subset when asked) and its dev splits' examples."""
    spec = resolve_task(cfg)
    train = read_split(cfg, spec, "train")
    if spec.format == "table" and not spec.regression and spec.labels is None:  # the whole file's label set
        spec = generic_task(cfg.task, labels_from_examples(train), cfg.text_column,
                            cfg.text_pair_column, cfg.label_column, name=cfg.task)
    train, dev = hold_out_dev(cfg, spec, train, cfg.seed)
    dev = dev or {split: read_split(cfg, spec, split) for split in spec.eval_splits}
    return spec, subset(train, cfg.max_train_examples, cfg.seed), dev


def prepare_data(cfg: FinetuneConfig, tokenizer: Tokenizer) -> RunData:
    """Read and encode the task's data once with the model's `tokenizer` (all seeds share it), reporting
    what was cut."""
    spec, train, dev = read_task(cfg)
    settings = cfg.input_settings(spec)
    encoded = encode(spec, train, tokenizer, settings, training=True)
    if encoded.too_long:
        if spec.kind == "wic":
            action = "cut around their target words"
        elif cfg.long_inputs == "window" or spec.kind == "span":
            action = "covered by overlapping windows"
        else:
            action = "cut (--long-inputs window keeps all of them)"
        print(f"{encoded.too_long:,} of {len(train):,} training examples are longer than {settings.max_seq_len} "
              f"tokens and were {action}", file=sys.stderr)
    return RunData(spec, tokenizer, settings, train, dev, encoded)


def finetune_once(cfg: FinetuneConfig, data: RunData, seed: int, out: Path) -> dict:
    """Train one seed into `out`; returns the best dev results (with the step they came from)."""
    torch.manual_seed(seed)
    model = load_task_model(cfg.model, data.spec, **cfg.family_options())
    describe_task(model.config, data.spec, data.settings)
    depths = {name: layer_depth(model, name) for name, _ in model.named_parameters()} if cfg.layer_lr_decay < 1 else {}
    num_layers = num_layers_of(model) if depths else 0
    features = data.train_encoded.features

    def make_batch(rows: list[int]) -> dict:
        return collate([features[i] for i in rows], data.spec.kind, data.tokenizer.pad_token_id, data.spec.regression)

    unfreeze = gradual_unfreezer(model) if cfg.gradual_unfreezing else None
    batches = EpochBatches([len(f.input_ids) for f in features], cfg.batch_size, seed, make_batch, unfreeze)
    best = BestModel(out, data, cfg.resume)

    def evaluate(module: TaskModule) -> dict:
        return best.update(evaluate_splits(module.model, data, cfg), module.model, trainer.step)

    def lr_scale(name: str) -> float:  # ULMFiT's discriminative rates: the head at lr, each layer below x decay
        return cfg.layer_lr_decay ** (num_layers + 1 - depths[name.removeprefix("model.")])

    trainer = Trainer(TaskModule(model), epoch_train_config(cfg, batches.steps_per_epoch, seed, cfg.precision), out,
                      batches, evaluate, lr_scale=lr_scale if cfg.layer_lr_decay < 1 else None)
    fit_and_finish(trainer, cfg, data.spec, out)
    return best.results


# The fine-tuning options of one family or another (its spec's `finetune_options`): flag, what it does.
FAMILY_OPTIONS = {"head_bilstm": ("--head-bilstm", "puts a BiLSTM between a BERT-family encoder and its head"),
                  "drop_mult": ("--drop-mult", "scales an AWD-LSTM classifier's dropouts (ULMFiT)")}


def check_model_setup(cfg: FinetuneConfig, model_dir: ModelDir, kind: str) -> None:
    """What the model's family can do against what the run asks (its spec: fine-tuning modes, heads,
    options, layers): a one-line error naming the setting, before any data is read."""
    spec, name = model_dir.spec, f"{cfg.model} ({model_dir.describe()})"
    if not spec.finetune_modes:
        again = f", or train a new one with --arch {model_dir.family.name}" if model_dir.family.recipe else ""
        raise UserError(f"{name}: an already trained {model_dir.family.name} model; evaluate or predict with it{again}")
    if cfg.mode not in spec.finetune_modes:
        modes = {"finetune": "fine-tuned whole here (--mode finetune)",
                 "features": "a fixed feature source: use --mode features (a head trains on its features)"}
        raise UserError(f"{name} is {modes[spec.finetune_modes[0]]}")
    for option, (flag, what) in FAMILY_OPTIONS.items():
        if getattr(cfg, option) != default_finetune_setting(option) and option not in spec.finetune_options:
            raise UserError(f"{flag} {what}; {name} does not take it")
    if (cfg.layer_lr_decay < 1 or cfg.gradual_unfreezing) and spec.layer_of is None:
        raise UserError(f"--layer-lr-decay and --gradual-unfreezing are ULMFiT's options for a stack of layers; "
                        f"{name} declares none")
    if cfg.long_inputs == "window" and spec.runner == "text_to_text":
        raise UserError("--long-inputs window: a text-to-text model's inputs are cut at --max-seq-len (text to text "
                        "has no windows here; a training example whose answer is cut off is dropped and counted)")
    if cfg.vectors is not None and spec.runner == "word_features":
        raise UserError(f"--vectors go beside a contextual encoder's features; {name} reads word vectors already")
    if kind == "wic":
        if "wic" not in spec.heads:
            raise UserError(f"wic needs a BERT-family encoder (its head reads the target words' tokens); {name} has "
                            "no WiC head")
        if cfg.long_inputs == "window":
            raise UserError("--long-inputs window does not apply to wic: its head reads both target words from one "
                            "row, so long pairs are cut around them")
    if cfg.head_bilstm and cfg.mode == "features":
        raise UserError("--head-bilstm trains a BiLSTM with the encoder (--mode finetune); the feature-based mode has "
                        "its own over the frozen encoder: --feature-head bilstm")
    if cfg.head_bilstm and kind == "wic":
        raise UserError("--head-bilstm does not apply to wic: its head reads the target words' own tokens from the "
                        "encoder")


def default_finetune_setting(name: str):
    """A FinetuneConfig setting's default."""
    return default_of(setting_fields(FinetuneConfig)[name])


# How each runner's fine-tuning starts: (prepare the data, train one seed), by the family's spec's `runner`.
def _prepare_head(cfg: FinetuneConfig, model_dir: ModelDir) -> tuple[RunData, Callable, int]:
    data = prepare_data(cfg, model_dir.tokenizer())
    return data, train_feature_head if cfg.mode == "features" else finetune_once, data.train_encoded.too_long


def _prepare_text_to_text(cfg: FinetuneConfig, model_dir: ModelDir) -> tuple[RunData, Callable, int]:
    spec, train, dev = read_task(cfg)
    data = prepare_text_to_text(model_dir, spec, train, dev, cfg.input_settings(spec))
    return data, finetune_text_to_text, data.train_encoded.too_long


def _prepare_word_features(cfg: FinetuneConfig, model_dir: ModelDir) -> tuple[RunData, Callable, int]:
    check_task(resolve_task(cfg))
    return prepare_static_data(*read_task(cfg), open_word_features(model_dir.path)), train_static_head, 0


PREPARE = {"head": _prepare_head, "text_to_text": _prepare_text_to_text, "word_features": _prepare_word_features}


def run_finetuning(cfg: FinetuneConfig) -> dict:
    """Fine-tune (or train a feature-based head) for cfg.seeds seeds; write and return the dev results."""
    cfg.validate()
    out = Path(cfg.out)
    check_output_dir(out, cfg.resume)
    if cfg.arch != "head":  # a family trained from scratch by a recipe of its own (TagLM's tagger beside a biLM)
        recipe = import_module(family_named(cfg.arch).recipe)
        data, train_one, too_long = recipe.prepare_run(cfg, *read_task(cfg)), recipe.train_run, 0
    else:
        model_dir = open_model_dir(cfg.model)
        check_model_setup(cfg, model_dir, resolve_task(cfg).kind)
        data, train_one, too_long = PREPARE[model_dir.spec.runner](cfg, model_dir)
    if cfg.resume:  # before the record is written again: the earlier run's settings, or a one-line refusal
        check_resumed_record(out / CONFIG_NAME, dataclasses.asdict(cfg))
    write_json_atomic(out / CONFIG_NAME, {**dataclasses.asdict(cfg), "task_spec": dataclasses.asdict(data.spec),
                                          "train_examples": len(data.train),
                                          "train_examples_longer_than_max_seq_len": too_long})
    seeds = [cfg.seed + k for k in range(cfg.seeds)]
    if len(seeds) == 1:
        return train_one(cfg, data, seeds[0], out)
    runs = [{"seed": seed, **train_one(cfg, data, seed, out / f"seed-{seed}")} for seed in seeds]
    summary = summarize(data.spec, runs)
    write_json_atomic(out / RESULTS_NAME, summary)
    return summary


@dataclass
class EvaluateConfig(Device):
    """The model, the task's split, and where the results go.

    The settings of `bertology evaluate`.
    """

    data: str = setting(required=True, metavar="PATH", help="the task's folder or file")
    model: str = setting(required=True, metavar="MODEL", model_dir=True,
                         help="a model directory from `bertology finetune`")
    task: str | None = setting(None, help="the task (default: the one the model was fine-tuned on)")
    split: str = setting("dev", help="the split to score: dev, dev_mismatched (MNLI), train or test")
    batch_size: int = setting(128, positive=True, help="examples per forward pass")
    precision: str = setting("auto", choices=PRECISIONS, help=PRECISION_HELP)
    out: str | None = setting(None, metavar="FILE", output="file", help="also write the results as JSON here "
                                                                         "(default: print only)")


@dataclass
class PredictConfig(Device):
    """The model, the input file and where the predictions go.

    The settings of `bertology predict`.
    """

    model: str = setting(required=True, metavar="MODEL", model_dir=True,
                         help="a model directory from `bertology finetune`")
    input: str = setting(required=True, metavar="FILE", help="the task's official format (WiC: a X.data.txt), or "
                                                             ".txt: one text per line (a tab between the texts of a "
                                                             "pair)")
    out: str = setting(required=True, metavar="FILE", output="file", help="the predictions: GLUE TSV, SQuAD JSON, "
                                                                         "CoNLL columns or WiC's T/F lines")
    batch_size: int = setting(128, positive=True, help="examples per forward pass")
    precision: str = setting("auto", choices=PRECISIONS, help=PRECISION_HELP)


def run_evaluation(task: str | None, data: str, model_dir: str, split: str = "dev", batch_size: int = 128,
                   precision: str = "auto", device: str = "auto") -> dict:
    """`bertology evaluate`: a fine-tuned model's metrics on a split of its task's files, through the
    directory's runner (inference/runners.py: a head's logits, a T5's decoded answers, a feature
    head over word vectors), on `device` (the `--device` setting)."""
    runner = open_runner(model_dir, precision, device)
    spec = runner.spec
    if task and task != spec.name:
        raise UserError(f"{model_dir} was fine-tuned for {spec.name}, not {task}")
    examples = read_split(FinetuneConfig(task=spec.name, model=model_dir), spec, split, data)
    return {"task": spec.name, "split": split, **runner.evaluate(examples, split, batch_size)}


def run_prediction(model_dir: str, input_path: Path, out_path: Path, batch_size: int = 128, precision: str = "auto",
                   device: str = "auto") -> int:
    """`bertology predict`: predictions for every example of a file, written in the task's format,
    through the directory's runner (inference/runners.py) on `device`."""
    runner = open_runner(model_dir, precision, device)
    spec = runner.spec
    examples = read_inputs(spec, Path(input_path))
    predictions = runner.predict(examples, batch_size, progress=True)
    if spec.kind == "span":
        write_squad_predictions(predictions, out_path)
    elif spec.kind == "token":
        write_conll_predictions(examples, predictions, out_path)
    elif spec.kind == "wic":
        write_wic_predictions(predictions, out_path)
    else:
        ids = predictions if spec.regression else [spec.labels.index(label) for label in predictions]
        write_glue_predictions(spec, examples, ids, out_path)
    return len(examples)
