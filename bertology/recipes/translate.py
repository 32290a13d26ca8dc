"""`bertology translate`: train CoVe's English-to-German translation model, score it with BLEU, translate text.

McCann et al. 2017 (models/cove.py) train an attentional LSTM encoder-decoder on translation
and keep its encoder, the MT-LSTM, as a source of contextual word vectors. Here:

- `translate train --data DIR --vectors DIR --out DIR`: the pairs of a parallel corpus folder
  (data/parallel.py: Multi30k's `train.{en,de}.gz` / `val.{en,de}.gz` layout, plain files too)
  over the fixed English vectors of a static-vectors directory (GloVe from `bertology static
  train --method glove`, the paper's choice; any method works). The German vocabulary is the
  training words seen `--min-count` times. Trained by the one loop (training/loop.py: progress
  bar, `--max-time`, checkpoints, `--resume`, metrics.jsonl), with the validation split's
  perplexity after every epoch (or `--eval-every` steps); the model with the lowest one so
  far is the one in `--out`, beside eval_results.json and training_curves.png.
- `translate evaluate --model DIR --data DIR --split test_2016_flickr --beam-size 5`: corpus
  BLEU (sacrebleu, its default 13a tokenization, cased; lower-cased beside it) of greedy
  decoding and of beam search against the raw references, and the translations, one file each.
- `translate text --model DIR --input FILE`: one English sentence per line in, German out.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import Device, override, setting
from ..data.parallel import SentencePair, read_split
from ..errors import UserError
from ..files import loads_json, write_json_atomic, write_text_atomic
from ..inference.modeldir import open_model_dir, open_static_vectors
from ..inference.predict import model_device
from ..models.cove import (
    PRESETS,
    SOURCE_SPECIALS,
    TARGET_SPECIALS,
    CoVeConfig,
    CoVeForTranslation,
    source_words,
    target_tokens,
)
from ..models.static import StaticVectors
from ..ops import resolve_device
from ..plots import plot_training_curves
from ..tasks.readers import read_text_lines
from ..training.loop import LoopConfig, StepOutput, TrainConfig, Trainer, check_finite_metrics, loop_settings
from .task_training import RESULTS_NAME, EpochBatches, check_output_dir


# An LSTM decoder has no positions to run out of: a translation that never ends stops here.
MAX_TRANSLATION_LENGTH = 1024


@dataclass
class TranslateTrainConfig(LoopConfig):
    """The parallel corpus, the English vectors, the model and the budget.

    The settings of `bertology translate train`.
    """

    data: str = setting("", required=True, metavar="DIR",
                        help="a parallel corpus folder: {split}.{lang} files, plain or .gz (Multi30k's layout)")
    vectors: str = setting("", required=True, metavar="DIR",
                           help="the English word vectors, fixed: a static-vectors directory (`bertology static "
                                "train --method glove`, the paper's choice)")
    out: str = setting("", required=True, metavar="DIR", output="dir",
                       help="the model directory: config.json, model.safetensors, the word lists, metrics.jsonl, "
                            "eval_results.json, training_curves.png")
    preset: str = setting("base", choices=tuple(PRESETS),
                          help="model size: base is the paper's MT-LSTM (300 per direction, 2 layers)")
    source_lang: str = setting("en", help="the source side's file suffix")
    target_lang: str = setting("de", help="the target side's file suffix")
    train_split: str = setting("train", help="the split trained on")
    valid_split: str = setting("val", help="the split whose perplexity is measured at every evaluation")
    min_count: int = setting(2, positive=True, help="German words seen fewer times in training are <unk>")
    max_words: int = setting(50, positive=True, help="training pairs with more words on either side are left out")
    max_train_examples: int | None = setting(None, positive=True, formerly=("max_train_pairs",),
                                             help="train on the first N sentence pairs only (default: all)")
    dropout: float | None = setting(None, minimum=0, help="dropout (default: the config's, 0.3 as OpenNMT-py's)")
    epochs: float = setting(10.0, positive=True, help="passes over the training pairs")
    max_time: float | str | None = setting(None, metavar="DURATION",
                                   help="wall-clock budget of training, e.g. 90s, 20m, 1.5h; the schedule is "
                                        "fitted to it (default: none, --epochs only)")
    batch_size: int = setting(64, positive=True, help="sentence pairs per step")
    eval_batch_size: int = setting(128, positive=True, help="sentence pairs per forward pass when evaluating")
    eval_every: int = setting(0, minimum=0, help="evaluate every N steps (default: 0, once per epoch)")
    lr: float = override(LoopConfig, "lr", 2e-3)
    warmup: float = override(LoopConfig, "warmup", 0.02)
    weight_decay: float = override(LoopConfig, "weight_decay", 0.0)
    max_grad_norm: float = override(LoopConfig, "max_grad_norm", 5.0)  # OpenNMT-py's
    precision: str = override(LoopConfig, "precision", "fp32")  # LSTM cells step by step: bf16 autocast saves little


@dataclass
class TranslateEvalConfig(Device):
    """The model, the split and where the translations go.

    The settings of `bertology translate evaluate`.
    """

    model: str = setting("", required=True, metavar="DIR", help="a model directory from `bertology translate train`")
    data: str = setting("", required=True, metavar="DIR", help="a parallel corpus folder ({split}.{lang}, plain or .gz)")
    out: str = setting("", required=True, metavar="DIR", output="dir",
                       help="where the translations ({split}.greedy.{lang}, {split}.beamN.{lang}) and bleu.json go")
    split: str = setting("test_2016_flickr", help="the split to translate and score")
    source_lang: str = setting("en", help="the source side's file suffix")
    target_lang: str = setting("de", help="the target side's file suffix")
    beam_size: int = setting(5, positive=True, help="beam search's width, scored beside greedy decoding (1: greedy "
                                                    "only)")
    max_length: int | None = setting(None, positive=True, maximum=MAX_TRANSLATION_LENGTH,
                                     help="the longest translation in tokens (default: the model's max_length)")
    batch_size: int = setting(64, positive=True, help="sentences decoded together")
    max_sentences: int | None = setting(None, positive=True, help="score the first N pairs only (default: all)")


@dataclass
class TranslateTextConfig(Device):
    """The model and the text.

    The settings of `bertology translate text`.
    """

    model: str = setting("", required=True, metavar="DIR", help="a model directory from `bertology translate train`")
    input: str = setting("", required=True, metavar="FILE", help="English text, one sentence per line")
    out: str | None = setting(None, metavar="FILE", output="file", help="write the translations here (default: "
                                                                       "print them)")
    beam_size: int = setting(5, positive=True, help="beam width (1: greedy decoding)")
    max_length: int | None = setting(None, positive=True, maximum=MAX_TRANSLATION_LENGTH,
                                     help="the longest translation in tokens (default: the model's max_length)")
    batch_size: int = setting(64, positive=True, help="sentences decoded together")


# ----- data ---------------------------------------------------------------------------------------


@dataclass
class Pairs:
    """A split's pairs as the model reads them: English words and German tokens."""

    sources: list[list[str]]
    targets: list[list[str]]


def tokenized(pairs: list[SentencePair], lowercase: bool, max_words: int | None = None) -> Pairs:
    """Each pair split into words; pairs with an empty side (or, given max_words, a side
    longer than that) are left out."""
    sources, targets = [], []
    for pair in pairs:
        source, target = source_words(pair.source, lowercase), target_tokens(pair.target)
        if source and target and (max_words is None or max(len(source), len(target)) <= max_words):
            sources.append(source)
            targets.append(target)
    return Pairs(sources, targets)


def german_vocabulary(targets: list[list[str]], min_count: int) -> list[str]:
    """The specials, then the tokens seen at least `min_count` times, most frequent first (ties by spelling)."""
    counts = Counter(token for sentence in targets for token in sentence)
    kept = sorted((token for token, n in counts.items() if n >= min_count), key=lambda t: (-counts[t], t))
    return [*TARGET_SPECIALS, *kept]


def new_model(cfg: TranslateTrainConfig, vectors: StaticVectors, target_words: list[str]) -> CoVeForTranslation:
    """A fresh translation model over the vectors (rows 0, 1: <pad>, <unk>, zeros) and the German words."""
    overrides = {} if cfg.dropout is None else {"dropout": cfg.dropout}
    config = CoVeConfig.from_preset(cfg.preset, input_size=vectors.hidden_size,
                                    source_vocab_size=len(vectors) + len(SOURCE_SPECIALS),
                                    decoder_vocab_size=len(target_words), lowercase=vectors.config.lowercase,
                                    **overrides)
    model = CoVeForTranslation(config, [*SOURCE_SPECIALS, *vectors.words], target_words)
    with torch.no_grad():
        model.encoder.source_vectors[len(SOURCE_SPECIALS):] = vectors.vectors
    return model


class TranslationModule(torch.nn.Module):
    """The model as the loop trains it: forward(batch) -> StepOutput with the token cross-entropy
    and the counts behind the training perplexity."""

    def __init__(self, model: CoVeForTranslation):
        super().__init__()
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """Teacher-forced loss over the German tokens and </s>."""
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"], batch["labels"])
        tokens = (batch["labels"] != -100).sum()
        return StepOutput(out.loss, {"lm_loss_sum": out.loss.detach() * tokens, "lm_total": tokens})


def make_batch(model: CoVeForTranslation, pairs: Pairs, rows: list[int]) -> dict[str, torch.Tensor]:
    """input_ids, attention_mask (B, S); decoder_input_ids, labels (B, T + 1)."""
    input_ids, attention_mask = model.source_ids([pairs.sources[i] for i in rows])
    decoder_input_ids, labels = model.target_ids([pairs.targets[i] for i in rows])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "decoder_input_ids": decoder_input_ids,
            "labels": labels}


@torch.no_grad()
def perplexity(model: CoVeForTranslation, pairs: Pairs, batch_size: int) -> dict[str, float]:
    """The mean cross-entropy per German token (and </s>) of a split, and its exponential."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    loss_sum, tokens = 0.0, 0
    order = sorted(range(len(pairs.sources)), key=lambda i: len(pairs.sources[i]))
    for start in range(0, len(order), batch_size):
        batch = {k: v.to(device) for k, v in make_batch(model, pairs, order[start: start + batch_size]).items()}
        count = int((batch["labels"] != -100).sum())
        loss_sum += float(model(**batch).loss) * count
        tokens += count
    model.train(was_training)
    loss = loss_sum / max(tokens, 1)
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


def open_vectors(directory: str) -> StaticVectors:
    """The English vectors; another kind of model directory is a one-line error."""
    return open_static_vectors(directory, "--vectors")


# ----- train ---------------------------------------------------------------------------------------


def train(cfg: TranslateTrainConfig) -> dict:
    """`bertology translate train`; returns the best validation results (and the run's summary)."""
    cfg.validate()
    out = Path(cfg.out)
    check_output_dir(out, cfg.resume)
    vectors = open_vectors(cfg.vectors)
    train_pairs = read_split(cfg.data, cfg.train_split, cfg.source_lang, cfg.target_lang)[: cfg.max_train_examples]
    valid_pairs = read_split(cfg.data, cfg.valid_split, cfg.source_lang, cfg.target_lang)
    lowercase = vectors.config.lowercase
    train_data = tokenized(train_pairs, lowercase, cfg.max_words)
    valid_data = tokenized(valid_pairs, lowercase)
    if not train_data.sources:
        raise UserError(f"{cfg.data}: no {cfg.train_split} pair has words on both sides")
    if not valid_data.sources:
        raise UserError(f"{cfg.data}: no {cfg.valid_split} pair has words on both sides")
    torch.manual_seed(cfg.seed)
    model = new_model(cfg, vectors, german_vocabulary(train_data.targets, cfg.min_count))
    known = sum(w in vectors.index for s in train_data.sources for w in s) / sum(map(len, train_data.sources))
    print(f"{len(train_data.sources):,} training pairs ({len(train_pairs) - len(train_data.sources):,} left out: "
          f"empty or over {cfg.max_words} words), {len(valid_data.sources):,} validation pairs; "
          f"{known:.1%} of the English training words have a vector; German vocabulary "
          f"{model.config.decoder_vocab_size:,}; {model.num_parameters():,} parameters", file=sys.stderr)

    batches = EpochBatches([len(s) + len(t) for s, t in zip(train_data.sources, train_data.targets)],
                           cfg.batch_size, cfg.seed, lambda rows: make_batch(model, train_data, rows))
    results_path = out / RESULTS_NAME
    best: dict = {}
    if cfg.resume and results_path.is_file():
        best = loads_json(results_path.read_text(encoding="utf-8"))

    def evaluate(module: TranslationModule) -> dict:
        values = perplexity(module.model, valid_data, cfg.eval_batch_size)
        check_finite_metrics(values, trainer.step)  # before a diverged model could be kept as the best
        if not best or values["perplexity"] < best["perplexity"]:
            best.clear()
            best.update({"split": cfg.valid_split, **values, "step": trainer.step})
            module.model.save_pretrained(out)
            write_json_atomic(results_path, best)
        return values

    steps_per_epoch = batches.steps_per_epoch
    train_config = TrainConfig(**loop_settings(cfg), max_steps=max(1, round(cfg.epochs * steps_per_epoch)),
                               max_time=cfg.max_time, log_every=max(1, min(50, steps_per_epoch // 4)),
                               eval_every=cfg.eval_every or steps_per_epoch, save_every=cfg.eval_every or steps_per_epoch,
                               keep_last=1)
    trainer = Trainer(TranslationModule(model), train_config, out, batches, evaluate)
    start = time.perf_counter()
    status = trainer.fit()
    rows = trainer.log.rows()
    plot_training_curves({"translation": rows}, out / "training_curves.png", accuracy_keys=("perplexity",))
    if status != "completed":
        raise KeyboardInterrupt
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return {**best, "steps": trainer.step, "epochs": trainer.step / steps_per_epoch,
            "training_seconds": trainer.elapsed, "wall_seconds": time.perf_counter() - start,
            "parameters": model.num_parameters(), "decoder_vocab_size": model.config.decoder_vocab_size}


# ----- evaluate, text ----------------------------------------------------------------------------------


def open_translator(directory: str, device: str = "auto") -> CoVeForTranslation:
    """A translation model on `device` (the `--device` setting); another kind of directory (a CoVe
    feature model has no decoder) is a one-line error."""
    opened = open_model_dir(directory)
    model = opened.load_model() if opened.spec.translates else None
    if model is None or type(model) is not opened.spec.default_class:  # a CoVe feature model has no decoder
        raise UserError(f"{directory}: not a translation model from `bertology translate train`")
    return model.to(resolve_device(device))


def bleu(hypotheses: list[str], references: list[str]) -> dict[str, float | str]:
    """sacrebleu's corpus BLEU (13a tokenization, cased) and the same lower-cased."""
    from sacrebleu.metrics import BLEU

    cased, lower = BLEU(), BLEU(lowercase=True)
    return {"bleu": round(cased.corpus_score(hypotheses, [references]).score, 2),
            "bleu_lowercase": round(lower.corpus_score(hypotheses, [references]).score, 2),
            "signature": str(cased.get_signature())}


def evaluate(cfg: TranslateEvalConfig) -> dict:
    """`bertology translate evaluate`: BLEU of greedy decoding and of beam search, translations written."""
    model = open_translator(cfg.model, cfg.device)
    pairs = read_split(cfg.data, cfg.split, cfg.source_lang, cfg.target_lang)[: cfg.max_sentences]
    sources = [pair.source for pair in pairs]
    references = [pair.target for pair in pairs]
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"split": cfg.split, "sentences": len(pairs)}
    for beam in sorted({1, cfg.beam_size}):
        name = "greedy" if beam == 1 else f"beam{beam}"
        start = time.perf_counter()
        hypotheses = model.translate(sources, beam, cfg.max_length, cfg.batch_size)
        seconds = time.perf_counter() - start
        write_text_atomic(out / f"{cfg.split}.{name}.{cfg.target_lang}", "".join(h + "\n" for h in hypotheses))
        results[name] = {**bleu(hypotheses, references), "beam_size": beam, "seconds": round(seconds, 1)}
    write_json_atomic(out / "bleu.json", results)
    return results


def format_bleu(results: dict) -> str:
    """A line per decoding: BLEU, lower-cased BLEU, time."""
    lines = [f"{results['split']}: {results['sentences']:,} sentences"]
    for name, row in results.items():
        if isinstance(row, dict):
            lines.append(f"  {name:<8} BLEU {row['bleu']:5.2f}  (lower-cased {row['bleu_lowercase']:5.2f})  "
                         f"{row['seconds']:.1f} s")
    return "\n".join(lines)


def translate_text(cfg: TranslateTextConfig) -> list[str]:
    """`bertology translate text`: the translations of the input's non-blank lines, in order."""
    model = open_translator(cfg.model, cfg.device)
    lines = read_text_lines(cfg.input)
    translations = model.translate([line for _, line in lines], cfg.beam_size, cfg.max_length, cfg.batch_size)
    if cfg.out:
        write_text_atomic(Path(cfg.out), "".join(t + "\n" for t in translations))
    return translations

