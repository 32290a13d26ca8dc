"""Exported models on SST-2 dev: accuracy, speed and size of PyTorch fp32, bf16, int8 and ONNX Runtime.

Exports a fine-tuned SST-2 model directory to `int8` and `onnx` (in a temporary folder),
then, in the same run and through the same path as `bertology evaluate` (every dev
sentence encoded once, length-bucketed batches of 32, `finetune.run_rows`), measures for
each setup: dev accuracy, throughput in sentences/s over the whole dev set (the median of
--repeats rounds, the setups timed in alternation after a warm-up pass, so drift in the
machine's speed hits all alike), the largest logit difference from PyTorch fp32, and the
size of the weights file on disk. Prints a markdown table with ratios to PyTorch fp32.

    python bench/export.py --model runs/sst2 [--data $BERTOLOGY_DATA/glue/SST-2] [--limit 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402
import torch  # noqa: E402

from bertology.inference.runners import load_finetuned
from bertology.inference.onnx import ONNX_NAME
from bertology.inference.predict import decode, run_rows, score
from bertology.ops import bf16_is_fast
from bertology.recipes.finetune import FinetuneConfig
from bertology.tasks.inputs import encode
from bertology.tasks.splits import read_split
from bertology.uses.export import export_model
from results_page import markdown_table, write_section


def weights_file(directory: Path) -> Path:
    """The file that holds a model directory's weights."""
    for name in (ONNX_NAME, "model.safetensors", "pytorch_model.bin"):
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{directory}: no weights file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path, help="a model directory fine-tuned on SST-2")
    parser.add_argument("--data", type=Path, default=DATA / "glue" / "SST-2", help="the SST-2 folder (dev.tsv)")
    parser.add_argument("--limit", type=int, help="only the first N dev sentences (a quick check)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per setup (median)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)  # before the ONNX Runtime sessions, which take the same count

    model, tokenizer, spec, settings = load_finetuned(str(args.model))
    if spec.kind != "sequence":
        raise SystemExit(f"{args.model} was fine-tuned for {spec.name}; this benchmark wants an SST-2 classifier")
    examples = read_split(FinetuneConfig(task=spec.name, model=str(args.model)), spec, "dev", str(args.data))
    examples = examples[: args.limit]
    encoded = encode(spec, examples, tokenizer, settings, training=False)

    with tempfile.TemporaryDirectory() as tmp:
        exported = {fmt: export_model(args.model, fmt, Path(tmp) / fmt) for fmt in ("int8", "onnx")}
        setups = [("PyTorch fp32", model, "fp32", args.model)]
        if bf16_is_fast(torch.device("cpu")):
            setups.append(("PyTorch bf16 autocast", model, "bf16", args.model))
        setups += [("PyTorch int8 (dynamic)", load_finetuned(str(exported["int8"]))[0], "auto", exported["int8"]),
                   ("ONNX Runtime fp32", load_finetuned(str(exported["onnx"]))[0], "auto", exported["onnx"])]
        sizes = {name: weights_file(Path(directory)).stat().st_size for name, _, _, directory in setups}

        def run(model, precision):
            return run_rows(model, encoded, spec, tokenizer.pad_token_id, args.batch_size, precision)

        outputs = {name: run(m, precision) for name, m, precision, _ in setups}  # also the warm-up pass
        seconds = {name: [] for name, *_ in setups}
        for _ in range(args.repeats):
            for name, m, precision, _ in setups:
                start = time.perf_counter()
                run(m, precision)
                seconds[name].append(time.perf_counter() - start)

    reference = np.stack(outputs["PyTorch fp32"])
    base = next(iter(setups))[0]
    speed = {name: len(encoded.features) / statistics.median(times) for name, times in seconds.items()}
    settings_line = (f"{args.model}: SST-2 dev, {len(examples)} sentences, batch {args.batch_size}, {args.threads} "
                     f"threads, median of {args.repeats} rounds; torch {torch.__version__}, onnxruntime "
                     f"{onnxruntime.__version__}")
    rows = []
    for name, *_ in setups:
        accuracy = score(spec, examples, decode(spec, encoded, outputs[name], examples, settings))["accuracy"]
        difference = float(np.abs(np.stack(outputs[name]) - reference).max())
        rows.append([name, f"{accuracy:.4f}", f"{speed[name]:.1f}", f"{speed[name] / speed[base]:.2f}",
                     f"{difference:.2e}", f"{sizes[name] / 2**20:.1f}", f"{sizes[name] / sizes[base]:.2f}"])
    table = markdown_table(["setup", "dev accuracy", "sentences/s", "speed vs fp32", "max abs logit diff vs fp32",
                            "weights MiB", "size vs fp32"], rows)
    print(f"\n{settings_line}\n\n{table}")
    if args.limit is None:  # a quick check over a few sentences measures nothing worth a page
        write_section("export", "sst2", "The SST-2 model exported: accuracy, speed and size", f"{settings_line}:\n\n{table}")


if __name__ == "__main__":
    main()
