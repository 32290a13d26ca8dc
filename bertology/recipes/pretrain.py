"""`bertology pretrain`: from raw text to a pre-trained encoder in the transformers layout.

The steps: check every input before any work; load (or train) the WordPiece vocabulary;
tokenize the corpus once into memory-mapped shards (reused by later runs); hold out a
slice of documents; build the objective's model; train with the shared loop; write the
model, the tokenizer, `metrics.jsonl`, `training_curves.png` and the resolved config
into the output directory."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..data.pretraining import PretrainingDataset, collate, make_batches
from ..data.shards import TokenizedCorpus, build_corpus, continuation_table
from ..data.tokenizer import Tokenizer, train_tokenizer
from ..errors import UserError
from ..files import cache_root, write_json_atomic
from ..models.bert import PRESETS, BertConfig
from ..plots import plot_training_curves
from ..training.loop import (
    Distributed,
    TrainConfig,
    Trainer,
    check_no_earlier_run,
    check_writable,
    metrics_from_counts,
    parse_duration,
)
from ..training.objectives import OBJECTIVES, build_objective

RESOLVED_CONFIG_NAME = "pretrain_config.json"


@dataclass
class PretrainConfig:
    """Everything a pre-training run needs; each field is also a command-line flag and a config-file key."""

    corpus: list[str] = field(default_factory=list)
    out: str = ""
    tokenizer: str | None = None  # a tokenizer directory; None = train one on the corpus
    vocab_size: int = 30522  # for a tokenizer trained here
    cased: bool = False
    doc_format: str = "auto"  # "lines", "file" or "auto" (see read_documents)
    skip_bad_lines: bool = False  # skip (and count) lines that are not UTF-8 instead of stopping
    cache_dir: str = field(default_factory=lambda: str(cache_root()))
    preset: str = "mini"
    model_config: str | None = None  # a config.json for the encoder instead of a preset
    model: dict[str, Any] = field(default_factory=dict)  # BertConfig field overrides (e.g. pre_layer_norm)
    objective: str = "bert"
    seq_len: int = 128
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 5e-4
    warmup: float = 0.06
    weight_decay: float = 0.01
    schedule: str = "linear"
    max_steps: int | None = None
    max_time: str | None = None  # "20m", "1h", "900" (seconds)
    precision: str = "auto"
    compile: bool = False
    seed: int = 0
    short_seq_prob: float = 0.1
    whole_word_masking: bool = False
    max_predictions: int | None = None  # cap on masked tokens per sequence (BERT: 20 at 128)
    eval_fraction: float = 0.01
    eval_batches: int = 20
    eval_every: int = 200
    log_every: int = 10
    save_every: int = 500
    keep_last: int = 2
    resume: bool = False
    progress: bool = True

    def validate(self) -> None:
        """Everything that can be checked before any tokenization or training."""
        if not self.corpus:
            raise UserError("no corpus given (--corpus PATH...)")
        for path in self.corpus:
            if not Path(path).exists():
                raise UserError(f"{path}: no such file or directory")
        if not self.out:
            raise UserError("no output directory given (--out DIR)")
        if self.objective not in OBJECTIVES:
            raise UserError(f"unknown objective {self.objective!r}; choose one of {', '.join(OBJECTIVES)}")
        if self.model_config is None and self.preset not in PRESETS:
            raise UserError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        if self.seq_len < 8:
            raise UserError(f"--seq-len must be at least 8, got {self.seq_len}")
        if self.batch_size <= 0:
            raise UserError(f"--batch-size must be positive, got {self.batch_size}")
        if self.tokenizer is not None and not Path(self.tokenizer).is_dir():
            raise UserError(f"{self.tokenizer}: no such tokenizer directory")
        if not 0 < self.eval_fraction < 1:
            raise UserError(f"--eval-fraction must be in (0, 1), got {self.eval_fraction}")

    def train_config(self) -> TrainConfig:
        """The loop's settings."""
        return TrainConfig(
            lr=self.lr, weight_decay=self.weight_decay, warmup=self.warmup, schedule=self.schedule,
            max_steps=self.max_steps, max_time=parse_duration(self.max_time) if self.max_time else None,
            grad_accum=self.grad_accum, precision=self.precision, compile=self.compile,
            log_every=self.log_every, eval_every=self.eval_every, save_every=self.save_every,
            keep_last=self.keep_last, seed=self.seed, progress=self.progress,
        )


def build_model_config(cfg: PretrainConfig, vocab_size: int) -> BertConfig:
    """Preset or config file, then the `model` overrides; the vocabulary decides vocab_size."""
    if cfg.model_config:
        base = BertConfig.load(cfg.model_config).to_dict()
        base.update(cfg.model, vocab_size=vocab_size)
        config = BertConfig.from_dict(base, source=cfg.model_config)
    else:
        try:
            config = BertConfig.from_preset(cfg.preset, vocab_size=vocab_size, **cfg.model)
        except TypeError as err:
            raise UserError(f"model settings: {err}") from None
    if cfg.seq_len > config.max_position_embeddings:
        raise UserError(f"--seq-len {cfg.seq_len} is larger than the model's max_position_embeddings "
                        f"({config.max_position_embeddings})")
    return config


def load_or_train_tokenizer(cfg: PretrainConfig, dist: Distributed) -> Tokenizer:
    """The given tokenizer, or one trained on the corpus (by rank 0; the others wait and load it)."""
    if cfg.tokenizer:
        return Tokenizer.from_pretrained(cfg.tokenizer)
    out = Path(cfg.out)
    if (out / "vocab.txt").is_file() and cfg.resume:
        return Tokenizer.from_pretrained(out)
    if dist.is_main:
        print(f"training a {cfg.vocab_size}-token WordPiece vocabulary on the corpus", file=sys.stderr)
        train_tokenizer([Path(p) for p in cfg.corpus], vocab_size=cfg.vocab_size, cased=cfg.cased, out_dir=out)
    dist.barrier()
    return Tokenizer.from_pretrained(out)


def prepare_batch(instances: list, objective, pad_id: int, seed: int, index: int,
                  continuation: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """Collate instances and let the objective mask them (whole-word masking needs `continuation`).

    The masking is drawn from a generator seeded by (seed, batch index): fresh for every batch,
    yet the same on a resumed run, on any rank, at every evaluation.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
    batch = collate(instances, pad_id)
    if continuation is not None:
        batch["word_continuation"] = continuation[batch["input_ids"]] & ~batch["special_mask"]
    return objective.prepare(batch, generator)


def load_corpus(cfg: PretrainConfig, tokenizer: Tokenizer, dist: Distributed) -> TokenizedCorpus:
    """Tokenized shards of the corpus: rank 0 builds (or reuses) them, the other ranks then open them."""
    def build():
        return build_corpus([Path(p) for p in cfg.corpus], tokenizer, Path(cfg.cache_dir),
                                 doc_format=cfg.doc_format, skip_bad_lines=cfg.skip_bad_lines)

    corpus = build() if dist.is_main else None
    dist.barrier()
    return corpus if corpus is not None else build()


class PretrainingBatches:
    """Step -> this rank's micro-batches, a pure function of (seed, step): resumable and rank-splittable.

    Micro-batch m of the run is batch j = m % n of epoch m // n, where n is the number of
    batches in epoch 0 (instance counts vary a little between epochs; a shorter epoch wraps
    around). Step s uses micro-batches s*A*W ... s*A*W + A*W - 1 (A = grad_accum, W = world
    size); rank r takes every W-th, so one process with A = 2 sees exactly what two ranks with
    A = 1 see. Masking is drawn from a generator seeded by (seed, m): fresh for every batch,
    reproducible on resume.
    """

    def __init__(self, dataset: PretrainingDataset, objective, batch_size: int, grad_accum: int,
                 seed: int, pad_id: int, rank: int = 0, world_size: int = 1,
                 continuation: torch.Tensor | None = None):
        self.dataset, self.objective = dataset, objective
        self.batch_size, self.grad_accum = batch_size, grad_accum
        self.seed, self.pad_id = seed, pad_id
        self.rank, self.world_size = rank, world_size
        self.continuation = continuation
        self._epoch, self._instances, self._order = None, None, None
        self.batches_per_epoch = len(self.epoch_batches(0)[1])

    def epoch_batches(self, epoch: int) -> tuple[list, list[list[int]]]:
        """(instances, batch index lists) of one epoch, cached for the current epoch."""
        if self._epoch != epoch:
            self._instances = self.dataset.instances(epoch)
            self._order = make_batches(len(self._instances), self.batch_size, epoch, self.seed)
            if not self._order:
                raise UserError(f"the corpus gives {len(self._instances)} training sequences, fewer than one "
                                f"batch of {self.batch_size}; use more text or a smaller --batch-size")
            self._epoch = epoch
        return self._instances, self._order

    def micro_batch(self, index: int) -> dict[str, torch.Tensor]:
        """The prepared (collated and masked) micro-batch number `index` of the run."""
        instances, order = self.epoch_batches(index // self.batches_per_epoch)
        chosen = order[(index % self.batches_per_epoch) % len(order)]
        return prepare_batch([instances[i] for i in chosen], self.objective, self.pad_id, self.seed, index,
                             self.continuation)

    def __call__(self, step: int) -> list[dict[str, torch.Tensor]]:
        first = step * self.grad_accum * self.world_size
        return [self.micro_batch(first + k * self.world_size + self.rank) for k in range(self.grad_accum)]


def make_evaluator(dataset: PretrainingDataset, objective, batch_size: int, max_batches: int, seed: int,
                   pad_id: int, continuation: torch.Tensor | None):
    """module -> held-out metrics over up to `max_batches` batches of the eval documents.

    The instances and their masking are the same at every evaluation, so the curve is comparable.
    """
    instances = dataset.instances(0)
    if not instances:
        raise UserError("the held-out documents give no evaluation sequences; raise --eval-fraction")
    chunks = [instances[i:i + batch_size] for i in range(0, len(instances), batch_size)][:max_batches]

    def evaluate(module) -> dict:
        counts, loss_sum = {}, 0.0
        device = next(module.parameters()).device
        for index, chunk in enumerate(chunks):
            batch = prepare_batch(chunk, objective, pad_id, seed, index, continuation)
            out = module({k: v.to(device) for k, v in batch.items()})
            loss_sum += out.loss.item()
            for key, value in out.counts.items():
                counts[key] = counts.get(key, 0.0) + float(value)
        return {"loss": loss_sum / len(chunks), **metrics_from_counts(counts)}

    return evaluate


def accuracy_keys(objective: str) -> tuple[str, ...]:
    """The held-out metrics worth plotting for an objective."""
    return {"bert": ("mlm_accuracy", "nsp_accuracy"), "roberta": ("mlm_accuracy",),
            "albert": ("mlm_accuracy", "sop_accuracy"), "electra": ("mlm_accuracy", "rtd_auc"),
            "clm": ("lm_accuracy",)}[objective]


def run_pretraining(cfg: PretrainConfig) -> str:
    """Run a whole pre-training job; returns "completed" or "interrupted"."""
    cfg.validate()
    train_config = cfg.train_config()
    train_config.validate()
    dist = Distributed()
    out = Path(cfg.out)
    check_writable(out, needed_bytes=0)  # the Trainer checks the space once the model's size is known
    if not cfg.resume:
        check_no_earlier_run(out)
    tokenizer = load_or_train_tokenizer(cfg, dist)
    model_config = build_model_config(cfg, tokenizer.vocab_size)
    if dist.is_main:
        write_json_atomic(out / RESOLVED_CONFIG_NAME, {**dataclasses.asdict(cfg), "model_config_resolved": model_config.to_dict()})

    corpus = load_corpus(cfg, tokenizer, dist)
    train_docs, eval_docs = corpus.split(cfg.eval_fraction, cfg.seed)
    spec = OBJECTIVES[cfg.objective]
    datasets = [PretrainingDataset(corpus, docs, cfg.seq_len, spec.data_format, spec.pair_task,
                                        cfg.short_seq_prob, tokenizer.cls_token_id, tokenizer.sep_token_id, cfg.seed)
                for docs in (train_docs, eval_docs)]
    if dist.is_main:
        print(f"corpus: {corpus.num_documents:,} documents, {corpus.num_tokens:,} tokens "
              f"({len(train_docs):,} documents for training, {len(eval_docs):,} held out)"
              f"{', reused tokenized shards' if corpus.reused else ''}", file=sys.stderr)
        if corpus.skipped_lines:
            print(f"skipped {corpus.skipped_lines} line(s) that were not valid UTF-8", file=sys.stderr)

    torch.manual_seed(cfg.seed)
    objective = build_objective(cfg.objective, model_config, tokenizer.mask_token_id,
                                whole_word=cfg.whole_word_masking, max_predictions=cfg.max_predictions)
    continuation = torch.from_numpy(continuation_table(tokenizer)) if cfg.whole_word_masking else None
    train_batches = PretrainingBatches(datasets[0], objective, cfg.batch_size, cfg.grad_accum, cfg.seed,
                                       tokenizer.pad_token_id, dist.rank, dist.world_size, continuation)
    evaluate = make_evaluator(datasets[1], objective, cfg.batch_size, cfg.eval_batches, cfg.seed + 1,
                              tokenizer.pad_token_id, continuation)

    def save_model(module) -> None:
        module.model_to_save().save_pretrained(out)
        tokenizer.save_pretrained(out)

    trainer = Trainer(objective, train_config, out, train_batches, evaluate, save_model, dist)
    status = trainer.fit(resume=cfg.resume)
    if dist.is_main:
        plot_training_curves({cfg.objective: trainer.log.rows()}, out / "training_curves.png",
                             accuracy_keys=accuracy_keys(cfg.objective))
    return status
