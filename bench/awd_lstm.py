"""AWD-LSTM language-model training speed: bertology's AWD-LSTM vs fastai's `AWD_LSTM`, on the
same weights and the same batches, in the same run.

Batches are real text read the way both train it: WikiText-2 valid tokenized by a WordPiece
vocabulary trained on it, joined into one stream and read in `--batch-size` rows of
`--bptt` tokens (data/token_stream.py), the LSTM state carried from batch to batch. Both models
are built from fastai's language-model config (dropouts 0.1/0.15/0.25/0.02/0.2, tied output)
and start from the same weights (fastai's, copied by `from_fastai`); both train with Adam
(fastai's betas 0.9/0.99), gradient clipping at 0.1 and fastai's AR (alpha 2) and TAR (beta 1)
terms, as fastai's `language_model_learner` does (its `RNNRegularizer` callback computes the
same two terms on the same outputs). Each round runs `--steps` steps for each contender in
turn from the same starting weights; the figure is the median over `--repeats` alternating
rounds. The ratio > 1 means bertology is faster. The first step's cross-entropies are checked
to agree (the dropout masks differ, so only to within a few percent).

    python bench/awd_lstm.py                          # tiny, small and base, batch 32 x 70
    python bench/awd_lstm.py --presets base --vocab-size 30000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from fastai.text.models.awdlstm import AWD_LSTM, awd_lstm_lm_config
from fastai.text.models.core import get_language_model

from bertology import checkpoint
from bertology.data.shards import build_corpus
from bertology.data.token_stream import TokenStream
from bertology.data.tokenizer import train_tokenizer
from bertology.models.awd_lstm import PRESETS, AWDLSTMConfig, AWDLSTMLMHeadModel, from_fastai
from results_page import markdown_table, slug, write_section

REPO = Path(__file__).resolve().parents[1]


def stream_batches(text: Path, vocab_size: int, rows: int, bptt: int, count: int, cache: Path) -> tuple[list, int]:
    """`count` consecutive stream batches of the text, and the vocabulary's size."""
    tokenizer = train_tokenizer([text], vocab_size=vocab_size, out_dir=cache / "tokenizer")
    corpus = build_corpus([text], tokenizer, cache / "shards")
    stream = TokenStream(corpus, np.arange(corpus.num_documents), rows, bptt, seed=0, bos_id=tokenizer.cls_token_id)
    if stream.batches_per_epoch < count:
        raise SystemExit(f"{text} gives {stream.batches_per_epoch} batches of {rows} x {bptt}; ask for fewer --steps")
    return [stream.batch(index) for index in range(count)], tokenizer.vocab_size


def fastai_step(model, batch: dict) -> torch.Tensor:
    """fastai's language-model loss: cross-entropy + AR on the dropped output + TAR on the raw one."""
    logits, raw, dropped = model(batch["input_ids"])
    loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
    return loss, loss + 2.0 * dropped.float().pow(2).mean() + 1.0 * (raw[:, 1:] - raw[:, :-1]).float().pow(2).mean()


def ours_step(model, batch: dict, state):
    out = model(batch["input_ids"], state, labels=batch["labels"])
    return out.masked_lm_loss, out.loss, out.recurrent_state


def train(model, batches: list, ours: bool) -> tuple[float, float]:
    """(seconds, first cross-entropy) of one Adam step per batch, the state carried."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.99))
    model.train()
    if not ours:
        model.reset()
    state, first = None, None
    start = time.perf_counter()
    for batch in batches:
        if ours:
            cross_entropy, loss, state = ours_step(model, batch, state)
        else:
            cross_entropy, loss = fastai_step(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        first = cross_entropy.item() if first is None else first
    return time.perf_counter() - start, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small", "base"], choices=list(PRESETS))
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--bptt", type=int, default=70)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--text", type=Path, default=REPO.parent / "shared/data/wikitext-2-raw/wiki.valid.raw")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # fastai's weight drop warns about non-contiguous LSTM weights
    with tempfile.TemporaryDirectory() as cache:
        batches, vocab_size = stream_batches(args.text, args.vocab_size, args.batch_size, args.bptt, args.steps,
                                             Path(cache))
    tokens = args.steps * args.batch_size * args.bptt
    settings_line = (f"the same weights and stream batches, fastai's language-model dropouts, AR/TAR, Adam and clipping; "
                     f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.steps} steps of "
                     f"{args.batch_size} x {args.bptt} tokens per round, median of {args.repeats} alternating rounds, "
                     f"vocabulary {vocab_size:,}")
    print(settings_line)
    rows = []
    print(f"{'preset':8} {'emb/hid':>9} {'params':>10} {'fastai tok/s':>13} {'ours tok/s':>11} {'ratio':>6} "
          f"{'first CE fastai / ours':>23}")
    for preset in args.presets:
        emb_sz, n_hid, n_layers = PRESETS[preset]
        torch.manual_seed(0)
        reference = get_language_model(AWD_LSTM, vocab_size, {**awd_lstm_lm_config, "emb_sz": emb_sz, "n_hid": n_hid,
                                                              "n_layers": n_layers, "pad_token": 0})
        start_state = {k: v.clone() for k, v in reference.state_dict().items()}
        ours = AWDLSTMLMHeadModel(AWDLSTMConfig(vocab_size=vocab_size, emb_sz=emb_sz, n_hid=n_hid, n_layers=n_layers))
        timings = {"fastai": [], "ours": []}
        firsts = {}
        for _ in range(args.repeats):
            reference.load_state_dict(start_state)
            seconds, firsts["fastai"] = train(reference, batches, ours=False)
            timings["fastai"].append(seconds)
            checkpoint.load_checked(ours, from_fastai(start_state), "fastai", "an AWD-LSTM", skip=ours.tied_keys())
            seconds, firsts["ours"] = train(ours, batches, ours=True)
            timings["ours"].append(seconds)
        speed = {name: tokens / statistics.median(values) for name, values in timings.items()}
        params = sum(p.numel() for p in ours.parameters())
        print(f"{preset:8} {f'{emb_sz}/{n_hid}':>9} {params:>10,} {speed['fastai']:>13,.0f} {speed['ours']:>11,.0f} "
              f"{speed['ours'] / speed['fastai']:>5.2f}x {firsts['fastai']:>11.3f} / {firsts['ours']:.3f}")
        rows.append([preset, f"{emb_sz}/{n_hid}", f"{params / 1e6:.2f}M", f"{speed['fastai']:,.0f}",
                     f"{speed['ours']:,.0f}", f"{speed['ours'] / speed['fastai']:.2f}x"])
    table = markdown_table(["preset", "emb/hidden", "parameters", "fastai `AWD_LSTM` tokens/s", "bertology tokens/s",
                            "ratio"], rows, "llrrrr")
    write_section("awd-lstm", slug("presets", *args.presets), "bertology's AWD-LSTM against fastai's AWD_LSTM", f"{settings_line}:\n\n{table}")


if __name__ == "__main__":
    main()
