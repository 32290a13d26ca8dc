"""Distillation: a fine-tuned teacher's soft targets train a small, fast student.

Hinton et al.'s knowledge distillation as DistilBERT, TinyBERT and Tang et al. (2019) apply
it to BERT. The teacher labels a transfer set of unlabeled text once: its outputs (one
vector per sentence or pair, one per word for tagging) are cached on disk, keyed by the
teacher's weights and the text, so every later student run reuses them. The student
learns to match them, by temperature-scaled KL divergence between the softened
distributions (times T^2, so the gradients keep their size as T changes) or by MSE between
the logits; optionally the true labels are mixed in where the text has them, and a
hidden-state loss pulls each student layer towards a teacher layer through a learned
projection (needed when the widths differ). Regression students match the teacher's score
by MSE. The student is a pre-trained encoder, a random one at a preset size, or, as DistilBERT
(Sanh et al. 2019) builds it, the teacher's own encoder (or the pre-trained one) cut to evenly
spaced layers; it is saved as a fine-tuned model, so evaluate, predict, export and serve take it
as it is."""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from ..config import TaskConfig, TaskFiles, override, setting
from ..data.tokenizer import MASK, Tokenizer
from ..errors import UserError
from ..files import atomic_path, cache_root, write_json_atomic
from ..inference.modeldir import describe_task, open_model_dir
from ..inference.predict import run_rows
from ..inference.runners import load_finetuned
from ..models import spec_for
from ..models.base import SIZES, evenly_spaced_layers
from ..ops import IGNORE_INDEX
from ..tasks.inputs import (
    Encoded,
    InputSettings,
    cache_key,
    collate,
    encode,
    example_logits,
    word_logits,
)
from ..tasks.readers import TaskSpec, TokenExample
from ..tasks.splits import read_inputs, read_split, subset
from ..training.loop import (
    StepOutput,
    Trainer,
    accuracy_counts,
    autocast,
    check_resumed_record,
    resolve_precision,
)
from .task_training import (
    BestModel,
    EpochBatches,
    EpochLoop,
    RunData,
    check_output_dir,
    epoch_train_config,
    evaluate_splits,
    fit_and_finish,
    load_task_model,
)

CONFIG_NAME = "distill_config.json"


LOSSES = ("kl", "mse")


@dataclass
class DistillConfig(TaskFiles, EpochLoop):
    """Distillation: the teacher, the transfer set, the student and the loss."""

    teacher: str = setting("", required=True, metavar="MODEL", model_dir=True,
                           help="the fine-tuned teacher's model directory (its task and labels are the student's)")
    out: str = setting("", required=True, metavar="DIR", output="dir",
                       help="output directory: the best student, eval_results.json, metrics.jsonl, learning_curve.png")
    # the transfer set: text the teacher labels
    train_text: bool = setting(True, help="the task's training text joins the transfer set (its labels are used "
                                          "only with --label-weight)")
    unlabeled: list[str] = setting([], metavar="FILE", help="more transfer text: one example per line, a tab between "
                                                            "the two texts of a pair (default: none)")
    max_train_examples: int | None = setting(None, positive=True,
                                             help="train on a reproducible random subset of this many transfer "
                                                  "examples (default: all)")
    augment: int = setting(0, minimum=0, metavar="N",
                           help="add N noisy copies of each transfer example for the teacher to label (Tang et al. "
                                "2019: words masked or replaced, n-grams sampled)")
    # the student
    student: str | None = setting(None, metavar="MODEL", model_dir=True,
                                  help="a pre-trained encoder directory or installed model's name (default: random weights at "
                                       "--preset)")
    preset: str = setting("mini", choices=SIZES, help="the size of a randomly initialised student")
    student_layers: int | None = setting(None, positive=True, metavar="N",
                                         help="DistilBERT's student: --student, or without it the teacher's own "
                                              "encoder, cut to N evenly spaced layers under a fresh head; half "
                                              "keeps layers 0, 2, 4, ... (default: no cut)")
    # the loss
    loss: str = setting("kl", choices=LOSSES, help="kl: KL divergence between the softened distributions (times "
                                                   "T^2); mse: mean squared error between the logits")
    temperature: float = setting(2.0, positive=True, help="the softening temperature T of the kl loss")
    label_weight: float = setting(0.0, minimum=0, help="weight of the true labels' loss where the text has labels "
                                                       "(the teacher's gets 1 minus this)")
    hidden_weight: float = setting(0.0, minimum=0, help="weight of the hidden-state loss: MSE between each student "
                                                        "layer and its teacher layer (0: off)")
    lr: float = override(EpochLoop, "lr", 1e-4)  # a small student learns faster than fine-tuning's 5e-5
    max_seq_len: int | None = setting(None, positive=True, help="tokens per row (default: the teacher's)")
    cache_dir: str | None = setting(None, metavar="DIR", output="dir", help="where the teacher's targets are kept "
                                                              "(default: $BERTOLOGY_CACHE/distill)")

    def __post_init__(self) -> None:
        for name in ("teacher", "out", "data", "train_file", "dev_file", "student", "cache_dir"):  # Paths from Python
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, str(value))
        self.unlabeled = [str(path) for path in self.unlabeled]

    def validate(self) -> None:
        """Check everything that needs no file reading."""
        super().validate()
        if not Path(self.teacher).is_dir():
            raise UserError(f"{self.teacher}: no such teacher model directory")
        teacher = open_model_dir(self.teacher)
        if teacher.spec.student_config is None:  # the student copies the teacher's config
            raise UserError(f"{self.teacher}: model family {teacher.family.name}; distill's teacher is a fine-tuned "
                            "BERT-family encoder")
        if self.student is not None and not Path(self.student).is_dir():
            raise UserError(f"{self.student}: no such student model directory")
        if self.student_layers is not None and self.student is not None and (
                student := open_model_dir(self.student)).spec.keep_layers is None:
            raise UserError(f"--student-layers cuts a BERT-family encoder; {self.student} is model family "
                            f"{student.family.name}")
        if self.label_weight > 1:
            raise UserError(f"--label-weight must be at most 1, got {self.label_weight}")
        if not self.train_text and not self.unlabeled:
            raise UserError("no transfer text: give --unlabeled files, or keep the task's training text")
        if (self.train_text or self.label_weight > 0) and not (self.data or self.train_file):
            raise UserError("the task's training text needs --data (or --train-file); "
                            "or use only --unlabeled text with --no-train-text")

    def task_files(self) -> TaskConfig:
        """Where this task's splits are (read by the same readers and checks as fine-tuning)."""
        return TaskConfig(task="distill", data=self.data, train_file=self.train_file, dev_file=self.dev_file)


def read_transfer_set(cfg: DistillConfig, spec: TaskSpec, mask: str = MASK) -> list:
    """The examples the teacher labels: the task's training text and the unlabeled files (and with
    --augment their noisy copies, masked words written `mask`: the teacher's mask token)."""
    examples = read_split(cfg.task_files(), spec, "train") if cfg.train_text else []
    for path in cfg.unlabeled:
        if not Path(path).is_file():
            raise UserError(f"{path}: no such file")
        examples.extend(dataclasses.replace(e, label=None) if hasattr(e, "label") else dataclasses.replace(e, tags=None)
                        for e in read_inputs(spec, Path(path)))
    if not examples:
        raise UserError("the transfer set is empty")
    examples = subset(examples, cfg.max_train_examples, cfg.seed)
    return examples + augmented(examples, cfg.augment, cfg.seed, mask) if cfg.augment else examples


# Tang et al. (2019), "Distilling Task-Specific Knowledge from BERT into Simple Neural Networks":
# each word is masked with p 0.1 or replaced with p 0.1, then with p 0.25 only an n-gram (n <= 5)
# is kept. They replace a word by one of the same part of speech; lacking a tagger, we draw
# from the distinct words of the transfer set.
MASK_P, REPLACE_P, NGRAM_P, MAX_NGRAM = 0.1, 0.1, 0.25, 5


def noisy_words(words: list[str], rng: np.random.Generator, vocabulary: list[str], mask: str = MASK) -> list[str]:
    """One noisy copy of a word list (see MASK_P and the comment above it); a masked word becomes `mask`."""
    draws = rng.random(len(words))
    out = [mask if d < MASK_P else vocabulary[rng.integers(len(vocabulary))] if d < MASK_P + REPLACE_P else w
           for w, d in zip(words, draws)]
    if len(out) > 1 and rng.random() < NGRAM_P:
        n = int(rng.integers(1, min(MAX_NGRAM, len(out)) + 1))
        start = int(rng.integers(0, len(out) - n + 1))
        out = out[start: start + n]
    return out


def augmented(examples: list, copies: int, seed: int, mask: str = MASK) -> list:
    """Up to `copies` noisy, unlabelled copies of every example (both texts of a pair; a tagged
    sentence's words), for the teacher to label, masked words written `mask` (BERT's [MASK], RoBERTa's
    <mask>); copies that came out unchanged are dropped."""
    rng = np.random.default_rng([seed, copies])
    if isinstance(examples[0], TokenExample):
        vocabulary = sorted({w for e in examples for w in e.words})
        copies_of = [dataclasses.replace(e, guid=f"{e.guid}-aug{k}", words=noisy_words(e.words, rng, vocabulary, mask),
                                         tags=None) for k in range(copies) for e in examples]
        return [c for c, e in zip(copies_of, examples * copies) if c.words and c.words != e.words]
    vocabulary = sorted({w for e in examples for text in (e.text_a, e.text_b) if text for w in text.split()})

    def noisy(text: str | None) -> str | None:
        return " ".join(noisy_words(text.split(), rng, vocabulary, mask)) or text if text else text

    copies_of = [dataclasses.replace(e, guid=f"{e.guid}-aug{k}", text_a=noisy(e.text_a), text_b=noisy(e.text_b),
                                     label=None) for k in range(copies) for e in examples]
    return [c for c, e in zip(copies_of, examples * copies) if (c.text_a, c.text_b) != (e.text_a, e.text_b)]


@torch.no_grad()
def teacher_targets(teacher: nn.Module, tokenizer: Tokenizer, spec: TaskSpec, settings: InputSettings, examples: list,
                    teacher_dir: str, cache: Path | None, batch_size: int, precision: str) -> list[np.ndarray]:
    """The teacher's logits for every example: (outputs,) for a sentence or pair (the mean
    over its windows), (words, tags) for a tagged sentence (NaN rows for words it did not see).

    Computed once and kept in `cache` (safetensors); a later run over the same text with the
    same teacher reads them back.
    """
    encoded = encode(spec, examples, tokenizer, settings, training=False)
    path = cache / f"{cache_key(teacher_dir, encoded)}.safetensors" if cache is not None else None
    if path is not None and path.is_file():
        stored = load_file(str(path))
        print(f"teacher targets for {len(examples):,} examples read from {path}", file=sys.stderr)
        return [row.numpy() for row in torch.split(stored["logits"], stored["lengths"].tolist())]
    print(f"the teacher labels {len(examples):,} transfer examples ...", file=sys.stderr)
    outputs = run_rows(teacher, encoded, spec, tokenizer.pad_token_id, batch_size, precision, progress=True)
    if spec.kind == "sequence":
        targets = [row[None].astype(np.float32) for row in example_logits(encoded, outputs)]
    else:
        num_tags = outputs[0].shape[-1]
        targets = [np.stack([np.full(num_tags, np.nan) if w is None else w for w in words]).astype(np.float32)
                   if words else np.zeros((0, num_tags), np.float32)
                   for words in word_logits(encoded, outputs, examples)]
    if path is not None:
        with atomic_path(path) as tmp:
            save_file({"logits": torch.from_numpy(np.concatenate(targets)),
                       "lengths": torch.tensor([len(t) for t in targets])}, str(tmp))
    return targets


def make_student(cfg: DistillConfig, spec: TaskSpec, teacher_tokenizer: Tokenizer,
                 teacher_config: Any) -> tuple[nn.Module, Tokenizer]:
    """A pre-trained encoder with a fresh task head, or a randomly initialised one at `cfg.preset`
    that shares the teacher's vocabulary.

    With `cfg.student_layers` = N, DistilBERT's student (Sanh et al. 2019): the pre-trained encoder,
    or without one the teacher's own encoder, cut to N evenly spaced layers (`evenly_spaced_layers`:
    half keeps 0, 2, 4, ...), embeddings and pooler copied, under a fresh task head. Fresh even when
    cut from the teacher: DistilBERT distilled the pre-training LM, not a task, so no task head came
    from its teacher (and the teacher's head read its last layer, which a cut to fewer layers drops).
    """
    num_labels = len(spec.labels) if spec.labels else 1
    id2label = dict(enumerate(spec.labels)) if spec.labels else None
    if cfg.student_layers is not None:
        source = open_model_dir(cfg.student or cfg.teacher)
        full = source.spec.heads[spec.kind].from_language_model(source.path, num_labels, id2label, config=source.config)
        total = source.spec.feature_layers(full.config)
        if cfg.student_layers > total:
            raise UserError(f"--student-layers {cfg.student_layers}: {source.path} has {total} layers")
        tokenizer = teacher_tokenizer if cfg.student is None else source.tokenizer()
        return source.spec.keep_layers(full, evenly_spaced_layers(cfg.student_layers, total)), tokenizer
    if cfg.student is not None:
        return load_task_model(cfg.student, spec), Tokenizer.from_pretrained(cfg.student)
    family = spec_for(teacher_config)
    config = family.student_config(teacher_config, cfg.preset, num_labels=num_labels, id2label=id2label)
    return family.heads[spec.kind](config), teacher_tokenizer


def same_tokenization(a: Tokenizer, b: Tokenizer) -> bool:
    """Whether two tokenizers turn any text into the same ids (same pieces, same normalisation)."""
    return a.fingerprint == b.fingerprint


def layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """The teacher layer each student layer learns from: evenly spaced, the last to the last (TinyBERT)."""
    return [math.ceil((i + 1) * teacher_layers / student_layers) for i in range(student_layers)]


class DistillModule(nn.Module):
    """The student as the loop trains it: forward(batch) -> the mixed distillation loss.

    A batch carries the inputs, the teacher's soft targets (`soft`, with `soft_mask` for
    tagging), the true labels where known (`labels`, IGNORE_INDEX / NaN elsewhere) and, with a
    hidden-state loss, the teacher's mapped layers (`teacher_hidden`).
    """

    def __init__(self, student: nn.Module, spec: TaskSpec, cfg: DistillConfig, teacher_width: int | None):
        super().__init__()
        self.student = student
        self.kind, self.regression = spec.kind, spec.regression
        self.loss_name, self.temperature = cfg.loss, cfg.temperature
        self.label_weight, self.hidden_weight = cfg.label_weight, cfg.hidden_weight
        width = spec_for(student.config).feature_width(student.config)
        # The projection only trains the student's layers; it is not part of the saved student.
        self.projection = nn.Linear(width, teacher_width) if teacher_width not in (None, width) else None

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """(1 - label_weight) x soft loss + label_weight x label loss + hidden_weight x hidden loss."""
        out = self.student(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                           output_hidden_states=self.hidden_weight > 0)
        all_logits = out.logits.float()
        logits, soft = all_logits, batch["soft"]
        if self.kind == "token":  # only the positions the teacher labelled (each word's first piece)
            logits, soft = all_logits[batch["soft_mask"]], soft[batch["soft_mask"]]
        loss = (1 - self.label_weight) * self.soft_loss(logits, soft)
        if self.label_weight > 0:
            loss = loss + self.label_weight * self.label_loss(all_logits, batch["labels"])
        if self.hidden_weight > 0:
            loss = loss + self.hidden_weight * self.hidden_loss(out.hidden_states, batch)
        counts = {} if self.regression else accuracy_counts("teacher_agreement", logits.argmax(-1), soft.argmax(-1))
        return StepOutput(loss, counts)

    def soft_loss(self, logits: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        """KL(teacher_T || student_T) x T^2, or MSE between logits (always for regression)."""
        if self.regression or self.loss_name == "mse":
            return F.mse_loss(logits, soft)
        t = self.temperature
        return F.kl_div(F.log_softmax(logits / t, -1), F.log_softmax(soft / t, -1), log_target=True,
                        reduction="batchmean") * t * t

    def label_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy (MSE for regression) on the examples that have a true label."""
        if self.regression:
            known = ~labels.isnan()
            return F.mse_loss(logits.view(-1)[known], labels[known]) if known.any() else logits.sum() * 0
        if not (labels != IGNORE_INDEX).any():
            return logits.sum() * 0
        return F.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=IGNORE_INDEX)

    def hidden_loss(self, student_states: tuple[torch.Tensor, ...], batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """MSE between each (projected) student layer and its teacher layer, over real tokens."""
        real = batch["attention_mask"].bool()
        losses = []
        for layer, target in zip(student_states[1:], batch["teacher_hidden"].unbind(0)):
            mapped = self.projection(layer) if self.projection is not None else layer
            losses.append(F.mse_loss(mapped.float()[real], target.float()[real]))
        return torch.stack(losses).mean()


def row_targets(spec: TaskSpec, encoded: Encoded, targets: list[np.ndarray], pad_id: int):
    """A function rows -> the batch of inputs, soft targets and true labels for the student's rows."""
    regression = spec.regression

    def make_batch(rows: list[int]) -> dict[str, torch.Tensor]:
        features = [encoded.features[i] for i in rows]
        batch = collate(features, "none", pad_id)
        if spec.kind == "sequence":
            batch["soft"] = torch.from_numpy(np.concatenate([targets[f.example] for f in features]))
            if regression:
                batch["labels"] = torch.tensor([np.nan if f.label is None else f.label for f in features], dtype=torch.float)
            else:
                batch["labels"] = torch.tensor([IGNORE_INDEX if f.label is None else f.label for f in features])
            return batch
        width = batch["input_ids"].shape[1]
        soft = torch.zeros(len(rows), width, targets[0].shape[-1])  # (words, tags), even with no words
        labels = torch.full((len(rows), width), IGNORE_INDEX)
        for j, f in enumerate(features):
            for t, word in enumerate(f.word_ids):
                if word is not None:
                    soft[j, t] = torch.from_numpy(targets[f.example][word])
            labels[j, : len(f.token_labels)] = torch.tensor(f.token_labels)
        batch["soft"], batch["labels"] = soft, labels
        batch["soft_mask"] = ~soft.isnan().any(-1) & torch.tensor(
            [[w is not None for w in f.word_ids] + [False] * (width - len(f.word_ids)) for f in features])
        batch["soft"] = batch["soft"].nan_to_num(0.0)
        return batch

    return make_batch


def with_teacher_hidden(make_batch, teacher: nn.Module, layers: list[int], precision: str):
    """Wrap `make_batch` to add the teacher's chosen hidden layers (computed now, without gradients)."""
    device = next(teacher.parameters()).device

    @torch.no_grad()
    def make(rows: list[int]) -> dict[str, torch.Tensor]:
        batch = make_batch(rows)
        with autocast(precision, device):
            states = spec_for(teacher.config).hidden_states(
                getattr(teacher, type(teacher).backbone), batch["input_ids"].to(device),
                batch["attention_mask"].to(device), batch["token_type_ids"].to(device))
        batch["teacher_hidden"] = torch.stack([states[i] for i in layers]).cpu()
        return batch

    return make


def run_distillation(cfg: DistillConfig) -> dict:
    """Distil the teacher into the student; write the student, its dev results and the curves."""
    cfg.validate()
    out = Path(cfg.out)
    check_output_dir(out, cfg.resume)
    teacher, teacher_tokenizer, spec, settings = load_finetuned(cfg.teacher, cfg.device)
    if spec.kind in ("span", "wic"):
        raise UserError(f"{cfg.teacher}: distillation covers sentence, pair and token tasks, not {spec.kind} "
                        f"({spec.name})")
    if cfg.max_seq_len is not None:
        settings = dataclasses.replace(settings, max_seq_len=cfg.max_seq_len)
    torch.manual_seed(cfg.seed)
    student, tokenizer = make_student(cfg, spec, teacher_tokenizer, teacher.config)
    if cfg.hidden_weight > 0 and not same_tokenization(tokenizer, teacher_tokenizer):
        raise UserError("hidden_weight > 0 needs a student with the teacher's vocabulary (positions must line up)")
    describe_task(student.config, spec, settings)

    transfer = read_transfer_set(cfg, spec, teacher_tokenizer.special_tokens.get("mask", MASK))
    dev = {split: read_split(cfg.task_files(), spec, split) for split in spec.eval_splits} if (cfg.data or cfg.dev_file) else {}
    cache = Path(cfg.cache_dir) if cfg.cache_dir else cache_root() / "distill"
    targets = teacher_targets(teacher, teacher_tokenizer, spec, settings, transfer, cfg.teacher, cache,
                              cfg.eval_batch_size, cfg.precision)
    encoded = encode(spec, transfer, tokenizer, settings, training=True)
    teacher_scores = evaluate_splits(teacher, RunData(spec, teacher_tokenizer, settings, [], dev, encoded), cfg) if dev else {}
    if cfg.resume:  # before the record is written again: the earlier run's settings, or a one-line refusal
        check_resumed_record(out / CONFIG_NAME, dataclasses.asdict(cfg))
    write_json_atomic(out / CONFIG_NAME, {**dataclasses.asdict(cfg), "task_spec": dataclasses.asdict(spec),
                                          "transfer_examples": len(transfer), "student_parameters": student.num_parameters(),
                                          "teacher_parameters": teacher.num_parameters(),
                                          **{f"teacher_{k}": v for k, v in teacher_scores.items()}})

    make_batch = row_targets(spec, encoded, targets, tokenizer.pad_token_id)
    teacher_width = None
    if cfg.hidden_weight > 0:
        student_family, teacher_family = spec_for(student.config), spec_for(teacher.config)
        layers = layer_map(student_family.feature_layers(student.config), teacher_family.feature_layers(teacher.config))
        device = next(teacher.parameters()).device
        make_batch = with_teacher_hidden(make_batch, teacher, layers, resolve_precision(cfg.precision, device))
        teacher_width = teacher_family.feature_width(teacher.config)
    else:
        del teacher  # its targets are cached; free the memory for the student
    batches = EpochBatches([len(f.input_ids) for f in encoded.features], cfg.batch_size, cfg.seed, make_batch)
    data = RunData(spec, tokenizer, settings, transfer, dev, encoded)
    best = BestModel(out, data, cfg.resume, distilled_from=cfg.teacher,
                     **{f"teacher_{k}": v for k, v in teacher_scores.items()})
    module = DistillModule(student, spec, cfg, teacher_width)

    def evaluate(module: DistillModule) -> dict:
        if not dev:  # nothing to score against: keep the latest student
            module.student.save_pretrained(out)
            tokenizer.save_pretrained(out)
            return {}
        return best.update(evaluate_splits(module.student, data, cfg), module.student, trainer.step)

    trainer = Trainer(module, epoch_train_config(cfg, batches.steps_per_epoch, cfg.seed, cfg.precision), out,
                      batches, evaluate)
    fit_and_finish(trainer, cfg, spec, out)
    return best.results or {"task": spec.name, "transfer_examples": len(transfer)}
