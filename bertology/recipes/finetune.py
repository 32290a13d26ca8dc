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
from pathlib import Path

import torch

from ..config import TaskConfig, setting
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import write_json_atomic
from ..inference.embedding import POOLINGS
from ..inference.modeldir import describe_task, load_finetuned, task_of
from ..inference.predict import predict, score
from ..inference.static_heads import load_static_head, open_word_features, predict_examples
from ..models import family_of, resolve_model_dir
from ..models.features import LAYER_CHOICES
from ..models.t5 import T5Config
from ..ops import PRECISIONS
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
from ..training.loop import Trainer, check_resumed_record
from ..training.tasks import (
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
    hold_out_dev,
    layer_depth,
    load_task_model,
    num_layers_of,
    read_inputs,
    read_split,
    resolve_task,
    subset,
    summarize,
)
from .feature_mode import train_feature_head
from .static_features import check_task, prepare_static_data, train_static_head
from .taglm import prepare_tagger_data, train_tagger
from .text_to_text import evaluate_directory, finetune_text_to_text, predict_directory, prepare_text_to_text

CONFIG_NAME = "finetune_config.json"


MODES = ("finetune", "features")
LONG_INPUTS = ("truncate", "window")
FEATURE_HEADS = ("linear", "bilstm")
ARCHES = ("head", "taglm")


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
    arch: str = setting("head", choices=ARCHES,
                        help="head: one small head on --model (the BERT paper); taglm: Peters et al. 2017's "
                             "BiLSTM-CRF tagger trained here, reading --lm's biLM states")
    lm: str | None = setting(None, metavar="DIR", help="--arch taglm: the frozen biLM (an ELMo from `pretrain --arch "
                                                       "elmo`) whose top states join after the first BiLSTM "
                                                       "(default: none, the tagger without a biLM)")
    word_vectors: str | None = setting(None, metavar="DIR",
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
        for name in ("data", "model", "out", "train_file", "dev_file", "cache_dir", "lm", "word_vectors"):  # Paths welcome from Python
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, str(value))

    def validate(self) -> None:
        """Check everything that needs no file reading (a model given by name becomes its folder)."""
        super().validate()
        if self.layer_lr_decay > 1:
            raise UserError(f"--layer-lr-decay must be at most 1, got {self.layer_lr_decay}")
        if self.arch == "taglm":
            given = [flag for flag, value in (("--model", self.model), ("--mode features", self.mode == "features"),
                                              ("--layer-lr-decay", self.layer_lr_decay < 1),
                                              ("--gradual-unfreezing", self.gradual_unfreezing),
                                              ("--head-bilstm", self.head_bilstm)) if value]
            if given:
                raise UserError(f"{given[0]} is not an option of --arch taglm, which trains its own tagger "
                                "(--lm DIR gives it a biLM, --word-vectors DIR its starting word vectors)")
            for flag, path in (("--lm", self.lm), ("--word-vectors", self.word_vectors)):
                if path is not None and not Path(path).is_dir():
                    raise UserError(f"{flag} {path}: no such directory")
            return
        if self.lm is not None:
            raise UserError("--lm belongs to --arch taglm (TagLM's tagger); give --arch taglm, or leave it out")
        if self.word_vectors is not None:
            if self.mode != "features":
                raise UserError("--word-vectors goes with --mode features (each token's word vector beside its "
                                "features) or --arch taglm (the tagger's word embeddings); fine-tuning has none")
            if not Path(self.word_vectors).is_dir():
                raise UserError(f"--word-vectors {self.word_vectors}: no such directory")
        if not self.model:
            raise UserError("--model is required: the pre-trained model directory (only --arch taglm trains a "
                            "tagger without one)")
        self.model = str(resolve_model_dir(self.model))

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


def prepare_data(cfg: FinetuneConfig) -> RunData:
    """Read and encode the task's data once (all seeds share it), reporting what was cut."""
    tokenizer = Tokenizer.from_pretrained(cfg.model)
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
    model = load_task_model(cfg.model, data.spec, cfg.drop_mult, cfg.head_bilstm)
    describe_task(model.config, data.spec, data.settings)
    num_layers = num_layers_of(model)
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


def check_wic_setup(cfg: FinetuneConfig, family: str) -> None:
    """WiC's head reads the target word's tokens from a fine-tuned BERT-family encoder in one row:
    a one-line error for any other model, the feature-based mode or windows."""
    if family != "bert":
        what = "--arch taglm trains a tagger" if cfg.arch == "taglm" else f"{cfg.model} is a {family} model"
        raise UserError(f"wic needs a BERT-family encoder (BERT, RoBERTa, ALBERT or ELECTRA: its head reads the "
                        f"target words' tokens); {what}")
    if cfg.mode == "features":
        raise UserError("wic is fine-tuned whole here (--mode finetune): its head reads the target word's tokens "
                        "from the encoder")
    if cfg.long_inputs == "window":
        raise UserError("--long-inputs window does not apply to wic: its head reads both target words from one row, "
                        "so long pairs are cut around them")


def check_head_bilstm_setup(cfg: FinetuneConfig, family: str, kind: str) -> None:
    """--head-bilstm puts a BiLSTM between a fine-tuned BERT-family encoder and a sequence, token or
    span head: a one-line error for any other model, the feature-based mode or WiC's head."""
    if family != "bert":
        raise UserError(f"--head-bilstm puts a BiLSTM on a BERT-family encoder (BERT, RoBERTa, ALBERT or ELECTRA); "
                        f"{cfg.model} is a {family} model")
    if cfg.mode == "features":
        raise UserError("--head-bilstm trains a BiLSTM with the encoder (--mode finetune); the feature-based mode has "
                        "its own over the frozen encoder: --feature-head bilstm")
    if kind == "wic":
        raise UserError("--head-bilstm does not apply to wic: its head reads the target words' own tokens from the "
                        "encoder")


def run_finetuning(cfg: FinetuneConfig) -> dict:
    """Fine-tune (or train a feature-based head) for cfg.seeds seeds; write and return the dev results."""
    cfg.validate()
    out = Path(cfg.out)
    check_output_dir(out, cfg.resume)
    family = "taglm" if cfg.arch == "taglm" else family_of(cfg.model).name
    if cfg.head_bilstm:
        check_head_bilstm_setup(cfg, family, resolve_task(cfg).kind)
    if resolve_task(cfg).kind == "wic":
        check_wic_setup(cfg, family)
    if family == "taglm" and cfg.arch != "taglm":
        raise UserError(f"{cfg.model}: an already trained TagLM tagger; evaluate or predict with it, or train a new "
                        "one with --arch taglm")
    if family in ("gpt", "t5", "awd-lstm", "xlnet") and cfg.mode == "features":
        raise UserError(f"{cfg.model}: a {family.upper()} is fine-tuned whole here (--mode finetune); feature-based "
                        "heads read BERT encoders or static vectors")
    if family == "elmo" and cfg.mode != "features":
        raise UserError(f"{cfg.model}: ELMo's biLM is a feature source, as in its paper: use --mode features "
                        "(--feature-layers mix learns ELMo's scalar mix with the head)")
    if family != "awd-lstm" and cfg.drop_mult != 1.0:
        raise UserError(f"--drop-mult scales an AWD-LSTM classifier's dropouts (ULMFiT); {cfg.model} is a {family}")
    if family == "t5" and (cfg.layer_lr_decay < 1 or cfg.gradual_unfreezing):
        raise UserError("--layer-lr-decay and --gradual-unfreezing are ULMFiT's options for BERT and GPT layers, "
                        "not for a T5's encoder-decoder")
    if family == "t5" and cfg.long_inputs == "window":
        raise UserError("--long-inputs window: a T5's inputs are cut at --max-seq-len (text to text has no windows "
                        "here; a training example whose answer is cut off is dropped and counted)")
    if family == "t5":  # text to text: the task's strings, not a head
        spec, train, dev = read_task(cfg)
        data = prepare_text_to_text(cfg.model, spec, train, dev, cfg.input_settings(spec))
        train_one, too_long = finetune_text_to_text, data.train_encoded.too_long
    elif family == "taglm":  # Peters et al. 2017's tagger, trained from scratch beside a frozen biLM
        data, train_one, too_long = prepare_tagger_data(*read_task(cfg), cfg.lm, cfg.word_vectors), train_tagger, 0
    elif family in ("static", "cove"):  # one vector per word (CoVe: [GloVe; CoVe], its paper's): only a head trains
        if cfg.mode != "features":
            raise UserError(f"{cfg.model}: static word vectors have no encoder to fine-tune; use --mode features"
                            if family == "static" else f"{cfg.model}: CoVe is a fixed feature source, as in its "
                            "paper; use --mode features")
        if cfg.word_vectors is not None:
            what = "word vectors already" if family == "static" else "CoVe, whose features hold GloVe's vectors already"
            raise UserError(f"--word-vectors go beside a contextual encoder's features; {cfg.model} is {what}")
        check_task(resolve_task(cfg))
        data, train_one, too_long = prepare_static_data(*read_task(cfg), open_word_features(cfg.model)), train_static_head, 0
    else:
        data = prepare_data(cfg)
        train_one = train_feature_head if cfg.mode == "features" else finetune_once
        too_long = data.train_encoded.too_long
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
class EvaluateConfig:
    """The model, the task's split, and where the results go.

    The settings of `bertology evaluate`.
    """

    data: str = setting(required=True, metavar="PATH", help="the task's folder or file")
    model: str = setting(required=True, metavar="MODEL", model_dir=True,
                         help="a model directory from `bertology finetune`")
    task: str | None = setting(None, help="the task (default: the one the model was fine-tuned on)")
    split: str = setting("dev", help="the split to score: dev, dev_mismatched (MNLI), train or test")
    batch_size: int = setting(128, positive=True, help="examples per forward pass")
    precision: str = setting("auto", choices=PRECISIONS, help="auto: bf16 where the processor runs it fast")
    out: str | None = setting(None, metavar="FILE", output="file", help="also write the results as JSON here "
                                                                         "(default: print only)")


@dataclass
class PredictConfig:
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
    precision: str = setting("auto", choices=PRECISIONS, help="auto: bf16 where the processor runs it fast")


def run_evaluation(task: str | None, data: str, model_dir: str, split: str = "dev", batch_size: int = 128,
                   precision: str = "auto") -> dict:
    """`bertology evaluate`: a fine-tuned model's metrics on a split of its task's files (a T5's
    from its decoded answers, see text_to_text.py; a feature head over static vectors or CoVe
    through static_features.py, in fp32 as it trained)."""
    directory = resolve_model_dir(model_dir)
    family = family_of(directory).name
    if family == "t5":
        spec, settings = task_of(T5Config.load(directory), model_dir)
    elif family in ("static", "cove"):
        head, vectors, spec = load_static_head(directory)
    else:
        model, tokenizer, spec, settings = load_finetuned(model_dir)
    if task and task != spec.name:
        raise UserError(f"{model_dir} was fine-tuned for {spec.name}, not {task}")
    examples = read_split(FinetuneConfig(task=spec.name, model=model_dir), spec, split, data)
    if family == "t5":
        return {"task": spec.name, "split": split,
                **evaluate_directory(str(directory), spec, settings, split, examples, batch_size)}
    if family in ("static", "cove"):
        predictions = predict_examples(head, vectors, spec, examples, batch_size)
    else:
        predictions = predict(model, tokenizer, spec, examples, settings, batch_size, precision, progress=True)
    return {"task": spec.name, "split": split, **score(spec, examples, predictions, split)}


def run_prediction(model_dir: str, input_path: Path, out_path: Path, batch_size: int = 128, precision: str = "auto") -> int:
    """`bertology predict`: predictions for every example of a file, written in the task's format
    (a T5's from its decoded answers, see text_to_text.py; a feature head over static vectors or
    CoVe through static_features.py)."""
    directory = resolve_model_dir(model_dir)
    family = family_of(directory).name
    if family == "t5":
        spec, settings = task_of(T5Config.load(directory), model_dir)
        examples = read_inputs(spec, Path(input_path))
        predictions = predict_directory(str(directory), spec, settings, examples, batch_size)
    elif family in ("static", "cove"):
        head, vectors, spec = load_static_head(directory)
        examples = read_inputs(spec, Path(input_path))
        predictions = predict_examples(head, vectors, spec, examples, batch_size)
    else:
        model, tokenizer, spec, settings = load_finetuned(model_dir)
        examples = read_inputs(spec, Path(input_path))
        predictions = predict(model, tokenizer, spec, examples, settings, batch_size, precision, progress=True)
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
