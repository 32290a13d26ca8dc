"""Claim 4: the masked LM converges a little more slowly than a left-to-right LM but is ahead
downstream almost at once and stays ahead (BERT, Appendix C.1, Figure 5).

Devlin et al. (2019) fine-tuned BERT-base (12 layers, 768 wide, 110M parameters) on MNLI from
checkpoints of its 1M-step pre-training (batches of 256 x 512 tokens, BooksCorpus + English
Wikipedia, 3.3B words), the masked LM beside a left-to-right one: "The MLM model does converge
slightly slower than the LTR model. However, in terms of absolute accuracy the MLM model begins
to outperform the LTR model almost immediately."

Here: the mini BERT encoder pre-trained twice on the shared corpus with the same shape, rate
and steps (checkpoints.RUN_SHAPE): by masked LM (objective `roberta`: 15% of the
tokens masked, full-sentence packing, no next-sentence prediction, so that the two runs differ in
direction only) and by left-to-right LM (objective `clm`: a causal mask, every token predicts the
next). Five models from each run, at steps 64, 128, 256, 512 and 1,024 (one run each, see
checkpoints.py), are fine-tuned over the seeds on an SST-2 subset and an MRPC subset; the plots are
dev accuracy against pre-training steps. Verdicts, per task: the masked LM ahead at the last
checkpoint, and already ahead at the first (the paper: "almost immediately").

The left-to-right models are fine-tuned with the causal mask kept, as the paper did; their
sentence classifier reads the last real token (the only one that has read the whole input, GPT's
choice), since [CLS] at position 0 sees only itself under the mask.

Full scale and time (2 free cores): a masked-LM step of 32 x 64 tokens on the mini BERT takes
about 0.75 s (MINI_MLM: 1,600 steps in about 20 minutes); measured here side by side on one
thread, a left-to-right step takes 2.4x that (it predicts every token over the 30,522-word
vocabulary, the masked LM 15%), a fine-tuning run on SST-2 (2,000 examples) about 30 masked-LM
steps and one on MRPC (1,500) about 50. So 13.5 + 32 minutes of pre-training (with the
held-out evaluations at every 64th step), then 60 fine-tunings, 30 minutes: about 76 minutes
from a cold cache. Claim 8 reuses the masked-LM run.
"""

from __future__ import annotations

import statistics

from ..plots import plot_seed_lines
from .checkpoints import (
    CHECKPOINTS,
    MLM_RUN,
    QUICK_CHECKPOINTS,
    RUN_SHAPE,
    curve_rows,
    doubling_steps,
    downstream_curves,
    held_out_note,
    pretrained_at_steps,
    run_scale,
)
from .experiment import LIGHT_GLUE_RECIPE, ClaimReport, Experiment, verdict

LTR_RUN = {**RUN_SHAPE, "objective": "clm"}
MLM, LTR = "MLM", "LTR"


def run(experiment: Experiment) -> ClaimReport:
    """Pre-train both directions once, fine-tune the models kept along each run, and compare."""
    mlm_settings, ltr_settings = experiment.quick_scale(MLM_RUN), experiment.quick_scale(LTR_RUN)
    steps = doubling_steps(mlm_settings["max_steps"], QUICK_CHECKPOINTS if experiment.quick else CHECKPOINTS)
    mlm = pretrained_at_steps(experiment, steps, **mlm_settings)
    ltr = pretrained_at_steps(experiment, steps, **ltr_settings)
    curves = {MLM: downstream_curves(experiment, "mlm", mlm.models()),
              LTR: downstream_curves(experiment, "ltr", ltr.models())}
    plots, verdicts = [], []
    for task in curves[MLM]:
        plots.append(str(plot_seed_lines(
            {"masked LM (MLM)": curves[MLM][task], "left-to-right LM (LTR)": curves[LTR][task]},
            experiment.out / f"directionality_{task.lower().replace('-', '')}.png",
            xlabel="pre-training steps (log scale)", ylabel=f"{task} dev accuracy",
            title=f"Masked vs left-to-right pre-training: {task} along training", log_x=True)))
        first, last = steps[0], steps[-1]
        verdicts += [
            verdict(f"MLM beats LTR on {task} at the last checkpoint (step {last:,})", MLM, curves[MLM][task][last],
                    LTR, curves[LTR][task][last], "accuracy"),
            verdict(f"MLM is already ahead of LTR on {task} at the first checkpoint (step {first:,})", MLM,
                    curves[MLM][task][first], LTR, curves[LTR][task][first], "accuracy"),
        ]
    columns, rows = curve_rows(curves, steps)
    notes = [f"{label} gained {gain(curves[label][task], steps[0], steps[-1]):+.3f} {task} accuracy (median) from "
             f"step {steps[0]:,} to {steps[-1]:,}" for task in curves[MLM] for label in (MLM, LTR)]
    notes += [held_out_note("MLM", mlm, ("mlm_accuracy",)),
              held_out_note("LTR", ltr, ("lm_accuracy", "perplexity")) + " (next-token prediction: not on the "
              "masked LM's scale)",
              f"Compute per step: LTR {ltr.flops_per_step():.3g} FLOPs, MLM {mlm.flops_per_step():.3g} (the LTR head "
              "predicts every token over the vocabulary, the MLM's 15%)."]
    return ClaimReport(
        name="directionality",
        title="Claim 4: the masked LM overtakes a left-to-right LM early in pre-training",
        paper="BERT (Devlin et al. 2019, Appendix C.1, Figure 5): MNLI dev accuracy after fine-tuning from "
              "checkpoints of BERT-base's 1M-step pre-training (110M parameters, batches of 256 x 512 tokens, 3.3B "
              "words): the MLM model converges slightly slower than the LTR model but outperforms it in absolute "
              "accuracy almost immediately (and BERT-base still gains about 1 point from 500k to 1M steps).",
        scale=run_scale(experiment, mlm_settings, steps) + " MLM: objective roberta (masked LM over full "
              "sentences, no NSP); LTR: objective clm on the same encoder (causal mask), fine-tuned with the mask kept, "
              "the sentence head on the last token. " + experiment.glue_scale(LIGHT_GLUE_RECIPE),
        columns=columns, rows=rows, verdicts=verdicts, plots=plots,
        notes=notes)


def gain(curve: dict[int, list[float]], start: int, end: int) -> float:
    """How much the median score over the seeds rose from step `start` to step `end`."""
    return statistics.median(curve[end]) - statistics.median(curve[start])
