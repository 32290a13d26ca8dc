"""Threads on a shared CPU: the demo's pre-training speed at 1 thread, 2 threads and the default.

The demo's model and step (a tiny BERT, RoBERTa's masked LM, batches of 32 x 64 tokens, the
training loop's own `train_step`: fused AdamW, the default precision) timed in a child process
per measurement, so that each starts as a `bertology` command does: PyTorch's threads and the
OpenMP runtime's waiting policy are set when it loads. Meanwhile N competing CPU-bound processes
(`python -c "while True: pass"`, the same priority) keep cores busy. Settings are measured in
interleaved rounds, so that every setting sees the same background; the script prints each
setting's median steps/s over the rounds (min-max), and the load average when it ran.

Settings (--settings): "default" (what a command does given no --threads), "N" (--threads N,
waiting as the default does), "N-spin" (N threads, the OpenMP runtime's own spin-waiting, as
PyTorch does by itself: how the demo ran before the default changed), "N-spinK" (N threads that
spin K times, GNU OpenMP's GOMP_SPINCOUNT, before they sleep: the runtime's own count is 300,000,
the sleeping default's 0).

    python bench/threads.py [--competitors 0 1] [--settings default 1 2 2-spin 2-spin3000] [--rounds 3] [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from results_page import slug, write_section


def child(setting: str, seconds: float) -> None:
    """Time the demo's pre-training step under `setting`; print {"steps_per_second", "threads"}."""
    from bertology.cli import apply_threads, prepare_threads
    from bertology.config import Threads

    threads, _, spin = setting.partition("-")
    if not spin.startswith("spin"):
        prepare_threads()  # before PyTorch loads, as the command line does
    import numpy as np
    import torch

    from bertology.data.pretraining import Instance, collate
    from bertology.models.bert import BertConfig
    from bertology.recipes.demo import BATCH_SIZE
    from bertology.training.loop import TrainConfig, Trainer
    from bertology.training.objectives import build_objective

    chosen = Threads(threads=None if threads == "default" else int(threads))
    apply_threads(chosen)  # as a command applies --threads
    count = chosen.threads
    config = BertConfig.from_preset("tiny", vocab_size=6000)
    module = build_objective("roberta", config, mask_token_id=4)
    ids = np.random.default_rng(0).integers(5, config.vocab_size, size=(BATCH_SIZE, 64))
    batch = collate([Instance(row, np.zeros_like(row), -1) for row in ids], pad_id=0)
    generator = torch.Generator().manual_seed(0)
    trainer = Trainer(module, TrainConfig(max_steps=10**9, progress=False), os.devnull,
                      lambda step: [module.prepare(dict(batch), generator)])
    for _ in range(3):  # the allocator's and the kernels' first calls are slow
        trainer.train_step()
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        trainer.train_step()
        steps += 1
    print(json.dumps({"steps_per_second": steps / elapsed, "threads": count}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--competitors", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--settings", nargs="+", default=["default", "1", "2", "2-spin"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.seconds)
    env = {key: value for key, value in os.environ.items()
           if key not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "BERTOLOGY_THREADS")}
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} before")
    lines = [f"The demo's pre-training step (a tiny BERT, RoBERTa's masked LM, batches of 32 x 64 tokens) in a child "
             f"process per measurement, interleaved rounds, {os.cpu_count()} CPUs; steps/s, median (min-max):"]
    for competitors in args.competitors:
        processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(competitors)]
        try:
            time.sleep(2)  # the competitors are running
            rates: dict[str, list[float]] = {setting: [] for setting in args.settings}
            threads, loads = {}, []
            for _ in range(args.rounds):
                for setting in args.settings:
                    spin_count = setting.partition("-spin")[2]  # read by the runtime when PyTorch loads
                    result = subprocess.run([sys.executable, __file__, "--child", setting, "--seconds",
                                             str(args.seconds)], capture_output=True, text=True, check=True,
                                            env={**env, "GOMP_SPINCOUNT": spin_count} if spin_count else env)
                    measured = json.loads(result.stdout.splitlines()[-1])
                    rates[setting].append(measured["steps_per_second"])
                    threads[setting] = measured["threads"]
                    loads.append(os.getloadavg()[0])
        finally:
            for process in processes:
                process.kill()
        print(f"\n{competitors} competing process(es); load average {min(loads):.1f}-{max(loads):.1f} while measuring")
        lines += ["", f"{competitors} competing process(es) (`python -c \"while True: pass\"`); load average "
                      f"{min(loads):.1f}-{max(loads):.1f} while measuring:", ""]
        for setting, values in rates.items():
            print(f"  {setting:<8} ({threads[setting]} threads) {statistics.median(values):6.2f} steps/s "
                  f"({min(values):.2f}-{max(values):.2f}) over {len(values)} rounds")
            lines.append(f"- {setting} ({threads[setting]} threads): {statistics.median(values):.2f} steps/s "
                         f"({min(values):.2f}-{max(values):.2f}) over {len(values)} rounds")
    write_section("threads", slug("demo-step", *args.settings, "competitors", *args.competitors),
                  "The demo's pre-training step beside competing processes", "\n".join(lines))


if __name__ == "__main__":
    main()
