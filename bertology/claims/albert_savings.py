"""Claim 7: ALBERT shrinks parameters, not compute (factorised embeddings, cross-layer sharing).

Lan et al. (2020) cut BERT's parameters two ways: factorised embeddings (the vocabulary embedded
at E=128, projected up to the hidden size H) and one set of layer weights shared by all layers.
ALBERT-large (24 layers, H=1024, E=128, shared) has 18M parameters against BERT-large's 334M
(18x fewer) at the same width and depth, so the same FLOPs per token; it trained ~1.7x faster
on TPUs (Table 2), with fewer weights to move and update, while ALBERT-xxlarge (H=4096, 235M) is
~3x slower than BERT-large. The cuts cost a little accuracy: at ALBERT-base's size, sharing all
layers lowers the average over SQuAD, MNLI, SST-2 and RACE by about 2.5 points at E=768 (Table
4), and E=128 instead of 768 without sharing by about 0.6 (Table 3).

Here, at the mini width (4 layers, 256 wide), on the same pre-training budget (800 steps of
32 x 64 tokens on the shared corpus, the shared MLM's other settings): BERT, factorised
embeddings (E = width / 2 = 128, ALBERT's E), shared layers, and both. Objective: RoBERTa's
masked LM for all four, not ALBERT's MLM + sentence order: the claim is about the architecture,
one objective keeps it the only change, SOP learns little at this scale (README, "Does each
objective learn?"), and the BERT row is then the shared cache's 800-step MLM (claim 6's 2N).
Reported per model: encoder parameters (deterministic: a ratio, no seeds), training tokens/s
timed here (masked-LM steps of each architecture in turns, so every model meets the same
machine load; the pre-training run's own rate from its metrics.jsonl is shown beside but may come
from the cache, run under another load), inference sentences/s (the fine-tuned SST-2 classifier
through `Predictor.predict` on 256 fixed dev sentences, in turns, median of the rounds), and
SST-2 and MRPC dev accuracy over the seeds. Compute counts as unchanged within 15%.

Full-scale time, from measured steps (mini: 1.24 CPU-s per step on one thread, 0.75 s with 2
free cores; E=128 a little less): pre-training 4 x 800 steps ~40 minutes, fine-tuning four models
(MRPC one epoch, SST-2 two, three seeds) ~18, timing ~2: about 60 minutes with 2 free cores,
~95 on one thread.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from ..inference.predictor import Predictor
from ..models.base import SIZES
from ..models.bert import BertConfig, BertForMaskedLM
from ..ops import IGNORE_INDEX
from ..plots import plot_seed_bars
from ..tasks.readers import TASKS, read_examples, task_files
from .experiment import (
    GLUE_TASKS,
    MINI_MLM,
    ClaimReport,
    Experiment,
    Verdict,
    corpus_words,
    encoder_parameters,
    pretraining_summary,
    size_label,
    verdict,
)

STEPS = MINI_MLM["max_steps"] // 2  # 800: the 2N model of claim 6 is this claim's BERT row
SAME_COMPUTE = 0.15  # tokens/s within this share of BERT's counts as the same compute
TIMING = {"rounds": 5, "steps": 3, "sentences": 256}
QUICK_TIMING = {"rounds": 2, "steps": 2, "sentences": 64}


def run(experiment: Experiment) -> ClaimReport:
    """Pre-train the four architectures on one budget; their parameters, speeds and dev accuracy."""
    settings = experiment.quick_scale({**MINI_MLM, "max_steps": STEPS})
    width = SIZES[settings["preset"]][1]
    embedding = width // 2
    variants = {"BERT": {}, f"factorised embeddings (E={embedding})": {"embedding_size": embedding},
                "shared layers": {"share_layers": True},
                f"both (ALBERT, E={embedding})": {"embedding_size": embedding, "share_layers": True}}
    models = {name: experiment.pretrained(**{**settings, **switches}) for name, switches in variants.items()}
    run_names = dict(zip(models, ("bert", "factorised", "shared", "albert")))
    scores = {name: experiment.glue_accuracies(run_names[name], model)
              for name, model in models.items()}
    timing = QUICK_TIMING if experiment.quick else TIMING
    training = training_tokens_per_second(models, settings["batch_size"], settings["max_seq_len"], timing["rounds"],
                                          timing["steps"])
    sst2 = TASKS["sst2"]
    sentences = [e.text_a for e in read_examples(sst2, task_files(sst2, experiment.task_data("glue/SST-2"), ["dev"])["dev"],
                                                  "dev")][:timing["sentences"]]
    classifiers = {name: finetuned_model(experiment, f"{run_names[name]}-sst2") for name in models}
    inference = inference_sentences_per_second(classifiers, sentences, timing["rounds"])
    parameters = {name: encoder_parameters(model) for name, model in models.items()}
    rows = [{"model": name, "parameters": f"{parameters[name] / 1e6:.2f}M",
             "BERT's parameters / this": round(parameters["BERT"] / parameters[name], 2),
             "training tokens/s (timed here)": training[name],
             "tokens/s of its pre-training run": round(pretraining_summary(model)["tokens_per_second"]),
             "inference sentences/s": inference[name], **scores[name]} for name, model in models.items()]
    verdicts = []
    for name in list(models)[1:]:
        ratio = parameters["BERT"] / parameters[name]
        verdicts.append(verdict(f"{name} cuts the encoder's parameters ({ratio:.2f}x fewer)", "BERT",
                                [parameters["BERT"] / 1e6], name, [parameters[name] / 1e6], "parameters (millions)"))
    verdicts += [same_compute(name, training[name], training["BERT"]) for name in list(models)[1:]]
    verdicts += [verdict(f"BERT beats {name} on {task}", "BERT", scores["BERT"][task], name, scores[name][task],
                         "accuracy") for name in list(models)[1:] for task in GLUE_TASKS]
    plots = [
        plot_seed_bars({task: {name: scores[name][task] for name in models} for task in GLUE_TASKS},
                       experiment.out / "albert_accuracy.png", ylabel="dev accuracy",
                       title="ALBERT's switches at one width: downstream accuracy"),
        plot_seed_bars({"parameters": {name: [parameters[name] / parameters["BERT"]] for name in models},
                        "training tokens/s": relative(training), "inference sentences/s": relative(inference)},
                       experiment.out / "albert_cost.png", ylabel="relative to BERT (1 = the same)",
                       title="ALBERT's switches shrink parameters, not compute"),
    ]
    return ClaimReport(
        name="albert", title="Claim 7: ALBERT shrinks parameters, not compute",
        paper="ALBERT (Lan et al. 2020): factorised embeddings (E=128) and all layers shared; ALBERT-large (24 "
              "layers, H=1024) has 18M parameters to BERT-large's 334M (18x fewer) at the same FLOPs per token and "
              "trained ~1.7x faster on TPUs (Table 2), ALBERT-xxlarge (H=4096) ~3x slower than BERT-large; at "
              "ALBERT-base's size sharing all layers lowers the average over SQuAD, MNLI, SST-2 and RACE by about "
              "2.5 points at E=768 (Table 4), E=128 instead of 768 without sharing by about 0.6 (Table 3). "
              "Pre-trained 125K steps of 4,096 x 512 tokens on BookCorpus and Wikipedia.",
        scale=f"Four architectures at the width and depth of {size_label(settings['preset'])}, each pre-trained by "
              f"masked LM (RoBERTa's) for {settings['max_steps']:,} steps of {settings['batch_size']} x "
              f"{settings['max_seq_len']} tokens at rate {settings['lr']} on {corpus_words(experiment.quick)}. Training "
              f"tokens/s: {timing['rounds']} rounds of {timing['steps']} steps per model, in turns; inference: "
              f"{timing['sentences']} SST-2 dev sentences per round, batch 64, fp32. " + experiment.glue_scale(),
        columns=["model", "parameters", "BERT's parameters / this", "training tokens/s (timed here)",
                 "tokens/s of its pre-training run", "inference sentences/s", *GLUE_TASKS],
        rows=rows, verdicts=verdicts, plots=[str(p) for p in plots],
        notes=[f"Factorising runs the masked-LM output product over the {BertConfig.load(models['BERT']).vocab_size:,}-"
               "word vocabulary at E instead of the width, a large share of a small model's compute; sharing "
               "layers leaves every product in place.", experiment.majority_note()])


def same_compute(name: str, values: list[float], bert: list[float]) -> Verdict:
    """Whether `name` trains at BERT's speed: the medians of their tokens/s within SAME_COMPUTE."""
    ratio = statistics.median(values) / statistics.median(bert)
    outcome = "reproduced" if abs(ratio - 1) <= SAME_COMPUTE else "not reproduced"
    return Verdict(f"{name} leaves the training compute unchanged (tokens/s x{ratio:.2f} of BERT's, within "
                   f"{SAME_COMPUTE:.0%})", name, "BERT", "training tokens/s", outcome,
                   round(statistics.median(values) - statistics.median(bert), 1))


def relative(rates: dict[str, list[float]]) -> dict[str, list[float]]:
    """Each model's rates over BERT's median rate."""
    base = statistics.median(rates["BERT"])
    return {name: [v / base for v in values] for name, values in rates.items()}


# ----- timing steps (generic: to move into experiment.py) -------------------------------------------


def training_tokens_per_second(models: dict[str, Path], batch_size: int, seq_len: int, rounds: int,
                               steps: int) -> dict[str, list[float]]:
    """Tokens/s of masked-LM training steps (forward, backward, AdamW) of each model's architecture, on one
    fixed batch with 15% of the positions predicted; the models take turns, `steps` steps each per round,
    so drift in the machine's load hits all alike. One value per round (a first, warm-up round is dropped)."""
    generator = torch.Generator().manual_seed(0)
    trainers = {}
    for name, folder in models.items():
        model = BertForMaskedLM(BertConfig.load(folder)).train()
        trainers[name] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    vocab = BertConfig.load(next(iter(models.values()))).vocab_size
    input_ids = torch.randint(vocab, (batch_size, seq_len), generator=generator)
    chosen = torch.rand(batch_size, seq_len, generator=generator) < 0.15
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    rates: dict[str, list[float]] = {name: [] for name in models}
    for round_ in range(rounds + 1):
        for name, (model, optimizer) in trainers.items():
            start = time.perf_counter()
            for _ in range(steps):
                model(input_ids, labels=labels).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            if round_:
                rates[name].append(steps * batch_size * seq_len / (time.perf_counter() - start))
    return rates


def inference_sentences_per_second(models: dict[str, Path], sentences: list[str],
                                   rounds: int) -> dict[str, list[float]]:
    """Sentences/s of each fine-tuned model's `Predictor.predict` on the same sentences (fp32, batch 64),
    the models in turns after one warm-up call each; one value per round."""
    predictors = {name: Predictor.load(str(folder), precision="fp32") for name, folder in models.items()}
    for predictor in predictors.values():
        predictor.predict(sentences, batch_size=64)
    rates: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds):
        for name, predictor in predictors.items():
            start = time.perf_counter()
            predictor.predict(sentences, batch_size=64)
            rates[name].append(len(sentences) / (time.perf_counter() - start))
    return rates


def finetuned_model(experiment: Experiment, name: str) -> Path:
    """The folder of the first seed's model of `experiment.finetuned(name, ...)` (one seed: the run's own folder)."""
    folder = experiment.out / "runs" / name
    return folder / f"seed-{experiment.seeds[0]}" if len(experiment.seeds) > 1 else folder
