"""ULMFiT's claim at laptop scale: what each of its three stages adds to an AWD-LSTM classifier
trained on 1,000 labelled SST-2 sentences (Howard & Ruder 2018, "Universal Language Model
Fine-tuning for Text Classification", Section 5, low-shot learning and the ablations of
the stages: with 100-1,000 labels, ULMFiT matches a model trained from scratch on 10-100x more).

The rows, each the median dev accuracy of `--seeds` seeds (the same 1,000 training
sentences for every row and seed; `finetune` keeps the best epoch on dev, as for BERT):

1. no LM: the classifier from random weights;
2. general LM: from the language model pre-trained on the books (`pretrain --arch awd-lstm`);
3. + target LM: that model first fine-tuned as a language model on SST-2's 67,349 training
   sentences, labels unused (`pretrain --init`, discriminative rates 1/2.6, slanted triangle);
4. + ULMFiT's classifier tricks: 3 with discriminative rates (1/2.6 per layer) and gradual
   unfreezing.

Every classifier trains with the same settings (`--epochs`, lr, batch 32, slanted triangular
schedule, drop_mult 0.5). The general LM is trained once into `--work` (reused by later runs,
as are the target LM and the random one) within `--general-minutes` of wall-clock time (the
issue allows 60).

    python bench/ulmfit_stages.py --work runs/ulmfit                       # ~60 minutes on 2 cores
    python bench/ulmfit_stages.py --work runs/ulmfit --general-minutes 60  # the full allowance
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import time
from pathlib import Path

import torch

from bertology.data.tokenizer import Tokenizer
from bertology.models.awd_lstm import AWDLSTMConfig, AWDLSTMLMHeadModel
from bertology.recipes.finetune import FinetuneConfig, run_finetuning
from bertology.recipes.pretrain import PretrainConfig, run_pretraining

REPO = Path(__file__).resolve().parents[1]
from results_page import markdown_table, write_section  # noqa: E402
DATA = REPO.parent / "shared/data"


def language_model(out: Path, **settings) -> Path:
    """Pre-train (or reuse) an AWD-LSTM language model in `out`."""
    if (out / "model.safetensors").is_file() and not (out / "checkpoints").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    cfg = PretrainConfig(arch="awd-lstm", out=str(out), max_seq_len=70, batch_size=32, lr=1e-2, eval_every=500,
                         save_every=1000, **settings)
    run_pretraining(cfg)
    held_out = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
                if '"split": "eval"' in line][-1]
    print(f"{out.name}: {time.perf_counter() - started:.0f} s, held-out perplexity {held_out['perplexity']:.1f}, "
          f"step {held_out['step']}", flush=True)
    return out


def sst2_sentences(out: Path) -> Path:
    """SST-2's training sentences, one document each (labels dropped): the target task's text."""
    with open(DATA / "glue/SST-2/train.tsv", newline="", encoding="utf-8") as f:
        sentences = [row["sentence"].strip() for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n\n".join(sentences) + "\n", encoding="utf-8")
    return out


def random_model(out: Path, like: Path) -> Path:
    """An AWD-LSTM of `like`'s config and tokenizer with random weights: the no-LM baseline."""
    if not (out / "model.safetensors").is_file():
        torch.manual_seed(0)
        AWDLSTMLMHeadModel(AWDLSTMConfig.load(like)).save_pretrained(out)
        Tokenizer.from_pretrained(like).save_pretrained(out)
    return out


def classify(model: Path, out: Path, seeds: int, epochs: float, labels: int, tricks: bool) -> dict:
    """Fine-tune the classifier for `seeds` seeds on `labels` SST-2 sentences; the summary."""
    shutil.rmtree(out, ignore_errors=True)
    extra = {"layer_lr_decay": 1 / 2.6, "gradual_unfreezing": True} if tricks else {}
    cfg = FinetuneConfig(task="sst2", data=str(DATA / "glue/SST-2"), model=str(model), out=str(out),
                         max_train_examples=labels, epochs=epochs, batch_size=32, lr=1e-2, seeds=seeds,
                         schedule="slanted_triangular", drop_mult=0.5, progress=False, **extra)
    return run_finetuning(cfg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=REPO / "runs/ulmfit")
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--general-minutes", type=float, default=35)
    parser.add_argument("--target-minutes", type=float, default=6)
    parser.add_argument("--labels", type=int, default=1000)
    parser.add_argument("--epochs", type=float, default=6)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    work = args.work
    general = language_model(work / "general_lm", corpus=[str(DATA / "gutenberg")], preset=args.preset,
                             vocab_size=args.vocab_size, max_time=f"{args.general_minutes}m",
                             cache_dir=str(work / "cache"), progress=True)
    target = language_model(work / "target_lm", corpus=[str(sst2_sentences(work / "sst2_train_sentences.txt"))],
                            init=str(general), max_time=f"{args.target_minutes}m", layer_lr_decay=1 / 2.6,
                            schedule="slanted_triangular", warmup=0.1, cache_dir=str(work / "cache"), progress=True)
    scratch = random_model(work / "random_lm", like=general)
    rows = [("no LM (random weights)", scratch, False), ("general LM", general, False),
            ("+ target LM fine-tuning", target, False), ("+ discriminative rates, gradual unfreezing", target, True)]
    results = []
    for name, model, tricks in rows:
        summary = classify(model, work / f"clf-{len(results)}", args.seeds, args.epochs, args.labels, tricks)
        runs = [round(run["accuracy"], 3) for run in summary["runs"]]
        results.append({"row": name, "accuracy": summary["accuracy"], "runs": runs})
        print(f"{name:45} {summary['accuracy']:.3f}  {runs}", flush=True)
    (work / "ulmfit_stages.json").write_text(json.dumps(results, indent=2) + "\n")
    gain = results[-1]["accuracy"] - results[0]["accuracy"]
    print(f"three-stage ULMFiT minus no LM: {gain * 100:+.1f} points (the claim: at least +5)")
    table = markdown_table([f"AWD-LSTM classifier on {args.labels:,} SST-2 labels", f"dev accuracy, median of {args.seeds} seeds",
                            "seeds"], [[r["row"], f"{r['accuracy']:.3f}", ", ".join(f"{a:.3f}" for a in r["runs"])]
                                       for r in results], "lrl")
    write_section("ulmfit-stages", f"sst2-{args.labels}", f"What each stage adds on {args.labels:,} SST-2 labels",
                  f"the `{args.preset}` AWD-LSTM; general LM {args.general_minutes:g} minutes on the Gutenberg books, "
                  f"target LM {args.target_minutes:g} minutes on SST-2's training sentences (labels unused), "
                  f"{args.vocab_size:,}-piece vocabulary; each classifier {args.epochs:g} epochs, best epoch on dev:"
                  f"\n\n{table}\n\nthree-stage ULMFiT minus no LM: {gain * 100:+.1f} points")


if __name__ == "__main__":
    main()
