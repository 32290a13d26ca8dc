"""Claim 5: bigger models help, even on a task of 3,600 labels (BERT's Table 6).

Devlin et al. (2019) pre-trained six BERTs of 3 to 24 layers and 768 to 1,024 wide with one
recipe (1M steps of 256 sequences of up to 512 tokens on 3.3B words) and fine-tuned each on
MNLI, MRPC and SST-2 (dev accuracy, the mean of 5 fine-tuning restarts). From L=3/H=768 to
L=24/H=1024 MRPC rose 79.8 -> 87.8, SST-2 88.4 -> 93.7 and MNLI-m 77.9 -> 86.6, and the masked
LM's held-out perplexity fell 5.84 -> 3.23: the larger model was better at every step, even on
MRPC's 3,668 training pairs, where a large model might have been expected to overfit.

Here: the presets tiny (2 layers, 128 wide), mini (4, 256), small (4, 512) and medium (8, 512),
each pre-trained by masked LM (RoBERTa's recipe, the shared MLM's settings) on the same tokens:
300 steps of 32 x 64 (0.61M tokens, under a fifth of the shared mini MLM's budget). Adam's stable
rate falls with width, and the paper chose each model's fine-tuning rate on dev, which this
budget cannot afford; so both rates are set in advance by one rule, the mini's rates (1e-3 to
pre-train, 3e-4 to fine-tune) times sqrt(256 / width). Each model is then fine-tuned on MRPC (all
3,668 pairs) and on 2,000 SST-2 sentences over the seeds, and its held-out masked-LM accuracy
at the end of pre-training is reported beside (the paper's perplexity column).

The budget is medium's. Measured on one thread, a pre-training step costs 0.35 / 1.24 / 3.4 / 5.9
CPU-seconds for tiny / mini / small / medium and one MRPC epoch 23 / 101 / 329 / ~575 (medium
extrapolated), so 300 steps of all four take ~3,200 CPU-s and the fine-tuning (MRPC one epoch,
SST-2 two, three seeds) ~4,500: about 80 minutes with 2 free cores (2 threads run ~1.65x one, as
the shared MLM's 1,600 steps in 20 minutes show), ~130 minutes on one thread.

"""

from __future__ import annotations

import math
import statistics

from ..models.base import size_of
from ..plots import plot_seed_lines
from .experiment import (
    GLUE_TASKS,
    MINI_FINETUNE_LR,
    MINI_MLM,
    ClaimReport,
    Experiment,
    corpus_words,
    encoder_parameters,
    pretraining_summary,
    size_label,
    verdict,
)

SIZES = ("tiny", "mini", "small", "medium")
QUICK_SIZES = ("tiny", "mini")
STEPS = 300  # medium's budget; see the module docstring
QUICK_STEPS = {"max_steps": 30, "batch_size": 8}  # --quick: as the shared tiny MLM, but two sizes


def run(experiment: Experiment) -> ClaimReport:
    """Pre-train each size on the same tokens, fine-tune each on SST-2 and MRPC; accuracy against parameters."""
    sizes = QUICK_SIZES if experiment.quick else SIZES
    budget = QUICK_STEPS if experiment.quick else {"max_steps": STEPS}
    rows, curves = [], {task: {} for task in GLUE_TASKS}
    for preset in sizes:
        hidden = size_of(preset)[1]
        model = experiment.pretrained(**{**MINI_MLM, "preset": preset, "lr": width_scaled(MINI_MLM["lr"], hidden),
                                         **budget})
        parameters = encoder_parameters(model)
        row = {"model": size_label(preset), "parameters": f"{parameters / 1e6:.1f}M",
               "held-out MLM accuracy": pretraining_summary(model)["eval"].get("mlm_accuracy")}
        for task, values in experiment.glue_accuracies(preset, model, lr=width_scaled(MINI_FINETUNE_LR, hidden)).items():
            row[task] = curves[task][parameters] = values
        rows.append(row)
    plot = plot_seed_lines(curves, experiment.out / "model_size.png", xlabel="encoder parameters (log scale)",
                           ylabel="dev accuracy", title="Bigger models help, same pre-training tokens", log_x=True)
    smallest, largest = rows[0]["model"], rows[-1]["model"]
    verdicts = [verdict(f"the largest model beats the smallest on {task}", largest, rows[-1][task], smallest,
                        rows[0][task], "accuracy") for task in GLUE_TASKS]
    notes = [monotone_note(task, [row["model"] for row in rows], [row[task] for row in rows]) for task in GLUE_TASKS]
    notes.append(experiment.majority_note())
    if not experiment.quick:
        notes.append(f"Pre-training budget: {STEPS:,} steps for every size, set by what the largest model's "
                     "pre-training and fine-tuning allow in 90 minutes; the paper's models trained 1M steps, so these "
                     "are all far from converged.")
    return ClaimReport(
        name="model-size", title="Claim 5: bigger models help, even with 3,600 labels",
        paper="BERT (Devlin et al. 2019, Table 6): six sizes from L=3/H=768 to L=24/H=1024 (up to 340M parameters), "
              "each pre-trained 1M steps of 256 x 512 tokens on 3.3B words; dev accuracy (mean of 5 fine-tuning "
              "restarts) rose with size on every task: MRPC 79.8 -> 87.8 (3,668 training pairs), SST-2 88.4 -> 93.7, "
              "MNLI-m 77.9 -> 86.6, and held-out masked-LM perplexity fell 5.84 -> 3.23.",
        scale=f"Presets {', '.join(size_label(p) for p in sizes)}, each pre-trained by masked LM (RoBERTa's recipe) "
              f"for {budget['max_steps']:,} steps of {budget.get('batch_size', MINI_MLM['batch_size'])} x "
              f"{MINI_MLM['max_seq_len']} tokens, the same for every size, on {corpus_words(experiment.quick)}; rates "
              "1e-3 (pre-training) and 3e-4 (fine-tuning) times sqrt(256 / width). " + experiment.glue_scale(),
        columns=["model", "parameters", "held-out MLM accuracy", *GLUE_TASKS], rows=rows, verdicts=verdicts,
        plots=[str(plot)], notes=notes)


def width_scaled(rate: float, hidden: int) -> float:
    """The mini's (256 wide) learning rate times sqrt(256 / hidden), to two significant digits."""
    return float(f"{rate * math.sqrt(256 / hidden):.2g}")


def monotone_note(task: str, models: list[str], values: list[list[float]]) -> str:
    """Whether the medians rise with every step up in size, and where they do not."""
    medians = [statistics.median(v) for v in values]
    drops = [f"{models[k + 1]} {medians[k + 1]:.3f} <= {models[k]} {medians[k]:.3f}"
             for k in range(len(medians) - 1) if medians[k + 1] <= medians[k]]
    return f"{task}: the medians rise with every step up in size." if not drops else \
        f"{task}: not monotone in size ({'; '.join(drops)})."
