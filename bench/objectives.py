"""Every pre-training objective on the same data and budget: does each one learn?

Runs `bertology pretrain` once per objective (bert, roberta, albert, electra, clm on the BERT
encoder; t5, span corruption on T5's encoder-decoder; plm, XLNet's permutation LM) on the shared corpus (WikiText-2 valid +
the Project Gutenberg books) with a freshly trained WordPiece vocabulary (t5: a unigram one of
the same size with 100 sentinels), and prints, per objective, the training loss at the start
and end and each held-out metric at the first and the last evaluation next to its chance level.
Also prints the parameter counts that ALBERT's switches (factorized embeddings, shared
layers) give at several sizes.

Two of the figures need more than "chance is 0.5" to read:
- sentence-order prediction: ALBERT's pair recipe (ours too) leaves the true second segment
  longer on average (it holds the chunk's last sentence, the one that crosses the target
  length), so "the first segment is the longer, hence swapped" already beats 0.5. That guess's
  accuracy on the same held-out pairs is printed next to sop_accuracy: only the excess over it
  is sentence order.
- replaced-token detection: with ~15% of the tokens replaced, the discriminator's probabilities
  stay below 0.5 long after it has begun to rank replaced tokens above original ones, so its
  balanced accuracy at 0.5 sits at chance; `rtd_auc` (threshold-free, as the release's
  `disc_auc`) measures the ranking.

    OMP_NUM_THREADS=1 python bench/objectives.py [--preset tiny] [--steps 2000] [--objectives albert electra]
        [--optimizer adafactor --lr 1e-2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

from bertology import BertConfig, BertModel
from bertology.data.pretraining import PretrainingDataset
from bertology.data.shards import build_corpus
from bertology.data.tokenizer import Tokenizer, train_tokenizer
from bertology.recipes.pretrain import PretrainConfig, run_pretraining

REPO = Path(__file__).resolve().parents[1]
from results_page import slug, write_section  # noqa: E402
# What guessing scores: the pair tasks, the balanced replaced-token accuracy and its AUC are 0.5
# (SOP: see the length baseline above); for the language models it is the share of the most
# frequent token, measured from the run's own data.
METRICS = {
    "bert": ["mlm_accuracy", "nsp_accuracy"],
    "roberta": ["mlm_accuracy"],
    "albert": ["mlm_accuracy", "sop_accuracy"],
    "electra": ["rtd_auc", "rtd_balanced_accuracy", "mlm_accuracy"],
    "clm": ["lm_accuracy", "perplexity"],
    "t5": ["span_accuracy", "span_word_accuracy", "lm_accuracy", "perplexity"],
    "plm": ["permutation_lm_accuracy", "permutation_perplexity"],
}
ARCH = {"t5": "t5", "plm": "xlnet"}  # the objectives of their own families; the rest train BERT's encoder


def albert_parameter_counts() -> list[tuple[str, int, int, int, int]]:
    """(preset, plain BERT, + factorized embeddings E=128, + shared layers, both) encoder parameter counts."""
    rows = []
    for preset in ("mini", "small", "base", "large"):
        counts = [BertModel(BertConfig.from_preset(preset, **switches)).num_parameters()
                  for switches in ({}, {"embedding_size": 128}, {"share_layers": True},
                                   {"embedding_size": 128, "share_layers": True})]
        rows.append((preset, *counts))
    return rows


def sop_length_baseline(cfg: PretrainConfig) -> float:
    """Accuracy of "swapped if the first segment is the longer" on the held-out pairs `cfg`'s run
    evaluates (the same documents, seed and count), a guess that reads no word of either segment."""
    tokenizer = Tokenizer.from_pretrained(cfg.tokenizer)
    corpus = build_corpus([Path(p) for p in cfg.corpus], tokenizer, cfg.cache_dir)
    _, eval_docs = corpus.split(cfg.eval_fraction, cfg.seed)
    dataset = PretrainingDataset(corpus, eval_docs, cfg.max_seq_len, "pairs", "sop", cfg.short_seq_prob,
                                      tokenizer.cls_token_id, tokenizer.sep_token_id, cfg.seed)
    pairs = dataset.instances(0)[: cfg.eval_batches * cfg.batch_size]
    # Token types: [CLS] A [SEP] are 0, B [SEP] are 1.
    guesses = [int((p.token_type_ids == 0).sum() - 2 > (p.token_type_ids == 1).sum() - 1) for p in pairs]
    return sum(g == p.pair_label for g, p in zip(guesses, pairs)) / len(pairs)


def most_frequent_token_share(cfg: PretrainConfig) -> float:
    """The share of the most frequent token in the held-out documents of `cfg`'s run: what always
    guessing one token scores on masked (or dropped) tokens, which are a uniform sample of them."""
    tokenizer = Tokenizer.from_pretrained(cfg.tokenizer)
    corpus = build_corpus([Path(p) for p in cfg.corpus], tokenizer, cfg.cache_dir)
    _, eval_docs = corpus.split(cfg.eval_fraction, cfg.seed)
    counts = Counter()
    for document in eval_docs.tolist():
        for sentence in corpus.document(document):
            counts.update(sentence.tolist())
    return max(counts.values()) / sum(counts.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--optimizer", default="adamw", choices=("adamw", "adafactor"),
                        help="adafactor: T5's optimizer (its rate is relative to each weight's scale: T5 used 1e-2)")
    parser.add_argument("--eval-batches", type=int, default=100,
                        help="held-out batches of 32 per evaluation (100: about 3,200 pairs, "
                             "a standard error of 0.009 at 0.5)")
    parser.add_argument("--objectives", nargs="+", default=list(METRICS))
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "objectives")
    args = parser.parse_args()
    data = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))
    corpus = [data / "wikitext-2-raw" / "wiki.valid.raw", data / "gutenberg"]
    if not all(p.exists() for p in corpus):
        sys.exit(f"{data}: shared data not found (set BERTOLOGY_DATA)")
    tokenizers = {"wordpiece": args.out / "tokenizer", "unigram": args.out / "tokenizer-unigram"}
    for model, folder in tokenizers.items():
        if not (folder / "vocab.txt").is_file() and (model == "unigram") == ("t5" in args.objectives):
            train_tokenizer(corpus, vocab_size=args.vocab_size, out_dir=folder, model=model,
                            sentinels=100 if model == "unigram" else 0)
    chance = {}

    results = {}
    for objective in args.objectives:
        out = args.out / objective
        shutil.rmtree(out, ignore_errors=True)  # a fresh run each time (the bench owns this folder)
        tokenizer = tokenizers["unigram" if objective == "t5" else "wordpiece"]
        cfg = PretrainConfig(corpus=[str(p) for p in corpus], tokenizer=str(tokenizer), out=str(out),
                             arch=ARCH.get(objective, "bert"),
                             preset=args.preset, objective=objective, max_seq_len=128, batch_size=32, lr=args.lr,
                             optimizer=args.optimizer, max_steps=args.steps, eval_every=args.steps // 4,
                             eval_fraction=0.02,
                             eval_batches=args.eval_batches, log_every=50, save_every=0, progress=False)
        run_pretraining(cfg)
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        results[objective] = rows
        if objective == "albert":
            length_baseline = sop_length_baseline(cfg)
        if objective in ("t5", "bert", "plm"):
            chance[objective] = most_frequent_token_share(cfg)

    lines = [f"preset {args.preset}, {args.steps} steps of 32 x 128 tokens, {args.optimizer} at lr {args.lr:g}, "
             f"vocabulary {args.vocab_size}, WikiText-2 valid + the Gutenberg books", "",
             "| objective | training loss (first 50 steps -> last 50) | held-out metric: first eval -> last eval |",
             "|---|---|---|"]
    for objective, rows in results.items():
        train = [r for r in rows if r.get("split") != "eval"]
        evals = [r for r in rows if r.get("split") == "eval"]
        metrics = ", ".join(f"{m} {evals[0][m]:.3f} -> {evals[-1][m]:.3f}" for m in METRICS[objective] if m in evals[-1])
        if objective == "albert":
            metrics += f" (length-only guess: {length_baseline:.3f})"
        if objective in chance:
            metrics += f" (the most frequent token's share of the held-out text: {chance[objective]:.3f})"
        lines.append(f"| {objective} | {train[0]['loss']:.3f} -> {train[-1]['loss']:.3f} | {metrics} |")
    lines += ["", "Chance: 0.5 for nsp/sop accuracy, rtd_balanced_accuracy and rtd_auc (SOP: also the length-only "
                  "guess); for mlm/lm accuracy, the share of the most frequent token."]
    parameters = ["| preset | BERT | + embedding_size 128 | + share_layers | both (ALBERT) |", "|---|---:|---:|---:|---:|"]
    for preset, *counts in albert_parameter_counts():
        parameters.append(f"| {preset} | " + " | ".join(f"{c / 1e6:.2f}M" for c in counts) + " |")
    print("\n" + "\n".join(lines) + "\n\n" + "\n".join(parameters))
    write_section("objectives", slug(args.preset, args.steps, "steps", args.optimizer, f"lr{args.lr:g}", *args.objectives),
                  f"{', '.join(args.objectives)}: {args.preset} preset, {args.steps} steps, {args.optimizer}",
                  "\n".join(lines))
    write_section("objectives", "albert-parameters", "ALBERT's switches: encoder parameters",
                  "\n".join(parameters) + "\n\n(The ALBERT paper gives 12M for ALBERT-base and 18M for ALBERT-large.)")


if __name__ == "__main__":
    main()
