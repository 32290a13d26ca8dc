"""Static vectors against BERT features under the same head: SST-2 and CoNLL-2003, 3 seeds.

Runs `bertology finetune --mode features` (the encoder or vectors frozen, only the head
trains) with each feature source on the same training subset and the full dev sets, and
prints one table of dev medians with min-max over the seeds:

- SST-2: mean-pooled features, linear head;
- CoNLL-2003: one vector per word (BERT: the word's first WordPiece, sum of the last four
  layers), the BERT paper's two-layer BiLSTM head.

    python bench/static_features.py --vectors word2vec=/tmp/static-bench/word2vec \\
        fasttext=/tmp/static-bench/fasttext [--bert all-MiniLM-L6-v2] [--train-examples 2000]

The vectors directories come from `bertology static train` (e.g. bench/static_vectors.py); an
ELMo biLM directory (`pretrain --arch elmo`) goes in the same list, its three layers summed
("sum_last_four" of three layers: an equal-weight mix).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from bertology.recipes.finetune import FinetuneConfig, run_finetuning

REPO = Path(__file__).resolve().parents[1]
from results_page import slug, write_section  # noqa: E402
DATA = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))
TASKS = {"sst2": {"data": DATA / "glue" / "SST-2", "feature_head": "linear", "epochs": 10, "metric": "accuracy"},
         "conll2003": {"data": DATA / "conll2003", "feature_head": "bilstm", "epochs": 3, "metric": "f1"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", nargs="*", default=[], metavar="NAME=DIR", help="static vectors directories")
    parser.add_argument("--bert", default="all-MiniLM-L6-v2",
                        help="a BERT model directory or installed name ('' leaves the BERT rows out)")
    parser.add_argument("--train-examples", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--out", default="/tmp/static-features-bench")
    args = parser.parse_args()
    sources = dict(item.split("=", 1) for item in args.vectors)
    if args.bert:
        sources[f"BERT features ({Path(args.bert).name})"] = args.bert
    rows = []
    for task in args.tasks:
        setup = TASKS[task]
        for name, model in sources.items():
            out = Path(args.out) / task / name.split(" ")[0]
            started = time.perf_counter()
            results = run_finetuning(FinetuneConfig(
                task=task, data=str(setup["data"]), model=model, out=str(out), mode="features",
                feature_head=setup["feature_head"], feature_layers="sum_last_four", epochs=setup["epochs"],
                lr=args.lr, max_train_examples=args.train_examples, seeds=args.seeds, progress=False))
            metric = setup["metric"]
            row = {"task": task, "features": name, "head": setup["feature_head"], "metric": metric,
                   "median": results[metric], "min": results[f"{metric}_min"], "max": results[f"{metric}_max"],
                   "minutes": round((time.perf_counter() - started) / 60, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    lines = [f"{args.train_examples} training examples, full dev sets, {args.seeds} seeds, lr {args.lr:g}; "
             "feature sources: " + ", ".join(f"{name} ({model})" for name, model in sources.items()), "",
             "| task | features | head | dev metric | median | min-max | minutes |", "|---|---|---|---|---:|---|---:|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['features']} | {r['head']} | {r['metric']} | {r['median']:.3f} | "
                     f"{r['min']:.3f}-{r['max']:.3f} | {r['minutes']} |")
    print("\n" + "\n".join(lines))
    write_section("static-features", slug(*sources, *args.tasks, args.train_examples), "Frozen features under the same "
                  f"heads: {', '.join(sources)}", "\n".join(lines))
    (Path(args.out) / f"results-{int(time.time())}.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
