"""ULMFiT's three stages through fastai's own pipeline, at bertology's budget: the reference row
beside bench/ulmfit_stages.py's table.

fastai is the library ULMFiT's authors wrote; its text pipeline is the published recipe
(fastai's "ULMFiT" text tutorial): spaCy word tokens with fastai's rules (xxbos, xxmaj, xxup,
...), `language_model_learner` over `AWD_LSTM`, `fit_one_cycle`, the target LM built on the
task's own vocabulary with the general LM's embeddings carried over (`match_embeds`), then
`text_classifier_learner` with gradual unfreezing and discriminative rates (slice(lr / 2.6**4, lr)).

The budget is bertology's run in bench/ulmfit_stages.py, in steps so that a busy machine
gives the same numbers: the same AWD-LSTM size (`--preset`'s emb_sz / n_hid / 3 layers), the
same vocabulary size (fastai's default of 60,000 words would make its softmax 7x wider than
our 8,000 pieces), the general LM for `--general-steps` batches of 32 x 70 tokens of the same
40 books (one fit_one_cycle epoch over that many tokens, the last book held out for its
loss), the target LM one frozen and one unfrozen epoch on SST-2's training sentences
(labels unused; ~2 x 490 steps against our 770), and the classifier on the same 1,000 labelled
sentences (bertology's subset, seed 42), 5 epochs in fastai's tutorial schedule, scored on
the dev set after the last epoch, for `--seeds` seeds.

    python bench/ulmfit_fastai.py --work runs/ulmfit_fastai      # ~45 minutes on one core
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import pandas as pd
import torch
from fastai.text.all import (
    AWD_LSTM,
    DataLoaders,
    LMDataLoader,
    Numericalize,
    ProgressCallback,
    TextDataLoaders,
    accuracy,
    awd_lstm_clas_config,
    awd_lstm_lm_config,
    language_model_learner,
    make_vocab,
    set_seed,
    text_classifier_learner,
    tokenize_df,
)
from fastai.text.learner import match_embeds

from bertology.models.awd_lstm import PRESETS
from bertology.tasks.readers import TASKS, read_examples
from bertology.tasks.splits import subset

REPO = Path(__file__).resolve().parents[1]
from results_page import write_section  # noqa: E402
DATA = REPO.parent / "shared/data"
BATCH, BPTT = 32, 70


def tokens(texts: list[str]) -> tuple[list[list[str]], dict]:
    """fastai's tokenization (spaCy + its rules) of each text, and the token counts."""
    frame, counts = tokenize_df(pd.DataFrame({"text": texts}), ["text"], n_workers=0)
    return list(frame["text"]), counts


def lm_loaders(train: list[list[str]], valid: list[list[str]], vocab: list[str], steps: int | None, seed: int) -> DataLoaders:
    """fastai LM loaders over numericalised texts; the training stream cut to `steps` batches."""
    numericalize = Numericalize(vocab)
    train_ids = [numericalize(t) for t in train]
    if steps is not None:  # keep whole texts in order, cutting the last one, to the tokens of `steps` batches
        budget, kept = steps * BATCH * BPTT + BATCH, []
        for ids in train_ids:
            kept.append(ids[:budget])
            budget -= len(kept[-1])
            if budget <= 0:
                break
        train_ids = kept
    valid_ids = [numericalize(t) for t in valid]
    set_seed(seed)
    dls = DataLoaders(LMDataLoader(train_ids, bs=BATCH, seq_len=BPTT, shuffle=True),
                      LMDataLoader(valid_ids, bs=BATCH, seq_len=BPTT))
    dls.vocab = vocab
    return dls


def awd_config(preset: str, base: dict) -> dict:
    """fastai's AWD-LSTM config (its LM's or its classifier's dropouts) at a bertology preset's sizes."""
    emb_sz, n_hid, n_layers = PRESETS[preset]
    return {**base, "emb_sz": emb_sz, "n_hid": n_hid, "n_layers": n_layers}


def quiet(learner):
    """A learner without its progress bars (a log of the bench, not of every batch)."""
    learner.remove_cb(ProgressCallback)
    return learner


def paragraphs(text: str) -> list[str]:
    """A book's blank-line-separated paragraphs (spaCy refuses texts over a million characters)."""
    return [p for p in (part.strip() for part in text.split("\n\n")) if p]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=REPO / "runs/ulmfit_fastai")
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--general-steps", type=int, default=3100, help="bench/ulmfit_stages.py's general LM ran 3,100")
    parser.add_argument("--labels", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    config = awd_config(args.preset, awd_lstm_lm_config)
    started = time.perf_counter()

    books = sorted((DATA / "gutenberg").glob("*.txt"))
    held_out = paragraphs(books[-1].read_text(encoding="utf-8"))
    texts = [p for book in books[:-1] for p in paragraphs(book.read_text(encoding="utf-8"))]
    book_tokens, counts = tokens(texts + held_out)
    vocab = make_vocab(counts, max_vocab=args.vocab_size)
    print(f"tokenized {len(books)} books ({sum(map(len, book_tokens)):,} fastai tokens) in "
          f"{time.perf_counter() - started:.0f} s; vocabulary {len(vocab):,}", flush=True)
    dls = lm_loaders(book_tokens[: len(texts)], book_tokens[len(texts):], vocab, args.general_steps, seed=0)
    general = quiet(language_model_learner(dls, AWD_LSTM, config=config, pretrained=False, drop_mult=1.0))
    general.fit_one_cycle(1, 1e-2)
    stage1 = {"steps": len(dls.train), "seconds": time.perf_counter() - started,
              "held_out_loss": float(general.validate()[0])}
    print(f"general LM: {stage1}", flush=True)

    spec = TASKS["sst2"]
    train = read_examples(spec, DATA / "glue/SST-2/train.tsv", "train")
    dev = read_examples(spec, DATA / "glue/SST-2/dev.tsv", "dev")
    sst_tokens, sst_counts = tokens([e.text_a for e in train])
    target_vocab = make_vocab(sst_counts, max_vocab=args.vocab_size)
    cut = len(sst_tokens) * 9 // 10
    target_dls = lm_loaders(sst_tokens[:cut], sst_tokens[cut:], target_vocab, None, seed=0)
    target = quiet(language_model_learner(target_dls, AWD_LSTM, config=config, pretrained=False, drop_mult=1.0))
    target.model.load_state_dict(match_embeds(general.model.state_dict(), vocab, target_vocab))
    target.freeze()
    target.fit_one_cycle(1, 2e-2)
    target.unfreeze()
    target.fit_one_cycle(1, 2e-3)
    stage2 = {"steps": 2 * len(target_dls.train), "held_out_loss": float(target.validate()[0]),
              "seconds": time.perf_counter() - started}
    print(f"target LM: {stage2}", flush=True)

    labelled = subset(train, args.labels, 42)  # bench/ulmfit_stages.py's 1,000 sentences
    frame = pd.DataFrame({"text": [e.text_a for e in labelled] + [e.text_a for e in dev],
                          "label": [e.label for e in labelled] + [e.label for e in dev],
                          "is_valid": [False] * len(labelled) + [True] * len(dev)})
    runs = []
    for seed in range(args.seeds):
        set_seed(seed)
        clas_dls = TextDataLoaders.from_df(frame, text_col="text", label_col="label", valid_col="is_valid",
                                           text_vocab=target_vocab, bs=BATCH, seed=seed)
        learn = quiet(text_classifier_learner(clas_dls, AWD_LSTM, config=awd_config(args.preset, awd_lstm_clas_config),
                                              pretrained=False, drop_mult=0.5, metrics=accuracy))
        learn.model[0].module.load_state_dict(target.model[0].state_dict())
        moms = (0.8, 0.7, 0.8)  # fastai's ULMFiT tutorial
        learn.freeze()
        learn.fit_one_cycle(1, 2e-2, moms=moms)
        learn.freeze_to(-2)
        learn.fit_one_cycle(1, slice(1e-2 / 2.6**4, 1e-2), moms=moms)
        learn.freeze_to(-3)
        learn.fit_one_cycle(1, slice(5e-3 / 2.6**4, 5e-3), moms=moms)
        learn.unfreeze()
        learn.fit_one_cycle(2, slice(1e-3 / 2.6**4, 1e-3), moms=moms)
        runs.append(round(float(learn.validate()[1]), 4))
        print(f"seed {seed}: dev accuracy {runs[-1]}", flush=True)
    result = {"general_lm": stage1, "target_lm": stage2, "accuracy": statistics.median(runs), "runs": runs,
              "seconds": time.perf_counter() - started, "torch_threads": torch.get_num_threads()}
    (args.work / "ulmfit_fastai.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    write_section("ulmfit-fastai", f"sst2-{args.labels}", f"fastai's ULMFiT at bertology's budget, {args.labels:,} SST-2 labels",
                  f"fastai's own pipeline (its ULMFiT text tutorial), the `{args.preset}` AWD-LSTM size, a "
                  f"{args.vocab_size:,}-word vocabulary; general LM {stage1['steps']:,} steps on the Gutenberg books "
                  f"(held-out loss {stage1['held_out_loss']:.3f}), target LM {stage2['steps']:,} steps on SST-2's "
                  f"sentences (held-out loss {stage2['held_out_loss']:.3f}); the classifier on {args.labels:,} "
                  f"sentences with gradual unfreezing, scored after the last epoch: dev accuracy "
                  f"**{result['accuracy']:.3f}** (median of {args.seeds} seeds: "
                  f"{', '.join(f'{r:.3f}' for r in runs)}); {result['seconds'] / 60:.0f} minutes, "
                  f"{result['torch_threads']} threads.")


if __name__ == "__main__":
    main()
