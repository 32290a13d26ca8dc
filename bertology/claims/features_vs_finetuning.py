"""Claim 10: feature extraction from the right layers comes close to fine-tuning (BERT's Table 7).

Devlin et al. (2019) froze BERT-base and fed its token vectors to a two-layer, 768-wide
BiLSTM tagger for CoNLL-2003 NER (trained on all 14,041 sentences; dev F1): the embeddings
layer 91.0, the second-to-last hidden layer 95.6, the last 94.9, a weighted sum of the last
four 95.9, the last four concatenated 96.1, a weighted sum of all 12 layers 95.5, against
96.4 for fine-tuning the whole model: the right layers come within 0.3 F1 of fine-tuning.

Here: all-MiniLM-L6-v2 (real weights: 6 layers, 384 wide) on 2,000 random CoNLL-2003
training sentences (the same for every run), scored on the full dev set (3,250 sentences,
entity F1). Six feature choices of the feature-based mode (models/features.py's
LAYER_CHOICES) each train the library's two-layer BiLSTM head (256 wide per direction, not
the paper's 768) on the frozen encoder's features, 6 epochs at lr 1e-3 (the features are
computed once per choice and cached on disk, so the epochs cost only the head); the sums
are plain sums (the paper's were weighted), and "all layers" includes the embeddings
output. Against them, the whole model fine-tuned with a per-token linear head, 5 epochs at
lr 1e-4 (with this few steps, 315, a higher rate than BERT-base's 5e-5; README fine-tunes
this model at 1e-4 on SST-2). Every run keeps its best epoch on dev.

Full run, estimated from the CPU time of one seed of each kind with 2,000 sentences on this
machine (one core): the encoder's features for one choice 50 s (train and dev), one head
epoch with its dev evaluation 26 s (the concatenation, 4x wider, about 42 s), one
fine-tuning epoch 81 s; in all about 77 minutes of one core (features 5, heads 52,
fine-tuning 20), some 55-60 minutes with both cores; nothing to pre-train. --quick uses the
tiny BERT pre-trained here instead, 100 sentences, one epoch and a 300-sentence dev subset.
`--model` runs another model pre-trained elsewhere in MiniLM's place (with --quick too), at the
same rates.
"""

from __future__ import annotations

import statistics

from ..models.features import LAYER_CHOICES, HeadConfig
from ..plots import plot_seed_bars
from .distillation import task_subset
from .experiment import ClaimReport, Experiment, seed_values, verdict

# Table 7's dev F1 for BERT-base, by the LAYER_CHOICES name that stands for each of its rows
PAPER = {"embeddings": 0.910, "second_to_last": 0.956, "last": 0.949, "sum_last_four": 0.959,
         "concat_last_four": 0.961, "sum_all": 0.955}
PAPER_FINETUNING = 0.964
SENTENCES, QUICK_SENTENCES = 2000, 100
QUICK_DEV = 300  # --quick scores every epoch of every run on a fixed subset of the dev set
HEAD_EPOCHS, HEAD_LR = 6, 1e-3  # README's rate for feature heads
FINETUNE_EPOCHS, FINETUNE_LR = 5, 1e-4  # chosen for all-MiniLM-L6-v2, kept for a --model
FINETUNING = "fine-tuning"
SHORT = {"embeddings": "embeddings", "second_to_last": "second-to-last", "last": "last",
         "sum_last_four": "sum of last four", "concat_last_four": "concat of last four", "sum_all": "sum of all",
         FINETUNING: "fine-tuning"}  # the plot's legend and the verdicts


def run(experiment: Experiment) -> ClaimReport:
    """Each layer choice's BiLSTM head and fine-tuning over the seeds; the table, the bars and the verdicts."""
    quick = experiment.quick
    tiny = quick and experiment.reference_is_minilm  # --quick checks the code on the tiny BERT, unless --model
    model = experiment.shared_mlm() if tiny else experiment.reference
    data = task_subset(experiment, "conll2003", "conll2003", dev=QUICK_DEV) if quick else experiment.path("conll2003")
    common = {"model": str(model), "task": "conll2003", "data": str(data),
              "max_train_examples": QUICK_SENTENCES if quick else SENTENCES}
    head_epochs, finetune_epochs = (1, 1) if quick else (HEAD_EPOCHS, FINETUNE_EPOCHS)
    scores: dict[str, list[float]] = {}
    for choice in PAPER:
        summary = experiment.finetuned(f"features-{choice.replace('_', '-')}", mode="features", feature_layers=choice,
                                       feature_head="bilstm", epochs=head_epochs, lr=HEAD_LR,
                                       cache_dir=str(experiment.cache), **common)
        scores[choice] = seed_values(summary, "f1")
    summary = experiment.finetuned(FINETUNING, epochs=finetune_epochs, lr=FINETUNE_LR, **common)
    scores[FINETUNING] = seed_values(summary, "f1")

    names = {**{choice: f"features: {LAYER_CHOICES[choice]}" for choice in PAPER}, FINETUNING: "fine-tuning"}
    paper = {**PAPER, FINETUNING: PAPER_FINETUNING}
    rows = [{"method": names[key], "CoNLL-2003 dev F1": values, "paper (BERT-base)": paper[key]}
            for key, values in scores.items()]
    model_name = "the tiny BERT" if tiny else experiment.reference_name
    plot = plot_seed_bars({f"here: {model_name}": {SHORT[k]: v for k, v in scores.items()},
                           "paper: BERT-base": {SHORT[k]: [v] for k, v in paper.items()}},
                          experiment.out / "features_vs_finetuning.png", ylabel="CoNLL-2003 dev F1",
                          title="Feature-based (frozen encoder, BiLSTM head) vs fine-tuning")
    best = max(PAPER, key=lambda choice: statistics.median(scores[choice]))
    verdicts = [verdict(f"the {SHORT[choice]} layers beats the embeddings layer", names[choice], scores[choice],
                        names["embeddings"], scores["embeddings"], "f1")
                for choice in ("concat_last_four", "sum_last_four")]
    verdicts.append(verdict(f"fine-tuning beats the best feature choice ({SHORT[best]})", names[FINETUNING],
                            scores[FINETUNING], names[best], scores[best], "f1"))
    gap = verdicts[-1].margin
    return ClaimReport(
        name="features-vs-finetuning",
        title="Claim 10: feature extraction from the right layers comes close to fine-tuning",
        paper="BERT (Devlin et al. 2019, Table 7): BERT-base (110M parameters, pre-trained on 3.3B words) frozen, a "
              "two-layer 768-wide BiLSTM over its features, "
              "CoNLL-2003 NER trained on all 14,041 sentences, dev F1 (one run per row): the last four layers "
              "concatenated reach 96.1 against 96.4 for fine-tuning, a gap of 0.3; the embeddings layer alone 91.0.",
        scale=(experiment.scale_note() if tiny else experiment.reference_words() + ".")
              + f" CoNLL-2003: {common['max_train_examples']:,} random training sentences, the same "
              "for every run; dev " + (f"subset of {QUICK_DEV} sentences" if quick else "set (3,250 sentences)") +
              f", entity F1. Features: the encoder frozen, a two-layer BiLSTM head ({HeadConfig.lstm_size} per "
              "direction) over the chosen layers (plain sums; all layers include the embeddings output), lr "
              f"{HEAD_LR:g}, {head_epochs} epochs. Fine-tuning: the whole model with a linear head per token, lr "
              f"{FINETUNE_LR:g}, {finetune_epochs} epochs. Best epoch on dev.",
        columns=["method", "CoNLL-2003 dev F1", "paper (BERT-base)"], rows=rows, verdicts=verdicts, plots=[str(plot)],
        notes=[f"the gap from the best feature choice ({SHORT[best]}) to fine-tuning: {100 * gap:+.1f} F1 "
               f"points (median; the paper: +{100 * (PAPER_FINETUNING - max(PAPER.values())):.1f} from the "
               "concatenated last four)"])
