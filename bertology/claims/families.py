"""The summary: every model family built here, pre-trained on the same corpus for the same time,
on the same six tasks (the project's own version of the papers' GLUE tables).

Rows, in the story's order: static vectors (word2vec), CoVe, ELMo, ULMFiT, GPT, BERT, RoBERTa,
ALBERT, ELECTRA, XLNet, T5 and a distilled student. Every pre-trained row reads the shared corpus
(WikiText-2 valid + the 40 Gutenberg books) for claim 3's `PRETRAIN_MINUTES`, its steps set from
its own measured seconds per step (claim 3's `equal_time` and `step_seconds`):

- GPT, BERT (MLM + NSP), RoBERTa (MLM only, full sentences), ELECTRA, XLNet and T5 are claim 3's
  rows with its very settings, so the content-keyed cache hands over claim 3's models (or claim 3
  gets these): nothing is pre-trained twice.
- ALBERT is the whole of ALBERT: claim 3's MLM + sentence-order row with claim 7's two switches,
  factorised embeddings (E = half the width) and one set of layer weights shared by all layers.
- ELMo is claim 1's biLM (`mini`, 32 x 20 tokens) and ULMFiT claim 2's AWD-LSTM language model
  (`mini`, 32 x 70 tokens), each for the same minutes; ULMFiT then fine-tunes that language model
  on each task's own text (TARGET_LM) and trains the classifier by claim 2's settings.
- static vectors are claim 1's word2vec on the same corpus (trained by epochs, not minutes: its
  actual minutes are in the table), CoVe claim 1's translation model over claim 1's GloVe:
  CoVe's pre-training data is a translation corpus by its nature (Multi30k here).
- the distilled student: the BERT row fine-tuned on each task is the teacher (its first seed);
  the student is DistilBERT's: the BERT row's pre-trained encoder cut to half its layers, one
  out of two (`distill --student-layers`), distilled from the teacher over the task's training
  text and Tang et al.'s noisy copies (claim 11's recipe).

Columns: SST-2, MRPC (accuracy), STS-B (Spearman, as the BERT paper reports it), CoNLL-2003
(entity F1), the SQuAD subset (claim 3's v1.1-style questions; F1) and WiC. The fine-tuned
families take claim 3's recipe per column (GLUE_RECIPE for SST-2 and MRPC, MRPC's for STS-B,
SPAN_AND_TOKEN_TASKS for CoNLL-2003 and SQuAD, T5's SQuAD at 384 tokens) at claim 3's rate,
ULMFiT the same data at its own classifier's settings; the feature families (static, CoVe,
ELMo) the same data under claim 1's heads over frozen features, each as its paper feeds a task
model: CoVe as [GloVe; CoVe], ELMo as [word2vec; ELMo] (`finetune --vectors`: the static
row's vectors in front of ELMo's learned scalar mix). WiC is `bertology wic`'s probe (a
logistic regression on the target word's vectors, deterministic: one number, no seeds), the
best layer's dev accuracy and its name. A cell the
package refuses (it raises UserError) is n/a with the refusal's words in a footnote: nothing
stands in for a family that cannot do a task.

Full scale, estimated from the times measured on this project's 2-core machine (claims 1-3 and
11): after claims 1 and 3 have run, their models cached, about 130 minutes: step timing of the
three new pre-trainings 1, their pre-training 15 (ALBERT, ELMo and the AWD-LSTM, 5 minutes each),
ULMFiT's three task language models 7 (300 steps each, about 0.45 s a step; CoNLL-2003 and
SQuAD are refused before one is trained), 105 fine-tuning
runs of the seven Transformer families 36 (claim 3's 20 s a run), ULMFiT's 9 classifier runs
about 9, the 36 feature-head runs of static, CoVe and ELMo about 25 (claim 1's heads; cached
features), the 12 distillations about 30 (five times a fine-tuning's examples: claim 11's
transfer set; about 2.5 minutes each) and the WiC probes 5 (2,000 training pairs each). From a
cold cache add claim 3's 30 minutes of pre-training, its two vocabularies 8 and its timings 1,
and claim 1's word2vec 3, GloVe 5 and translation model 17: about 195 minutes. Over the claims'
90 minutes: it runs every family on every task, three seeds each; run it after claims 1 and 3.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import UserError
from ..files import loads_json
from ..models.base import SIZES
from ..models.bert import BertConfig
from ..plots import plot_seed_bars
from ..recipes.task_training import load_task_model
from ..tasks.readers import TASKS
from ..uses.wic import WicConfig, run_wic
from .albert_savings import finetuned_model
from .contextual_vs_static import COVE, ELMO, FEATURE_HEAD_LR, GLOVE, QUICK_COVE, QUICK_STATIC, WORD2VEC
from .contextual_vs_static import TASKS as FEATURE_HEADS
from .distillation import AUGMENT, DISTILL_EPOCHS, QUICK_AUGMENT, STUDENT_LR, distilled_over_seeds
from .experiment import (
    AWD_LSTM_LM,
    GLUE_RECIPE,
    TARGET_LM,
    ULMFIT_CLASSIFIER,
    ClaimReport,
    Experiment,
    corpus_words,
    pretraining_summary,
    seed_values,
    size_label,
    slug,
    verdict,
)
from .pretraining_task import (
    FINETUNE_LR,
    LTR_GPT,
    MLM,
    MLM_NSP,
    PRETRAIN_MINUTES,
    T5_SQUAD,
    equal_time,
    span_and_token_settings,
    squad_v1_folder,
    step_seconds,
    steps_within,
)

STATIC, COVE_ROW, ELMO_ROW, ULMFIT, GPT, BERT, ROBERTA, ALBERT, ELECTRA, XLNET, T5, DISTILLED = (
    "static (word2vec)", "CoVe", "ELMo", "ULMFiT", "GPT", "BERT", "RoBERTa", "ALBERT", "ELECTRA", "XLNet", "T5",
    "distilled student")
FAMILIES = (STATIC, COVE_ROW, ELMO_ROW, ULMFIT, GPT, BERT, ROBERTA, ALBERT, ELECTRA, XLNET, T5, DISTILLED)
# The families claim 3 pre-trains, with its settings: family -> its row there.
CLAIM_3_ROWS = {GPT: LTR_GPT, BERT: MLM_NSP, ROBERTA: MLM, ELECTRA: "ELECTRA", XLNET: "XLNet (permutation LM)",
                T5: "T5 (span corruption)"}
SOP_ROW = "MLM + SOP (ALBERT)"  # claim 3's sentence-order row: ALBERT's objective on BERT's encoder
FEATURE_FAMILIES = (STATIC, COVE_ROW, ELMO_ROW)
OBJECTIVES = {STATIC: "word2vec skip-gram", COVE_ROW: "MT-LSTM encoder translating English to German, over GloVe",
              ELMO_ROW: "biLM (forward and backward LSTM LMs over characters)",
              ULMFIT: "AWD-LSTM LM, then an LM on each task's text", GPT: "left-to-right LM", BERT: "MLM + NSP",
              ROBERTA: "MLM only, full sentences", ALBERT: "MLM + SOP, factorised embeddings, shared layers",
              ELECTRA: "replaced-token detection", XLNET: "permutation LM", T5: "span corruption",
              DISTILLED: "the BERT row's, cut to half its layers, distilled per task from BERT fine-tuned on it"}

# column -> (task, data folder (None: claim 3's SQuAD v1.1-style folder), the metric of its cells, the
# recipe: a GLUE recipe or the claim 3 column it shares)
COLUMNS: dict[str, tuple[str, str | None, str, dict | str]] = {
    "SST-2 acc.": ("sst2", "glue/SST-2", "accuracy", GLUE_RECIPE["SST-2"]),
    "MRPC acc.": ("mrpc", "glue/MRPC", "accuracy", GLUE_RECIPE["MRPC"]),
    "STS-B Spearman": ("stsb", "glue/STS-B", "spearman", GLUE_RECIPE["MRPC"]),  # a pair task: MRPC's recipe
    "CoNLL-2003 F1": ("conll2003", "conll2003", "f1", "CoNLL-2003 F1"),
    "SQuAD subset F1": ("squad", None, "f1", "SQuAD F1"),
}
WIC = "WiC acc. (best layer)"
WIC_TRAIN_PAIRS = 2000  # of WiC's 5,428 (the same subset for every model): twelve probes in a few minutes
DISTILL_SETTINGS = ("max_train_examples", "max_seq_len", "batch_size", "epochs")  # a column's recipe that distill takes


@dataclass(frozen=True)
class NotApplicable:
    """A cell the package refuses: its one-line reason."""

    reason: str


@dataclass(frozen=True)
class Probe:
    """A WiC cell: the best layer's dev accuracy, and the layer."""

    accuracy: float
    layer: str


Cell = list[float] | Probe | NotApplicable


def run(experiment: Experiment) -> ClaimReport:
    """Pre-train (or find in the cache) every family, fine-tune or train heads on each task over the
    seeds, probe WiC; the table, a plot and a few comparisons."""
    settings = pretraining_settings(experiment)
    models = {family: experiment.pretrained(**row) for family, row in settings.items()}
    models |= static_sources(experiment)
    squad = squad_v1_folder(experiment)
    cells: dict[str, dict[str, Cell]] = {}
    for family in FAMILIES:
        cells[family] = {}
        for column, (task, folder, metric, _) in COLUMNS.items():
            data = squad if folder is None else experiment.task_data(folder)
            run_cell = cell_runner(experiment, family, models, settings, column, data)
            cells[family][column] = attempt(lambda: seed_values(run_cell(), metric))
        wic_model = student(experiment, "sst2") if family == DISTILLED else models[family]
        cells[family][WIC] = attempt(lambda: wic_probe(experiment, family, wic_model))
    shown, footnotes = table_cells(cells)
    rows = []
    for family in FAMILIES:
        model = models.get(family, models[BERT])
        rows.append({"family": family, "pre-training": pretraining_words(family, settings, experiment.quick),
                     "minutes (actual)": None if family == DISTILLED else training_minutes(model), **shown[family],
                     "model": str(model),
                     "cells": {column: value if isinstance(value, list) else dataclasses.asdict(value)
                               for column, value in cells[family].items()}})
    # one group per family, one bar per task: six colours, where twelve families would repeat matplotlib's ten
    groups = {family: {column: value if isinstance(value, list) else [value.accuracy]
                       for column, value in cells[family].items() if not isinstance(value, NotApplicable)}
              for family in FAMILIES}
    plot = plot_seed_bars(groups, experiment.out / "families.png", ylabel="dev score (median, seed range)",
                          title="Every family on the same corpus for the same minutes")
    return ClaimReport(
        name="families", title="The summary: every model family on the same corpus for the same time",
        paper="The papers' GLUE tables (BERT's Table 1, RoBERTa's, ALBERT's, ELECTRA's, XLNet's, T5's, DistilBERT's) "
              "compare families pre-trained on different corpora for different times (BERT-base: 3.3B words, 1M "
              "steps of 256 sequences; RoBERTa: 160GB; T5: C4) and fine-tuned by different recipes; CoVe, ELMo and "
              "ULMFiT report other tasks. Here every family reads one corpus for the same minutes and every task "
              "one recipe.",
        scale=scale_note(experiment, settings), columns=["family", "pre-training", "minutes (actual)", *COLUMNS, WIC],
        rows=rows, verdicts=verdicts(cells), plots=[str(plot)], notes=notes(experiment) + footnotes)


def pretraining_settings(experiment: Experiment) -> dict[str, dict]:
    """The PretrainConfig settings of every family pre-trained for the same minutes (claim 3's budget),
    max_steps from each one's measured seconds per step, at the experiment's scale."""
    claim_3, _, budget = equal_time(experiment)
    sop = claim_3[SOP_ROW]
    settings = {family: claim_3[row] for family, row in CLAIM_3_ROWS.items()}
    settings[ALBERT] = {**sop, "embedding_size": SIZES[sop["preset"]][1] // 2, "share_layers": True}  # claim 7's E
    settings[ELMO_ROW] = experiment.quick_scale(ELMO)
    settings[ULMFIT] = experiment.quick_scale(AWD_LSTM_LM)
    return {family: {**row, "max_steps": steps_within(budget, step_seconds(experiment, row))}
            for family, row in settings.items()}


def static_sources(experiment: Experiment) -> dict[str, Path]:
    """Claim 1's word2vec, and its CoVe over its GloVe (the same cached models)."""
    quick = QUICK_STATIC if experiment.quick else {}
    glove = experiment.static_vectors(**{**GLOVE, **quick})
    cove = experiment.translation_model(vectors=str(glove), **{**COVE, **(QUICK_COVE if experiment.quick else {})})
    return {STATIC: experiment.static_vectors(**{**WORD2VEC, **quick}), COVE_ROW: cove}


def cell_runner(experiment: Experiment, family: str, models: dict[str, Path], settings: dict[str, dict],
                column: str, data: Path) -> Callable[[], dict]:
    """The run of one cell: a function returning its summary over the seeds (fine-tuning, a feature
    head or distillation), under runs/<family>-<task>."""
    task, _, _, recipe = COLUMNS[column]
    arch = settings.get(family, {}).get("arch")
    recipe = experiment.glue_settings(recipe) if isinstance(recipe, dict) else \
        span_and_token_settings(experiment, recipe, arch)
    name = f"{slug(family)}-{task}"
    if family == DISTILLED:
        return lambda: distilled_over_seeds(
            experiment, name, teacher=str(finetuned_model(experiment, f"{slug(BERT)}-{task}")), student=str(models[BERT]),
            student_layers=student_depth(models[BERT]), data=str(data), augment=QUICK_AUGMENT if experiment.quick else AUGMENT, lr=STUDENT_LR,
            cache_dir=str(experiment.cache / "distill"), **{k: v for k, v in recipe.items() if k in DISTILL_SETTINGS})
    if family in FEATURE_FAMILIES:
        head = FEATURE_HEADS["CoNLL-2003" if task == "conll2003" else "SST-2"]
        features = {"mode": "features", "feature_head": head["feature_head"], "epochs": head["epochs"],
                    "lr": FEATURE_HEAD_LR, "feature_layers": "mix" if family == ELMO_ROW else "sum_last_four"}
        if family == ELMO_ROW:  # ELMo's paper: [x_k; ELMo_k], the task model's word vectors beside ELMo's
            features["vectors"] = str(models[STATIC])
        return lambda: experiment.finetuned(name, model=str(models[family]), task=task, data=str(data),
                                            **{**recipe, **features})
    if family == ULMFIT:
        def ulmfit() -> dict:
            # the package's refusal of a task the classifier does not take, before a task LM is trained for nothing
            load_task_model(str(experiment.pretrained(**settings[ULMFIT])), TASKS[task])
            text = experiment.task_text(str(data), task)  # an absolute folder: task_data keeps it as it is
            model = experiment.ulmfit_language_model(text, settings[ULMFIT])
            return experiment.finetuned(name, model=str(model), task=task, data=str(data),
                                        **{**recipe, **ULMFIT_CLASSIFIER})
        return ulmfit
    return lambda: experiment.finetuned(name, model=str(models[family]), task=task, data=str(data), lr=FINETUNE_LR,
                                        **recipe)


def student_depth(bert: Path) -> int:
    """DistilBERT's student depth: half the BERT row's layers (at least one), kept one out of two."""
    return max(1, BertConfig.load(bert).num_hidden_layers // 2)


def student(experiment: Experiment, task: str) -> Path:
    """The distilled student of `task`, first seed (distillation keeps one folder per seed)."""
    return experiment.out / "runs" / f"{slug(DISTILLED)}-{task}" / f"seed-{experiment.seeds[0]}"


def wic_probe(experiment: Experiment, family: str, model: Path) -> Probe:
    """The WiC probe of a family's model: its best layer's dev accuracy (results in wic/<family>.json)."""
    probe = run_wic(WicConfig(data=str(experiment.task_data("wic")), model=str(model),
                              max_train_examples=WIC_TRAIN_PAIRS, device=experiment.device,
                              out=str(experiment.out / "wic" / f"{slug(family)}.json")))
    best = max(probe["layers"], key=lambda layer: layer["dev_accuracy"])
    return Probe(best["dev_accuracy"], best["layer"])


def attempt(compute: Callable[[], Any]) -> Any:
    """`compute()`, or the package's refusal as a NotApplicable cell (see `refusal`)."""
    try:
        return compute()
    except UserError as err:
        return NotApplicable(refusal(str(err)))


def refusal(message: str) -> str:
    """A UserError's message as an n/a cell's reason: its first line, without the folder it starts with
    (the cell's row and column say which model): "/cache/m: an AWD-LSTM ..." -> "an AWD-LSTM ..."."""
    line = message.splitlines()[0] if message else "refused"
    folder, separator, rest = line.partition(": ")
    return rest if separator and rest and Path(folder).is_absolute() else line


def table_cells(cells: dict[str, dict[str, Cell]]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each family's cells as the report's table shows them, and the footnotes of the n/a cells.

    Seeds' values stay lists (the report shows "median (min-max)"), a WiC probe reads "0.553 (LSTM 1)",
    and an n/a cell "n/a [k]", numbered in reading order (row by row), with the footnote
    "[k] family, column: reason". Example: {"static": {"SQuAD F1": NotApplicable("no spans")}} gives
    ({"static": {"SQuAD F1": "n/a [1]"}}, ["[1] static, SQuAD F1: no spans"]).
    """
    shown: dict[str, dict[str, Any]] = {}
    footnotes = []
    for family, row in cells.items():
        shown[family] = {}
        for column, value in row.items():
            if isinstance(value, NotApplicable):
                footnotes.append(f"[{len(footnotes) + 1}] {family}, {column}: {value.reason}")
                shown[family][column] = f"n/a [{len(footnotes)}]"
            elif isinstance(value, Probe):
                shown[family][column] = f"{value.accuracy:.3f} ({value.layer})"
            else:
                shown[family][column] = value
    return shown, footnotes


def training_minutes(model: Path) -> float:
    """The minutes a cached model's training took, by its own records (static vectors: results.json;
    the rest: metrics.jsonl); CoVe's add its GloVe's."""
    if (model / "results.json").is_file():  # `bertology static train` keeps its times there
        return round(loads_json((model / "results.json").read_text(encoding="utf-8"))["seconds"]["total"] / 60, 2)
    minutes = pretraining_summary(model)["seconds"] / 60
    settings = model / "claim_settings.json"
    if settings.is_file() and "vectors" in (read := loads_json(settings.read_text(encoding="utf-8"))):
        minutes += training_minutes(Path(read["vectors"]))  # a translation model over word vectors: theirs too
    return round(minutes, 2)


def pretraining_words(family: str, settings: dict[str, dict], quick: bool) -> str:
    """A row's pre-training in a few words: the objective and the steps (word2vec's epochs)."""
    if family in settings:
        return f"{OBJECTIVES[family]}, {settings[family]['max_steps']:,} steps"
    if family == STATIC:
        return f"{OBJECTIVES[family]}, {(QUICK_STATIC if quick else WORD2VEC)['epochs']} epoch(s)"
    return OBJECTIVES[family]


def verdicts(cells: dict[str, dict[str, Cell]]) -> list:
    """A few comparisons the table allows: contextual features and BERT against static vectors on SST-2
    and CoNLL-2003, BERT against GPT on SQuAD, BERT against its distilled student on SST-2."""
    pairs = [(better, STATIC, column) for column in ("SST-2 acc.", "CoNLL-2003 F1") for better in (ELMO_ROW, BERT)]
    pairs += [(BERT, GPT, "SQuAD subset F1"), (BERT, DISTILLED, "SST-2 acc.")]
    results = []
    for better, worse, column in pairs:
        a, b = cells[better][column], cells[worse][column]
        if isinstance(a, list) and isinstance(b, list):
            results.append(verdict(f"{better} beats {worse} on {column.rsplit(' ', 1)[0]}", better, a, worse, b,
                                   COLUMNS[column][2]))
    return results


def scale_note(experiment: Experiment, settings: dict[str, dict]) -> str:
    """What ran, in words."""
    bert, elmo, awd = settings[BERT], settings[ELMO_ROW], settings[ULMFIT]
    layers = SIZES[bert["preset"]][0]
    time = ("the time of the quick steps of claim 3's fastest objective" if experiment.quick
            else f"{PRETRAIN_MINUTES:g} minutes each")
    return (f"Pre-training on {corpus_words(experiment.quick)} for {time} (steps = the time / each model's measured "
            f"seconds per step). The Transformers {size_label(bert['preset'])} (T5: encoder and decoder each; ALBERT "
            f"E={settings[ALBERT]['embedding_size']}, all layers shared), batches of {bert['batch_size']} x "
            f"{bert['max_seq_len']} tokens, 8,000-piece vocabularies trained on the corpus (claim 3). ELMo `{elmo['preset']}` "
            f"({elmo['batch_size']} x {elmo['max_seq_len']} tokens) and ULMFiT's AWD-LSTM `{awd['preset']}` "
            f"({awd['batch_size']} x {awd['max_seq_len']}), each with its own 8,000-word vocabulary. Static: word2vec "
            "(claim 1's settings). CoVe's pre-training data is necessarily a translation corpus: Multi30k's 29k "
            "English-German captions, over GloVe trained on the shared corpus (claim 1's). "
            + experiment.glue_scale(GLUE_RECIPE, FINETUNE_LR)
            + " STS-B by MRPC's recipe. CoNLL-2003 and SQuAD by claim 3's recipes (T5's SQuAD at "
            f"{T5_SQUAD['max_seq_len']} tokens). The distilled student: DistilBERT's, the BERT row's pre-trained "
            f"encoder cut to {max(1, layers // 2)} of its {layers} layers (one out of two), distilled from the BERT "
            "row fine-tuned on the task (its first seed) over the task's training examples and "
            f"{QUICK_AUGMENT if experiment.quick else AUGMENT} noisy copies of each (claim 11's recipe: KL at "
            f"temperature 2, lr {STUDENT_LR:g}, no labels), as many epochs as the column's recipe "
            f"(claim 11's distilled students took {DISTILL_EPOCHS}).")


def notes(experiment: Experiment) -> list[str]:
    """The choices a reader needs to weigh the table."""
    return [
        "Metrics: SST-2 and MRPC dev accuracy, STS-B dev Spearman correlation (the BERT paper's), CoNLL-2003 dev "
        "entity F1, SQuAD F1 on claim 3's v1.1-style subset; the best epoch of each run. Numbers: median (min-max) "
        f"over {len(experiment.seeds)} seeds.",
        f"Feature families (static, CoVe, ELMo): the encoder frozen, claim 1's heads on each column's training data "
        f"(SST-2, MRPC and STS-B: {FEATURE_HEADS['SST-2']['feature_head']} over mean-pooled features, "
        f"{FEATURE_HEADS['SST-2']['epochs']} epochs; CoNLL-2003: the BERT paper's two-layer BiLSTM, "
        f"{FEATURE_HEADS['CoNLL-2003']['epochs']} epochs; lr {FEATURE_HEAD_LR:g}); each as its paper feeds a task "
        "model: CoVe's features are [GloVe; CoVe], ELMo's [word2vec; ELMo], the static row's vectors in front of "
        "ELMo's learned scalar mix of the token layer and both LSTMs (its WiC probe reads the biLM's layers alone).",
        f"ULMFiT: the AWD-LSTM language model fine-tuned as a language model on each task's training text for "
        f"{TARGET_LM['max_steps']} steps (ULMFiT's second stage, the labels unused), then "
        f"its classifier on the column's data at lr {ULMFIT_CLASSIFIER['lr']:g} with discriminative rates (x "
        f"{ULMFIT_CLASSIFIER['layer_lr_decay']:.2f} a layer down), the slanted triangular schedule and gradual "
        "unfreezing (claim 2's settings).",
        f"WiC: `bertology wic`'s probe on up to {WIC_TRAIN_PAIRS:,} training pairs (the same for every model), every "
        "dev pair (638 at full scale, balanced: chance 0.500), the best layer of each model named (any layer, the "
        "context-free ones too); deterministic, one number. The distilled "
        "student has no task-free form: its WiC cell probes the SST-2 student (first seed).",
        "n/a: the package refuses that family on that task (the note of the same number quotes its refusal); no "
        "stand-in ran.",
    ]
