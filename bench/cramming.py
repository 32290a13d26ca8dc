"""Cramming's changes at laptop budgets (issue 37): the ablation, the two acceptance experiments and
the results page, from runs cached by content and resumable.

Geiping and Goldstein (2022), "Cramming: Training a Language Model on a Single GPU in One Day",
asked which changes let a BERT learn more per second of pre-training. Here each change runs alone
over a baseline, at equal wall time (a step budget per variant, converted from its own step time
measured before any run), in two tracks:

- demo: the `bertology demo` setting: the tiny BERT on the standard library's documentation (its
  6,000-piece vocabulary), the demo's pre-training (RoBERTa's objective, 64-token rows, batch 32,
  lr 1e-3) for the time its 4,000 steps take (210 s on 2 free cores), then the demo's task (which
  part of the standard library a docstring comes from, 180 labels), 3 pre-training seeds;
- shared: the claims' corpus (WikiText-2 valid + the 40 Gutenberg books, all-MiniLM-L6-v2's
  vocabulary), the tiny BERT of claim 3's masked-LM row (128-token rows) for its 5 minutes, then
  SST-2 with 2,000 labels (the claims' GLUE recipe), pre-training seed 0, fine-tuning seeds 0-2.

The changes that pay by the rule fixed in PLAN.md make the recipe (`RECIPES["cramming"]` of
bertology/recipes/pretrain.py is then set from it by hand, and said so in the page); then the
acceptance runs: 30 minutes of pre-training on the shared corpus, SST-2 / MRPC / CoNLL-2003 beside
the random-weights twin and word2vec trained for the same 30 minutes.

    python bench/cramming.py prepare --runs DIR   # data, vocabularies, tokenized corpora, TF-IDF
    python bench/cramming.py time --runs DIR      # each variant's step time (2 threads), then the plan
    python bench/cramming.py run --runs DIR       # run the plan's jobs (several workers may share DIR)
    python bench/cramming.py evaluate --runs DIR  # the demo-track models' MLM accuracy on the dev docstrings
    python bench/cramming.py diagnose --runs DIR  # why pre-training barely pays: fine-tuning budgets, frozen features
    python bench/cramming.py report --runs DIR    # docs/results/pretraining-recipe.md and -plan.md from DIR

`--smoke` runs every kind of job at a toy scale (seconds of pre-training, a few examples, one seed)
into a runs folder of its own, to check the code before hours of runs.

Every job writes DIR/results/<job>.json when done; a job that dies resumes from its checkpoints (the
pre-trainings) or restarts (a fine-tuning's seeds) when `run` is started again.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from unittest import mock
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bertology.claims.experiment import (GLUE_RECIPE, KEY_NAMES, MINI_FINETUNE_LR, Experiment, minilm,  # noqa: E402
                                         pretraining_key)
from bertology.claims.contextual_vs_static import FEATURE_HEAD_LR, QUICK_TRAIN_EXAMPLES, TRAIN_EXAMPLES  # noqa: E402
from bertology.claims.contextual_vs_static import TASKS as FEATURE_TASKS  # noqa: E402
from bertology.claims.contextual_vs_static import WORD2VEC  # noqa: E402
from bertology.claims.pretraining_task import SPAN_AND_TOKEN_TASKS  # noqa: E402
from bertology.data.stdlib_docs import docstring_task, write_pretraining_corpus  # noqa: E402
from bertology.data.tokenizer import train_tokenizer  # noqa: E402
from bertology.files import loads_json, write_json_atomic, write_text_atomic  # noqa: E402
from bertology.inference.modeldir import save_random_weights  # noqa: E402
from bertology.recipes.demo import DemoConfig, tfidf_baseline  # noqa: E402
from bertology.recipes.finetune import FinetuneConfig, run_finetuning  # noqa: E402
from bertology.recipes.pretrain import PretrainConfig, run_pretraining  # noqa: E402
from bertology.training.loop import ramped_accumulation  # noqa: E402
from results_page import write_section  # noqa: E402  (bench/'s helper; bench/ is this script's folder)

SEEDS = (0, 1, 2)
BUDGETS = {"demo": 210.0, "shared": 300.0, "accept": 1800.0}  # seconds of pre-training on 2 free cores
EVAL_SEQUENCES = 640  # held-out sequences per evaluation (20 batches of 32), the same for every variant
DEMO = DemoConfig()  # the demo's settings: its vocabulary, task and fine-tuning

# The tracks' baselines: PretrainConfig settings (besides corpus, tokenizer and budget).
BASELINES = {
    "demo": {"preset": "tiny", "objective": "roberta", "max_seq_len": DEMO.pretrain_max_seq_len, "batch_size": 32,
             "lr": DEMO.pretrain_lr, "eval_fraction": 0.02},
    "shared": {"preset": "tiny", "objective": "roberta", "max_seq_len": 128, "batch_size": 32, "lr": 1e-3},
}
# Each Cramming change alone over the baseline (the masked-LM head on the masked positions only is
# already every run's: models/bert.py's score_masked_lm; the baselines already drop NSP, so that row
# puts it back).
CHANGES: dict[str, dict[str, Any]] = {
    "pre-LN": {"pre_layer_norm": True},
    "no biases": {"bias": False},
    "gated GELU": {"gated_gelu": True},
    "no dropout": {"dropout": 0.0},
    "one-cycle (warmup 0.5)": {"warmup": 0.5},
    "one-cycle, peak 2e-3": {"warmup": 0.5, "lr": 2e-3},
    "batch ramp 16 to 64": {"batch_size": 16, "grad_accum": 4, "batch_ramp": 0.6},
    "vocabulary padded to 64": {"vocab_multiple": 64},
    "sequences of 128": {"max_seq_len": 128},
    "with NSP": {"objective": "bert"},
}
ONLY_IN = {"sequences of 128": "demo"}  # the shared baseline already reads 128-token rows
# Cramming's whole recipe, every change at once (its peak rate, 1e-3; no NSP)
ALL = {**CHANGES["pre-LN"], **CHANGES["no biases"], **CHANGES["gated GELU"], **CHANGES["no dropout"],
       **CHANGES["one-cycle (warmup 0.5)"], **CHANGES["batch ramp 16 to 64"], **CHANGES["vocabulary padded to 64"],
       **CHANGES["sequences of 128"]}
BASELINE, ALL_ROW, RECIPE_ROW = "baseline", "all of Cramming's changes", "recipe (the changes that paid)"
WORD2VEC_EPOCHS = 30  # claim 1's word2vec: 3 epochs in 3 minutes on 2 cores, so 30 fill 30 minutes
TIMING_STEPS = {"demo": 110, "shared": 40, "accept": 40}  # steps per timing run (the first 10 untimed)
# The demo baseline's step on 2 free cores: the README's 19 steps/s (4,000 steps in 3.5 minutes)
DEMO_BASELINE_STEP_SECONDS = 1 / 19
TIMING_ROUNDS = 2
CURRENT_NAMES = {old: new for new, old in KEY_NAMES.items()}  # a setting's former name -> its name today


# ----- the plan -----------------------------------------------------------------------------------------


def rows(track: str) -> dict[str, dict[str, Any]]:
    """Row -> settings over the track's baseline, phase 1 (fixed before any run)."""
    changes = {name: value for name, value in CHANGES.items() if ONLY_IN.get(name, track) == track}
    return {BASELINE: {}, **changes, ALL_ROW: {k: v for k, v in ALL.items() if track == "demo" or k != "max_seq_len"}}


def paying_changes(results: dict[str, dict]) -> dict[str, Any]:
    """The rule fixed in PLAN.md before any run: the recipe's settings from the phase-1 results.

    Read on pre-training seed 0 of both tracks (the other demo seeds come later and show how firm it
    was): a change joins when, alone, it raises the held-out masked-LM accuracy above the baseline's in
    both tracks. Two changes alter what that accuracy is measured on, so they are judged by fine-tuning
    instead: sequences of 128 (other held-out sequences) joins when it raises the demo task's accuracy,
    NSP (another objective) when it raises both the demo task's accuracy and SST-2's median over its
    three fine-tuning seeds. Of the two one-cycle rows, the one with the higher shared-track accuracy is
    taken when both pay."""
    def mlm(track, row):
        return statistics.median(results[track][row]["mlm_accuracy"])

    def finetuned(track, row):
        return statistics.median(results[track][row]["finetuned"])

    paying = {}
    for name in CHANGES:
        if name == "sequences of 128":
            pays = finetuned("demo", name) > finetuned("demo", BASELINE)
        elif name == "with NSP":
            pays = all(finetuned(track, name) > finetuned(track, BASELINE) for track in ("demo", "shared"))
        else:
            pays = all(mlm(track, name) > mlm(track, BASELINE) for track in ("demo", "shared"))
        if pays:
            paying[name] = CHANGES[name]
    cycles = [name for name in ("one-cycle (warmup 0.5)", "one-cycle, peak 2e-3") if name in paying]
    if len(cycles) == 2:
        del paying[min(cycles, key=lambda name: mlm("shared", name))]
    return {k: v for settings in paying.values() for k, v in settings.items()}


# ----- data -------------------------------------------------------------------------------------------


class Runs:
    """The runs folder: data, cache, plan, results, locks and logs. `smoke`: the toy scale of --smoke (the
    experiment's --quick: a few examples of each task)."""

    def __init__(self, root: Path, smoke: bool = False):
        self.root = root
        self.smoke = smoke
        self.data = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))
        self.experiment = Experiment(out=root / "results", data=self.data, quick=smoke, seeds=list(SEEDS),
                                     cache=root / "cache", log=lambda line: log(line))

    @property
    def plan_file(self) -> Path:
        return self.root / "PLAN.json"

    def plan(self) -> dict:
        return loads_json(self.plan_file.read_text(encoding="utf-8")) if self.plan_file.exists() else {}

    def result_file(self, job: str) -> Path:
        return self.root / "results" / f"{job}.json"

    def result(self, job: str) -> dict | None:
        path = self.result_file(job)
        return loads_json(path.read_text(encoding="utf-8")) if path.exists() else None

    def demo_data(self) -> dict[str, Path]:
        folder = self.root / "demo-data"
        return {"corpus": folder / "corpus", "tokenizer": folder / "tokenizer",
                "train": folder / "task" / "train.jsonl", "dev": folder / "task" / "dev.jsonl",
                "baselines": folder / "baselines.json"}

    def corpus(self, track: str) -> dict[str, Any]:
        """The track's corpus and tokenizer settings."""
        if track == "demo":
            data = self.demo_data()
            return {"corpus": [str(p) for p in sorted(data["corpus"].iterdir())], "tokenizer": str(data["tokenizer"])}
        return {"corpus": self.experiment.corpus(), "tokenizer": str(minilm())}


def log(line: str) -> None:
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}] {line}", flush=True)


def prepare(runs: Runs) -> None:
    """The demo's task, corpus, vocabulary and TF-IDF baselines; the two corpora tokenized once."""
    data = runs.demo_data()
    task = docstring_task(seed=DEMO.task_seed, max_train_per_label=DEMO.max_train_per_label)
    corpus = write_pretraining_corpus(data["corpus"], exclude_modules=task.dev_modules)
    for split, examples in (("train", task.train), ("dev", task.dev)):
        write_text_atomic(data[split], "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in examples))
    if not (data["tokenizer"] / "vocab.txt").exists():
        train_tokenizer(corpus, vocab_size=DEMO.vocab_size, out_dir=data["tokenizer"])
    if not data["baselines"].exists():
        labels = [label for _, label in task.dev]
        write_json_atomic(data["baselines"], {
            "majority": max(labels.count(label) for label in set(labels)) / len(labels),
            "tfidf_words": tfidf_baseline(task.train, task.dev, "word")["accuracy"],
            "tfidf_chars": tfidf_baseline(task.train, task.dev, "char_wb")["accuracy"],
            "train_examples": len(task.train), "dev_examples": len(task.dev)})
    for track in ("demo", "shared"):  # tokenize each corpus now, so that workers never build it at once
        with tempfile.TemporaryDirectory() as folder:
            run_pretraining(PretrainConfig(out=folder, cache_dir=str(runs.root / "cache"), max_steps=1, progress=False,
                                           save_every=0, eval_batches=1, **runs.corpus(track), **BASELINES[track]))
    log("prepared")


# ----- timing and budgets -------------------------------------------------------------------------------


def settings_of(runs: Runs, track: str, row_settings: dict) -> dict:
    """A pre-training's settings (PretrainConfig fields, no budget): the track's corpus and baseline, the row's
    changes, and held-out evaluation over EVAL_SEQUENCES sequences whatever the batch size."""
    settings = {**runs.corpus(track), **BASELINES["shared" if track == "accept" else track], **row_settings}
    settings["eval_batches"] = EVAL_SEQUENCES // settings["batch_size"]
    return settings


def step_seconds(runs: Runs, settings: dict, steps: int) -> float:
    """CPU seconds per optimizer step of one short single-threaded run with these settings, the first 10 steps
    untimed. The loop's clock is replaced by this process's CPU time: on one thread that is the step's time
    on a free core, however busy the machine is (other programs take turns on the cores, and a thread's CPU
    time counts only its own turns)."""
    with tempfile.TemporaryDirectory() as folder, mock.patch("bertology.training.loop.time.perf_counter",
                                                             time.process_time):
        run_pretraining(PretrainConfig(out=folder, cache_dir=str(runs.root / "cache"), max_steps=steps,
                                       log_every=10, eval_every=0, save_every=0, progress=False, eval_batches=1,
                                       **{k: v for k, v in settings.items() if k != "eval_batches"}))
        train = [r for r in map(json.loads, (Path(folder) / "metrics.jsonl").read_text().splitlines())
                 if "split" not in r]
    return (train[-1]["elapsed"] - train[0]["elapsed"]) / (train[-1]["step"] - train[0]["step"])


def steps_within(budget: float, settings: dict, seconds: dict[str, float]) -> int:
    """The optimizer steps whose time fills `budget`. `seconds`: {"step": s} per step, or under a batch ramp
    {"one": s1, "full": sA}, the steps of 1 and of grad_accum micro-batches (a step of k costs s1 + (k - 1) x
    (sA - s1) / (A - 1))."""
    if "step" in seconds:
        return max(1, int(budget / seconds["step"]))
    accum, ramp = settings["grad_accum"], settings["batch_ramp"]
    per_micro = (seconds["full"] - seconds["one"]) / (accum - 1)

    def total(steps):
        return sum(seconds["one"] + (ramped_accumulation(accum, s / steps, ramp) - 1) * per_micro for s in range(steps))

    low, high = 1, int(budget / seconds["one"]) + 1
    while low < high:  # the most steps that fit
        middle = (low + high + 1) // 2
        low, high = (middle, high) if total(middle) <= budget else (low, middle - 1)
    return low


def time_variants(runs: Runs, variants: dict[tuple[str, str], dict]) -> dict[tuple[str, str], dict[str, float]]:
    """(track, row) -> the step time(s) `steps_within` needs ({"step"}, or {"one", "full"} under a batch ramp):
    each variant's CPU time per step on one thread (`step_seconds`; the smallest of TIMING_ROUNDS rounds over
    every variant in turn), scaled to 2 free cores by one factor: the demo baseline's known time there
    (DEMO_BASELINE_STEP_SECONDS) over its time measured here. So the variants' costs relative to each other
    are measured, and their absolute scale is the demo's."""
    torch.set_num_threads(1)
    runs_of = {}  # (track, row, part) -> settings of a timing run
    for (track, row), settings in variants.items():
        if settings.get("batch_ramp"):
            plain = {k: v for k, v in settings.items() if k != "batch_ramp"}
            runs_of[(track, row, "one")], runs_of[(track, row, "full")] = {**plain, "grad_accum": 1}, plain
        else:
            runs_of[(track, row, "step")] = settings
    anchor = ("demo", "anchor", "step")
    runs_of[anchor] = settings_of(runs, "demo", {})
    times: dict[tuple, list[float]] = {key: [] for key in runs_of}
    for round_ in range(TIMING_ROUNDS):
        for key, settings in runs_of.items():
            times[key].append(step_seconds(runs, settings, TIMING_STEPS[key[0]]))
            log(f"timing round {round_ + 1}: {key}: {times[key][-1]:.4f} CPU s/step (load {os.getloadavg()[0]:.1f})")
    best = {key: min(values) for key, values in times.items()}
    scale = DEMO_BASELINE_STEP_SECONDS / best[anchor]
    log(f"demo baseline {best[anchor]:.4f} CPU s/step on one thread, {DEMO_BASELINE_STEP_SECONDS:.4f} s on 2 free "
        f"cores: scale {scale:.3f}")
    out: dict[tuple[str, str], dict[str, float]] = {}
    for (track, row, part), value in best.items():
        if row != "anchor" or track != "demo":
            out.setdefault((track, row), {})[part] = value * scale
    return {key: {**value, "measured_min": {k: v / scale for k, v in value.items()}, "scale": scale,
                  "rounds": {part: times[(key[0], key[1], part)] for part in value}}
            for key, value in out.items()}


def budget_of(track: str, settings: dict, seconds: dict) -> int:
    """Steps of `settings` that fill the track's budget at the calibrated step time(s)."""
    return steps_within(BUDGETS[track], settings, {k: v for k, v in seconds.items() if k in ("step", "one", "full")})


def time_phase_one(runs: Runs) -> None:
    """Every phase-1 variant's step time, then PLAN.json's budgets (written once: the plan never changes)."""
    if runs.plan_file.exists():
        sys.exit(f"{runs.plan_file} exists: the plan is fixed")
    variants = {(track, row): settings_of(runs, track, row_settings)
                for track in ("demo", "shared") for row, row_settings in rows(track).items()}
    seconds = time_variants(runs, variants)
    plan = {"created": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "commit": commit(), "budgets": BUDGETS,
            "seeds": list(SEEDS), "tracks": {"demo": {}, "shared": {}}}
    for (track, row), settings in variants.items():
        steps = budget_of(track, settings, seconds[(track, row)])
        plan["tracks"][track][row] = {"settings": settings, "seconds": seconds[(track, row)], "max_steps": steps}
        log(f"{track} / {row}: -> {steps} steps")
    write_json_atomic(runs.plan_file, plan)
    write_plan_text(runs, plan)


def plan_phase_two(runs: Runs) -> None:
    """The recipe by the rule (`paying_changes`) from phase 1's results, its step times and budgets: the demo
    and shared rows, the shared row at mini, and the acceptance runs (recipe at tiny and mini, baseline)."""
    recipe = paying_changes(phase_one_results(runs))
    phase = {"created": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "recipe": recipe, "rows": {}}
    wanted = {("demo", RECIPE_ROW): recipe, ("shared", RECIPE_ROW): recipe,
              ("shared", RECIPE_ROW + ", mini"): {**recipe, "preset": "mini"},
              ("accept", "recipe, tiny"): recipe, ("accept", "recipe, mini"): {**recipe, "preset": "mini"},
              ("accept", BASELINE): {}}
    variants = {(track, row): settings_of(runs, track, {k: v for k, v in row_settings.items()
                                                        if track == "demo" or k != "max_seq_len"})
                for (track, row), row_settings in wanted.items()}
    seconds = time_variants(runs, variants)
    for (track, row), settings in variants.items():
        steps = budget_of(track, settings, seconds[(track, row)])
        phase["rows"][f"{track}|{row}"] = {"settings": settings, "seconds": seconds[(track, row)], "max_steps": steps}
        log(f"phase 2: {track} / {row}: -> {steps} steps")
    write_json_atomic(runs.root / "PLAN-phase2.json", phase)


PLAN_TEXT = """# Pre-registered plan: Cramming's changes at laptop budgets (issue 37)

Written by `bench/cramming.py time` on {created} (commit {commit}, {cpus} CPU cores, {processor}, torch {torch})
before any pre-training of the study ran; the budgets below are the ones every run uses. Nothing here is
tuned after seeing results.

## Budgets: equal wall time, converted to steps before the runs

Each row pre-trains for the optimizer steps that fill its track's budget of wall time on 2 free cores:
demo {demo_minutes:g} minutes (the time the demo's 4,000 baseline steps take there: 19 steps/s, README),
shared {shared_minutes:g} minutes (claim 3's budget per objective), acceptance {accept_minutes:g} minutes.
A row's step time is its CPU time per step on one thread (the training loop's clock replaced by the
process's CPU time, so a busy machine does not inflate it; the smallest of {rounds} rounds taken over all rows
in turn, the first 10 steps of each timing run untimed), scaled to 2 free cores by one factor for all rows:
the demo baseline's 1/19 s over its measured time ({scale:.3f}). Under a batch ramp the steps of 1 and of
--grad-accum micro-batches are timed and the budget is filled step by step along the ramp. The runs then
have step budgets: a busy machine gets the same models, later. Runs use one thread each (`OMP_NUM_THREADS=1`,
`nice -n 19`); bf16 autocast as `bertology pretrain` defaults to on this processor.

## Tracks, seeds, tasks and rates

- demo: the `bertology demo` setting. Corpus: the standard library's docstrings and language reference minus
  the task's dev modules (task seed 0); its 6,000-piece WordPiece vocabulary; tiny BERT (2 x 128). Baseline:
  the demo's pre-training (RoBERTa's objective, rows of 64 tokens, batch 32, peak lr 1e-3, linear warmup 6%
  then linear decay to 0, dropout 0.1). Fine-tuning: the demo's (30 epochs of the 180 labelled docstrings,
  lr 5e-4, batch 32, 128 tokens, the dev accuracy after the last epoch, 551 dev docstrings). Pre-training
  seeds 0, 1, 2, each fine-tuned with its own seed; the random-weights twins of the baseline's and of the
  all-changes architecture with the same seeds.
- shared: WikiText-2 valid + the 40 Gutenberg books, all-MiniLM-L6-v2's 30,522-piece vocabulary, tiny BERT.
  Baseline: claim 3's masked-LM row (RoBERTa's objective, 128-token rows, batch 32, lr 1e-3, warmup 6%).
  Fine-tuning: SST-2 on 2,000 labels by the claims' GLUE recipe (2 epochs, batch 16, 64 tokens, lr 3e-4,
  dev accuracy of the best epoch), seeds 0, 1, 2 over pre-training seed 0.
- Held-out masked-LM accuracy: at the end of the budget, over 640 held-out sequences (the same documents and
  masks for every row of a track), plus 8 evaluations on the way for the curves.

## Rows: each change alone over the baseline, then all of them

{rows_table}

The masked-LM head scores only the masked positions in every row (it already did: models/bert.py,
`score_masked_lm`, so there is no row for it); NSP is off in both baselines, so its row puts it back.

## The rule that makes the recipe (fixed now)

{rule}

Phase 2 (its step times measured the same way once seed 0's rows are done, written to PLAN-phase2.json):
the recipe's row in both tracks (demo: 3 seeds), the shared row at mini, and the acceptance runs.

## Acceptance runs

- {accept_minutes:g} minutes of pre-training on the shared corpus (tiny: the recipe; the baseline's settings for the
  same time; mini: the recipe), pre-training seed 0; each and its random-weights twin fine-tuned on SST-2 (2,000
  labels), MRPC (its 3,668 training pairs, 1 epoch) and CoNLL-2003 (2,000 sentences, 2 epochs, batch 16, 128
  tokens), claim 3's recipes at lr 3e-4, seeds 0-2. Claim: >= 5 points over the twin on SST-2 and CoNLL-2003.
- word2vec (claim 1's skip-gram, 300 wide) on the same corpus for {word2vec_epochs} epochs (claim 1 measured 3
  epochs in 3 minutes on 2 cores: {word2vec_epochs} fill the same {accept_minutes:g} minutes), beside each BERT under
  claim 1's SST-2 head over frozen features (mean-pooled, linear, 10 epochs, lr 1e-3, 2,000 labels), seeds 0-2.
- The demo, default settings, 3 seeds, with the recipe if it is made the demo's default: `bertology demo
  --seeds 3`, timed on 2 cores.
"""


def write_plan_text(runs: Runs, plan: dict) -> None:
    """PLAN.md: the plan in words, with the rows' settings, step times and budgets."""
    rows_table = ["| track | row | changes over the baseline | s/step (2 free cores) | steps |",
                  "|---|---|---|---:|---:|"]
    scale = 1.0
    for track in ("demo", "shared"):
        for row, row_settings in rows(track).items():
            spec = plan["tracks"][track][row]
            seconds = spec["seconds"]
            scale = seconds["scale"]
            per_step = (f"{seconds['step']:.4f}" if "step" in seconds
                        else f"{seconds['one']:.4f} to {seconds['full']:.4f}")
            changes = ", ".join(f"{k}={v}" for k, v in row_settings.items() if track == "demo" or k != "max_seq_len") or "-"
            rows_table.append(f"| {track} | {row} | {changes} | {per_step} | {spec['max_steps']:,} |")
    machine_ = plan["machine"]
    text = PLAN_TEXT.format(created=plan["created"], commit=plan["commit"], cpus=machine_["cpus"],
                            processor=machine_["processor"], torch=machine_["torch"], demo_minutes=BUDGETS["demo"] / 60,
                            shared_minutes=BUDGETS["shared"] / 60, accept_minutes=BUDGETS["accept"] / 60,
                            rounds=TIMING_ROUNDS, scale=scale, rows_table="\n".join(rows_table),
                            rule=" ".join(line.strip() for line in paying_changes.__doc__.splitlines()[2:]),
                            word2vec_epochs=WORD2VEC_EPOCHS)
    write_text_atomic(runs.root / "PLAN.md", text)


# ----- jobs -------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Job:
    name: str
    run: Callable[[], dict]
    needs: tuple[str, ...] = ()


def pretrained(runs: Runs, settings: dict, max_steps: int, seed: int) -> Path:
    """A pre-trained model, cached by content (Experiment.cached), resumable, evaluated 8 times on the way."""
    # the plan's settings under today's names (PLAN.json keeps those it was written with; the key is the same)
    settings = {CURRENT_NAMES.get(k, k): v for k, v in {**settings, "max_steps": max_steps, "seed": seed}.items()}

    def train(out: Path, resume: bool) -> None:
        cfg = PretrainConfig(out=str(out), cache_dir=str(runs.root / "cache"), resume=resume, progress=False,
                             eval_every=max(max_steps // 8, 1), save_every=100, keep_last=1, **settings)
        if run_pretraining(cfg) == "interrupted":
            raise KeyboardInterrupt

    return runs.experiment.cached("pretrained", pretraining_key(settings), settings, train)


def pretraining_record(model: Path) -> dict:
    """The run's held-out curve and its last evaluation, steps and seconds."""
    rows_ = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines() if line]
    evals = [r for r in rows_ if r.get("split") == "eval"]
    train = [r for r in rows_ if "split" not in r]
    return {"model": str(model), "steps": train[-1]["step"], "seconds": train[-1]["elapsed"],
            "mlm_accuracy": evals[-1]["mlm_accuracy"], "mlm_loss": evals[-1]["mlm_loss"],
            "curve": [{"step": r["step"], "elapsed": r["elapsed"], "mlm_accuracy": r["mlm_accuracy"],
                       "mlm_loss": r["mlm_loss"]} for r in evals],
            "train_loss": [{"step": r["step"], "loss": r["loss"], "lr": r["lr"]}
                           for r in train[:: max(len(train) // 50, 1)]]}


def demo_finetuned(runs: Runs, model: Path, name: str, seed: int, folder: str = "results/runs",
                   **overrides: Any) -> float:
    """The demo's fine-tuning of `model` (its settings, seed `seed`; `overrides`: other FinetuneConfig settings,
    for the diagnosis) into `folder`/`name`: dev accuracy after the last epoch."""
    data = runs.demo_data()
    out = runs.root / folder / name
    if not (out / "eval_results.json").exists():
        shutil.rmtree(out, ignore_errors=True)
        settings = {"epochs": 1 if runs.smoke else DEMO.finetune_epochs, "lr": DEMO.finetune_lr, "batch_size": 32,
                    "max_seq_len": DEMO.finetune_max_seq_len, **overrides}
        run_finetuning(FinetuneConfig(task="classification", train_file=str(data["train"]), dev_file=str(data["dev"]),
                                      model=str(model), out=str(out), seed=seed, progress=False, learning_curve=False,
                                      **settings))
    evals = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r.get("split") == "eval"]
    return evals[-1]["accuracy"]


# ----- a diagnosis of the demo track (after the runs; changes nothing of the plan) ------------------------


DIAGNOSIS_EPOCHS = (5, 10, 30)  # the demo's fine-tuning for fewer epochs (its schedule fitted to each)
DIAGNOSIS_SEEDS = (0, 1, 2)  # fine-tuning seeds over pre-training seed 0
FEATURE_PROBE = {"mode": "features", "feature_layers": "-1", "feature_head": "linear", "lr": 1e-3}


def diagnose(runs: Runs) -> None:
    """Why pre-training barely pays in the demo track: seed 0's baseline model and its random-weights twin
    (both from the finished job) fine-tuned by the demo's recipe for 5, 10 and 30 epochs with fine-tuning seeds
    0-2, and under a linear head over frozen last-layer features (mean-pooled, 30 epochs, lr 1e-3, claim 1's
    head rate), the same three seeds. Written to results/extra/diagnosis.json; the page shows it. The runs'
    own fine-tuning (30 epochs, seed 0) is among them, so the page shows whether today's code reproduces it."""
    record = runs.result(f"demo-{slug(BASELINE)}-seed0")
    if record is None or "random_finetuned" not in record:
        sys.exit("the demo baseline's seed 0 is not finished yet")
    models = {"pre-trained": Path(record["model"]), "random weights": runs.root / "results" / "models" /
              f"random-{slug(BASELINE)}-0"}
    settings = {f"{epochs} epochs": {"epochs": 1 if runs.smoke else epochs} for epochs in DIAGNOSIS_EPOCHS}
    settings["frozen features, linear head"] = {**FEATURE_PROBE, "epochs": 1 if runs.smoke else 30,
                                                "cache_dir": str(runs.root / "diagnostics" / "features-cache")}
    torch.set_num_threads(1)
    start = time.process_time()
    out: dict[str, Any] = {"model": record["model"], "job": {"finetuned": record["finetuned"],
                                                           "random_finetuned": record["random_finetuned"]},
                           "rows": {}}
    for row, overrides in settings.items():
        out["rows"][row] = {kind: [demo_finetuned(runs, model, f"{slug(row)}-{slug(kind)}-seed{seed}", seed,
                                                  folder="diagnostics/finetuning", **overrides)
                                   for seed in DIAGNOSIS_SEEDS]
                            for kind, model in models.items()}
        log(f"diagnosis {row}: {out['rows'][row]}")
    out["cpu_seconds"] = round(time.process_time() - start, 1)
    out["written"] = time.strftime("%Y-%m-%d %H:%M")
    out["commit"] = commit()
    write_json_atomic(runs.root / "results" / "extra" / "diagnosis.json", out)


def sst2(runs: Runs, model: Path, name: str) -> list[float]:
    """SST-2 on 2,000 labels by the claims' GLUE recipe, seeds 0-2: dev accuracy of each."""
    summary = runs.experiment.finetuned(f"sst2-{name}", model=str(model), task="sst2",
                                        data=str(runs.experiment.task_data("glue/SST-2")), lr=MINI_FINETUNE_LR,
                                        **runs.experiment.glue_settings(GLUE_RECIPE["SST-2"]))
    return [run["accuracy"] for run in summary["runs"]]


def slug(text: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def jobs(runs: Runs) -> list[Job]:
    """Every job of the plan, in priority order (phase 2's once its plan exists)."""
    plan = runs.plan()
    if not plan:
        return []
    out: list[Job] = []

    def demo_job(row: str, spec: dict, seed: int, twin: bool) -> Job:
        def run() -> dict:
            model = pretrained(runs, spec["settings"], spec["max_steps"], seed)
            record = {"track": "demo", "row": row, "seed": seed, **pretraining_record(model),
                      "finetuned": demo_finetuned(runs, model, f"demo-{slug(row)}-seed{seed}", seed)}
            if twin:  # the random-weights twin of this architecture, with this seed (as the demo draws it)
                random_dir = runs.root / "results" / "models" / f"random-{slug(row)}-{seed}"
                if not random_dir.exists():
                    save_random_weights(model, random_dir, seed)
                record["random_finetuned"] = demo_finetuned(runs, random_dir, f"demo-random-{slug(row)}-seed{seed}",
                                                            seed)
            return record
        return Job(f"demo-{slug(row)}-seed{seed}", run)

    def shared_job(row: str, spec: dict, twin: bool) -> Job:
        def run() -> dict:
            model = pretrained(runs, spec["settings"], spec["max_steps"], 0)
            record = {"track": "shared", "row": row, "seed": 0, **pretraining_record(model),
                      "finetuned": sst2(runs, model, slug(row))}
            if twin:
                record["random_finetuned"] = sst2(runs, runs.experiment.random_weights(model), f"random-{slug(row)}")
            return record
        return Job(f"shared-{slug(row)}", run)

    # in the code's order (the plan file's keys are sorted)
    demo_rows = {row: plan["tracks"]["demo"][row] for row in rows("demo")}
    shared_rows = {row: plan["tracks"]["shared"][row] for row in rows("shared")}
    twins = (BASELINE, ALL_ROW)
    # Seed 0 of both tracks decides the recipe (`paying_changes`); then the acceptance runs and the seeds the
    # demo's acceptance needs; last the other seeds of the single changes, which say how firm seed 0's
    # differences were (the order only decides what finishes first on a busy machine).
    out += [demo_job(row, spec, 0, row in twins) for row, spec in demo_rows.items()]
    out += [shared_job(row, spec, row in twins) for row, spec in shared_rows.items()]
    out.append(Job("plan-phase2", lambda: (plan_phase_two(runs), {"done": True})[1], tuple(job.name for job in out)))
    phase2_file = runs.root / "PLAN-phase2.json"
    phase2 = loads_json(phase2_file.read_text(encoding="utf-8"))["rows"] if phase2_file.exists() else None
    if phase2:
        recipe_row = phase2[f"demo|{RECIPE_ROW}"]
        out.append(accept_job(runs, "recipe, tiny", phase2["accept|recipe, tiny"]))
        out.append(Job("accept-word2vec", lambda: accept_word2vec(runs)))
        out += [demo_job(RECIPE_ROW, recipe_row, seed, True) for seed in SEEDS]
        out.append(accept_job(runs, BASELINE, phase2[f"accept|{BASELINE}"]))
    out += [demo_job(row, demo_rows[row], seed, True) for seed in SEEDS[1:] for row in twins]
    if phase2:
        out.append(accept_job(runs, "recipe, mini", phase2["accept|recipe, mini"]))
        out.append(shared_job(RECIPE_ROW, phase2[f"shared|{RECIPE_ROW}"], True))
        out.append(shared_job(RECIPE_ROW + ", mini", phase2[f"shared|{RECIPE_ROW}, mini"], True))
    out += [demo_job(row, spec, seed, False) for seed in SEEDS[1:] for row, spec in demo_rows.items()
            if row not in twins]
    return out


ACCEPT_TASKS = {"SST-2": ("sst2", "glue/SST-2", "accuracy", GLUE_RECIPE["SST-2"]),
                "MRPC": ("mrpc", "glue/MRPC", "accuracy", GLUE_RECIPE["MRPC"]),
                "CoNLL-2003": ("conll2003", "conll2003", "f1", SPAN_AND_TOKEN_TASKS["CoNLL-2003 F1"][3])}


def feature_head(runs: Runs, model: Path, name: str) -> list[float]:
    """Claim 1's SST-2 head over frozen features (mean-pooled, linear; 2,000 labels), seeds 0-2."""
    task = FEATURE_TASKS["SST-2"]
    summary = runs.experiment.finetuned(f"features-sst2-{name}", model=str(model), task="sst2",
                                        data=str(runs.experiment.task_data(task["data"])), mode="features",
                                        feature_head=task["feature_head"], feature_layers="sum_last_four",
                                        epochs=1 if runs.smoke else task["epochs"], lr=FEATURE_HEAD_LR,
                                        max_train_examples=QUICK_TRAIN_EXAMPLES if runs.smoke else TRAIN_EXAMPLES)
    return [run["accuracy"] for run in summary["runs"]]


def accept_job(runs: Runs, row: str, spec: dict) -> Job:
    def run() -> dict:
        model = pretrained(runs, spec["settings"], spec["max_steps"], 0)
        random_dir = runs.experiment.random_weights(model)
        record = {"track": "accept", "row": row, **pretraining_record(model), "tasks": {}, "random": {}}
        for column, (task, folder, metric, recipe) in ACCEPT_TASKS.items():
            for key, weights, prefix in (("tasks", model, ""), ("random", random_dir, "random-")):
                summary = runs.experiment.finetuned(f"accept-{prefix}{slug(row)}-{task}", model=str(weights), task=task,
                                                    data=str(runs.experiment.task_data(folder)), lr=MINI_FINETUNE_LR,
                                                    **runs.experiment.glue_settings(recipe))
                record[key][column] = [r[metric] for r in summary["runs"]]
        record["features_sst2"] = feature_head(runs, model, f"accept-{slug(row)}")
        return record
    return Job(f"accept-{slug(row)}", run)


def accept_word2vec(runs: Runs) -> dict:
    """word2vec on the shared corpus for the same 30 minutes (WORD2VEC_EPOCHS), under claim 1's SST-2 head."""
    start = time.perf_counter()
    vectors = runs.experiment.static_vectors(**{**WORD2VEC, "epochs": 1 if runs.smoke else WORD2VEC_EPOCHS})
    return {"track": "accept", "row": "word2vec", "model": str(vectors), "epochs": WORD2VEC_EPOCHS,
            "seconds_this_call": time.perf_counter() - start, "features_sst2": feature_head(runs, vectors, "word2vec")}


def phase_one_results(runs: Runs) -> dict[str, dict[str, dict]]:
    """track -> row -> {"mlm_accuracy": [seed 0's], "finetuned": [the demo task's, or SST-2's seeds]}:
    pre-training seed 0's results, which decide the recipe."""
    results: dict[str, dict[str, dict]] = {"demo": {}, "shared": {}}
    for path in sorted((runs.root / "results").glob("*.json")):
        record = loads_json(path.read_text(encoding="utf-8"))
        if record.get("track") not in results:
            continue
        if record.get("seed") != 0:
            continue
        cell = results[record["track"]].setdefault(record["row"], {"mlm_accuracy": [], "finetuned": []})
        cell["mlm_accuracy"].append(record["mlm_accuracy"])
        cell["finetuned"] += record["finetuned"] if isinstance(record["finetuned"], list) else [record["finetuned"]]
    return results


# ----- a common held-out set for the demo track -----------------------------------------------------------


DEV_MLM_SEQ_LEN = 64  # every demo-track model read the same way, whatever its pre-training rows


def dev_docstrings_mlm(runs: Runs) -> None:
    """Held-out masked-LM accuracy of every finished demo-track model on the task's dev docstrings (the 41
    modules no pre-training read): all of them in 64-token rows, one masking for every model, so the rows of
    the demo track, the 128-token one too, are compared on one set about seven times the size of the
    pre-training's own held-out slice. Written to results/extra/dev-mlm-<job>.json, once per model; no
    training, no choice made on it (the plan's rule reads the pre-training's own held-out accuracy)."""
    from bertology.data.pretraining import PretrainingDataset
    from bertology.data.shards import build_corpus
    from bertology.data.tokenizer import Tokenizer
    from bertology.models.bert import BertConfig, BertForMaskedLM
    from bertology.ops import IGNORE_INDEX
    from bertology.recipes.pretrain import make_evaluator, prepare_batch
    from bertology.training.objectives import build_objective

    data = runs.demo_data()
    texts = [json.loads(line)["text"] for line in data["dev"].read_text(encoding="utf-8").splitlines()]
    text_file = runs.root / "demo-data" / "dev-docstrings.txt"
    if not text_file.exists():  # one docstring a document, its paragraphs on one line each
        write_text_atomic(text_file, "\n\n".join("\n".join(p for p in (" ".join(part.split()) for part in
                                                                       t.split("\n\n")) if p) for t in texts) + "\n")
    tokenizer = Tokenizer.from_pretrained(data["tokenizer"])
    corpus = build_corpus([text_file], tokenizer, runs.root / "cache", doc_format="lines")
    dataset = PretrainingDataset(corpus, np.arange(corpus.num_documents), DEV_MLM_SEQ_LEN, "full_sentences", None,
                                 0.1, tokenizer.cls_token_id, tokenizer.sep_token_id, 0)
    out = runs.root / "results" / "extra"
    out.mkdir(parents=True, exist_ok=True)
    instances = dataset.instances(0)
    masker = build_objective("roberta", BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size),
                             tokenizer.mask_token_id)
    masked = sum(int((prepare_batch(instances[i:i + 32], masker, tokenizer.pad_token_id, 1, index, None)["labels"]
                      != IGNORE_INDEX).sum()) for index, i in enumerate(range(0, len(instances), 32)))
    for path in sorted((runs.root / "results").glob("demo-*.json")):
        target = out / f"dev-mlm-{path.stem}.json"
        record = loads_json(path.read_text(encoding="utf-8"))
        if target.exists() or "model" not in record:
            continue
        model = BertForMaskedLM.from_pretrained(record["model"])
        objective = build_objective("roberta", BertConfig.load(record["model"]), tokenizer.mask_token_id)
        objective.model = model
        evaluate = make_evaluator(dataset, objective, 32, 10_000, 1, tokenizer.pad_token_id, None)
        with torch.no_grad():
            metrics = evaluate(objective.eval())
        write_json_atomic(target, {"job": path.stem, "model": record["model"], "masked_tokens": masked,
                                   "sequences": len(instances), "docstrings": len(texts), **metrics})
        log(f"dev docstrings MLM of {path.stem}: {metrics['mlm_accuracy']:.4f} over {masked} masked tokens")


# ----- the worker ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def claimed(runs: Runs, name: str):
    """A lock on job `name`, or None when another process holds it: an exclusive flock on
    locks/<name>.lock (which holds the owner's pid, for people). The kernel drops the lock when its
    process dies, so a crashed worker's job is free at once, and two workers can never both take it
    (a pid file taken over from a dead owner could be taken by two workers started together)."""
    locks = runs.root / "locks"
    locks.mkdir(exist_ok=True)
    with open(locks / f"{name}.lock", "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield handle.name
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def work(runs: Runs) -> None:
    """Run jobs until none is left: the first job in priority order that is not done, not held by another
    worker, and whose needs are done. A job's result is written last, so an interrupted job runs again
    (its pre-training resuming from its checkpoint)."""
    while True:
        pending = [job for job in jobs(runs) if not runs.result_file(job.name).exists()]
        if not pending:
            log("all jobs done")
            return
        ran = False
        for job in pending:
            if not all(runs.result_file(need).exists() for need in job.needs):
                continue
            with claimed(runs, job.name) as lock:
                if lock is None or runs.result_file(job.name).exists():
                    continue
                log(f"job {job.name}: start")
                start = time.perf_counter()
                record = job.run()
                record["job_seconds"] = round(time.perf_counter() - start, 1)
                record["finished"] = time.strftime("%Y-%m-%d %H:%M")
                write_json_atomic(runs.result_file(job.name), record)
                log(f"job {job.name}: done in {record['job_seconds'] / 60:.1f} min")
                ran = True
                break
        if not ran:
            log("waiting for other workers' jobs")
            time.sleep(120)


# ----- the page -------------------------------------------------------------------------------------------


def machine() -> dict:
    return {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version()}


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return (REPO / "COMMIT").read_text().strip() if (REPO / "COMMIT").exists() else "unknown"


def cell(values: list[float] | None, digits: int = 3) -> str:
    """"median (min-max)" of the seeds' values, one value as is, nothing as a dash."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def values(record: dict, key: str) -> list[float]:
    """A record's value(s) under `key` as a list (the demo task's one per seed, SST-2's three)."""
    value = record.get(key)
    return [] if value is None else value if isinstance(value, list) else [value]


def plot_curves(track: str, by: dict, row_specs: dict, path: Path) -> Path | None:
    """Held-out masked-LM accuracy against the share of the budget, one line per row (seed 0)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(9, 5))
    drawn = False
    for row, spec in row_specs.items():
        record = next((r for r in by.get((track, row), []) if r.get("seed") == 0), None)
        if record is None:
            continue
        points = [(0.0, None)] + [(c["step"] / spec["max_steps"], c["mlm_accuracy"]) for c in record["curve"]]
        axis.plot(*zip(*points[1:]), marker=".", label=row, linewidth=2.5 if row in (BASELINE, RECIPE_ROW) else 1)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    axis.set(xlabel="share of the pre-training budget (equal wall time)", ylabel="held-out masked-LM accuracy",
             title=f"{track} track, pre-training seed 0")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


SETTINGS_TEXT = """Cramming's changes (Geiping and Goldstein 2022, "Cramming: Training a Language Model on a Single GPU
in One Day") are settings of `bertology pretrain`, each one alone: `--pre-layer-norm`; `--no-bias` (no biases in the
attention and feed-forward linears; zeros are written in their place, so transformers' `BertModel` still loads the
model); `--gated-gelu` (a gated-GELU feed-forward whose output matrix reads half the intermediate width, as
Cramming's: transformers cannot load that one); `--dropout 0` (no dropout while pre-training; the saved config keeps
the model's own 0.1 for fine-tuning); `--objective roberta` (no NSP); `--schedule linear --warmup 0.5` (the one-cycle
triangle: up to the peak rate at half the budget, down to exactly 0 at its end, in steps or, with `--max-time`, in
seconds); `--batch-ramp 0.6 --grad-accum 4` (the micro-batches per step grow from 1 to 4 over the first 60% of the
budget); `--vocab-multiple 64` (a WordPiece vocabulary padded with `[unusedK]` tokens to a multiple of 64); and
`--max-seq-len 128`. The masked-LM head already scores only the masked positions. The model switches are the BERT
family's (its spec's `pretrain_switches`). `--recipe cramming` sets the changes the plan's rule chose (below: no
biases, gated GELU, no dropout, one-cycle to 2e-3, the vocabulary padded to 64) and `--recipe cramming-all` every
change (the last row of each track), wherever a setting is left at its default, and with `--max-time` and no
`--preset` also the model size for the time; `bertology demo --recipe` and `bertology reproduce --recipe` pre-train
by either.""".replace("\n", " ")


def report(runs: Runs, pages: Path) -> None:
    """The results page (and its curves beside it) from the runs' results: the ablation tables of both tracks,
    the recipe the rule chose, the acceptance runs, and how many jobs are done."""
    plan = runs.plan()
    phase2_file = runs.root / "PLAN-phase2.json"
    phase2 = loads_json(phase2_file.read_text(encoding="utf-8")) if phase2_file.exists() else None
    by: dict[tuple, list[dict]] = {}
    for path in sorted((runs.root / "results").glob("*.json")):
        record = loads_json(path.read_text(encoding="utf-8"))
        by.setdefault((record.get("track"), record.get("row")), []).append(record)
    baselines = loads_json(runs.demo_data()["baselines"].read_text(encoding="utf-8"))
    dev_mlm = {p.stem.removeprefix("dev-mlm-"): loads_json(p.read_text(encoding="utf-8"))
               for p in sorted((runs.root / "results" / "extra").glob("dev-mlm-*.json"))}
    all_jobs = jobs(runs)
    done = sum(1 for job in all_jobs if runs.result_file(job.name).exists())
    machine_ = plan.get("machine", {})
    lines = [f"From the runs of the plan fixed on {plan.get('created')} (every run imports a frozen copy of the code "
             f"at commit {str(plan.get('commit'))[:10]}; "
             f"{machine_.get('cpus')} CPU cores, {machine_.get('processor')}, torch {machine_.get('torch')}, Python "
             f"{machine_.get('python')}): {done} of {len(all_jobs)} jobs done. The plan, written before any run, "
             "with its step budgets and the rule that makes the recipe: "
             "[pretraining-recipe-plan.md](pretraining-recipe-plan.md). Cells: median over seeds (min-max).", "",
             SETTINGS_TEXT, ""]
    for track, title, metric in (("demo", "Demo track: the standard library's docs, then the demo's task",
                                  "demo task, dev accuracy after the last epoch"),
                                 ("shared", "Shared track: WikiText-2 + Gutenberg, then SST-2 with 2,000 labels",
                                  "SST-2 dev accuracy (best epoch), fine-tuning seeds 0-2")):
        row_specs = {row: plan["tracks"][track][row] for row in rows(track)} if plan else {}
        if phase2:
            row_specs |= {key.split("|", 1)[1]: spec for key, spec in phase2["rows"].items()
                          if key.startswith(track + "|")}
        lines += [f"## {title}", "",
                  f"Each row pre-trains for the steps that fill {BUDGETS[track] / 60:g} minutes on 2 free cores at its "
                  "own measured step time. Held-out masked-LM accuracy at the end of the budget: the same held-out "
                  "documents and masks in every row of the track (the 128-token row reads them as longer sequences). "
                  + ("Pre-training seeds 0-2, each fine-tuned with its own seed; the twin is the same architecture "
                     "from random weights of that seed." if track == "demo" else
                     "Pre-training seed 0; fine-tuning seeds 0-2; the twin is the same architecture from random "
                     "weights."), "",
                  f"| row | steps | s/step (2 free cores) | held-out MLM accuracy | {metric} | random-weights twin |"
                  + (" MLM accuracy, dev docstrings |" if track == "demo" else ""),
                  "|---|---:|---:|---:|---:|---:|" + ("---:|" if track == "demo" else "")]
        for row, spec in row_specs.items():
            got = sorted(by.get((track, row), []), key=lambda r: r.get("seed", 0))
            seconds = spec["seconds"]
            per_step = f"{seconds['step']:.4f}" if "step" in seconds else f"{seconds['one']:.4f}-{seconds['full']:.4f}"
            mlm = cell([r["mlm_accuracy"] for r in got])
            tuned = cell([v for r in got for v in values(r, "finetuned")])
            twin = cell([v for r in got for v in values(r, "random_finetuned")])
            seeds = f" ({len(got)} seed{'s' if len(got) != 1 else ''})" if track == "demo" and 0 < len(got) < 3 else ""
            extra = ""
            if track == "demo":
                jobs_done = [f"demo-{slug(row)}-seed{r['seed']}" for r in got]
                extra = f" {cell([dev_mlm[job]['mlm_accuracy'] for job in jobs_done if job in dev_mlm])} |"
            lines.append(f"| {row}{seeds} | {spec['max_steps']:,} | {per_step} | {mlm} | {tuned} | {twin} |{extra}")
        if track == "demo" and dev_mlm:
            first = next(iter(dev_mlm.values()))
            lines += ["", f"The last column reads every model on one set: the task's {first['docstrings']} dev "
                          f"docstrings as {first['sequences']} rows of {DEV_MLM_SEQ_LEN} tokens, one masking, "
                          f"{first['masked_tokens']:,} "
                          "masked tokens (the pre-training's own held-out slice has about 900, so its accuracy "
                          "moves by about 0.015 with the sample alone); `bench/cramming.py evaluate`, after the "
                          "runs, chose nothing."]
        if track == "demo":
            lines += ["", f"The demo task's baselines (no pre-training): TF-IDF character 2-5-grams "
                          f"{baselines['tfidf_chars']:.3f}, TF-IDF words {baselines['tfidf_words']:.3f}, majority "
                          f"class {baselines['majority']:.3f} ({baselines['train_examples']} training and "
                          f"{baselines['dev_examples']} dev docstrings)."]
        picture = plot_curves(track, by, row_specs, pages / f"pretraining-recipe-{track}.png")
        if picture:
            lines += ["", f"![held-out masked-LM accuracy over the budget, {track} track]({picture.name})"]
        lines.append("")
    if phase2:
        lines += ["## The recipe the rule chose", "",
                  "From seed 0 of both tracks, by the plan's rule: `" + json.dumps(phase2["recipe"]) + "` over each "
                  "track's baseline (`{}`: no change paid).", ""]
        lines += ["## Acceptance: 30 minutes of pre-training on the shared corpus", "",
                  "Pre-training seed 0; fine-tuning seeds 0-2 (claim 3's recipes, lr 3e-4); the last column is claim 1's "
                  "SST-2 head over frozen features (mean-pooled, linear, 2,000 labels), the same head over word2vec.", "",
                  "| model | steps | held-out MLM accuracy | SST-2 | MRPC | CoNLL-2003 F1 | SST-2, frozen features |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for row in ("recipe, tiny", "recipe, mini", BASELINE, "word2vec"):
            record = (by.get(("accept", row)) or [None])[0]
            if record is None:
                lines.append(f"| {row} | not run yet | | | | | |")
            elif row == "word2vec":
                lines.append(f"| word2vec, {record['epochs']} epochs | | | | | | {cell(record['features_sst2'])} |")
            else:
                tasks, random_ = record["tasks"], record["random"]
                lines.append(f"| BERT, {row} | {record['steps']:,} | {record['mlm_accuracy']:.3f} | "
                             f"{cell(tasks['SST-2'])} | {cell(tasks['MRPC'])} | {cell(tasks['CoNLL-2003'])} | "
                             f"{cell(record['features_sst2'])} |")
                lines.append(f"| its random-weights twin | | | {cell(random_['SST-2'])} | {cell(random_['MRPC'])} | "
                             f"{cell(random_['CoNLL-2003'])} | |")
        lines.append("")
    lines += epoch_lines(runs, by)
    lines += diagnosis_lines(runs, by)
    lines += verdict_lines(by, baselines)
    lines += pending_lines(runs, all_jobs)
    notes = runs.root / "NOTES.md"  # what happened to the runs, written by whoever watched them
    if notes.exists():
        lines += ["## Notes on the runs", "", notes.read_text(encoding="utf-8").strip(), ""]
    body = "\n".join("####" + line[2:] if line.startswith("## ") else line for line in lines)  # under the section
    new_page(pages / "pretraining-recipe.md", "Pre-training that pays on a laptop: Cramming's changes, measured")
    write_section("pretraining-recipe", "study", "The study so far", body, script="bench/cramming.py", directory=pages)
    if plan:
        plan_text = (runs.root / "PLAN.md").read_text(encoding="utf-8").split("\n", 1)[1].strip()
        new_page(pages / "pretraining-recipe-plan.md", "Pre-training that pays on a laptop: the pre-registered plan")
        write_section("pretraining-recipe-plan", "plan", "The plan, as written before any run",
                      "\n".join("####" + line[2:] if line.startswith("## ") else line for line in plan_text.splitlines()),
                      script="bench/cramming.py", directory=pages,
                      provenance=f"*Copied from the runs' PLAN.md (its headings one level down), which `python "
                                 f"bench/cramming.py time` wrote on {plan['created']} before any run.*")


def new_page(page: Path, title: str) -> None:
    """A results page's title and the line saying which script writes it, when the page is not there yet
    (bench/results_page.py's `write_section` then writes the stamped sections)."""
    if not page.exists():
        write_text_atomic(page, f"# {title}\n\nWritten by `bench/cramming.py`: each section is replaced when the "
                                "script that measures it runs again (see [Results](index.md)).\n")


EPOCHS_SHOWN = (1, 3, 5, 10, 20, 30)


def epoch_lines(runs: Runs, by: dict) -> list[str]:
    """The demo task's dev accuracy after chosen fine-tuning epochs, pre-trained against random weights (median
    over the seeds done): where pre-training's lead is made and where it goes."""
    lines = ["## The demo task, epoch by epoch", "",
             "Dev accuracy after the epoch, median over the seeds done; each row's model, then its random-weights "
             "twin. Pre-training that pays shows as a lead that lasts to the last epoch.", "",
             "| model | " + " | ".join(f"epoch {e}" for e in EPOCHS_SHOWN) + " |",
             "|---|" + "---:|" * len(EPOCHS_SHOWN)]
    for row in (BASELINE, ALL_ROW, RECIPE_ROW):
        seeds = sorted(r["seed"] for r in by.get(("demo", row), []) if "random_finetuned" in r)
        for kind, prefix in (("pre-trained", ""), ("random weights", "random-")):
            curves = []
            for seed in seeds:
                path = runs.root / "results" / "runs" / f"demo-{prefix}{slug(row)}-seed{seed}" / "metrics.jsonl"
                evals = [r for r in map(json.loads, path.read_text().splitlines()) if r.get("split") == "eval"]
                curves.append([evals[e - 1]["accuracy"] for e in EPOCHS_SHOWN if e <= len(evals)])
            if curves:
                medians = [statistics.median(c[i] for c in curves) for i in range(len(curves[0]))]
                lines.append(f"| {row}, {kind} ({len(curves)} seed{'s' if len(curves) > 1 else ''}) | "
                             + " | ".join(f"{m:.3f}" for m in medians) + " |")
    return lines + [""]


def diagnosis_lines(runs: Runs, by: dict) -> list[str]:
    """The diagnosis (`diagnose`) of why pre-training barely pays in the demo track, when it has run."""
    path = runs.root / "results" / "extra" / "diagnosis.json"
    if not path.exists():
        return []
    found = loads_json(path.read_text(encoding="utf-8"))
    curve = sorted(by.get(("demo", BASELINE), []), key=lambda r: r["seed"])[0]["curve"]
    lines = ["## Diagnosis: why pre-training barely pays in the demo track", "",
             f"Measured after the runs by `python bench/cramming.py diagnose` (code at {found['commit']}, "
             f"{found['written']}, {found['cpu_seconds'] / 60:.0f} minutes of one-thread CPU); it changes nothing of "
             "the plan. Seed 0's baseline model and its random-weights twin, fine-tuned with seeds 0-2; cells: median "
             "(min-max) of the demo task's dev accuracy after the last epoch.", "",
             "| fine-tuning | pre-trained | random weights | pre-trained minus random, per seed |",
             "|---|---:|---:|---|"]
    order = sorted(found["rows"], key=lambda row: (not row.endswith(" epochs"), int(row.split()[0])
                                                   if row.endswith(" epochs") else 0))
    for row in order:
        kinds = found["rows"][row]
        gaps = ", ".join(f"{a - b:+.3f}" for a, b in zip(kinds["pre-trained"], kinds["random weights"]))
        lines.append(f"| {row} | {cell(kinds['pre-trained'])} | {cell(kinds['random weights'])} | {gaps} |")
    held_out = ", ".join(f"{point['mlm_accuracy']:.3f}" for point in curve)
    lines += ["", f"The study's own job (30 epochs, seed 0, the frozen code): {found['job']['finetuned']:.3f} against "
                  f"{found['job']['random_finetuned']:.3f}. The baseline's held-out masked-LM accuracy at its "
                  f"{len(curve)} evaluations: {held_out}.", ""]

    def gap(row: str) -> float:
        kinds = found["rows"][row]
        return statistics.median(kinds["pre-trained"]) - statistics.median(kinds["random weights"])

    epochs = sorted((row for row in found["rows"] if row.endswith(" epochs")), key=lambda row: int(row.split()[0]))
    shortest, longest = epochs[0], epochs[-1]
    half = curve[len(curve) // 2]
    reading = [f"What it shows: the pre-trained model's lead over its random twin is {gap(shortest):+.3f} after "
               f"{shortest} of fine-tuning and {gap(longest):+.3f} after {longest} (medians)."]
    if gap(shortest) - gap(longest) >= 0.05:
        labels = loads_json(runs.demo_data()["baselines"].read_text(encoding="utf-8"))["train_examples"]
        reading.append(f"The demo's fine-tuning ({longest} on {labels} labelled docstrings, lr "
                       f"{DEMO.finetune_lr:g}) is long enough for the random-weights twin to learn the task from the "
                       "labels alone, so it hides most of what the pre-training gave; a shorter fine-tuning shows "
                       "it, but ends lower for both models.")
    last = found["rows"][longest]
    reading.append(f"Fine-tuning seeds alone move the random twin's accuracy after {longest} over "
                   f"{min(last['random weights']):.3f}-{max(last['random weights']):.3f} and the pre-trained model's "
                   f"over {min(last['pre-trained']):.3f}-{max(last['pre-trained']):.3f}, so one seed's gap (the "
                   f"study's job: {found['job']['finetuned'] - found['job']['random_finetuned']:+.3f}) says little "
                   "on its own: the plan's three pre-training seeds, each with its own twin, are what the verdict "
                   "reads.")
    probe = found["rows"].get("frozen features, linear head")
    if probe:
        reading.append(f"Without fine-tuning the encoder, a linear head over its frozen features reads "
                       f"{statistics.median(probe['pre-trained']):.3f} from the pre-trained model against "
                       f"{statistics.median(probe['random weights']):.3f} from random weights: the pre-training "
                       "learned features the task can use.")
    best_row, best = max(((row, record["mlm_accuracy"]) for (track, row), records in by.items() if track == "demo"
                          for record in records if record.get("seed") == 0), key=lambda pair: pair[1])
    reading.append(f"The baseline's masked-LM accuracy was still rising when the budget ended "
                   f"({half['mlm_accuracy']:.3f} at step {half['step']:,}, {curve[-1]['mlm_accuracy']:.3f} at step "
                   f"{curve[-1]['step']:,}), and the best row so far ({best_row}) reached {best:.3f} in the same time: "
                   "at this budget the tiny model stops while it is still learning.")
    return lines + [" ".join(reading), ""]


def pending_lines(runs: Runs, all_jobs: list[Job]) -> list[str]:
    """The jobs not finished yet, in the order the workers take them."""
    pending = [job.name for job in all_jobs if not runs.result_file(job.name).exists()]
    if not pending:
        return []
    done = [record for path in sorted((runs.root / "results").glob("demo-*.json"))
            if "job_seconds" in (record := loads_json(path.read_text(encoding="utf-8")))]
    estimate = ""
    if done:
        minutes = statistics.mean(record["job_seconds"] for record in done) / 60
        demo_left = sum(1 for name in pending if name.startswith("demo-"))
        estimate = (f" The finished demo jobs took {minutes:.0f} minutes each on average (one worker, one thread), so "
                    f"the {demo_left} demo jobs left need about {demo_left * minutes / 2 / 60:.1f} hours of two "
                    "workers at that pace; the shared, phase-2 and acceptance jobs (30-minute pre-trainings, three "
                    "tasks) are not timed yet.")
    return ["## Still to run", "",
            f"{len(pending)} job(s), in the order the workers take them (phase 2's jobs are listed once "
            "`plan-phase2` has chosen the recipe): " + ", ".join(f"`{name}`" for name in pending) + "." + estimate, ""]


def verdict_lines(by: dict, baselines: dict) -> list[str]:
    """The issue's acceptance criteria, each computed from the tables' numbers (or "not run yet")."""
    lines = ["## The acceptance criteria, as measured", ""]

    def demo_pair(row: str) -> str:
        got = sorted(by.get(("demo", row), []), key=lambda r: r["seed"])
        pairs = [(r["finetuned"], r["random_finetuned"]) for r in got if "random_finetuned" in r]
        if not pairs:
            return f"- Demo, {row}: not run yet."
        gaps = [tuned - random_ for tuned, random_ in pairs]
        tuned, random_ = [p[0] for p in pairs], [p[1] for p in pairs]
        apart = min(tuned) > max(random_)
        return (f"- Demo, {row} ({len(pairs)} seed(s)): pre-trained minus random twin per seed "
                f"{', '.join(f'{g:+.3f}' for g in gaps)} (>= +0.05 in every seed: "
                f"{'yes' if min(gaps) >= 0.05 else 'no'}; ranges apart: {'yes' if apart else 'no'}); median "
                f"{statistics.median(tuned):.3f} against TF-IDF characters {baselines['tfidf_chars']:.3f} "
                f"({'above' if statistics.median(tuned) > baselines['tfidf_chars'] else 'below'}).")

    lines += [demo_pair(BASELINE), demo_pair(RECIPE_ROW), demo_pair(ALL_ROW)]
    word2vec = (by.get(("accept", "word2vec")) or [None])[0]
    for row in ("recipe, tiny", "recipe, mini", BASELINE):
        record = (by.get(("accept", row)) or [None])[0]
        if record is None:
            lines.append(f"- 30 minutes, BERT {row}: not run yet.")
            continue
        gaps = {task: statistics.median(record["tasks"][task]) - statistics.median(record["random"][task])
                for task in ACCEPT_TASKS}
        text = (f"- 30 minutes, BERT {row}: median over the random twin SST-2 {gaps['SST-2']:+.3f}, CoNLL-2003 "
                f"{gaps['CoNLL-2003']:+.3f}, MRPC {gaps['MRPC']:+.3f} (>= +0.05 on SST-2 and CoNLL-2003: "
                f"{'yes' if min(gaps['SST-2'], gaps['CoNLL-2003']) >= 0.05 else 'no'})")
        if word2vec is not None:
            ours, theirs = statistics.median(record["features_sst2"]), statistics.median(word2vec["features_sst2"])
            text += (f"; SST-2 under the same frozen-feature head {ours:.3f} against word2vec's {theirs:.3f} "
                     f"({'above' if ours > theirs else 'below'}); fine-tuned "
                     f"{statistics.median(record['tasks']['SST-2']):.3f}")
        lines.append(text + ".")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["prepare", "time", "run", "evaluate", "diagnose", "report"])
    parser.add_argument("--runs", type=Path, default=Path("/work/cram_runs"))
    parser.add_argument("--pages", type=Path, default=REPO / "docs" / "results",
                        help="where report writes pretraining-recipe.md, its -plan.md and the curves")
    parser.add_argument("--smoke", action="store_true", help="every kind of job at a toy scale, to check the code")
    args = parser.parse_args()
    if args.smoke:
        global SEEDS, TIMING_ROUNDS
        SEEDS, TIMING_ROUNDS = (0,), 1
        BUDGETS.update(demo=2.0, shared=2.0, accept=3.0)
        TIMING_STEPS.update(demo=14, shared=12, accept=12)
        args.pages = args.runs
    runs = Runs(args.runs.resolve(), smoke=args.smoke)
    {"prepare": lambda: prepare(runs), "time": lambda: time_phase_one(runs), "run": lambda: work(runs),
     "evaluate": lambda: dev_docstrings_mlm(runs), "diagnose": lambda: diagnose(runs),
     "report": lambda: report(runs, args.pages)}[args.command]()


if __name__ == "__main__":
    main()
