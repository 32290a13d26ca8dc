"""Generation speed: bertology's GPT over its static key/value cache (the default), over the cache
that grows by concatenation, and without a cache, vs transformers' `generate`, on the same
weights, in the same run; with --compile also the static cache's decode step compiled (inductor:
on this CPU its build takes minutes, and CUDA graphs need a GPU: bench/gpu.py measures them there).

Greedy decoding of `--new-tokens` tokens after a 16-token prompt, at batch 1 and 8, GPT-2
layout with random weights (a `--preset` of the BERT size names; mini = 4 layers x 256).
Each figure is the median of `--repeats` rounds timed in alternation, so drift in the
machine's speed hits every contender alike; the table gives new tokens per second and the
ratio to transformers (> 1: bertology is faster). The outputs are checked to be identical.

    python bench/generation.py                     # mini, 128 new tokens, batch 1 and 8
    python bench/generation.py --preset base       # GPT-2 small's shape (124M with a 50k vocabulary)
    python bench/generation.py --compile --batch-sizes 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from bertology.inference.generation import GenerationConfig, generate  # noqa: E402
from bertology.models.gpt import GPTConfig, GPTLMHeadModel  # noqa: E402
from results_page import markdown_table, slug, write_section  # noqa: E402


def load_pair(preset: str, vocab_size: int, positions: int):
    """The same random GPT-2-layout weights in both libraries (saved once by bertology)."""
    torch.manual_seed(0)
    config = GPTConfig.from_preset(preset, vocab_size=vocab_size, n_positions=positions, pre_layer_norm=True)
    directory = tempfile.mkdtemp()
    GPTLMHeadModel(config).save_pretrained(directory)
    ours = GPTLMHeadModel.from_pretrained(directory).eval()
    reference = transformers.GPT2LMHeadModel.from_pretrained(directory).eval()
    return config, ours, reference


def timed(function) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    output = function()
    return time.perf_counter() - start, output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="also the compiled decode step")
    args = parser.parse_args()
    config, ours, reference = load_pair(args.preset, args.vocab_size, 16 + args.new_tokens)
    settings_line = (f"GPT-2 layout, preset {args.preset} ({config.n_layer} layers x {config.n_embd}, "
                     f"{ours.num_parameters():,} parameters), greedy, 16-token prompts, {args.new_tokens} new tokens, "
                     f"median of {args.repeats} alternating rounds, outputs checked identical; torch {torch.__version__}, "
                     f"{torch.get_num_threads()} threads, transformers {transformers.__version__}")
    print(settings_line)
    rows = []
    print(f"{'batch':>5} {'contender':<38} {'new tokens/s':>13} {'vs transformers':>16}")
    settings = GenerationConfig(max_new_tokens=args.new_tokens)
    for batch_size in args.batch_sizes:
        prompt = torch.randint(0, args.vocab_size, (batch_size, 16), generator=torch.Generator().manual_seed(1))
        contenders = {
            "transformers generate (cache)": lambda: reference.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.new_tokens, do_sample=False,
                pad_token_id=0),
            "bertology generate (static cache)": lambda: generate(ours, prompt, config=settings),
            "bertology generate (dynamic cache)": lambda: generate(
                ours, prompt, config=GenerationConfig(max_new_tokens=args.new_tokens, cache_implementation="dynamic")),
            "bertology generate (no cache)": lambda: generate(
                ours, prompt, config=GenerationConfig(max_new_tokens=args.new_tokens, use_cache=False)),
        }
        if args.compile:
            contenders["bertology generate (static, compiled)"] = lambda: generate(
                ours, prompt, config=GenerationConfig(max_new_tokens=args.new_tokens, compile=True))
        seconds: dict[str, list[float]] = {name: [] for name in contenders}
        outputs = {}
        with torch.inference_mode():
            for name, run in contenders.items():  # warm-up, and the outputs to compare
                outputs[name] = run()
            for _ in range(args.repeats):
                for name, run in contenders.items():
                    seconds[name].append(timed(run)[0])
        reference_output = outputs["transformers generate (cache)"]
        assert all(torch.equal(o, reference_output) for o in outputs.values()), "the contenders disagree"
        baseline = statistics.median(seconds["transformers generate (cache)"])
        for name, values in seconds.items():
            median = statistics.median(values)
            print(f"{batch_size:>5} {name:<38} {batch_size * args.new_tokens / median:>13,.0f} "
                  f"{baseline / median:>15.2f}x")
            rows.append([batch_size, name, f"{batch_size * args.new_tokens / median:,.0f}", f"{baseline / median:.2f}x"])
    table = markdown_table(["batch", "contender", "new tokens/s", "vs transformers"], rows, "rlrr")
    write_section("generation", slug("gpt2", args.preset), f"GPT-2 layout, {args.preset}: bertology's generate against "
                  "transformers'", f"{settings_line}:\n\n{table}")


if __name__ == "__main__":
    main()
