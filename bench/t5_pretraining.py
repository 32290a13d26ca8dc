"""T5 span-corruption pre-training speed: bertology's T5 vs transformers' T5ForConditionalGeneration
in a plain training loop, on the same weights and the same batches, in the same run.

Batches are real text (WikiText-2 valid, a unigram vocabulary with T5's 100 sentinels trained
on it) corrupted by bertology's span corruption (15% noise, mean span 3): the inputs and
targets both models see are identical. Each round runs `--steps` AdamW steps (forward,
backward, update) from the same starting weights for each contender in turn; the figure is
the median over `--repeats` alternating rounds, so drift in the machine's speed hits both
alike. Tokens/s counts input and target tokens; the ratio > 1 means bertology is faster. The
first step's losses are checked to agree.

    python bench/t5_pretraining.py                   # tiny and mini, batch 32 x 128
    python bench/t5_pretraining.py --presets small --batch-size 16
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from bertology.data.tokenizer import train_tokenizer  # noqa: E402
from bertology.models.t5 import T5Config, T5ForConditionalGeneration  # noqa: E402
from bertology.training.objectives import build_objective  # noqa: E402
from results_page import markdown_table, slug, write_section  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def corrupted_batches(text: Path, vocab_size: int, seq_len: int, batch_size: int, count: int) -> tuple[list, dict]:
    """`count` span-corrupted batches of the text's first tokens, and the tokenizer's special ids."""
    tokenizer = train_tokenizer([text], vocab_size=vocab_size, model="unigram", sentinels=100)
    lines = [line for line in text.read_text(encoding="utf-8").splitlines() if line.strip()]
    ids = [i for line in lines[:4000] for i in tokenizer.encode(line, add_special_tokens=False, truncation=False)]
    width = seq_len - 2
    rows = [[tokenizer.cls_token_id] + ids[k:k + width] + [tokenizer.sep_token_id]
            for k in range(0, width * batch_size * count, width)]
    special = dict(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id,
                   eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.pad_token_id)
    objective = build_objective("t5", T5Config(**special, num_layers=1, d_model=8, d_kv=8, d_ff=8, num_heads=1), None,
                                sentinel_ids=tokenizer.sentinel_token_ids)
    generator = torch.Generator().manual_seed(0)
    batches = []
    for start in range(0, len(rows), batch_size):
        chunk = torch.tensor(rows[start:start + batch_size])
        batches.append(objective.prepare({"input_ids": chunk, "attention_mask": torch.ones_like(chunk)}, generator))
    return batches, special


def train(model, batches: list, ours: bool) -> tuple[float, float]:
    """(seconds, first loss) of one AdamW step per batch."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    start, first = time.perf_counter(), None
    for batch in batches:
        if ours:
            loss = model(batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss
        else:
            loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         labels=batch["labels"]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        first = loss.item() if first is None else first
    return time.perf_counter() - start, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "mini"])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gated-gelu", action="store_true", help="T5 v1.1's feed-forward and untied output")
    args = parser.parse_args()
    data = Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))
    batches, special = corrupted_batches(data / "wikitext-2-raw" / "wiki.valid.raw", args.vocab_size, args.max_seq_len,
                                         args.batch_size, args.steps)
    tokens = sum(int(b["attention_mask"].sum() + (b["labels"] != -100).sum()) for b in batches)
    v1_1 = {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False} if args.gated_gelu else {}
    settings_line = (f"T5{' v1.1' if args.gated_gelu else ''} span corruption, batch {args.batch_size} x "
                     f"{args.max_seq_len} tokens before corruption, {args.vocab_size:,}-piece unigram vocabulary, "
                     f"{args.steps} steps per round, median of {args.repeats} rounds; tokens counted in inputs and "
                     f"targets; torch {torch.__version__}, {torch.get_num_threads()} threads, transformers "
                     f"{transformers.__version__}, dropout 0.1, fp32")
    print(settings_line)
    rows = []
    print(f"{'preset':<7} {'parameters':>11} {'transformers tok/s':>19} {'bertology tok/s':>16} {'ratio':>6}")
    for preset in args.presets:
        torch.manual_seed(0)
        directory = tempfile.mkdtemp()
        T5ForConditionalGeneration(T5Config.from_preset(preset, **special, **v1_1)).save_pretrained(directory)
        seconds = {"transformers": [], "bertology": []}
        losses = {}
        for _ in range(args.repeats):
            for name in seconds:  # fresh copies from the same file each round: the same work every time
                torch.manual_seed(1)  # the same dropout masks where the two draw them alike
                model = (T5ForConditionalGeneration.from_pretrained(directory) if name == "bertology"
                         else transformers.T5ForConditionalGeneration.from_pretrained(directory))
                elapsed, losses[name] = train(model, batches, name == "bertology")
                seconds[name].append(elapsed)
        reference, ours = (statistics.median(seconds[name]) for name in ("transformers", "bertology"))
        parameters = sum(p.numel() for p in model.parameters())
        print(f"{preset:<7} {parameters:>11,} {tokens / reference:>19,.0f} {tokens / ours:>16,.0f} "
              f"{reference / ours:>5.2f}x   (first losses {losses['transformers']:.3f} / {losses['bertology']:.3f})")
        rows.append([preset, f"{parameters / 1e6:.1f}M", f"{tokens / reference:,.0f}", f"{tokens / ours:,.0f}",
                     f"{reference / ours:.2f}x"])
    table = markdown_table(["preset", "parameters", "transformers tokens/s", "bertology tokens/s", "vs transformers"], rows)
    write_section("t5-pretraining", slug("presets", *args.presets, "v1.1" if args.gated_gelu else ""),
                  f"Span-corruption training tokens/s against transformers' T5ForConditionalGeneration"
                  f"{' (v1.1)' if args.gated_gelu else ''}", f"{settings_line}:\n\n{table}")


if __name__ == "__main__":
    main()
