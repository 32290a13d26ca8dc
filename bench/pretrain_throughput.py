"""Pre-training throughput: bertology's training loop vs transformers' BertForPreTraining, same run.

For each preset (tiny, mini, small by default) at sequence length 128 and batch 32,
both models get the same config (BERT's 30,522-token vocabulary), the same batches
(15% of positions labelled for the masked LM, NSP labels) and the same optimizer
(AdamW, gradient clipping at 1.0). One optimizer step = forward + backward + clip +
AdamW update. Measured in fp32 and with bf16 autocast; prints training tokens/s, the
ratio bertology / transformers, and bertology's model FLOP utilisation (MFU): useful
model FLOPs per second over the matrix-product peak measured in the same run.

Each measurement runs in its own child process, in the environment its library runs in
by default: bertology's with the glibc malloc settings its command line sets
(`bertology/__main__.py`), transformers' without. A third column gives transformers
with bertology's malloc settings too, so the gain of each part can be told apart.

With `--compile`, both again compiled: bertology's `--compile` (its repeated layers, one graph
shared by the stack) against `torch.compile` of transformers' whole model, the usual way a
transformers user compiles it. Compiling happens in the warm-up steps, outside the timing.

    python bench/pretrain_throughput.py [--presets tiny mini small] [--steps 6] [--compile]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402

from bertology import BertConfig  # noqa: E402
from bertology.__main__ import MALLOC_SETTINGS  # noqa: E402
from bertology.ops import (
    bf16_is_fast,
    linear,  # noqa: E402
)
from bertology.training.loop import TrainConfig, Trainer
from bertology.training.objectives import build_objective
from results_page import slug, write_section

SEQ_LEN, BATCH, VOCAB, MASK_ID = 128, 32, 30522, 103


def make_batches(count: int, seed: int = 0, batch: int = BATCH, seq_len: int = SEQ_LEN,
                 vocab: int = VOCAB) -> list[dict[str, torch.Tensor]]:
    """Batches as the pre-training pipeline prepares them: masked ids, MLM labels, NSP labels,
    each (batch, seq_len) (pair_labels (batch,)); the second segment starts at seq_len // 2."""
    g = torch.Generator().manual_seed(seed)
    middle = seq_len // 2
    batches = []
    for _ in range(count):
        ids = torch.randint(min(1000, vocab // 2), vocab, (batch, seq_len), generator=g)
        ids[:, 0], ids[:, middle], ids[:, -1] = 101, 102, 102
        chosen = torch.rand(batch, seq_len, generator=g) < 0.15
        chosen[:, [0, middle, -1]] = False
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        batches.append({
            "input_ids": ids.masked_fill(chosen, MASK_ID),
            "attention_mask": torch.ones_like(ids),
            "token_type_ids": (torch.arange(seq_len) > middle).long().expand(batch, -1).contiguous(),
            "labels": labels,
            "pair_labels": torch.randint(0, 2, (batch,), generator=g),
        })
    return batches


def model_flops_per_token(config: BertConfig, masked_fraction: float = 0.15, seq_len: int = SEQ_LEN) -> float:
    """Useful training FLOPs per token (forward + backward = 3x forward): the layers'
    products, attention scores and mixing, and the masked-LM head at the masked positions only."""
    H, I, L, V = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    per_layer = 2 * (4 * H * H + 2 * H * I) + 2 * 2 * seq_len * H
    head = masked_fraction * 2 * (H * H + H * V)
    return 3 * (L * per_layer + head)


def matmul_peak(precision: str) -> float:
    """FLOP/s of a large matrix product on the fastest path bertology uses for this precision."""
    x = torch.randn(4096, 1024)
    w = torch.randn(1024, 1024)
    if precision == "bf16":
        x, w = x.bfloat16(), w.bfloat16()
        run = lambda: F.linear(x, w)  # noqa: E731
    else:
        run = lambda: linear(x, w)  # noqa: E731
    with torch.no_grad():
        for _ in range(3):
            run()
        start = time.perf_counter()
        for _ in range(10):
            run()
    return 10 * 2 * 4096 * 1024 * 1024 / (time.perf_counter() - start)


def bertology_seconds(config: BertConfig, batches, precision: str, steps: int, compiled: bool = False) -> float:
    """Seconds per optimizer step of bertology's Trainer (batches already prepared), `compiled` by its --compile."""
    torch.manual_seed(0)
    objective = build_objective("bert", config, MASK_ID)
    trainer = Trainer(objective, TrainConfig(lr=1e-4, max_steps=10**6, precision=precision, progress=False,
                                             compile=compiled),
                      "/tmp/bertology-bench", lambda step: [batches[step % len(batches)]])
    for _ in range(2):  # warm-up (compiling, when compiled)
        trainer.train_step()
    start = time.perf_counter()
    for _ in range(steps):
        trainer.train_step()
    return (time.perf_counter() - start) / steps


def transformers_seconds(config: BertConfig, batches, precision: str, steps: int, compiled: bool = False) -> float:
    """Seconds per optimizer step of a plain transformers training loop, same work; `compiled`: the whole
    model under torch.compile."""
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**{k: v for k, v in config.to_dict().items() if k != "model_type"})
    trained = transformers.BertForPreTraining(hf_config).train()
    model = torch.compile(trained) if compiled else trained
    optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-4, eps=1e-6)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

    def step(i):
        batch = batches[i % len(batches)]
        with autocast:
            loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         token_type_ids=batch["token_type_ids"], labels=batch["labels"],
                         next_sentence_label=batch["pair_labels"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for i in range(2):  # warm-up (compiling, when compiled)
        step(i)
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    return (time.perf_counter() - start) / steps


# The library a child measures -> its timing (a library's name, not a model family's: both run BERT).
STEP_SECONDS = dict(bertology=bertology_seconds, transformers=transformers_seconds)


def child(library: str, preset: str, precision: str, mode: str, steps: int) -> None:
    """Measure one (library, preset, precision, mode: eager or compiled) and print its tokens/s as JSON."""
    config = BertConfig.from_preset(preset, vocab_size=VOCAB)
    seconds = STEP_SECONDS[library](config, make_batches(4), precision, steps, compiled=mode == "compiled")
    print(json.dumps({"tokens_per_second": BATCH * SEQ_LEN / seconds}))


def measure(library: str, preset: str, precision: str, steps: int, tuned_malloc: bool, mode: str = "eager") -> float:
    """Tokens/s from a child process, with or without bertology's malloc settings, eager or compiled."""
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_SETTINGS}
    if tuned_malloc:
        env.update(MALLOC_SETTINGS)
    command = [sys.executable, __file__, "--child", library, preset, precision, mode, "--steps", str(steps)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])["tokens_per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "mini", "small"])
    parser.add_argument("--steps", type=int, default=6, help="timed steps per measurement")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all measurements; the median is reported")
    parser.add_argument("--compile", action="store_true",
                        help="also measure both compiled (bertology --compile, transformers under torch.compile)")
    parser.add_argument("--child", nargs=4, metavar=("LIBRARY", "PRESET", "PRECISION", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child, args.steps)

    precisions = ["fp32", "bf16"] if bf16_is_fast(torch.device("cpu")) else ["fp32"]
    peaks = {p: matmul_peak(p) for p in precisions}
    # (library, bertology's malloc settings, mode): each library as it runs by default, then compiled
    setups = [("transformers", False, "eager"), ("transformers", True, "eager"), ("bertology", True, "eager")]
    if args.compile:
        setups += [("transformers", False, "compiled"), ("bertology", True, "compiled")]
    samples: dict[tuple, list[float]] = {}
    for _ in range(args.rounds):  # rounds alternate, so drift in the machine's speed hits all alike
        for preset in args.presets:
            for precision in precisions:
                for library, tuned, mode in setups:
                    samples.setdefault((preset, precision, library, tuned, mode), []).append(
                        measure(library, preset, precision, args.steps, tuned, mode))
                print(f"{preset} {precision}: " + ", ".join(
                    f"{lib}{' (tuned malloc)' if t else ''}{' compiled' if m == 'compiled' else ''} "
                    f"{samples[(preset, precision, lib, t, m)][-1]:,.0f} tok/s" for lib, t, m in setups), flush=True)
    speed = {key: statistics.median(values) for key, values in samples.items()}

    lines = [f"seq {SEQ_LEN}, batch {BATCH}, vocab {VOCAB}, MLM + NSP, {torch.get_num_threads()} threads, torch "
             f"{torch.__version__}, transformers {transformers.__version__}, median of {args.rounds} rounds; "
             "matmul peak measured now: " + ", ".join(f"{p} {v / 1e9:,.0f} GFLOP/s" for p, v in peaks.items()), "",
             "| preset | precision | transformers tok/s | transformers + tuned malloc | bertology tok/s | ratio | bertology MFU |"
             + (" transformers compiled | bertology compiled | compiled ratio | bertology compiled / eager |"
                if args.compile else ""),
             "|---|---|---:|---:|---:|---:|---:|" + ("---:|---:|---:|---:|" if args.compile else "")]
    for preset in args.presets:
        config = BertConfig.from_preset(preset, vocab_size=VOCAB)
        for precision in precisions:
            theirs = speed[(preset, precision, "transformers", False, "eager")]
            tuned = speed[(preset, precision, "transformers", True, "eager")]
            ours = speed[(preset, precision, "bertology", True, "eager")]
            mfu = ours * model_flops_per_token(config) / peaks[precision]
            line = (f"| {preset} | {precision} | {theirs:,.0f} | {tuned:,.0f} | {ours:,.0f} | {ours / theirs:.2f} "
                    f"| {mfu:.0%} |")
            if args.compile:
                theirs_compiled = speed[(preset, precision, "transformers", False, "compiled")]
                ours_compiled = speed[(preset, precision, "bertology", True, "compiled")]
                line += (f" {theirs_compiled:,.0f} | {ours_compiled:,.0f} | {ours_compiled / theirs_compiled:.2f} "
                         f"| {ours_compiled / ours:.2f} |")
            lines.append(line)
    default = "bf16" if "bf16" in precisions else "fp32"
    lines += ["", f"ratio = bertology / transformers, each as it runs by default. bertology's default precision here "
                  f"is {default}; its speed against transformers' default setups:", ""]
    for preset in args.presets:
        ours = speed[(preset, default, "bertology", True, "eager")]
        line = f"- {preset}: {ours / speed[(preset, 'fp32', 'transformers', False, 'eager')]:.2f}x transformers fp32"
        if "bf16" in precisions:
            line += (f", {ours / speed[(preset, 'bf16', 'transformers', False, 'eager')]:.2f}x transformers with bf16 "
                     "autocast")
        lines.append(line)
    print("\n" + "\n".join(lines))
    if args.compile:
        lines += ["", "compiled ratio = bertology --compile / transformers under torch.compile, the same precision; "
                      "the last column: what --compile gives bertology here."]
    write_section("pretrain-throughput", slug("presets", *args.presets, *(["compiled"] if args.compile else [])),
                  "Training tokens/s per preset, bertology against transformers' BertForPreTraining"
                  + (", eager and compiled" if args.compile else ""), "\n".join(lines))


if __name__ == "__main__":
    main()
