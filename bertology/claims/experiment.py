"""What every claim shares: its settings, the data folder, pre-training cached by content,
fine-tuning over seeds, the verdict, and the report (results.json, results.md, plots).

A claim is a short script over the public API (`run_pretraining`, `run_finetuning`, ...)
that calls these steps; nothing here knows any one claim. Two rules make claims cheap to
run one after another and safe to interrupt:

- Pre-trained models are cached by content: the key hashes every pre-training setting and
  the corpus files' bytes, so the mini MLM model one claim pre-trains is the same folder for
  every claim that asks for it, on any path, and a changed setting or corpus is a new model.
  A run is written into `<key>.partial` and renamed when finished; an interrupted one
  resumes from its last checkpoint.
- Fine-tuning runs are kept in the claim's output folder (`runs/<name>/`): run the claim
  again with the same --out and every finished run is read back instead of repeated.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ..config import Device, setting
from ..data.corpus import read_documents
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import cache_root, loads_json, write_json_atomic, write_text_atomic
from ..inference.modeldir import check_model_dir, open_model_dir, save_random_weights
from ..models import resolve_model_dir
from ..models.base import SIZES
from ..models.bert import BertConfig, BertModel
from ..recipes.finetune import FinetuneConfig, run_finetuning
from ..recipes.pretrain import RECIPES, PretrainConfig, default_setting, recipe_refusal, run_pretraining
from ..recipes.static_vectors import StaticTrainConfig
from ..recipes.static_vectors import train as train_static
from ..recipes.translate import TranslateTrainConfig
from ..recipes.translate import train as train_translation
from ..tasks.readers import TASKS, SpanExample, TokenExample, read_examples, task_files
from ..training.loop import run_summary

_CACHE_VERSION = 1  # bump when a change to pre-training makes old cached models stale

# The models most claims start from, pre-trained once on the shared corpus and cached. Budgets are
# in steps, not minutes, so that a busy machine gets the same model later; the minutes are those
# of this project's 2-core machine with both cores free.
MINI_MLM = {"preset": "mini", "objective": "roberta", "max_seq_len": 64, "batch_size": 32, "lr": 1e-3,
            "max_steps": 1600, "seed": 0}  # about 20 minutes
AWD_LSTM_LM = {"arch": "awd-lstm", "preset": "mini", "tokenizer": None, "vocab_size": 8000, "max_seq_len": 70,
               "batch_size": 32, "lr": 1e-2, "max_steps": 2000, "seed": 0}  # about 15 minutes
TARGET_LM = {"max_steps": 300, "layer_lr_decay": 1 / 2.6, "schedule": "slanted_triangular", "warmup": 0.1}
# ULMFiT's third stage, the classifier (FinetuneConfig settings): fastai's rate, discriminative rates, the
# slanted triangular schedule, gradual unfreezing, and its dropouts at half fastai's (claim 2's settings)
ULMFIT_CLASSIFIER = {"lr": 1e-2, "schedule": "slanted_triangular", "drop_mult": 0.5, "layer_lr_decay": 1 / 2.6,
                     "gradual_unfreezing": True}
# --quick: the same steps on a tiny scale, to check the code
QUICK = {"preset": "tiny", "max_steps": 12, "batch_size": 8}
QUICK_EXAMPLES = 80  # examples per file of a task's data with --quick

# The two GLUE tasks most claims fine-tune on (column -> task, data folder), and two recipes.
GLUE_TASKS = {"SST-2": ("sst2", "glue/SST-2"), "MRPC": ("mrpc", "glue/MRPC")}
# Claims 5-7 (a few models each): MRPC on all its 3,668 pairs (one epoch at batch 16: 230 updates,
# about the BERT recipe's 3 epochs at 32 for half the compute), SST-2 on a 2,000-sentence subset
# (the same for every model and seed) for 2 epochs.
GLUE_RECIPE = {"SST-2": {"max_train_examples": 2000, "epochs": 2, "max_seq_len": 64, "batch_size": 16},
               "MRPC": {"epochs": 1, "max_seq_len": 128, "batch_size": 16}}
# Claims 4 and 8 (ten models each): one epoch of 2,000 SST-2 sentences and 1,500 MRPC pairs at batch 32.
LIGHT_GLUE_RECIPE = {"SST-2": {"max_train_examples": 2000, "epochs": 1, "max_seq_len": 64},
                     "MRPC": {"max_train_examples": 1500, "epochs": 1, "max_seq_len": 128}}
QUICK_GLUE = {"max_train_examples": 48, "epochs": 1, "max_seq_len": 40}
MINI_FINETUNE_LR = 3e-4  # the mini BERTs' fine-tuning rate (bench/distill.py's for this size)
REFERENCE = "all-MiniLM-L6-v2"  # the model pre-trained elsewhere that claims compare against, unless --model
# What a claim may do with its --model, each answered by the family's spec: train heads on its frozen
# layers' features (embed, WiC, feature heads), fine-tune it whole with a sentence or a token head,
# distil a student from it.
REFERENCE_NEEDS = {
    "features": ("trains heads on its frozen layers' features",
                 lambda spec: spec.feature_encoder is not None and "features" in spec.finetune_modes),
    "sequence": ("fine-tunes it whole with a sentence head",
                 lambda spec: "finetune" in spec.finetune_modes and "sequence" in spec.heads),
    "token": ("fine-tunes it whole with a token head",
              lambda spec: "finetune" in spec.finetune_modes and "token" in spec.heads),
    "teacher": ("distils a student from it", lambda spec: spec.student_config is not None),
}


@dataclass
class ReproduceConfig(Device):
    """The claim, its scale and where its results go.

    The settings of `bertology reproduce`.
    """

    claim: str = setting("", positional=True, metavar="CLAIM",
                         help="the claim to run, by name or number (default: none; --list shows them)")
    list: bool = setting(False, help="list the claims: what each measures, its paper, and whether it can run")
    out: str = setting("", metavar="DIR", output="dir",
                       help="where results.json, results.md, the plots and every run go (default: none; "
                            "required with a claim; run again with the same folder to resume)")
    data: str = setting(default_factory=lambda: os.environ.get("BERTOLOGY_DATA", "../shared/data"), metavar="DIR",
                        help="the data folder: glue/SST-2, glue/MRPC, glue/STS-B, conll2003, squad, wic, wikitext-2-raw, "
                             "gutenberg (default: $BERTOLOGY_DATA, else ../shared/data)")
    quick: bool = setting(False, help="a reduced version in minutes (tiny models, few examples, 2 seeds): it checks "
                                      "the claim's code, not the claim")
    seeds: int | None = setting(None, positive=True, help="fine-tuning seeds per number (default: 3; --quick 2)")
    cache_dir: str = setting(default_factory=lambda: str(cache_root()), metavar="DIR", output="dir",
                             help="where pre-trained models are kept for every claim ($BERTOLOGY_CACHE)")
    recipe: str | None = setting(None, choices=tuple(RECIPES),
                                 help="pre-train every BERT-family model of the claim by this recipe (`bertology "
                                      "pretrain --recipe`), wherever the claim leaves a setting at its default; the "
                                      "models are cached apart from the claim's own (default: none)")
    beside: str = setting("", metavar="RESULTS",
                          help="with --recipe: the results.json of the same claim run without it (docs/claims/"
                               "NAME.json); results.md then keeps its rows and shows each row this run changed "
                               "beside it, named '..., --recipe NAME', and both runs' verdicts (default: none)")
    model: str = setting("", metavar="DIR",
                         help="the model pre-trained elsewhere that a claim compares against (claims 1, 2, 10 and "
                              "11; --list marks them): a model directory or an installed model's name (default: "
                              f"{REFERENCE}); the claims' learning rates were chosen for {REFERENCE} and stay as "
                              "they are")


def open_reference(model: str, claim: str, needs: tuple[str, ...]) -> tuple[Path | None, str]:
    """--model for `claim`, which needs these REFERENCE_NEEDS of it: (its directory, None for
    all-MiniLM-L6-v2; its name in rows: an installed model's as given, a directory's own). A
    directory that is not a whole model (`check_model_dir`), or of a family without what the claim
    needs, is a one-line error naming --model."""
    if not model:
        return None, REFERENCE
    try:
        opened = open_model_dir(model)
    except UserError as error:
        raise UserError(f"--model {model}: {error}") from None
    problems = check_model_dir(opened.path)  # config, tensors and tokenizer: before hours of other runs
    if problems:
        raise UserError(f"--model {model}: {problems[0]}")
    for need in needs:
        doing, holds = REFERENCE_NEEDS[need]
        if not holds(opened.spec):
            raise UserError(f"--model {model}: claim {claim} {doing}, which a {opened.family.name} model "
                            "cannot do here")
    path = opened.path.resolve()
    if path == minilm().resolve():
        return None, REFERENCE
    return path, path.name if Path(model).exists() else model.rsplit("/", 1)[-1]


# ----- the experiment: data, pre-training, fine-tuning ----------------------------------------------


@dataclass
class Experiment:
    """One claim's run: where its data and results are, its scale, and the shared steps."""

    out: Path
    data: Path
    quick: bool
    seeds: list[int]
    cache: Path
    device: str = "auto"  # the `--device` setting, passed to every run (not part of its cache key)
    reference_dir: Path | None = None  # --model, resolved; None: all-MiniLM-L6-v2 (looked up when used)
    reference_name: str = REFERENCE  # the reference model's name in rows, plots and verdicts
    log: Callable[[str], None] = print
    started: float = field(default_factory=time.perf_counter)
    recipe: str | None = None  # `bertology pretrain --recipe` for every BERT-family pre-training
    beside: dict | None = None  # --beside: the same claim's results without the recipe, shown beside this run's

    @classmethod
    def from_config(cls, cfg: ReproduceConfig, reference: tuple[Path | None, str] | None = None,
                    beside: dict | None = None) -> "Experiment":
        """The experiment of `bertology reproduce`'s settings (the output folder made); `reference`:
        `open_reference`'s answer for a claim that compares against a model pre-trained elsewhere;
        `beside`: `read_beside`'s."""
        if not cfg.out:
            raise UserError("--out DIR is required to run a claim")
        seeds = cfg.seeds or (2 if cfg.quick else 3)
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        experiment = cls(out, Path(cfg.data), cfg.quick, list(range(seeds)), Path(cfg.cache_dir), cfg.device,
                         recipe=cfg.recipe, beside=beside)
        if reference is not None:
            experiment.reference_dir, experiment.reference_name = reference
            experiment.bind_reference()
        return experiment

    @property
    def reference(self) -> Path:
        """The model pre-trained elsewhere that the claims compare against: --model, or all-MiniLM-L6-v2."""
        return self.reference_dir or minilm()

    @property
    def reference_is_minilm(self) -> bool:
        """Whether the reference is all-MiniLM-L6-v2, whose specifics a report may state."""
        return self.reference_dir is None

    def reference_words(self) -> str:
        """The reference model in words for a report: its name and sizes."""
        if self.reference_is_minilm:
            return f"{REFERENCE} (real pre-trained weights: 6 layers, 384 wide, 22.7M parameters)"
        return f"{self.reference_name} (--model: {open_model_dir(self.reference).describe()})"

    def bind_reference(self) -> None:
        """Record in the output folder which model is the reference; a folder holding another
        model's runs is a one-line error naming --model (finished runs are read back by their
        names, which do not say which model made them)."""
        record, used = self.out / "reference_model.json", REFERENCE if self.reference_is_minilm else str(self.reference)
        if record.exists():
            before = loads_json(record.read_text(encoding="utf-8"))["model"]
        else:
            before = REFERENCE if (self.out / "runs").exists() else used  # runs made before --model: all MiniLM's
        if before != used:
            raise UserError(f"--model {self.reference_name}: {self.out} holds the runs of another model ({before}); "
                            "choose another --out")
        write_json_atomic(record, {"model": used})

    def path(self, relative: str) -> Path:
        """A file or folder of the data folder; a one-line error naming it when it is missing."""
        path = self.data / relative
        if not path.exists():
            raise UserError(f"{path}: not found; point --data (or $BERTOLOGY_DATA) at the folder that holds "
                            f"{relative.split('/')[0]}")
        return path

    def task_data(self, relative: str) -> Path:
        """A task's folder or file in the data folder; with --quick, a copy of the first
        QUICK_EXAMPLES examples of each of its files (in the cache, made once), so that the quick
        tier evaluates on a few hundred examples instead of the full dev sets."""
        source = self.path(relative)
        if not self.quick:
            return source
        target = self.cache / "claims" / "quick-data" / relative
        if not target.exists():
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            files = sorted(p for p in source.iterdir() if p.is_file()) if source.is_dir() else [source]
            for file in files:
                write_text_atomic(partial / file.name if source.is_dir() else partial, first_examples(file))
            os.replace(partial, target)
        return target

    def dev_examples(self, relative: str, task: str) -> int:
        """How many examples the dev split of a task's data holds as this run reads it (with
        --quick, the first few of `task_data`), for a report's scale."""
        spec = TASKS[task]
        return len(read_examples(spec, task_files(spec, self.task_data(relative), ["dev"])["dev"], "dev"))

    def corpus(self) -> list[str]:
        """The pre-training corpus every claim shares: WikiText-2 valid + the 40 Gutenberg books
        (--quick: WikiText-2 valid alone)."""
        paths = [self.path("wikitext-2-raw/wiki.valid.raw")]
        if not self.quick:
            paths.append(self.path("gutenberg"))
        return [str(p) for p in paths]

    def corpus_slice(self, tokens: int) -> Path:
        """A small corpus for runs that read their text many times over: the first whole articles of
        WikiText-2 valid holding at most `tokens` tokens of the shared vocabulary (all-MiniLM-L6-v2's),
        and at least two, so that one can be held out. Written one sentence per line, a blank line
        between articles (pre-train it with doc_format "lines"), into the cache; its name hashes its
        content, so every claim shares it."""
        tokenizer = Tokenizer.from_pretrained(minilm())
        articles, count = [], 0
        for article in read_documents([self.path("wikitext-2-raw/wiki.valid.raw")]):
            size = sum(len(tokenizer.encode(sentence, add_special_tokens=False)) for sentence in article)
            if len(articles) >= 2 and count + size > tokens:
                break
            articles.append(article)
            count += size
        text = "\n\n".join("\n".join(article) for article in articles) + "\n"
        path = self.cache / "claims" / f"wikitext-slice-{hashlib.sha256(text.encode()).hexdigest()[:16]}.txt"
        if not path.exists():
            write_text_atomic(path, text)
        return path

    def minutes(self) -> float:
        """Minutes since the claim started."""
        return (time.perf_counter() - self.started) / 60

    def scale_note(self) -> str:
        """The scale of the shared pre-trained models, for a claim's report."""
        if self.quick:
            return f"--quick: tiny models pre-trained for {QUICK['max_steps']} steps on WikiText-2 valid; 2 seeds."
        return ("Pre-training corpus: WikiText-2 valid + 40 Project Gutenberg books (10.8M words); the mini BERT "
                f"(4 layers, 256 wide, 11M parameters) pre-trained here by masked LM for {MINI_MLM['max_steps']:,} "
                f"steps of {MINI_MLM['batch_size']} x {MINI_MLM['max_seq_len']} tokens (RoBERTa's recipe, "
                "all-MiniLM-L6-v2's vocabulary).")

    def quick_scale(self, settings: dict) -> dict:
        """`settings` as they run: with --quick, tiny and a few steps."""
        return {**settings, **QUICK} if self.quick else settings

    def shared_mlm(self) -> Path:
        """The mini BERT pre-trained by masked LM that most claims start from (see MINI_MLM)."""
        return self.pretrained(**self.quick_scale(MINI_MLM))

    def ulmfit_language_model(self, target_text: Path, general: dict | None = None) -> Path:
        """ULMFiT's first two stages: an AWD-LSTM language model pre-trained on the shared corpus with
        its own 8,000-word vocabulary (`general`: its settings as they run; default AWD_LSTM_LM at the
        experiment's scale), then fine-tuned as a language model on the target task's text."""
        general = general or self.quick_scale(AWD_LSTM_LM)
        target = {**general, **TARGET_LM, "corpus": [str(target_text)], "init": str(self.pretrained(**general))}
        if self.quick:  # the first QUICK_EXAMPLES texts: hold out a tenth, enough for a window of held-out tokens
            target = {**self.quick_scale(target), "eval_fraction": 0.1}
        return self.pretrained(**target)

    def task_text(self, folder: str, task: str) -> Path:
        """A task's training texts as a corpus, one document per example, labels dropped (in the cache:
        the file's name hashes its content, so every claim shares it)."""
        spec = TASKS[task]
        examples = read_examples(spec, task_files(spec, self.task_data(folder), ["train"])["train"], "train")
        text = "\n\n".join(map(example_text, examples)) + "\n"
        path = self.cache / "claims" / f"{task}-train-text-{hashlib.sha256(text.encode()).hexdigest()[:16]}.txt"
        if not path.exists():
            write_text_atomic(path, text)
        return path

    def random_weights(self, like: Path) -> Path:
        """A model of `like`'s architecture and vocabulary with random weights (seed 0): the
        from-scratch baseline, under the claim's output folder."""
        folder = self.out / "models" / f"random-weights-of-{like.name}"
        if not (folder / "config.json").exists():
            save_random_weights(like, folder, seed=0)
        return folder

    def pretrained(self, **settings: Any) -> Path:
        """A model pre-trained on the shared corpus with these PretrainConfig settings, from the
        cache when any claim has trained it before (see the module docstring).

        The default vocabulary is all-MiniLM-L6-v2's, so every BERT-family model here shares it
        with the real pre-trained model the claims compare against. With the experiment's `recipe`,
        every BERT-family model takes it (a setting of its own, so its key, and its cached model,
        differ from the claim's own).
        """
        settings = self.with_recipe({"tokenizer": str(minilm()), "corpus": self.corpus(), **settings})

        def train(out: Path, resume: bool) -> None:
            cfg = PretrainConfig(out=str(out), cache_dir=str(self.cache), resume=resume, progress=not self.quick,
                                 eval_every=0, save_every=100, device=self.device, **settings)
            if run_pretraining(cfg) == "interrupted":
                raise KeyboardInterrupt

        return self.cached("pretrained", pretraining_key(settings), settings, train)

    def with_recipe(self, settings: dict) -> dict:
        """PretrainConfig settings with the experiment's recipe when their family takes it (`recipe_refusal`)."""
        if self.recipe and recipe_refusal(self.recipe, settings.get("arch", default_setting("arch"))) is None:
            return {**settings, "recipe": self.recipe}
        return settings

    def static_vectors(self, **settings: Any) -> Path:
        """Static word vectors (`bertology static train` settings) on the shared corpus, cached by content."""
        settings = {"corpus": self.corpus(), **settings}
        return self.cached("static", recipe_key("static", settings), settings,
                           lambda out, _: train_static(StaticTrainConfig(out=str(out), **settings)))

    def translation_model(self, **settings: Any) -> Path:
        """CoVe's translation model (`bertology translate train` settings) on Multi30k, cached by content."""
        settings = {"data": str(self.path("multi30k")), **settings}

        def train(out: Path, resume: bool) -> None:
            train_translation(TranslateTrainConfig(out=str(out), resume=resume, progress=not self.quick,
                                                   device=self.device, **settings))

        return self.cached("translation", recipe_key("translate", settings), settings, train)

    def cached(self, kind: str, key: str, settings: dict, train: Callable[[Path, bool], None]) -> Path:
        """The folder of a model trained by `train(folder, resume)` with `settings`, keyed by `key`:
        trained into `<key>.partial` (resumed when a run was interrupted), renamed when finished."""
        folder = self.cache / "claims" / f"{kind}-{key[:20]}"
        if (folder / "claim_settings.json").exists():
            self.log(f"{kind} model from the cache: {folder}")
            return folder
        partial = folder.with_name(folder.name + ".partial")
        resume = (partial / "metrics.jsonl").exists()
        if partial.exists() and not resume:
            shutil.rmtree(partial)
        self.log(f"training ({describe(settings)}) into {partial}" + (" (resuming)" if resume else ""))
        train(partial, resume)
        write_json_atomic(partial / "claim_settings.json", {"key": key, **settings})
        os.replace(partial, folder)
        return folder

    def finetuned(self, name: str, **settings: Any) -> dict:
        """Fine-tune over the experiment's seeds (FinetuneConfig settings: model, task, data, ...);
        returns run_finetuning's summary: the median of each metric, its min and max, and "runs"."""
        def run(folder: Path) -> dict:
            cfg = FinetuneConfig(out=str(folder), seed=self.seeds[0], seeds=len(self.seeds), progress=False,
                                 learning_curve=not self.quick, device=self.device, **settings)
            summary = run_finetuning(cfg)
            if len(self.seeds) == 1:  # run_finetuning summarises several seeds only
                summary = {**summary, "runs": [{"seed": self.seeds[0], **summary}]}
            return summary

        return self.seed_runs(name, "fine-tuning", run)

    def seed_runs(self, name: str, what: str, run: Callable[[Path], dict]) -> dict:
        """`run(folder)` (training over the seeds into runs/<name>, returning its summary), or the
        summary of a finished run read back. The summary is written last (claim_runs.json), so a run
        without it is unfinished and starts again."""
        folder = self.out / "runs" / name
        finished = folder / "claim_runs.json"
        if finished.exists():
            return loads_json(finished.read_text(encoding="utf-8"))
        if folder.exists():
            shutil.rmtree(folder)
        self.log(f"{what} {name} ({len(self.seeds)} seeds)")
        summary = run(folder)
        write_json_atomic(finished, summary)
        return summary

    def glue_accuracies(self, name: str, model: Path, recipe: dict = GLUE_RECIPE,
                        lr: float = MINI_FINETUNE_LR) -> dict[str, list[float]]:
        """Column -> dev accuracy of `model` fine-tuned on each task of `recipe` (GLUE_TASKS's columns ->
        FinetuneConfig settings) at rate `lr`, one value per seed (runs under runs/<name>-<task>)."""
        scores = {}
        for column, settings in recipe.items():
            task, folder = GLUE_TASKS[column]
            summary = self.finetuned(f"{name}-{task}", model=str(model), task=task, data=str(self.task_data(folder)),
                                     lr=lr, **self.glue_settings(settings))
            scores[column] = seed_values(summary, "accuracy")
        return scores

    def glue_settings(self, settings: dict) -> dict:
        """A GLUE recipe's settings for one task as they run: with --quick, QUICK_GLUE's few examples."""
        return {**settings, **QUICK_GLUE} if self.quick else settings

    def glue_scale(self, recipe: dict = GLUE_RECIPE, lr: float | str = MINI_FINETUNE_LR) -> str:
        """The fine-tuning of `glue_accuracies`, in words for a report's scale."""
        if self.quick:
            return (f"Fine-tuning (--quick): {QUICK_GLUE['max_train_examples']} examples of each task, "
                    f"{QUICK_GLUE['epochs']} epoch, rows of {QUICK_GLUE['max_seq_len']} tokens, "
                    f"{len(self.seeds)} seeds.")
        tasks = "; ".join(f"{column} on {s['max_train_examples']:,} training examples" if "max_train_examples" in s
                          else f"{column} on its whole training set" for column, s in recipe.items())
        details = "; ".join(f"{column}: {s['epochs']:g} epoch(s), batch {s.get('batch_size', 32)}, rows of "
                            f"{s['max_seq_len']} tokens" for column, s in recipe.items())
        return (f"Fine-tuning at lr {lr} over {len(self.seeds)} seeds: {tasks} (the same subset for every model "
                f"and seed); {details}; dev accuracy of the best epoch (SST-2 872 sentences, MRPC 408 pairs).")

    def majority_note(self) -> str:
        """What always answering the dev set's most frequent label scores on each GLUE task: the floor."""
        shares = []
        for column, (task, folder) in GLUE_TASKS.items():
            spec = TASKS[task]
            dev = read_examples(spec, task_files(spec, self.task_data(folder), ["dev"])["dev"], "dev")
            labels = Counter(example.label for example in dev)
            shares.append(f"{column} {max(labels.values()) / sum(labels.values()):.3f}")
        return f"Majority-class dev accuracy: {', '.join(shares)}."

    def report(self, claim: "ClaimReport") -> dict:
        """Write results.json and results.md (the table, the verdicts, the scale, the machine and the time)."""
        results = {"claim": claim.name, "title": claim.title, "quick": self.quick, "seeds": self.seeds,
                   "minutes": round(self.minutes(), 1), "machine": machine(), "scale": claim.scale,
                   "paper": claim.paper, "columns": claim.columns, "rows": claim.rows,
                   "verdicts": [dataclasses.asdict(v) for v in claim.verdicts], "plots": claim.plots,
                   "notes": claim.notes}
        write_json_atomic(self.out / "results.json", results)
        shown = results if self.beside is None else rows_beside(self.beside, results, f"--recipe {self.recipe}")
        write_text_atomic(self.out / "results.md", markdown(shown))
        return results


def first_examples(file: Path, count: int = QUICK_EXAMPLES) -> str:
    """The start of a task file in the file's own format: SQuAD JSON (whole articles until `count`
    questions), CoNLL (the first `count` blank-line-separated blocks after the first), or lines
    (the first `count` + 1: a TSV's header and `count` rows; WiC's data and gold files alike)."""
    text = file.read_text(encoding="utf-8")
    if file.suffix == ".json":
        squad = loads_json(text)
        articles, questions = [], 0
        for article in squad["data"]:
            if questions >= count:
                break
            articles.append(article)
            questions += sum(len(paragraph["qas"]) for paragraph in article["paragraphs"])
        return json.dumps({**squad, "data": articles})
    if "\n\n" in text.replace("\r\n", "\n"):
        return "\n\n".join(re.split(r"\n\s*\n", text.replace("\r\n", "\n"))[: count + 1]).rstrip("\n") + "\n"
    return "".join(text.splitlines(keepends=True)[: count + 1])


def example_text(example: Any) -> str:
    """An example's text with its labels dropped: a sentence or both of a pair, a tagged sentence's
    words, a question and its context."""
    if isinstance(example, TokenExample):
        return " ".join(example.words)
    if isinstance(example, SpanExample):
        return f"{example.question} {example.context}"
    return " ".join(filter(None, (example.text_a, example.text_b)))


# Settings renamed so that one thing has one name on every command, hashed under the names the cached
# models were trained with: a rename retrains nothing.
KEY_NAMES = {"max_seq_len": "seq_len", "max_train_examples": "max_train_pairs"}


def pretraining_key(settings: dict) -> str:
    """A hash of everything a pre-trained model depends on: the settings and the corpus files' bytes."""
    corpus = []
    for path in settings["corpus"]:
        files = sorted(p for p in Path(path).rglob("*") if p.is_file()) if Path(path).is_dir() else [Path(path)]
        corpus += [file_digest(p) for p in files]
    described = {"version": _CACHE_VERSION,
                 **{KEY_NAMES.get(k, k): v for k, v in settings.items() if k not in ("corpus", "tokenizer")},
                 "corpus": corpus, "tokenizer": [file_digest(p) for p in sorted(Path(settings["tokenizer"]).glob(
                     "*")) if p.name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json")]
                 if settings.get("tokenizer") else None}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode("utf-8")).hexdigest()


def recipe_key(recipe: str, settings: dict) -> str:
    """A hash of a recipe's settings, every file or folder they name by its bytes (so a model
    trained from a cached folder is keyed by that folder's content, not its path)."""
    def content(value: Any) -> Any:
        if isinstance(value, list):
            return [content(item) for item in value]
        if isinstance(value, str) and value and Path(value).exists():
            path = Path(value)
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            return [(str(p.relative_to(path)) if path.is_dir() else "", file_digest(p)) for p in files]
        return value
    described = {"version": _CACHE_VERSION, "recipe": recipe,
                 **{KEY_NAMES.get(k, k): content(v) for k, v in settings.items()}}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode("utf-8")).hexdigest()


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(settings: dict) -> str:
    """The pre-training settings a reader cares about, in one line."""
    keys = ("arch", "method", "preset", "objective", "max_steps", "epochs", "max_seq_len", "batch_size", "lr")
    return ", ".join(f"{k} {settings[k]}" for k in keys if k in settings)


def encoder_parameters(model: Path) -> int:
    """The parameters of a pre-trained BERT's encoder (embeddings, layers and pooler; no pre-training
    heads), shared weights counted once."""
    return BertModel(BertConfig.load(model)).num_parameters()


def pretraining_summary(model: Path) -> dict:
    """A pre-trained model's run from its metrics.jsonl: steps, seconds, tokens, tokens/s and the
    last held-out evaluation ("eval")."""
    rows = [json.loads(line) for line in (model / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    return run_summary(rows)


def size_label(preset: str) -> str:
    """A BERT preset as a row's name: "small (4 layers, 512 wide)"."""
    layers, hidden = SIZES[preset]
    return f"{preset} ({layers} layers, {hidden} wide)"


def corpus_words(quick: bool) -> str:
    """The shared pre-training corpus, in a few words."""
    return "WikiText-2 valid" if quick else "WikiText-2 valid + 40 Project Gutenberg books (10.6M tokens)"


@functools.cache
def minilm() -> Path:
    """The installed all-MiniLM-L6-v2's folder: the real pre-trained model the claims compare against
    unless --model names another, and the vocabulary of every BERT pre-trained here (looked up once:
    finding it costs a second or two)."""
    return resolve_model_dir("all-MiniLM-L6-v2")


def slug(name: str) -> str:
    """A folder name for a row: "BERT, pre-trained here" -> "bert-pre-trained-here"."""
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


def machine() -> dict:
    """What the numbers were measured on."""
    return {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}


# ----- verdicts and reports ------------------------------------------------------------------------


@dataclass
class Verdict:
    """Whether a claim's direction held: `better` beat `worse` on every seed's range, or the reverse."""

    statement: str  # "MLM beats left-to-right on SQuAD"
    better: str  # the row the paper says is better
    worse: str
    metric: str
    outcome: str  # "reproduced", "not reproduced" or "inconclusive (within seed range)"
    margin: float  # median(better) - median(worse)


def verdict(statement: str, better: str, better_values: list[float], worse: str, worse_values: list[float],
            metric: str) -> Verdict:
    """Reproduced when every seed of `better` beats every seed of `worse`; not reproduced when every
    seed of `worse` beats every seed of `better`; otherwise inconclusive (the seed ranges overlap)."""
    if min(better_values) > max(worse_values):
        outcome = "reproduced"
    elif max(better_values) < min(worse_values):
        outcome = "not reproduced"
    else:
        outcome = "inconclusive (within seed range)"
    margin = statistics.median(better_values) - statistics.median(worse_values)
    return Verdict(statement, better, worse, metric, outcome, round(margin, 4))


def seed_values(summary: dict, metric: str) -> list[float]:
    """One metric of every seed of a fine-tuning summary."""
    return [run[metric] for run in summary["runs"]]


@dataclass
class ClaimReport:
    """What a claim found: table rows (each a dict over `columns`; a metric's cell holds every
    seed's value), the verdicts, the plots written, and the scale in words."""

    name: str
    title: str
    paper: str  # what the paper found and at what scale
    scale: str  # what was run here
    columns: list[str]
    rows: list[dict] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def cell(value: Any) -> str:
    """A table cell: seeds' values as "median (min-max)", a number to 3 decimals, text as is."""
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        if len(value) == 1:
            return f"{value[0]:.3f}"
        return f"{statistics.median(value):.3f} ({min(value):.3f}-{max(value):.3f})"
    if isinstance(value, float):
        return f"{value:.3f}"
    return "" if value is None else str(value)


def read_beside(cfg: ReproduceConfig, claim: str) -> dict:
    """--beside's results.json, which must be claim `claim`'s (run without a recipe): a one-line error naming the
    file otherwise."""
    if not cfg.recipe:
        raise UserError("--beside shows a run with --recipe beside one without it: give --recipe too")
    path = Path(cfg.beside)
    try:
        base = loads_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"--beside {path}: not a readable results.json ({error})") from None
    if not isinstance(base, dict) or not {"claim", "columns", "rows", "verdicts", "notes"} <= set(base):
        raise UserError(f"--beside {path}: not the results.json of a claim (it lacks claim, columns, rows, verdicts "
                        "or notes)")
    if base["claim"] != claim:
        raise UserError(f"--beside {path}: holds claim {base['claim']}'s results, not claim {claim}'s")
    return base


def rows_beside(base: dict, results: dict, label: str) -> dict:
    """A claim's `results` from a run with a pre-training recipe (named by `label`) beside `base`, the same
    claim's without it: base's rows, each followed by this run's row of the same name wherever a number
    differs, named "NAME, LABEL" (rows only this run has come last, named so too); base's verdicts, then
    this run's, each prefixed "LABEL: "; base's notes, then this run's that base lacks. Paper, scale and
    plots stay base's, with a note on this run's date, scale and time."""
    if base["columns"] != results["columns"]:
        raise UserError(f"--beside: the columns differ ({', '.join(base['columns'])} against "
                        f"{', '.join(results['columns'])}): were both run at the same scale (--quick)?")
    key = base["columns"][0]
    ours = {row[key]: row for row in results["rows"]}
    rows = []
    for row in base["rows"]:
        rows.append(row)
        changed = ours.get(row[key])
        if changed is not None and changed != row:
            rows.append({**changed, key: f"{row[key]}, {label}"})
    named = {row[key] for row in base["rows"]}
    rows += [{**row, key: f"{name}, {label}"} for name, row in ours.items() if name not in named]
    verdicts = base["verdicts"] + [{**v, "statement": f"{label}: {v['statement']}"} for v in results["verdicts"]]
    when = (f"Rows named '..., {label}' come from a run of the same claim with `{label}` "
            f"({results['machine']['date']}, {results['minutes']} minutes); the rest from the run below, and a row "
            "that run gave the same numbers (a model the recipe does not touch) is shown once.")
    notes = [*base["notes"], *[note for note in results["notes"] if note not in base["notes"]], when]
    return {**base, "rows": rows, "verdicts": verdicts, "notes": notes}


def markdown(results: dict) -> str:
    """results.json as the Markdown that docs/claims.md and the README show."""
    lines = [f"### {results['title']}", "", f"Paper: {results['paper']}", "", f"Here: {results['scale']}", "",
             "| " + " | ".join(results["columns"]) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(results["columns"]))) + "|"]
    for row in results["rows"]:
        lines.append("| " + " | ".join(cell(row.get(column)) for column in results["columns"]) + " |")
    lines += ["", "Numbers: median over the seeds (min-max)." if len(results["seeds"]) > 1 else "", ""]
    for v in results["verdicts"]:
        lines.append(f"- {v['statement']}: **{v['outcome']}** ({v['metric']}, median {v['better']} - "
                     f"{v['worse']} = {v['margin']:+.3f})")
    lines += [f"- {note}" for note in results["notes"]]
    machine_ = results["machine"]
    lines += ["", f"Ran in {results['minutes']} minutes on {machine_['cpus']} CPU cores ({machine_['processor']}, torch "
              f"{machine_['torch']}, {machine_['torch_threads']} threads), {machine_['date']}"
              + (", --quick (checks the code, not the claim)." if results["quick"] else "."), ""]
    lines += [f"![{Path(p).stem}]({Path(p).name})" for p in results["plots"]]
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"
