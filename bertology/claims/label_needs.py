"""Claim 2: pre-training cuts the labels a task needs (ULMFiT's Figure 3; BERT's premise).

Howard & Ruder (2018) trained on 100 to 10k labels of IMDb, TREC-6 and AG News: ULMFiT with
100 labels matched training from scratch on 10-20 times more. Here: SST-2 dev accuracy
against 100, 300, 1k, 3k and 10k training labels (the same random subsets for every model)
for four models: a mini BERT from random weights, ULMFiT (an AWD-LSTM language model
pre-trained on the shared corpus, fine-tuned as a language model on SST-2's training text
with its labels unused, then as a classifier with discriminative rates, the slanted
triangular schedule and gradual unfreezing), the mini BERT pre-trained here by masked LM,
and all-MiniLM-L6-v2 (real pre-training at scale: a 6-layer model distilled from a large one
and trained on a billion sentence pairs; `--model` puts another model pre-trained elsewhere in
its place, at the same rate). Fewer labels get more epochs, so that every run
takes at least a few hundred steps.
"""

from __future__ import annotations

from ..plots import plot_seed_lines
from .experiment import ULMFIT_CLASSIFIER, ClaimReport, Experiment, seed_values, slug, verdict

LABELS = (100, 300, 1000, 3000, 10000)
EPOCHS = {100: 20, 300: 8, 1000: 4, 3000: 2, 10000: 1}
QUICK_LABELS = (20, 60)
QUICK_EPOCHS = {20: 2, 60: 1}
# lr per model: the BERT paper's fine-tuning range for the real model (chosen for all-MiniLM-L6-v2, kept
# for a --model); the mini BERTs (random and pre-trained here, the same settings for both) at the rate
# bench/distill.py uses for this size; ULMFiT's classifier by ULMFIT_CLASSIFIER (fastai's rate).
BERT_LR, MINI_LR = 5e-5, 3e-4


def run(experiment: Experiment) -> ClaimReport:
    """Fine-tune the four models on each label count over the seeds; the curves and the verdicts."""
    sst2 = str(experiment.task_data("glue/SST-2"))
    mlm = experiment.shared_mlm()
    ulmfit = experiment.ulmfit_language_model(experiment.task_text("glue/SST-2", "sst2"))
    models = {
        "BERT, random weights": (experiment.random_weights(mlm), {"lr": MINI_LR}),
        "ULMFiT (AWD-LSTM, 3 stages)": (ulmfit, ULMFIT_CLASSIFIER),
        "BERT, pre-trained here": (mlm, {"lr": MINI_LR}),
        experiment.reference_name: (experiment.reference, {"lr": BERT_LR}),
    }
    labels, epochs = (QUICK_LABELS, QUICK_EPOCHS) if experiment.quick else (LABELS, EPOCHS)
    curves: dict[str, dict[float, list[float]]] = {name: {} for name in models}
    rows = []
    for name, (model, settings) in models.items():
        row = {"model": name}
        for count in labels:
            summary = experiment.finetuned(f"{slug(name)}-{count}", model=str(model), task="sst2", data=sst2,
                                           max_train_examples=count, epochs=epochs[count], max_seq_len=64,
                                           **settings)
            curves[name][count] = row[f"{count:,} labels"] = seed_values(summary, "accuracy")
        rows.append(row)
    plot = plot_seed_lines(curves, experiment.out / "label_needs.png", xlabel="SST-2 training labels (log scale)",
                           ylabel="SST-2 dev accuracy", title="Pre-training cuts the labels a task needs",
                           log_x=True)
    scratch, pretrained = curves["BERT, random weights"], curves["BERT, pre-trained here"]
    verdicts = [verdict(f"pre-trained beats the same model from random weights at {count:,} labels",
                        "BERT, pre-trained here", pretrained[count], "BERT, random weights",
                        scratch[count], "accuracy") for count in labels]
    # ULMFiT's figure: the pre-trained model at some count matches scratch at 10x the labels
    tenfold = [(low, high) for low in labels for high in labels if high >= 10 * low]
    verdicts += [verdict(f"pre-trained with {low:,} labels matches random weights with {high:,}",
                         f"pre-trained, {low:,}", pretrained[low], f"random, {high:,}", scratch[high], "accuracy")
                 for low, high in tenfold[:1]]
    return ClaimReport(
        name="label-needs", title="Claim 2: pre-training cuts the labels a task needs",
        paper="ULMFiT (Howard & Ruder 2018, Figure 3): with 100 labelled IMDb reviews ULMFiT matched training from "
              "scratch on 10x (supervised) to 100x (semi-supervised) more; its language model was pre-trained on "
              "Wikitext-103 (103M tokens), and BERT-base on 3.3B words.",
        scale=experiment.scale_note() + f" SST-2 dev ({experiment.dev_examples('glue/SST-2', 'sst2'):,} sentences); "
              f"training subsets of {', '.join(map(str, labels))} "
              "labels, the same subset for every model and seed; epochs " +
              ", ".join(f"{epochs[c]} at {c:,}" for c in labels) + "; rows of at most 64 tokens." +
              ("" if experiment.reference_is_minilm else f" Pre-trained elsewhere: {experiment.reference_words()}."),
        columns=["model", *(f"{count:,} labels" for count in labels)], rows=rows, verdicts=verdicts,
        plots=[str(plot)])

