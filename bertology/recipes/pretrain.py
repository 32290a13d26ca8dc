"""`bertology pretrain`: from raw text to a pre-trained encoder in the transformers layout.

The steps: check every input before any work; load (or train) the WordPiece vocabulary;
tokenize the corpus once into memory-mapped shards (reused by later runs); hold out a
slice of documents; build the objective's model; train with the shared loop; write the
model, the tokenizer, `metrics.jsonl`, `training_curves.png` and the resolved config
into the output directory."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import default_of, override, setting
from ..data.corpus import DOC_FORMATS, reading_notes
from ..data.pretraining import PretrainingDataset, collate, make_batches, static_mask_seeds
from ..data.shards import TokenizedCorpus, build_corpus, continuation_table
from ..data.token_stream import StreamBatches, TokenStream
from ..data.tokenizer import Tokenizer, train_tokenizer
from ..errors import UserError
from ..files import cache_root, write_json_atomic
from ..models import ARCHITECTURES, family_named, family_of
from ..models.awd_lstm import AWDLSTMConfig, AWDLSTMLanguageModel
from ..models.bert import POSITION_TYPES, PRESETS, BertConfig
from ..models.elmo import ELMoConfig, character_ids
from ..models.gpt import GPTConfig
from ..models.t5 import T5Config
from ..models.xlnet import XLNetConfig
from ..plots import plot_training_curves
from ..training.loop import (
    Distributed,
    TrainConfig,
    Trainer,
    check_no_earlier_run,
    check_writable,
    metrics_from_counts,
)
from ..training.objectives import ELECTRA_MASKING, MASKING_OBJECTIVES, OBJECTIVES, build_objective, lm_counts

RESOLVED_CONFIG_NAME = "pretrain_config.json"


OBJECTIVE_HELP = ("pre-training objective: bert (masked LM + next-sentence prediction), roberta (masked LM over "
                  "full sentences), albert (masked LM + sentence order), electra (replaced-token detection), "
                  "clm (left-to-right LM), t5 (span corruption), bilm (ELMo's forward and backward LSTM LMs), "
                  "plm (XLNet's permutation LM)")
# The objective each family trains with by default, and the only ones it takes (None: an encoder's).
FAMILY_OBJECTIVES = {"bert": ("bert", None), "gpt": ("clm", ("clm",)), "t5": ("t5", ("t5",)),
                     "awd-lstm": ("clm", ("clm",)), "elmo": ("bilm", ("bilm",)), "xlnet": ("plm", ("plm",))}
# The LSTMs: a token stream and a carried state (data/token_stream.py); XLNet reads it too with --mem-len.
STREAM_FAMILIES = ("awd-lstm", "elmo")

# --recipe NAME: settings that replace PretrainConfig's defaults (a setting given another value keeps it).
# cramming: the changes of Cramming (Geiping and Goldstein 2022), measured one by one on a 2-core CPU at
# equal wall time (bench/cramming.py, docs/results/pretraining-recipe.md); until that study's rule has
# chosen the ones that paid here, all of them.
RECIPES: dict[str, dict[str, Any]] = {
    "cramming": {"objective": "roberta", "pre_layer_norm": True, "bias": False, "gated_gelu": True, "dropout": 0.0,
                 "schedule": "linear", "warmup": 0.5, "lr": 1e-3, "seq_len": 128, "vocab_multiple": 64,
                 "batch_size": 16, "grad_accum": 4, "batch_ramp": 0.6},
}
# --recipe with --max-time and no --preset: the model size for the time (the first whose limit the budget is
# within), so that a short budget trains a model small enough to learn in it.
RECIPE_PRESETS: list[tuple[float, str]] = [(20 * 60, "tiny"), (float("inf"), "mini")]


@dataclass
class PretrainConfig(TrainConfig):
    """Pre-training: the corpus, the vocabulary, the model and the objective."""

    corpus: list[str] = setting([], required=True, metavar="PATH", help="text files, or folders of them")
    out: str = setting("", required=True, metavar="DIR", output="dir",
                       help="output directory: the model, its tokenizer, metrics.jsonl, training_curves.png")
    doc_format: str = setting("auto", choices=DOC_FORMATS,
                              help="lines: a sentence or paragraph per line, blank lines between documents; "
                                   "file: one document per file; auto: decide per file")
    text_field: str = setting("text", help="JSONL corpus files: the field that holds the text")
    skip_bad_lines: bool = setting(False, help="skip (and count) lines that are not UTF-8 instead of stopping")
    tokenizer: str | None = setting(None, metavar="DIR", help="a tokenizer directory (default: train one on the corpus)")
    vocab_size: int = setting(30522, positive=True, help="the size of a vocabulary trained on the corpus")
    cased: bool = setting(False, help="train a cased vocabulary (case and accents kept)")
    cache_dir: str = setting(default_factory=lambda: str(cache_root()), metavar="DIR",
                             help="where the tokenized corpus is kept for later runs ($BERTOLOGY_CACHE)")
    arch: str = setting("bert", choices=ARCHITECTURES, help="the model family")
    preset: str = setting("mini", choices=PRESETS, help="the model's size")
    model_config: str | None = setting(None, metavar="FILE", help="a config.json for the encoder instead of a "
                                                                  "preset (default: none)")
    init: str | None = setting(None, metavar="DIR", help="--arch awd-lstm: go on training this pre-trained language "
                                                         "model (its config, weights and tokenizer) on the corpus: "
                                                         "ULMFiT's target-task LM fine-tuning (default: none)")
    layer_lr_decay: float = setting(1.0, positive=True,
                                    help="--arch awd-lstm: ULMFiT's discriminative rates, each LSTM layer down trains "
                                         "at this factor of the one above (ULMFiT: 0.385 = 1/2.6); the tied "
                                         "embedding and output layer at --lr")
    model: dict[str, Any] = setting({}, help="config-file only: the family's config fields to override (BertConfig, "
                                             "GPTConfig, ...), as a [model] table")
    # the variants' switches, applied over the preset and winning over `model`
    pre_layer_norm: bool = setting(False, help="LayerNorm before each sub-layer (pre-LN) instead of after it")
    embedding_size: int | None = setting(None, positive=True, help="ALBERT's factorized embeddings: this width, "
                                                                   "projected to the hidden size (default: off)")
    share_layers: bool = setting(False, help="ALBERT's cross-layer parameter sharing")
    segment_embeddings: bool = setting(True, help="segment (token type) embeddings")
    # Cramming's switches (Geiping and Goldstein 2022); --recipe cramming sets the ones that paid here
    bias: bool = setting(True, help="biases in the attention and feed-forward linears; --no-bias: none, as Cramming "
                                    "(zeros are written in their place, so transformers still loads the model)")
    dropout: float | None = setting(None, minimum=0, help="dropout while pre-training, hidden and attention (Cramming: "
                                                          "0); the saved model keeps its own for fine-tuning "
                                                          "(default: the model's, 0.1)")
    vocab_multiple: int = setting(1, positive=True, metavar="N",
                                  help="pad the model's vocabulary to a multiple of N with unused tokens (Cramming: 64, "
                                       "for the matrix units); the saved tokenizer gets them too, as [unusedK]")
    recipe: str | None = setting(None, choices=tuple(RECIPES),
                                 help="cramming: the Cramming changes that paid on this project's 2-core CPU (see "
                                      "docs/results/pretraining-recipe.md), set wherever a setting is left at its "
                                      "default; with --max-time and no --preset, also the model size that fits "
                                      "the time (default: none)")
    position: str = setting("absolute", choices=POSITION_TYPES,
                            help="absolute: learned position embeddings (BERT); relative: T5's bucketed relative "
                                 "position bias in every attention instead")
    objective: str | None = setting(None, choices=OBJECTIVES, help=f"{OBJECTIVE_HELP} (default: bert; --arch gpt "
                                                                    "and awd-lstm take clm only, t5 t5, elmo bilm, "
                                                                    "xlnet plm)")
    seq_len: int = setting(128, minimum=8, help="sequence length in tokens")
    batch_size: int = setting(32, positive=True, help="sequences per micro-batch")
    short_seq_prob: float = setting(0.1, minimum=0, help="share of shorter sequences, as BERT's data has")
    whole_word_masking: bool = setting(False, help="mask all the pieces of a word together")
    # Off by default: RoBERTa's dynamic masking, a fresh mask every time a sequence is seen.
    static_masks: int | None = setting(None, positive=True, metavar="N",
                                       help="BERT's static masking (RoBERTa's Table 1 baseline): N copies of the "
                                            "data, each sequence masked once per copy; epoch e reads copy e mod N, "
                                            "so a sequence comes back with the same mask every N epochs (BERT: "
                                            "10). Masked-LM objectives only (bert, roberta, albert, electra); "
                                            "default: off, a fresh mask every time")
    max_predictions: int | None = setting(None, positive=True, help="cap on masked tokens per sequence "
                                                                    "(default: none; BERT: 20 at 128 tokens)")
    sop_balance: bool = setting(False, help="albert: cut each chunk at the sentence boundary nearest its middle and "
                                            "both segments to one length, so lengths say nothing of the order")
    generator_size: float = setting(0.25, positive=True, help="electra: the generator's width as a share of the "
                                                              "discriminator's (the paper: 1/4 best; 1/8, 1/2, 1)")
    generator_temperature: float = setting(1.0, positive=True, help="electra: the temperature of the generator's "
                                                                    "sampling")
    electra_masking: str = setting("bert", choices=tuple(ELECTRA_MASKING),
                                   help="electra: the generator's input, bert (80% [MASK], 10% random, 10% kept) "
                                        "or release (85% [MASK], 15% kept, as ELECTRA's code)")
    noise_density: float = setting(0.15, positive=True, help="t5: the share of each text dropped in spans")
    mean_span_length: float = setting(3.0, positive=True, help="t5: the mean length of a dropped span, in tokens")
    gated_gelu: bool = setting(False, help="a gated-GELU feed-forward: t5, T5 v1.1's (and an output matrix of its "
                                           "own); bert, Cramming's (the output matrix reads half the intermediate "
                                           "width; transformers cannot load it)")
    # Off by default: memory changes the data (a stream, not shuffled sequences) and the held-out
    # regime, so earlier runs stay comparable; on, --seq-len is a sensible N at the small presets.
    mem_len: int = setting(0, minimum=0, metavar="N",
                           help="xlnet: Transformer-XL's segment recurrence, as XLNet pre-trains: read the corpus as "
                                "a token stream, each batch row continuing its text, every token also attending to "
                                "the states of the last N positions its row read (per layer, no gradient; the model's "
                                "mem_len); held out, the same. 0: off, independent sequences (the release: 384 at "
                                "512 tokens; here --seq-len is a sensible N)")
    eval_fraction: float = setting(0.01, positive=True, help="share of the documents held out for evaluation")
    eval_batches: int = setting(20, positive=True, help="held-out batches per evaluation")
    lr: float = override(TrainConfig, "lr", 5e-4)  # an AWD-LSTM wants fastai's order, --lr 1e-2
    eval_every: int = override(TrainConfig, "eval_every", 200)

    def validate(self) -> None:
        """Everything that can be checked before any tokenization or training (first applying --recipe)."""
        self.apply_recipe()
        super().validate()
        for path in self.corpus:
            if not Path(path).exists():
                raise UserError(f"{path}: no such file or directory")
        if self.tokenizer is not None and not Path(self.tokenizer).is_dir():
            raise UserError(f"{self.tokenizer}: no such tokenizer directory")
        default, allowed = FAMILY_OBJECTIVES[self.arch]
        if self.objective is None:
            self.objective = default
        if allowed and self.objective not in allowed:
            what = {"t5": "trained by span corruption", "elmo": "a bidirectional LSTM language model",
                    "xlnet": "trained by permutation language modelling"}.get(
                self.arch, "a left-to-right language model")
            raise UserError(f"--arch {self.arch} is {what}: its objective is {default}, not {self.objective}")
        if self.arch == "bert" and self.objective == "t5":
            raise UserError("--objective t5 (span corruption) trains an encoder-decoder: use --arch t5")
        if self.arch == "bert" and self.objective == "bilm":
            raise UserError("--objective bilm trains ELMo's forward and backward LSTM language models: use --arch elmo")
        if self.arch == "bert" and self.objective == "plm":
            raise UserError("--objective plm (permutation LM) trains XLNet's two-stream attention: use --arch xlnet")
        if self.arch != "bert":
            for flag, value in (("--share-layers", self.share_layers), ("--embedding-size", self.embedding_size),
                                ("--whole-word-masking", self.whole_word_masking),
                                ("--pre-layer-norm", self.pre_layer_norm and self.arch in ("t5", "xlnet")),
                                ("--position relative", self.position == "relative")):
                if value:
                    raise UserError(f"{flag} is a switch of the bert family, not of --arch {self.arch}")
        if self.arch != "t5":
            for flag, value, default_value in (("--noise-density", self.noise_density, 0.15),
                                               ("--mean-span-length", self.mean_span_length, 3.0)):
                if value != default_value:
                    raise UserError(f"{flag} is a switch of span corruption (--arch t5), not of --arch {self.arch}")
        if self.arch not in ("bert", "t5") and self.gated_gelu:
            raise UserError(f"--gated-gelu is a switch of the bert and t5 families, not of --arch {self.arch}")
        if self.arch != "bert":
            for flag, value in (("--no-bias", not self.bias), ("--dropout", self.dropout is not None),
                                ("--vocab-multiple", self.vocab_multiple != 1), ("--recipe", self.recipe)):
                if value:
                    raise UserError(f"{flag} is a switch of the bert family, not of --arch {self.arch}")
        if self.dropout is not None and self.dropout >= 1:
            raise UserError(f"--dropout must be below 1, got {self.dropout}")
        if self.mem_len and self.arch != "xlnet":
            raise UserError(f"--mem-len is XLNet's segment recurrence (--arch xlnet), not of --arch {self.arch}")
        if self.arch != "awd-lstm":
            for flag, value in (("--init", self.init), ("--layer-lr-decay", self.layer_lr_decay != 1.0)):
                if value:
                    raise UserError(f"{flag} is ULMFiT's target-LM fine-tuning (--arch awd-lstm), not of --arch {self.arch}")
        if self.init is not None:
            if not Path(self.init).is_dir():
                raise UserError(f"{self.init}: no such model directory")
            if family_of(self.init).name != "awd-lstm":
                raise UserError(f"{self.init}: a {family_of(self.init).name} model; --init takes an AWD-LSTM language "
                                "model (bertology pretrain --arch awd-lstm)")
            if self.model_config or self.model:
                raise UserError("--init takes the model's own config.json; --model-config and [model] do not apply")
        if self.layer_lr_decay > 1:
            raise UserError(f"--layer-lr-decay must be at most 1, got {self.layer_lr_decay}")
        if not 0 < self.noise_density < 1:
            raise UserError(f"--noise-density must be between 0 and 1, got {self.noise_density}")
        if self.static_masks is not None and self.objective not in MASKING_OBJECTIVES:
            raise UserError(f"--static-masks fixes the masks of a masked LM ({', '.join(MASKING_OBJECTIVES)}); "
                            f"the {self.objective} objective masks no tokens")
        if self.sop_balance and self.objective != "albert":
            raise UserError(f"--sop-balance balances ALBERT's sentence order, not the {self.objective} objective")
        if self.eval_fraction >= 1:
            raise UserError(f"--eval-fraction must be below 1, got {self.eval_fraction}")

    def apply_recipe(self) -> None:
        """Set --recipe's settings wherever a setting still has its default (see RECIPES), and with a time
        budget and the default preset, the recipe's size for the time (RECIPE_PRESETS)."""
        if self.recipe is None:
            return
        if self.arch != "bert":
            raise UserError(f"--recipe {self.recipe} pre-trains the bert family, not --arch {self.arch}")
        fields = {f.name: f for f in dataclasses.fields(self)}
        for name, value in RECIPES[self.recipe].items():
            if getattr(self, name) == default_of(fields[name]):
                setattr(self, name, value)
        seconds = self.time_budget()
        if seconds and self.preset == default_of(fields["preset"]) and not self.model_config:
            self.preset = next(preset for limit, preset in RECIPE_PRESETS if seconds <= limit)

    def model_overrides(self) -> dict[str, Any]:
        """The BertConfig fields to set over the preset or --model-config: the `model` table, then
        the switches given (so a flag wins over the config file's table)."""
        switches = {"pre_layer_norm": self.pre_layer_norm or None, "share_layers": self.share_layers or None,
                    "embedding_size": self.embedding_size, "type_vocab_size": None if self.segment_embeddings else 0,
                    "use_bias": None if self.bias else False, "gated_feed_forward": self.gated_gelu or None,
                    "position_embedding_type": "relative" if self.position == "relative" else None}
        return {**self.model, **{k: v for k, v in switches.items() if v is not None}}


def build_model_config(cfg: PretrainConfig, tokenizer: Tokenizer) -> BertConfig | GPTConfig | T5Config | AWDLSTMConfig:
    """Preset or config file, then the model overrides; the vocabulary decides vocab_size (and
    T5's special ids: [PAD] starts the decoder and pads, [SEP] ends a text). --arch gpt gives a
    GPTConfig, --arch t5 a T5Config, --arch awd-lstm an AWDLSTMConfig (their [model] tables hold
    their own fields; --init's model keeps its own config)."""
    vocab_size = tokenizer.vocab_size
    if cfg.init:
        config = AWDLSTMConfig.load(cfg.init)
        if config.vocab_size != vocab_size:
            raise UserError(f"{cfg.init}: the model has {config.vocab_size:,} tokens, the tokenizer {vocab_size:,}; "
                            "give --init's own tokenizer (the default)")
        return config
    if cfg.arch == "gpt":
        overrides = {**cfg.model, **({"pre_layer_norm": True} if cfg.pre_layer_norm else {})}
    elif cfg.arch == "t5":
        v1_1 = {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False} if cfg.gated_gelu else {}
        overrides = {**cfg.model, **v1_1, "pad_token_id": tokenizer.pad_token_id,
                     "decoder_start_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.sep_token_id}
    elif cfg.arch in STREAM_FAMILIES:
        overrides = {**cfg.model, "pad_token_id": tokenizer.pad_token_id}
    elif cfg.arch == "xlnet":
        # bos: the [CLS] that opens each document of the token stream read with --mem-len
        overrides = {**cfg.model, "pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.cls_token_id,
                     "eos_token_id": tokenizer.sep_token_id, **({"mem_len": cfg.mem_len} if cfg.mem_len else {})}
    else:
        overrides = cfg.model_overrides()
    config_class = {"gpt": GPTConfig, "t5": T5Config, "awd-lstm": AWDLSTMConfig, "elmo": ELMoConfig,
                    "xlnet": XLNetConfig}.get(cfg.arch, BertConfig)
    try:
        if cfg.model_config:
            config = dataclasses.replace(config_class.load(cfg.model_config), **overrides, vocab_size=vocab_size)
        else:
            config = config_class.from_preset(cfg.preset, vocab_size=vocab_size, **overrides)
    except TypeError as err:
        raise UserError(f"model settings: {err}") from None
    if cfg.mem_len and config.reuse_len:
        raise UserError(f"--mem-len remembers whole segments of the stream: unset the model's reuse_len "
                        f"({config.reuse_len})")
    # No context limit: an LSTM's --seq-len is its BPTT length, and XLNet's positions are relative.
    if cfg.arch in STREAM_FAMILIES or cfg.arch == "xlnet":
        return config
    positions = config.n_positions if cfg.arch in ("gpt", "t5") else config.max_position_embeddings
    if cfg.seq_len > positions:
        raise UserError(f"--seq-len {cfg.seq_len} is larger than the model's context ({positions} positions)")
    return config


T5_SENTINELS = 100


def load_or_train_tokenizer(cfg: PretrainConfig, dist: Distributed) -> Tokenizer:
    """The given tokenizer, or one trained on the corpus (by rank 0; the others wait and load it):
    WordPiece, or for --arch t5 a unigram vocabulary with T5's 100 sentinels."""
    out = Path(cfg.out)
    if cfg.tokenizer or cfg.init:
        tokenizer = Tokenizer.from_pretrained(cfg.tokenizer or cfg.init)
    elif (out / "vocab.txt").is_file() and cfg.resume:
        tokenizer = Tokenizer.from_pretrained(out)
    else:
        model, sentinels = ("unigram", T5_SENTINELS) if cfg.arch == "t5" else ("wordpiece", 0)
        if dist.is_main:
            print(f"training a {cfg.vocab_size}-token {model} vocabulary on the corpus", file=sys.stderr)
            # Lines it skips are the ones the corpus reading below skips and reports.
            train_tokenizer([Path(p) for p in cfg.corpus], vocab_size=cfg.vocab_size, cased=cfg.cased, out_dir=out,
                            skip_bad_lines=cfg.skip_bad_lines, text_field=cfg.text_field, model=model,
                            sentinels=sentinels)
        dist.barrier()
        tokenizer = Tokenizer.from_pretrained(out)
    if cfg.arch == "t5" and not tokenizer.sentinel_token_ids:
        raise UserError(f"{cfg.tokenizer}: the tokenizer has no sentinel tokens <extra_id_N> for span corruption; "
                        "train one with `bertology tokenizer train --model unigram --sentinels 100`")
    return tokenizer


def padded_tokenizer(tokenizer: Tokenizer, multiple: int) -> Tokenizer:
    """`tokenizer` with unused tokens appended ([unused0], [unused1], ...: BERT's names; WordPiece never
    produces them, since they are not words) up to a multiple of `multiple` entries, so that the model's
    embedding and output matrices have a size the matrix units tile evenly. Every text keeps its ids."""
    missing = -tokenizer.vocab_size % multiple
    if not missing:
        return tokenizer
    if tokenizer.model != "wordpiece":
        raise UserError("--vocab-multiple pads a WordPiece vocabulary; this tokenizer is a unigram one")
    tokens = tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))
    taken = set(tokens)
    unused = (name for k in range(tokenizer.vocab_size + missing) if (name := f"[unused{k}]") not in taken)
    return Tokenizer(tokens + [next(unused) for _ in range(missing)], do_lower_case=tokenizer.do_lower_case,
                     strip_accents=tokenizer.strip_accents, tokenize_chinese_chars=tokenizer.tokenize_chinese_chars,
                     keep_hangul=tokenizer.keep_hangul, model_max_length=tokenizer.model_max_length)


def batch_generator(seed: int, index: int) -> torch.Generator:
    """The generator of batch `index`'s masking (or factorisation orders): seeded by (seed, index),
    so fresh for every batch, yet the same on a resumed run, on any rank, at every evaluation."""
    return torch.Generator().manual_seed(seed * 1_000_003 + index)


def prepare_batch(instances: list, objective, pad_id: int, seed: int, index: int,
                  continuation: torch.Tensor | None, mask_seeds: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Collate instances and let the objective mask them (whole-word masking needs `continuation`),
    drawing from `batch_generator(seed, index)`, or with `mask_seeds` (B,) each instance's mask from
    its own seed (static masking; `static_mask_seeds`)."""
    batch = collate(instances, pad_id)
    if continuation is not None:
        batch["word_continuation"] = continuation[batch["input_ids"]] & ~batch["special_mask"]
    if mask_seeds is not None:
        batch["mask_seeds"] = mask_seeds
    return objective.prepare(batch, batch_generator(seed, index))


def load_corpus(cfg: PretrainConfig, tokenizer: Tokenizer, dist: Distributed) -> TokenizedCorpus:
    """Tokenized shards of the corpus: rank 0 builds (or reuses) them, the other ranks then open them."""
    def build():
        return build_corpus([Path(p) for p in cfg.corpus], tokenizer, Path(cfg.cache_dir), doc_format=cfg.doc_format,
                            skip_bad_lines=cfg.skip_bad_lines, text_field=cfg.text_field)

    corpus = build() if dist.is_main else None
    dist.barrier()
    return corpus if corpus is not None else build()


class PretrainingBatches:
    """Step -> this rank's micro-batches, a pure function of (seed, step): resumable and rank-splittable.

    Micro-batch m of the run is batch j = m % n of epoch m // n, where n is the number of
    batches in epoch 0 (instance counts vary a little between epochs; a shorter epoch wraps
    around). Step s uses micro-batches s*A*W ... s*A*W + A*W - 1 (A = grad_accum, W = world
    size); rank r takes every W-th, so one process with A = 2 sees exactly what two ranks with
    A = 1 see; under a batch ramp the steps read growing windows of the same sequence of
    micro-batches (`window`). Masking is drawn from a generator seeded by (seed, m): fresh for
    every batch, reproducible on resume.

    With `static_masks` N (BERT's duplicated data): epoch e reads the instances of epoch e mod N,
    its copy (in a batch order of its own), and each instance is masked by a seed of (seed, copy,
    its index in the copy) (`static_mask_seeds`): the same mask every N epochs, whatever its batch.
    """

    def __init__(self, dataset: PretrainingDataset, objective, batch_size: int, grad_accum: int,
                 seed: int, pad_id: int, rank: int = 0, world_size: int = 1,
                 continuation: torch.Tensor | None = None, static_masks: int | None = None):
        self.dataset, self.objective = dataset, objective
        self.batch_size, self.grad_accum = batch_size, grad_accum
        self.seed, self.pad_id = seed, pad_id
        self.rank, self.world_size = rank, world_size
        self.continuation = continuation
        self.static_masks = static_masks
        self._epoch, self._instances, self._order = None, None, None
        self.batches_per_epoch = len(self.epoch_batches(0)[1])

    def data_copy(self, epoch: int) -> int:
        """The epoch whose instances `epoch` reads: itself, or with N static copies, epoch mod N."""
        return epoch % self.static_masks if self.static_masks else epoch

    def epoch_batches(self, epoch: int) -> tuple[list, list[list[int]]]:
        """(instances, batch index lists) of one epoch, cached for the current epoch."""
        if self._epoch != epoch:
            self._instances = self.dataset.instances(self.data_copy(epoch))
            self._order = make_batches(len(self._instances), self.batch_size, epoch, self.seed)
            if not self._order:
                raise UserError(f"the corpus gives {len(self._instances)} training sequences, fewer than one "
                                f"batch of {self.batch_size}; use more text or a smaller --batch-size")
            self._epoch = epoch
        return self._instances, self._order

    def micro_batch(self, index: int) -> dict[str, torch.Tensor]:
        """The prepared (collated and masked) micro-batch number `index` of the run."""
        epoch = index // self.batches_per_epoch
        instances, order = self.epoch_batches(epoch)
        chosen = order[(index % self.batches_per_epoch) % len(order)]
        mask_seeds = static_mask_seeds(self.seed, self.data_copy(epoch), chosen) if self.static_masks else None
        return prepare_batch([instances[i] for i in chosen], self.objective, self.pad_id, self.seed, index,
                             self.continuation, mask_seeds)

    def window(self, first: int, count: int) -> list[dict[str, torch.Tensor]]:
        """This rank's micro-batches number first .. first + count - 1 of the run (a batch ramp's steps)."""
        return [self.micro_batch((first + k) * self.world_size + self.rank) for k in range(count)]

    def __call__(self, step: int) -> list[dict[str, torch.Tensor]]:
        return self.window(step * self.grad_accum, self.grad_accum)


def summed(counts: dict[str, torch.Tensor]) -> dict[str, float]:
    """A batch's metric counts as floats, for a Counter that adds them up over the held-out batches."""
    return {key: float(value) for key, value in counts.items()}


def make_evaluator(dataset: PretrainingDataset, objective, batch_size: int, max_batches: int, seed: int,
                   pad_id: int, continuation: torch.Tensor | None):
    """module -> held-out metrics over up to `max_batches` batches of the eval documents.

    The instances and their masking are the same at every evaluation, so the curve is comparable.
    """
    instances = dataset.instances(0)
    if not instances:
        raise UserError("the held-out documents give no evaluation sequences; raise --eval-fraction")
    chunks = [instances[i:i + batch_size] for i in range(0, len(instances), batch_size)][:max_batches]

    def evaluate(module) -> dict:
        counts, loss_sum = Counter(), 0.0
        device = next(module.parameters()).device
        for index, chunk in enumerate(chunks):
            batch = prepare_batch(chunk, objective, pad_id, seed, index, continuation)
            out = module({k: v.to(device) for k, v in batch.items()})
            loss_sum += out.loss.item()
            counts.update(summed(out.counts))
        return {"loss": loss_sum / len(chunks), **metrics_from_counts(counts)}

    return evaluate


def accuracy_keys(objective: str) -> tuple[str, ...]:
    """The held-out metrics worth plotting for an objective."""
    return {"bert": ("mlm_accuracy", "nsp_accuracy"), "roberta": ("mlm_accuracy",),
            "albert": ("mlm_accuracy", "sop_accuracy"), "electra": ("mlm_accuracy", "rtd_auc"),
            "clm": ("lm_accuracy",), "t5": ("span_accuracy", "span_word_accuracy", "lm_accuracy"),
            "bilm": ("forward_lm_accuracy", "backward_lm_accuracy"), "plm": ("permutation_lm_accuracy",)}[objective]


def sequence_training(cfg: PretrainConfig, model_config, corpus: TokenizedCorpus, train_docs, eval_docs,
                      tokenizer: Tokenizer, dist: Distributed):
    """(objective, step -> micro-batches, evaluator) for the Transformer families: independent
    sequences packed from the documents as the objective wants them, masked at batch time (with
    --static-masks, each by its own seed; the held-out batches are masked the same at every
    evaluation either way)."""
    spec = OBJECTIVES[cfg.objective]
    datasets = [PretrainingDataset(corpus, docs, cfg.seq_len, spec.data_format, spec.pair_task, cfg.short_seq_prob,
                                   tokenizer.cls_token_id, tokenizer.sep_token_id, cfg.seed, cfg.sop_balance)
                for docs in (train_docs, eval_docs)]
    electra = {"generator_size": cfg.generator_size, "temperature": cfg.generator_temperature,
               "masking": cfg.electra_masking} if cfg.objective == "electra" else {}
    span_corruption = {"sentinel_ids": tokenizer.sentinel_token_ids, "noise_density": cfg.noise_density,
                       "mean_span_length": cfg.mean_span_length} if cfg.objective == "t5" else {}
    objective = build_objective(cfg.objective, model_config, tokenizer.mask_token_id,
                                whole_word=cfg.whole_word_masking, max_predictions=cfg.max_predictions,
                                **electra, **span_corruption)
    continuation = torch.from_numpy(continuation_table(tokenizer)) if cfg.whole_word_masking else None
    train_batches = PretrainingBatches(datasets[0], objective, cfg.batch_size, cfg.grad_accum, cfg.seed,
                                       tokenizer.pad_token_id, dist.rank, dist.world_size, continuation,
                                       cfg.static_masks)
    evaluate = make_evaluator(datasets[1], objective, cfg.batch_size, cfg.eval_batches, cfg.seed + 1,
                              tokenizer.pad_token_id, continuation)
    return objective, train_batches, evaluate


def token_streams(cfg: PretrainConfig, corpus: TokenizedCorpus, train_docs, eval_docs, tokenizer: Tokenizer,
                  dist: Distributed, reverse: bool = False) -> tuple[TokenStream, TokenStream]:
    """(training, held-out) token streams (data/token_stream.py), each document opened by [CLS]: the
    training documents in --batch-size rows per rank, read --seq-len tokens at a time; the held-out
    ones in order, in as many rows, fewer when their text is short (a full window each). `reverse`:
    the same streams read from their ends (ELMo's backward LM)."""
    stream = TokenStream(corpus, train_docs, cfg.batch_size * dist.world_size, cfg.seq_len, cfg.seed,
                         tokenizer.cls_token_id, reverse=reverse)
    if stream.batches_per_epoch < 1:
        raise UserError(f"{', '.join(cfg.corpus)}: {stream.num_tokens:,} training tokens, too few for one batch of "
                        f"{stream.rows} rows x {cfg.seq_len + 1} tokens (--batch-size x (--seq-len + 1)); use more "
                        "text, a smaller --batch-size or a shorter --seq-len")
    held_out = TokenStream(corpus, eval_docs, 1, cfg.seq_len, cfg.seed, tokenizer.cls_token_id, shuffle=False)
    if held_out.batches_per_epoch < 1:
        raise UserError(f"{', '.join(cfg.corpus)}: the held-out documents hold {held_out.num_tokens:,} tokens, fewer "
                        f"than one --seq-len window of {cfg.seq_len + 1}; raise --eval-fraction")
    rows = min(cfg.batch_size, held_out.num_tokens // (cfg.seq_len + 1))
    return stream, TokenStream(corpus, eval_docs, rows, cfg.seq_len, cfg.seed, tokenizer.cls_token_id, shuffle=False,
                               reverse=reverse)


def stream_training(cfg: PretrainConfig, model_config: AWDLSTMConfig | ELMoConfig, corpus: TokenizedCorpus,
                    train_docs, eval_docs, tokenizer: Tokenizer, dist: Distributed):
    """(objective, step -> micro-batches, evaluator) for the LSTMs: the documents as one token
    stream (`token_streams`; ELMo's backward LM reads the same stream reversed). With --init, the
    objective starts from that language model's weights; ELMo's character CNN gets each vocabulary
    entry's spelling."""
    objective = build_objective(cfg.objective, model_config, tokenizer.mask_token_id, rows=cfg.batch_size)
    if cfg.init:
        objective.model.load_state_dict(AWDLSTMLanguageModel.from_pretrained(cfg.init).state_dict())
    if cfg.arch == "elmo":
        spellings = tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))
        objective.model.bilm.token_encoder.char_ids.copy_(character_ids(spellings, model_config.max_characters_per_token))
    bidirectional = cfg.arch == "elmo"
    streams = [token_streams(cfg, corpus, train_docs, eval_docs, tokenizer, dist, reverse)
               for reverse in ((False, True) if bidirectional else (False,))]
    held_out = [evaluation for _, evaluation in streams]

    def evaluate(module) -> dict:
        """Next-token loss, accuracy and perplexity over the held-out stream (each direction's, for
        ELMo), read from a zero state."""
        counts, loss_sum = Counter(), 0.0
        device = next(module.parameters()).device
        batches = min(cfg.eval_batches, held_out[0].batches_per_epoch)
        for direction, stream_of_direction in enumerate(held_out):
            state = None
            for index in range(batches):
                batch = {k: v.to(device) for k, v in stream_of_direction.batch(index).items()}
                if bidirectional:
                    out = module.model.direction_loss(batch["input_ids"], batch["labels"], direction == 1, state)
                else:
                    out = module.model(batch["input_ids"], state, labels=batch["labels"])
                state = out.recurrent_state
                loss_sum += out.loss.item() / len(held_out)
                name = ("forward_lm", "backward_lm")[direction] if bidirectional else "lm"
                counts.update(summed(lm_counts(out, batch["labels"], name)))
        return {"loss": loss_sum / batches, **metrics_from_counts(counts)}

    backward = streams[1][0] if bidirectional else None
    return objective, StreamBatches(streams[0][0], cfg.batch_size, cfg.grad_accum, dist.rank, backward), evaluate


def memory_training(cfg: PretrainConfig, model_config: XLNetConfig, corpus: TokenizedCorpus, train_docs, eval_docs,
                    tokenizer: Tokenizer, dist: Distributed):
    """(objective, step -> micro-batches, evaluator) for XLNet with --mem-len: the LSTMs' token stream
    (`token_streams`), each row continuing its text from step to step, the objective carrying each
    row's memory (training/objectives.py: `PermutationLanguageModel`). Held out, the same regime: the
    held-out stream read in order from an empty memory, carried from batch to batch; its
    factorisation orders are the same at every evaluation, so the curve is comparable."""
    objective = build_objective(cfg.objective, model_config, tokenizer.mask_token_id, rows=cfg.batch_size,
                                mem_len=cfg.mem_len)
    stream, held_out = token_streams(cfg, corpus, train_docs, eval_docs, tokenizer, dist)

    def prepare(batch: dict[str, torch.Tensor], index: int) -> dict[str, torch.Tensor]:
        # Ranks read the same stream batch index (different rows): each draws its own orders.
        return objective.prepare(batch, batch_generator(cfg.seed, index * dist.world_size + dist.rank))

    def evaluate(module) -> dict:
        """Permutation-LM loss, accuracy and perplexity over the held-out stream, with memory."""
        counts, loss_sum, memory = Counter(), 0.0, None
        device = next(module.parameters()).device
        batches = min(cfg.eval_batches, held_out.batches_per_epoch)
        for index in range(batches):
            batch = module.prepare(held_out.batch(index), batch_generator(cfg.seed + 1, index))
            out, memory = module.read({k: v.to(device) for k, v in batch.items()}, memory)
            loss_sum += out.loss.item()
            counts.update(summed(out.counts))
        return {"loss": loss_sum / batches, **metrics_from_counts(counts)}

    return objective, StreamBatches(stream, cfg.batch_size, cfg.grad_accum, dist.rank, prepare=prepare), evaluate


def discriminative_rates(config: AWDLSTMConfig, decay: float):
    """Parameter name -> learning-rate factor: LSTM layer i of n trains at decay ** (n - 1 - i)
    of the top; the tied embedding and output layer (fastai's last layer group) at 1."""
    def scale(name: str) -> float:
        match = re.search(r"\.rnns\.(\d+)\.", name)
        return decay ** (config.n_layers - 1 - int(match.group(1))) if match else 1.0
    return scale


def training_model_config(cfg: PretrainConfig, model_config: BertConfig) -> BertConfig:
    """The encoder's config while it pre-trains: with --dropout, that dropout (hidden and attention)."""
    if cfg.dropout is None:
        return model_config
    return dataclasses.replace(model_config, hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout)


def saved_model_config(cfg: PretrainConfig, trained_with: BertConfig, model_config: BertConfig) -> BertConfig:
    """The config written with the model: as trained, but with --dropout the model's own dropout back, for
    the fine-tuning that follows (Cramming pre-trains without dropout and fine-tunes with it)."""
    if cfg.dropout is None:
        return trained_with
    return dataclasses.replace(trained_with, hidden_dropout_prob=model_config.hidden_dropout_prob,
                               attention_probs_dropout_prob=model_config.attention_probs_dropout_prob)


def run_pretraining(cfg: PretrainConfig) -> str:
    """Run a whole pre-training job; returns "completed" or "interrupted"."""
    family = family_named(cfg.arch)  # the registry's one-line error names the families there are
    if family.name not in FAMILY_OBJECTIVES:  # the objectives (training/objectives.py) train these
        raise UserError(f"--arch {family.name}: pretrain trains the {', '.join(FAMILY_OBJECTIVES)} families; "
                        f"{family.name} ({family.description}) is trained by its own command")
    cfg.validate()
    dist = Distributed()
    out = Path(cfg.out)
    check_writable(out, needed_bytes=0)  # the Trainer checks the space once the model's size is known
    if not cfg.resume:
        check_no_earlier_run(out)
    tokenizer = load_or_train_tokenizer(cfg, dist)
    # The model's vocabulary (the corpus is read with `tokenizer`: the same ids, and its cached shards)
    model_tokenizer = padded_tokenizer(tokenizer, cfg.vocab_multiple)
    model_config = build_model_config(cfg, model_tokenizer)
    if cfg.objective == "t5":
        spans = max(round(round(cfg.seq_len * cfg.noise_density) / cfg.mean_span_length), 1)
        if spans + 1 > len(tokenizer.sentinel_token_ids):  # a target may end with one more sentinel
            raise UserError(f"--seq-len {cfg.seq_len} with --noise-density {cfg.noise_density} and --mean-span-length "
                            f"{cfg.mean_span_length} drops {spans} spans per text: more than the tokenizer's "
                            f"{len(tokenizer.sentinel_token_ids)} sentinels allow")
    if dist.is_main:
        write_json_atomic(out / RESOLVED_CONFIG_NAME, {**dataclasses.asdict(cfg), "model_config_resolved": model_config.to_dict()})

    corpus = load_corpus(cfg, tokenizer, dist)
    train_docs, eval_docs = corpus.split(cfg.eval_fraction, cfg.seed)
    if dist.is_main:
        print(f"corpus: {corpus.num_documents:,} documents, {corpus.num_tokens:,} tokens "
              f"({len(train_docs):,} documents for training, {len(eval_docs):,} held out)"
              f"{', reused tokenized shards' if corpus.reused else ''}", file=sys.stderr)
        if notes := reading_notes(corpus.skipped_lines, corpus.control_characters):
            print(notes, file=sys.stderr)

    torch.manual_seed(cfg.seed)
    lr_scale = None
    if cfg.arch in STREAM_FAMILIES:
        objective, train_batches, evaluate = stream_training(cfg, model_config, corpus, train_docs, eval_docs,
                                                             tokenizer, dist)
        lr_scale = discriminative_rates(model_config, cfg.layer_lr_decay) if cfg.arch == "awd-lstm" else None
    elif cfg.mem_len:
        objective, train_batches, evaluate = memory_training(cfg, model_config, corpus, train_docs, eval_docs,
                                                             tokenizer, dist)
    else:
        objective, train_batches, evaluate = sequence_training(cfg, training_model_config(cfg, model_config), corpus,
                                                               train_docs, eval_docs, tokenizer, dist)

    def save_model(module) -> None:
        model = module.model_to_save()
        trained_with = model.config
        model.config = saved_model_config(cfg, trained_with, model_config)
        try:
            model.save_pretrained(out)
        finally:
            model.config = trained_with
        model_tokenizer.save_pretrained(out)

    trainer = Trainer(objective, cfg, out, train_batches, evaluate, save_model, dist, lr_scale)
    status = trainer.fit()
    if dist.is_main:
        plot_training_curves({cfg.objective: trainer.log.rows()}, out / "training_curves.png",
                             accuracy_keys=accuracy_keys(cfg.objective))
    return status
