"""Static word vectors on the shared corpus: word2vec, fastText and GloVe side by side, and GloVe's speed.

Trains each method with `bertology.recipes.static_vectors.train` on WikiText-2 valid + test and the
Project Gutenberg books (the same corpus, tokenizer, vocabulary rule and held-out documents
for all three), each under a training budget, and prints one table: method, dimension,
training time, WordSim-353 and SimLex-999 Spearman, 3CosAdd analogy accuracy, and OOV counts.
Then measures GloVe's co-occurrence counting on 1x, 3x and 10x the corpus (the tokenized
training text read 1, 3 or 10 times; each scale in a fresh process, so its peak memory is
its own) and GloVe's training throughput with 1 and 2 threads.

With `--glove-c BUILD_DIR` (the `build` folder of Stanford's reference GloVe, github.com/
stanfordnlp/GloVe, after `make`), the reference tools count and train on the same tokenized
training text with the same vocabulary threshold, window, dimension, x_max, alpha, learning
rate, iterations and threads, and their vectors go through the same evaluation: the check
that bertology's GloVe matches the reference's quality, and its time as a ratio of the
reference's, measured in the same run.

    python bench/static_vectors.py [--out /tmp/static-bench] [--max-time 8m] [--methods glove word2vec]
        [--window 5] [--dim 100] [--skip-scaling] [--glove-c ~/GloVe/build]

Each run is CPU-heavy (2 threads); the script runs them one after another.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from bertology.data.cooccurrence import CooccurrenceCounter
from bertology.models.static import GloVe
from bertology.recipes.static_vectors import (StaticTrainConfig, evaluate_vectors, import_vectors, tokenize_corpus, train,
                                      vocabulary)

REPO = Path(__file__).resolve().parents[1]
from results_page import markdown_table, slug, write_section  # noqa: E402
DATA = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))
CORPUS = [DATA / "wikitext-2-raw" / "wiki.valid.raw", DATA / "wikitext-2-raw" / "wiki.test.raw", DATA / "gutenberg"]


def train_methods(args, out: Path) -> list[dict]:
    """Train each method once; returns their summaries."""
    summaries = []
    for method in args.methods:
        target = out / method
        shutil.rmtree(target, ignore_errors=True)
        print(f"\n== {method} (load average before: {os.getloadavg()[0]:.1f})", flush=True)
        summary = train(StaticTrainConfig(corpus=[str(p) for p in CORPUS], out=str(target), method=method,
                                          vector_size=args.dim, window=args.window, max_time=args.max_time,
                                          threads=2, progress=False))
        summary["load_average_after"] = round(os.getloadavg()[0], 1)
        print(json.dumps({k: summary[k] for k in ("seconds", "epochs", "throughput", "held_out")}), flush=True)
        summaries.append(summary)
    return summaries


def table(summaries: list[dict]) -> str:
    """The methods' table (Markdown), as docs/results/static-vectors.md shows it."""
    lines = ["| method | dim | window | epochs | training time | total time | WordSim-353 | SimLex-999 | analogy (3CosAdd) "
             "| OOV pairs / questions | held-out OOV tokens |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        e = s["evaluation"]
        ws, sl, an = e["wordsim353"], e["simlex999"], e["analogy"]
        lines.append(
            f"| {s['method']} | {s['vector_size']} | {s['window']} | {s['epochs']} | {s['seconds']['training']:.0f} s "
            f"| {s['seconds']['total']:.0f} s | {ws['spearman']:.3f} | {sl['spearman']:.3f} | {an['accuracy']:.3f} "
            f"(sem {an['semantic']:.3f}, syn {an['syntactic']:.3f}) | {ws['oov_pairs']}/353, {sl['oov_pairs']}/999, "
            f"{an['oov_questions']}/19544 | {s['held_out']['oov_token_rate']:.2%} |")
    return "\n".join(lines)


def count_scaled(train_file: str, words: list[str], window: int, repeats: int, queue) -> None:
    """Count co-occurrences over the tokenized text read `repeats` times (in a child process)."""
    index = {w: i for i, w in enumerate(words)}
    counter = CooccurrenceCounter(len(words), window)
    started = time.perf_counter()
    for _ in range(repeats):
        with open(train_file, encoding="utf-8") as file:
            for line in file:
                counter.add([index[w] for w in line.split() if w in index])
    matrix = counter.matrix()
    seconds = time.perf_counter() - started
    queue.put({"repeats": repeats, "tokens": counter.tokens, "pairs": counter.pairs, "nonzero": matrix.nnz,
               "seconds": round(seconds, 1), "tokens_per_second": round(counter.tokens / seconds),
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)})


def counting_scaling(args, out: Path) -> tuple[list[dict], dict]:
    """Counting at 1x, 3x, 10x the corpus, and GloVe training throughput on the 1x counts."""
    work = out / "scaling"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg = StaticTrainConfig(corpus=[str(p) for p in CORPUS], out=str(work), method="glove", window=args.window,
                            progress=False)
    corpus = tokenize_corpus(cfg, work)
    words = vocabulary(cfg, corpus.train_counts)
    results = []
    context = multiprocessing.get_context("spawn")
    for repeats in (1, 3, 10):
        queue = context.Queue()
        process = context.Process(target=count_scaled, args=(str(corpus.train_file), words, args.window, repeats, queue))
        process.start()
        results.append(queue.get())
        process.join()
        print(json.dumps(results[-1]), flush=True)
    # training throughput: one epoch's worth of batches on the 1x matrix, per thread count and batch size
    counter = CooccurrenceCounter(len(words), args.window)
    index = {w: i for i, w in enumerate(words)}
    with open(corpus.train_file, encoding="utf-8") as file:
        for line in file:
            counter.add([index[w] for w in line.split() if w in index])
    matrix = counter.matrix().tocoo()
    order = np.random.default_rng(0).permutation(matrix.nnz)
    rows, cols = (torch.from_numpy(a[order].astype(np.int32)) for a in (matrix.row, matrix.col))
    values = torch.from_numpy(matrix.data[order])
    throughput = {"nonzero": matrix.nnz}
    for workers in (1, 2):
        for batch_size in (4096, 16384):
            glove = GloVe(len(words), args.dim)
            batches = list(range(min(matrix.nnz // batch_size, 400)))
            started = time.perf_counter()
            _, entries, _ = glove.train_batches(rows, cols, values, batches, batch_size, workers)
            rate = entries / (time.perf_counter() - started)
            throughput[f"workers={workers} batch={batch_size}"] = {"entries_per_second": round(rate),
                                                                   "epochs_per_second": round(rate / matrix.nnz, 4)}
            print(json.dumps({f"workers={workers} batch={batch_size}": throughput[f"workers={workers} batch={batch_size}"]}),
                  flush=True)
    shutil.rmtree(work)
    return results, throughput


def glove_c_reference(args, out: Path, build: Path, ours: dict) -> dict:
    """Stanford's glove.c on the tokenized training text with bertology's GloVe settings (`ours`, its summary)."""
    work = out / "glove-c"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg = StaticTrainConfig(corpus=[str(p) for p in CORPUS], out=str(work), method="glove", window=args.window,
                            progress=False)
    corpus = tokenize_corpus(cfg, work)  # the same documents held out, the same words as bertology's run
    settings = cfg.settings()  # train_methods' settings: each method's defaults but the window
    seconds = {}

    def run(step: str, command: list[str], source: Path, target: Path) -> None:
        started = time.perf_counter()
        with open(source, "rb") as stdin, open(target, "wb") as stdout:
            subprocess.run([str(build / command[0]), *command[1:]], stdin=stdin, stdout=stdout, check=True,
                           stderr=subprocess.DEVNULL)
        seconds[step] = round(time.perf_counter() - started, 1)

    train_file, vocab, threads = corpus.train_file, work / "vocab.txt", "2"
    run("vocab", ["vocab_count", "-min-count", str(settings["min_count"]), "-verbose", "0"], train_file, vocab)
    run("counting", ["cooccur", "-memory", "4.0", "-vocab-file", str(vocab), "-window-size", str(settings["window"]),
                     "-verbose", "0"], train_file, work / "cooc.bin")
    run("shuffle", ["shuffle", "-memory", "4.0", "-verbose", "0"], work / "cooc.bin", work / "cooc.shuf.bin")
    started = time.perf_counter()
    subprocess.run([str(build / "glove"), "-input-file", str(work / "cooc.shuf.bin"), "-vocab-file", str(vocab),
                    "-save-file", str(work / "vectors"), "-threads", threads, "-vector-size", str(args.dim),
                    "-iter", str(settings["epochs"]), "-eta", str(settings["lr"]), "-x-max", str(settings["x_max"]),
                    "-alpha", str(settings["alpha"]), "-binary", "0", "-model", "2", "-verbose", "0", "-seed", "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds["training"] = round(time.perf_counter() - started, 1)
    evaluation = evaluate_vectors(import_vectors(work / "vectors.txt"))
    ratios = {"counting": round(ours["seconds"]["counting"] / (seconds["vocab"] + seconds["counting"]
                                                               + seconds["shuffle"]), 2),
              "training_per_epoch": round(ours["seconds"]["training"] / ours["epochs"]
                                          / (seconds["training"] / settings["epochs"]), 2)}
    shutil.rmtree(work)
    return {"seconds": seconds, "evaluation": evaluation, "time_ratio_bertology_over_glove_c": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/static-bench")
    parser.add_argument("--methods", nargs="+", default=["word2vec", "fasttext", "glove"])
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--max-time", default="8m", help="each method's training budget (reading and counting excluded)")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--glove-c", type=Path, metavar="BUILD_DIR",
                        help="the reference GloVe's build folder: run it beside bertology's GloVe (see above)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if not args.skip_training:
        report["methods"] = train_methods(args, out)
        body = table(report["methods"])
        print("\n" + body)
        ours = next((m for m in report["methods"] if m["method"] == "glove"), None)
        if args.glove_c and ours:
            report["glove_c"] = glove_c_reference(args, out, args.glove_c, ours)
            e = report["glove_c"]["evaluation"]
            line = (f"glove.c, same text and settings: WordSim-353 {e['wordsim353']['spearman']:.3f}, SimLex-999 "
                    f"{e['simlex999']['spearman']:.3f}, analogies {e['analogy']['accuracy']:.3f}; seconds "
                    f"{report['glove_c']['seconds']}; bertology / glove.c time "
                    f"{report['glove_c']['time_ratio_bertology_over_glove_c']}")
            print("\n" + line, flush=True)
            body += "\n\n" + line
        write_section("static-vectors", slug("methods", *args.methods, f"{args.dim}d", "window", args.window,
                                             args.max_time, "glove-c" if args.glove_c else ""),
                      f"{', '.join(args.methods)} on the shared corpus ({args.dim}-d, window {args.window}, "
                      f"{args.max_time} each)", f"WikiText-2 valid + test and the Gutenberg books, {report['cpus']} "
                      f"CPUs, {report['torch_threads']} threads:\n\n{body}")
    if not args.skip_scaling:
        report["counting"], report["glove_training"] = counting_scaling(args, out)
        counting = markdown_table(["corpus read", "tokens", "distinct pairs", "seconds", "tokens/s", "peak memory MB"],
                                  [[f"{c['repeats']}x", f"{c['tokens']:,}", f"{c['nonzero']:,}", c["seconds"],
                                    f"{c['tokens_per_second']:,}", c["peak_rss_mb"]] for c in report["counting"]])
        training = markdown_table(["threads, batch", "entries/s", "epochs/s"],
                                  [[key.replace("workers=", "").replace(" batch=", ", "), f"{v['entries_per_second']:,}",
                                    v["epochs_per_second"]] for key, v in report["glove_training"].items() if key != "nonzero"])
        write_section("static-vectors", slug("glove-speed", "window", args.window, f"{args.dim}d"),
                      "GloVe's counting and training speed",
                      f"Counting co-occurrences (window {args.window}) over the tokenized training text read 1, 3 and "
                      f"10 times, each in a fresh process:\n\n{counting}\n\nAdaGrad over the "
                      f"{report['glove_training']['nonzero']:,} co-occurrence entries of the 1x text ({args.dim}-d):"
                      f"\n\n{training}")
    path = out / f"results-{int(time.time())}.json"
    path.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
