"""Every pre-training objective on the same encoder, data and budget: does each one learn?

Runs `bertology pretrain` once per objective (bert, roberta, albert, electra, clm) on the
shared corpus (WikiText-2 valid + the Project Gutenberg books) with a freshly trained
WordPiece vocabulary, and prints, per objective, the training loss at the start and end
and each held-out metric at the first and the last evaluation next to its chance level.
Also prints the parameter counts that ALBERT's switches (factorized embeddings, shared
layers) give at several sizes.

    python bench/objectives.py [--preset tiny] [--steps 2000] [--out runs/objectives]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from bertology import BertConfig, BertModel
from bertology.pretrain import PretrainConfig, run_pretraining
from bertology.tokenizer import train_tokenizer

REPO = Path(__file__).resolve().parents[1]
# What guessing scores: the pair tasks and the balanced replaced-token accuracy are 0.5; for the
# language models it is the share of the most frequent token, measured from the run's own data.
METRICS = {
    "bert": ["mlm_accuracy", "nsp_accuracy"],
    "roberta": ["mlm_accuracy"],
    "albert": ["mlm_accuracy", "sop_accuracy"],
    "electra": ["rtd_balanced_accuracy", "mlm_accuracy"],
    "clm": ["lm_accuracy", "perplexity"],
}


def albert_parameter_counts() -> list[tuple[str, int, int, int, int]]:
    """(preset, plain BERT, + factorized embeddings E=128, + shared layers, both) encoder parameter counts."""
    rows = []
    for preset in ("mini", "small", "base", "large"):
        counts = [BertModel(BertConfig.from_preset(preset, **switches)).num_parameters()
                  for switches in ({}, {"embedding_size": 128}, {"share_layers": True},
                                   {"embedding_size": 128, "share_layers": True})]
        rows.append((preset, *counts))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--objectives", nargs="+", default=list(METRICS))
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "objectives")
    args = parser.parse_args()
    data = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))
    corpus = [data / "wikitext-2-raw" / "wiki.valid.raw", data / "gutenberg"]
    if not all(p.exists() for p in corpus):
        sys.exit(f"{data}: shared data not found (set BERTOLOGY_DATA)")
    tokenizer = args.out / "tokenizer"
    if not (tokenizer / "vocab.txt").is_file():
        train_tokenizer(corpus, vocab_size=args.vocab_size, out_dir=tokenizer)

    results = {}
    for objective in args.objectives:
        out = args.out / objective
        shutil.rmtree(out, ignore_errors=True)  # a fresh run each time (the bench owns this folder)
        cfg = PretrainConfig(corpus=[str(p) for p in corpus], tokenizer=str(tokenizer), out=str(out),
                             preset=args.preset, objective=objective, seq_len=128, batch_size=32, lr=1e-3,
                             max_steps=args.steps, eval_every=args.steps // 4, eval_fraction=0.02, eval_batches=20,
                             log_every=50, save_every=0, progress=False)
        run_pretraining(cfg)
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        results[objective] = rows

    print(f"\npreset {args.preset}, {args.steps} steps of 32 x 128 tokens, lr 1e-3, vocabulary {args.vocab_size}\n")
    print("| objective | training loss (first 50 steps -> last 50) | held-out metric: first eval -> last eval |")
    print("|---|---|---|")
    for objective, rows in results.items():
        train = [r for r in rows if r.get("split") != "eval"]
        evals = [r for r in rows if r.get("split") == "eval"]
        metrics = ", ".join(f"{m} {evals[0][m]:.3f} -> {evals[-1][m]:.3f}" for m in METRICS[objective] if m in evals[-1])
        print(f"| {objective} | {train[0]['loss']:.3f} -> {train[-1]['loss']:.3f} | {metrics} |")
    print("\nChance: 0.5 for nsp/sop accuracy and rtd_balanced_accuracy; for mlm/lm accuracy, the share of the most "
          "frequent token.\n")
    print("| preset | BERT | + embedding_size 128 | + share_layers | both (ALBERT) |")
    print("|---|---:|---:|---:|---:|")
    for preset, *counts in albert_parameter_counts():
        print(f"| {preset} | " + " | ".join(f"{c / 1e6:.2f}M" for c in counts) + " |")


if __name__ == "__main__":
    main()
