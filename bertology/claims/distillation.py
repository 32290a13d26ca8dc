"""Claim 11: distillation beats training the small model directly (DistilBERT, Tang et al. 2019, TinyBERT).

Tang et al. (2019) distilled BERT-large fine-tuned on SST-2 (67k labels) into a one-layer
BiLSTM over its logits on the training sentences plus noisy copies of them, and beat the
same BiLSTM trained on the labels by about 4 points; DistilBERT (a 6-layer student of
BERT-base, distilled in pre-training over BooksCorpus and Wikipedia) kept 97% of GLUE, and
TinyBERT's task-specific distillation with data augmentation beat fine-tuning its 4-layer
student. README's "Distillation" section measured it here once on all 67k SST-2 labels:
teacher all-MiniLM-L6-v2 0.899, the mini student pre-trained here fine-tuned 0.828 against
0.856 distilled with 4 noisy copies of each sentence.

Here, as a claim over seeds at a scale that fits 90 minutes: 3,000 random SST-2 training
sentences (the same for every run), scored on the full dev set (872). The teacher is
all-MiniLM-L6-v2 (real pre-training at scale) fine-tuned on their labels (3 epochs, lr 1e-4);
`--model` makes another model pre-trained elsewhere the teacher, at the same rate.
There is one teacher, as in the papers: it is a fixed input of the distillation (like the
pre-trained weights are), so the seeds vary what the comparison is about, the student's
head, data order and noisy copies; a teacher per seed would cost three teacher runs and mix
the teacher's own seed spread into the students'. The student is the mini BERT pre-trained
here by masked LM (and, as a second pair, the same architecture from random weights),
either (a) fine-tuned on the 3,000 labels (5 epochs, the best epoch on dev kept), or (b)
distilled from the teacher over the same 3,000 sentences plus up to 4 noisy copies of each
(Tang et al.'s masking, word replacement and n-gram sampling; about 15k texts), never seeing
a label (KL divergence at temperature 2, 2 epochs, the best epoch kept). Both students use
lr 3e-4 and 64-token rows; the fine-tuned one gets more epochs over its smaller set (470
steps against the distilled one's 940), keeping its best, so that neither stops short.

Full run, estimated from the CPU time of one run of each kind at this scale on this machine
(one core): the teacher 3.8 minutes, a student fine-tuned 2.5, a student distilled
5.5 (the teacher's labelling of the 15k texts, about 1 minute, is cached and shared by the
second student); in all about 49 minutes of one core (teacher 4, fine-tuned students 15,
distilled students 30), after the shared mini MLM's pre-training (about 20 minutes with
both cores, cached for every claim): some 55-70 minutes from a cold cache with both cores.
--quick: the tiny BERT, 100 sentences, 2 noisy copies, one epoch, a 200-sentence dev subset.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from pathlib import Path

from ..files import loads_json, write_text_atomic
from ..plots import plot_seed_bars
from ..recipes.distill import DistillConfig, run_distillation
from ..recipes.task_training import summarize
from ..tasks.readers import TASKS, TaskSpec, task_files
from ..tasks.splits import subset
from .experiment import ClaimReport, Experiment, seed_values, verdict

LABELS, QUICK_LABELS = 3000, 100
QUICK_DEV = 200  # --quick scores a fixed subset of the dev set: every run is evaluated on it, often
AUGMENT, QUICK_AUGMENT = 4, 2
TEACHER_RUN = {"epochs": 3, "lr": 1e-4}  # README's rate for all-MiniLM-L6-v2 on SST-2 (kept for a --model)
STUDENT_LR = 3e-4  # README's students' rate at this size
FINETUNE_EPOCHS, DISTILL_EPOCHS = 5, 2  # the distilled student's transfer set is ~5x the labelled set
MAX_SEQ_LEN = 64  # SST-2's sentences fit (1 in 2,000 is longer)


def run(experiment: Experiment) -> ClaimReport:
    """The teacher, then each student fine-tuned on the labels and distilled from the teacher, over the seeds."""
    quick = experiment.quick
    labels = QUICK_LABELS if quick else LABELS
    augment = QUICK_AUGMENT if quick else AUGMENT
    data = task_subset(experiment, "glue/SST-2", "sst2", train=labels, dev=QUICK_DEV if quick else None)
    teacher, teacher_accuracy = teacher_model(experiment, data, epochs=1 if quick else TEACHER_RUN["epochs"])
    mlm = experiment.shared_mlm()
    students = {"student pre-trained here": ("pretrained", mlm),
                "student from random weights": ("random", experiment.random_weights(mlm))}
    finetune_epochs, distill_epochs = (1, 1) if quick else (FINETUNE_EPOCHS, DISTILL_EPOCHS)
    results: dict[str, dict[str, list[float]]] = {}
    for name, (slug, student) in students.items():
        finetuned = experiment.finetuned(f"{slug}-finetuned", model=str(student), task="sst2", data=str(data),
                                         epochs=finetune_epochs, lr=STUDENT_LR, max_seq_len=MAX_SEQ_LEN)
        distilled = distilled_over_seeds(experiment, f"{slug}-distilled", teacher=str(teacher), student=str(student),
                                         data=str(data), augment=augment, epochs=distill_epochs, lr=STUDENT_LR,
                                         cache_dir=str(experiment.cache / "distill"))
        results[name] = {"fine-tuned on the labels": seed_values(finetuned, "accuracy"),
                         "distilled from the teacher": seed_values(distilled, "accuracy")}
    transfer = loads_json((experiment.out / "runs" / "pretrained-distilled" / f"seed-{experiment.seeds[0]}" /
                           "distill_config.json").read_text(encoding="utf-8"))["transfer_examples"]
    rows = [{"model": f"teacher: {experiment.reference_name}", "trained on": f"{labels:,} labels",
             "SST-2 dev accuracy": teacher_accuracy}]
    for name, pair in results.items():
        rows.append({"model": f"{name}, fine-tuned", "trained on": f"{labels:,} labels",
                     "SST-2 dev accuracy": pair["fine-tuned on the labels"]})
        rows.append({"model": f"{name}, distilled", "trained on": f"the teacher's outputs on {transfer:,} texts",
                     "SST-2 dev accuracy": pair["distilled from the teacher"]})
    # group labels on two lines: "student pre-trained here" beside "student from random weights" would overlap
    plot = plot_seed_bars({"teacher": {f"teacher ({experiment.reference_name})": teacher_accuracy},
                           **{name.replace(" ", "\n", 1): pair for name, pair in results.items()}},
                          experiment.out / "distillation.png", ylabel="SST-2 dev accuracy",
                          title=f"Distilled vs fine-tuned on the same {labels:,} sentences")
    verdicts = [verdict(f"the {name} distilled from the teacher beats it fine-tuned on the labels",
                        f"{name}, distilled", pair["distilled from the teacher"], f"{name}, fine-tuned",
                        pair["fine-tuned on the labels"], "accuracy") for name, pair in results.items()]
    best = max(v for pair in results.values() for v in pair["distilled from the teacher"])
    return ClaimReport(
        name="distillation", title="Claim 11: distillation beats training the small model directly",
        paper="Tang et al. (2019): BERT-large fine-tuned on SST-2's 67k labels, distilled into a 1-layer BiLSTM over "
              "the training sentences plus noisy copies, beat the same BiLSTM trained on the labels by 4 points "
              "(GLUE test accuracy 90.7 vs 86.7); DistilBERT (6 layers, distilled from BERT-base while pre-training "
              "on BooksCorpus + Wikipedia) kept 97% of BERT-base's GLUE dev score; TinyBERT (4 layers, distilled in "
              "pre-training and on augmented task data) beat the same small BERT pre-trained and fine-tuned directly.",
        scale=experiment.scale_note() + f" SST-2: {labels:,} random training sentences, the same for every run; dev "
              + (f"subset of {QUICK_DEV} sentences" if quick else "set (872 sentences)") + f". One teacher: "
              f"{experiment.reference_words()} fine-tuned on those labels (seed {experiment.seeds[0]}). Students: the "
              f"BERT pre-trained here and the same architecture from random weights, fine-tuned on the labels ({finetune_epochs} "
              f"epochs) or distilled from the teacher over the sentences plus up to {augment} noisy copies of each "
              f"({transfer:,} texts, {distill_epochs} epochs, KL at temperature 2, no labels); lr {STUDENT_LR:g}, "
              f"rows of at most {MAX_SEQ_LEN} tokens, best epoch on dev.",
        columns=["model", "trained on", "SST-2 dev accuracy"], rows=rows, verdicts=verdicts, plots=[str(plot)],
        notes=[f"the best distilled student keeps {best / teacher_accuracy[0]:.1%} of the teacher's accuracy"])


def teacher_model(experiment: Experiment, data: Path, epochs: float) -> tuple[Path, list[float]]:
    """The teacher: the reference model (all-MiniLM-L6-v2, or --model) fine-tuned once (the first
    seed) on the task subset; its folder and dev accuracy (one value). Kept in runs/teacher and read
    back like every fine-tuning run."""
    once = dataclasses.replace(experiment, seeds=experiment.seeds[:1])
    summary = once.finetuned("teacher", model=str(experiment.reference), task="sst2", data=str(data), epochs=epochs,
                             lr=TEACHER_RUN["lr"], max_seq_len=MAX_SEQ_LEN)
    return experiment.out / "runs" / "teacher", seed_values(summary, "accuracy")


def distilled_over_seeds(experiment: Experiment, name: str, **settings) -> dict:
    """Distil over the experiment's seeds (DistillConfig settings: teacher, student, data, ...), one
    student per seed in runs/<name>/seed-<seed>; returns the median of each dev metric with its
    range and every seed's results under "runs", like `Experiment.finetuned` (and read back as it is)."""
    def run(folder: Path) -> dict:
        runs = [{"seed": seed, **run_distillation(DistillConfig(out=str(folder / f"seed-{seed}"), seed=seed,
                                                                progress=False, learning_curve=not experiment.quick,
                                                                device=experiment.device, **settings))}
                for seed in experiment.seeds]
        return summarize(TASKS[runs[0]["task"]], runs)

    return experiment.seed_runs(name, "distilling", run)


def task_subset(experiment: Experiment, folder: str, task: str, **counts: int | None) -> Path:
    """A copy of a task's data folder in which some splits are a random subset of their examples
    (`train=3000`, `dev=200`; None keeps a split whole), drawn once with seed 0: every run that
    reads the folder, fine-tuning or distillation, whatever its seed, sees the same examples.

    Kept in the cache under a name that hashes the content. GLUE TSV files (examples are lines
    after the header) and CoNLL files (examples are blank-line-separated sentences) are handled.
    """
    spec = TASKS[task]
    files = task_files(spec, experiment.path(folder), ["train", *spec.eval_splits])
    texts = {}
    for split, path in files.items():
        text = path.read_text(encoding="utf-8")
        texts[path.name] = text if counts.get(split) is None else subset_text(text, spec, counts[split])
    digest = hashlib.sha256("\0".join(f"{name}\0{text}" for name, text in sorted(texts.items())).encode())
    out = experiment.cache / "claims" / f"{task}-subset-{digest.hexdigest()[:16]}"
    if not out.exists():
        partial = out.with_name(out.name + ".partial")
        for name, text in texts.items():
            write_text_atomic(partial / name, text)
        os.replace(partial, out)
    return out


def subset_text(text: str, spec: TaskSpec, count: int) -> str:
    """`count` random examples (seed 0, in file order) of a GLUE or CoNLL file's text, in the same format."""
    if spec.format == "glue":
        lines = text.splitlines(keepends=True)
        header = lines[:1] if spec.columns.text_a in lines[0].rstrip("\r\n").split("\t") else []
        return "".join(header + subset([line for line in lines[len(header):] if line.strip()], count, 0))
    if spec.format == "conll":
        blocks = ("\n".join(line for line in block.splitlines() if line.strip() and not line.startswith("-DOCSTART-"))
                  for block in re.split(r"\n[ \t]*\n", text))
        sentences = [block for block in blocks if block]
        return "\n\n".join(subset(sentences, count, 0)) + "\n"
    raise ValueError(f"task_subset reads GLUE and CoNLL files, not {spec.format}")
