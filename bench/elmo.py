"""ELMo biLM training speed at each preset, and the share of a step spent in the softmax.

Batches are real text read as `pretrain --arch elmo` reads it: WikiText-2 valid tokenized by a
WordPiece vocabulary trained on it (`--vocab-size`), one stream in `--batch-size` rows of
`--bptt` tokens, the backward LM on the same rows reversed, each direction's state carried.
A step is both directions' forward and backward passes and an Adam update. Tokens/s counts
text tokens (each is read once per direction). The softmax share is the time of the output
layer and its loss (forward and backward, both directions: `vocabulary x projection` products
over every position) timed alone on the step's own hidden states, over the whole step's time.
No ELMo implementation is a dependency to compare with (AllenNLP, which carried ELMo in
PyTorch, is archived); the figures place the presets against each other.

    python bench/elmo.py                         # tiny, mini and small
    python bench/elmo.py --presets medium --steps 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertology.data.shards import build_corpus
from bertology.data.token_stream import TokenStream
from bertology.data.tokenizer import train_tokenizer
from bertology.models.elmo import PRESETS, ELMoConfig, character_ids
from bertology.ops import cross_entropy_with_accuracy
from bertology.training.objectives import build_objective
from results_page import markdown_table, slug, write_section

REPO = Path(__file__).resolve().parents[1]


def batches(text: Path, vocab_size: int, rows: int, bptt: int, count: int, cache: Path) -> tuple[list, list[str]]:
    """`count` micro-batches with both directions' windows, and the vocabulary's tokens."""
    tokenizer = train_tokenizer([text], vocab_size=vocab_size, out_dir=cache / "tokenizer")
    corpus = build_corpus([text], tokenizer, cache / "shards")
    docs = np.arange(corpus.num_documents)
    streams = [TokenStream(corpus, docs, rows, bptt, 0, tokenizer.cls_token_id, reverse=reverse) for reverse in (False, True)]
    out = []
    for index in range(count):
        batch = streams[0].batch(index)
        batch.update({f"backward_{k}": v for k, v in streams[1].batch(index).items()})
        out.append(batch)
    return out, tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))


def softmax_seconds(objective: torch.nn.Module, batch: dict) -> float:
    """Forward and backward of the output layer and its loss alone, both directions, on this batch's states."""
    model = objective.model
    states = []
    with torch.no_grad():
        for prefix, lstms in (("", model.bilm.forward_lstms), ("backward_", model.bilm.backward_lstms)):
            x = model.bilm.token_encoder(batch[f"{prefix}input_ids"])
            states.append(model.bilm.run_direction(x, lstms, None)[0][-1].flatten(0, 1))
    start = time.perf_counter()
    for prefix, hidden in zip(("", "backward_"), states):
        hidden = hidden.detach().requires_grad_(True)
        loss, _ = cross_entropy_with_accuracy(model.softmax(hidden), batch[f"{prefix}labels"].flatten())
        loss.backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "mini", "small"], choices=list(PRESETS))
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--bptt", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--text", type=Path, default=REPO.parent / "shared/data/wikitext-2-raw/wiki.valid.raw")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        data, tokens = batches(args.text, args.vocab_size, args.batch_size, args.bptt, args.steps + 1, Path(cache))
    settings_line = (f"both directions' forward and backward passes and an Adam step; torch {torch.__version__}, "
                     f"{torch.get_num_threads()} threads; batch {args.batch_size} x {args.bptt} tokens of WikiText-2, "
                     f"vocabulary {len(tokens):,}, median of {args.steps} steps after one warm-up step; the softmax "
                     f"share is the output layer and its loss timed alone on the step's own states")
    print(settings_line)
    rows = []
    print(f"{'preset':8} {'proj/cells':>11} {'params (no softmax)':>20} {'tokens/s':>9} {'s/step':>7} {'softmax share':>14}")
    for preset in args.presets:
        torch.manual_seed(0)
        config = ELMoConfig.from_preset(preset, vocab_size=len(tokens))
        objective = build_objective("bilm", config, None, rows=args.batch_size)
        objective.model.bilm.token_encoder.char_ids.copy_(character_ids(tokens, config.max_characters_per_token))
        optimizer = torch.optim.Adam(objective.parameters(), lr=1e-3)
        seconds, shares = [], []
        for index, batch in enumerate(data):
            start = time.perf_counter()
            objective(batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step = time.perf_counter() - start
            if index:  # the first step warms up the allocator and the kernels
                seconds.append(step)
                shares.append(softmax_seconds(objective, batch) / step)
                optimizer.zero_grad(set_to_none=True)
        per_step = statistics.median(seconds)
        print(f"{preset:8} {f'{config.projection_dim}/{config.lstm_dim}':>11} "
              f"{objective.model.num_parameters(softmax=False):>20,} {args.batch_size * args.bptt / per_step:>9,.0f} "
              f"{per_step:>7.2f} {statistics.median(shares):>13.0%}")
        rows.append([preset, f"{config.projection_dim}/{config.lstm_dim}",
                     f"{objective.model.num_parameters(softmax=False) / 1e6:.2f}M",
                     f"{args.batch_size * args.bptt / per_step:,.0f}", f"{statistics.median(shares):.0%}"])
    table = markdown_table(["preset", "projection/cells", "parameters without the softmax", "tokens/s",
                            "softmax share of a step"], rows, "llrrr")
    write_section("elmo", slug("presets", *args.presets), "Tokens/s per preset and the softmax's share of a step", f"{settings_line}:\n\n{table}")


if __name__ == "__main__":
    main()
