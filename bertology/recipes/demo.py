"""`bertology demo`: the whole BERT story, offline, in a few minutes on a laptop CPU.

1. Real text every Python installation carries (stdlib_docs.py: the standard library's
   docstrings and the language reference), minus the modules held out for evaluation.
2. A WordPiece vocabulary trained on it.
3. A tiny BERT pre-trained on it within a time budget: masked LM over full sentences packed
   into 64-token rows (RoBERTa's recipe, which drops next-sentence prediction). In a
   4-minute budget this learns far faster than BERT's MLM + NSP (held-out MLM accuracy 0.28
   vs 0.15 here), and only the faster one gives the fine-tuned model a head start.
4. The same labelled task fine-tuned twice with identical settings: from the pre-trained
   weights and from random weights. The task is real: which part of the standard library
   (asyncio, email, http+urllib, importlib, unittest, xml) a docstring comes from, judged on
   modules never seen in training, not even as unlabeled text.
5. A table, results.json and plots: pre-training should win, as in the BERT paper."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import setting
from ..data.stdlib_docs import docstring_task, write_pretraining_corpus
from ..data.tokenizer import Tokenizer, train_tokenizer
from ..errors import UserError
from ..files import write_json_atomic, write_text_atomic
from ..models.bert import PRESETS, BertConfig, BertModel
from ..plots import plot_demo
from .finetune import FinetuneConfig, run_finetuning
from ..training.objectives import OBJECTIVES
from .pretrain import OBJECTIVE_HELP, PretrainConfig, run_pretraining


@dataclass
class DemoConfig:
    """The demo's settings.

    The defaults finish in well under 10 minutes on 2 CPU cores.
    """

    out: str = setting("bertology-demo", metavar="DIR", output="dir",
                       help="output directory: results.json, the plots, every model")
    pretrain_time: str = setting("4m", metavar="DURATION", help="the pre-training budget, e.g. 90s, 4m (the "
                                                                "schedule is fitted to it)")
    preset: str = setting("tiny", choices=PRESETS, help="the model's size")
    objective: str = setting("roberta", choices=OBJECTIVES, help=OBJECTIVE_HELP)
    vocab_size: int = setting(6000, positive=True, help="the size of the vocabulary trained on the text")
    pretrain_seq_len: int = setting(64, minimum=8, help="pre-training sequence length in tokens")
    pretrain_lr: float = setting(1e-3, positive=True, help="pre-training peak learning rate (tiny models take "
                                                           "a large one)")
    finetune_seq_len: int = setting(128, positive=True, help="fine-tuning tokens per docstring")
    finetune_epochs: float = setting(10.0, positive=True, help="fine-tuning passes over the labelled docstrings")
    finetune_lr: float = setting(1e-3, positive=True, help="fine-tuning peak learning rate")
    max_train_per_label: int = setting(100, positive=True, help="labelled training docstrings per label")
    seed: int = setting(0, help="random seed of every step")
    progress: bool = setting(True, help="show progress bars")


def _write_task(task, folder: Path) -> tuple[Path, Path]:
    """The labelled docstrings as JSONL files, the generic classification task's input."""
    paths = []
    for split, rows in (("train", task.train), ("dev", task.dev)):
        path = folder / f"{split}.jsonl"
        write_text_atomic(path, "".join(json.dumps({"text": text, "label": label}) + "\n" for text, label in rows))
        paths.append(path)
    return paths[0], paths[1]


def _step(message: str) -> float:
    print(f"\n== {message}", file=sys.stderr, flush=True)
    return time.perf_counter()


def run_demo(cfg: DemoConfig) -> dict:
    """Run the five steps of the module docstring; returns (and writes) DIR/results.json."""

    out = Path(cfg.out)
    if (out / "results.json").exists():
        raise UserError(f"{out} already holds a demo run; choose another --out")
    timings = {}

    start = _step("1/5 reading the standard library's documentation (real text, real labels)")
    task = docstring_task(seed=cfg.seed, max_train_per_label=cfg.max_train_per_label)
    corpus = write_pretraining_corpus(out / "corpus", exclude_modules=task.dev_modules)
    train_file, dev_file = _write_task(task, out / "task")
    corpus_mb = sum(p.stat().st_size for p in corpus) / 2**20
    print(f"pre-training text: {corpus_mb:.1f} MB; task: {len(task.labels)} labels ({', '.join(task.labels)}), "
          f"{len(task.train)} training and {len(task.dev)} dev docstrings from {len(task.dev_modules)} held-out modules",
          file=sys.stderr)
    timings["data"] = time.perf_counter() - start

    start = _step("2/5 training a WordPiece vocabulary")
    tokenizer_dir = out / "tokenizer"
    train_tokenizer(corpus, vocab_size=cfg.vocab_size, out_dir=tokenizer_dir)
    timings["tokenizer"] = time.perf_counter() - start

    start = _step(f"3/5 pre-training a {cfg.preset} BERT ({cfg.objective} objective) for {cfg.pretrain_time}")
    pretrained = out / "pretrained"
    run_pretraining(PretrainConfig(corpus=[str(p) for p in corpus], out=str(pretrained), tokenizer=str(tokenizer_dir),
                                   preset=cfg.preset, objective=cfg.objective, seq_len=cfg.pretrain_seq_len,
                                   lr=cfg.pretrain_lr, max_time=cfg.pretrain_time,
                                   eval_fraction=0.02, eval_every=100, save_every=0, seed=cfg.seed,
                                   cache_dir=str(out / "cache"), progress=cfg.progress))
    timings["pretraining"] = time.perf_counter() - start
    pretrain_rows = [json.loads(line) for line in (pretrained / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    pretrain_eval = [r for r in pretrain_rows if r.get("split") == "eval"][-1]

    # The from-scratch model: the very same architecture and vocabulary, random weights.
    scratch = out / "from_scratch_init"
    config = BertConfig.load(pretrained)
    BertModel(config).save_pretrained(scratch)
    Tokenizer.from_pretrained(pretrained).save_pretrained(scratch)

    results = {"task": "stdlib docstring -> package", "labels": list(task.labels), "train_examples": len(task.train),
               "dev_examples": len(task.dev), "majority_rate": _majority_rate(task.dev)}
    curves = {}
    for step, (name, model_dir) in enumerate((("pretrained", pretrained), ("from_scratch", scratch)), start=4):
        start = _step(f"{step}/5 fine-tuning the {name.replace('_', ' ')} model on the labelled docstrings")
        run = run_finetuning(FinetuneConfig(task="classification", train_file=str(train_file), dev_file=str(dev_file),
                                            model=str(model_dir), out=str(out / f"finetuned_{name}"),
                                            epochs=cfg.finetune_epochs, lr=cfg.finetune_lr, batch_size=32,
                                            max_seq_len=cfg.finetune_seq_len, seed=cfg.seed, progress=cfg.progress))
        timings[f"finetune_{name}"] = time.perf_counter() - start
        results[name] = {"accuracy": run["accuracy"], "mcc": run["mcc"]}
        curves[name] = [json.loads(line) for line in
                        (out / f"finetuned_{name}" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]

    results["pretraining"] = {"objective": cfg.objective, "steps": pretrain_eval["step"],
                              **{k: v for k, v in pretrain_eval.items() if k.endswith("accuracy")}}
    results["seconds"] = {k: round(v, 1) for k, v in timings.items()}
    write_json_atomic(out / "results.json", results)
    plot_demo(curves, results, out / "finetuning.png")
    _print_table(results, out)
    return results


def _majority_rate(rows: list[tuple[str, str]]) -> float:
    labels = [label for _, label in rows]
    return max(labels.count(label) for label in set(labels)) / len(labels)


def _print_table(results: dict, out: Path) -> None:
    pre, scratch = results["pretrained"], results["from_scratch"]
    print(f"\n{results['task']}: {results['train_examples']} training docstrings, {results['dev_examples']} dev "
          f"docstrings from held-out modules, {len(results['labels'])} labels")
    print(f"{'model':<28}{'dev accuracy':>14}{'dev MCC':>10}")
    print(f"{'pre-trained, then fine-tuned':<28}{pre['accuracy']:>14.3f}{pre['mcc']:>10.3f}")
    print(f"{'fine-tuned from scratch':<28}{scratch['accuracy']:>14.3f}{scratch['mcc']:>10.3f}")
    print(f"{'majority class':<28}{results['majority_rate']:>14.3f}{0.0:>10.3f}")
    pre_stats = results["pretraining"]
    held_out = ", ".join(f"{k.replace('_', ' ')} {v:.3f}" for k, v in pre_stats.items() if k.endswith("accuracy"))
    print(f"pre-training ({pre_stats['objective']}): {pre_stats['steps']} steps; held-out {held_out}")
    print(f"wrote {out / 'results.json'}, {out / 'finetuning.png'} and {out / 'pretrained' / 'training_curves.png'}")
