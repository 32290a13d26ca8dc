"""`bertology pretrain`: from raw text to a pre-trained encoder in the transformers layout.

The steps: check every input before any work; load (or train) the WordPiece vocabulary;
tokenize the corpus once into memory-mapped shards (reused by later runs); hold out a
slice of documents; build the objective's model; train with the shared loop; write the
model, the tokenizer, `metrics.jsonl`, `training_curves.png` and the resolved config
into the output directory."""

from __future__ import annotations

import dataclasses
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ..config import default_of, option_name, override, setting, setting_fields
from ..data.corpus import DOC_FORMATS, corpus_notes, reading_notes
from ..data.pretraining import PretrainingDataset, collate, make_batches, static_mask_seeds
from ..data.shards import TokenizedCorpus, build_corpus, continuation_table
from ..data.token_stream import StreamBatches, TokenStream
from ..data.tokenizer import Tokenizer, train_tokenizer
from ..data.tokenizer_files import has_tokenizer
from ..errors import UserError
from ..files import cache_root, write_json_atomic
from ..memory import FP32_BYTES, check_fits, parameters_of
from ..models import FAMILIES, family_named, family_of, spec_for, trained_by
from ..models.base import SIZES, ConfigFile, FamilySpec, load_pretrained, tensor_shapes
from ..models.bert import POSITION_TYPES
from ..plots import plot_training_curves
from ..training.loop import (
    Distributed,
    TrainConfig,
    Trainer,
    check_no_earlier_run,
    check_resumed_record,
    check_writable,
    metrics_from_counts,
)
from ..training.objectives import ELECTRA_MASKING, OBJECTIVES, build_objective, lm_counts

RESOLVED_CONFIG_NAME = "pretrain_config.json"


OBJECTIVE_HELP = ("pre-training objective: " + ", ".join(f"{name} ({objective.description})"
                                                       for name, objective in OBJECTIVES.items()))
# The settings that are a model family's switches (its spec's `pretrain_switches`) and an objective's
# options (OBJECTIVES[name].options): each is refused, at any value but its default, where it does not apply.
FAMILY_SWITCHES = ("pre_layer_norm", "embedding_size", "share_layers", "segment_embeddings", "position", "gated_gelu",
                   "bias", "dropout", "mem_len")
OBJECTIVE_OPTIONS = tuple(dict.fromkeys(option for objective in OBJECTIVES.values() for option in objective.options))
# Family switches that hold while pre-training only: the saved config gets the fields they set back as the
# preset or config file had them (Cramming pre-trains without dropout and fine-tunes with it).
TRAINING_ONLY_SWITCHES = ("dropout",)

# --recipe NAME: settings that replace PretrainConfig's defaults (a setting given another value keeps it).
# The changes of Cramming (Geiping and Goldstein 2022) were measured one by one on a 2-core CPU at equal
# wall time (bench/cramming.py, docs/results/pretraining-recipe.md). cramming: those that paid there, as
# the study's pre-registered rule chose them from its first seed (each raised held-out masked-LM accuracy
# in both of its tracks): no biases, gated GELU, no dropout, a one-cycle schedule peaking at 2e-3 and a
# vocabulary padded to a multiple of 64. Pre-LN, the batch ramp, 128-token rows and NSP did not pay and
# stay off. cramming-all: every change, as the paper trains (the study's worst row at these budgets).
# A family takes a recipe when it takes its switches and objective.
RECIPES: dict[str, dict[str, Any]] = {
    "cramming": {"objective": "roberta", "bias": False, "gated_gelu": True, "dropout": 0.0, "schedule": "linear",
                 "warmup": 0.5, "lr": 2e-3, "vocab_multiple": 64},
    "cramming-all": {"objective": "roberta", "pre_layer_norm": True, "bias": False, "gated_gelu": True, "dropout": 0.0,
                     "schedule": "linear", "warmup": 0.5, "lr": 1e-3, "max_seq_len": 128, "vocab_multiple": 64,
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
    cache_dir: str = setting(default_factory=lambda: str(cache_root()), metavar="DIR", output="dir",
                             help="where the tokenized corpus is kept for later runs ($BERTOLOGY_CACHE)")
    arch: str = setting("bert", choices=lambda: trained_by("pretrain"), help="the model family")
    preset: str = setting("mini", choices=SIZES, help="the model's size")
    model_config: str | None = setting(None, metavar="FILE", help="a config.json for the encoder instead of a "
                                                                  "preset (default: none)")
    init: str | None = setting(None, metavar="DIR", help="go on training this pre-trained model of --arch's family (its "
                                                         "config, weights and tokenizer) on the corpus: ULMFiT's "
                                                         "target-task LM fine-tuning (default: none)")
    layer_lr_decay: float = setting(1.0, positive=True,
                                    help="ULMFiT's discriminative rates: each layer down trains at this factor of the "
                                         "one above (ULMFiT: 0.385 = 1/2.6); the embeddings and output layer (tied in "
                                         "a language model) at --lr")
    model: dict[str, Any] = setting({}, help="config-file only: the family's config fields to override (its config "
                                             "class's, as in its config.json), as a [model] table")
    # the variants' switches, applied over the preset and winning over `model`
    pre_layer_norm: bool = setting(False, help="LayerNorm before each sub-layer (pre-LN) instead of after it")
    embedding_size: int | None = setting(None, positive=True, help="ALBERT's factorized embeddings: this width, "
                                                                   "projected to the hidden size (default: off)")
    share_layers: bool = setting(False, help="ALBERT's cross-layer parameter sharing")
    segment_embeddings: bool = setting(True, help="segment (token type) embeddings")
    position: str = setting("absolute", choices=POSITION_TYPES,
                            help="absolute: learned position embeddings (BERT); relative: T5's bucketed relative "
                                 "position bias in every attention instead")
    objective: str | None = setting(None, choices=lambda: tuple(OBJECTIVES),
                                    help=f"{OBJECTIVE_HELP} (default: the family's first; `bertology pretrain --arch "
                                         "NAME --help` does not list them per family: a wrong one is refused naming "
                                         "those --arch takes)")
    max_seq_len: int = setting(128, minimum=8, formerly=("seq_len",),
                               help="tokens per sequence, at most (BERT packs sentences up to it; an LSTM's BPTT "
                                    "length)")
    batch_size: int = setting(32, positive=True, help="sequences per micro-batch")
    short_seq_prob: float = setting(0.1, minimum=0, maximum=1, help="share of shorter sequences, as BERT's data has")
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
    # Cramming's switches (Geiping and Goldstein 2022); --recipe cramming sets the ones that paid here
    bias: bool = setting(True, help="biases in the attention and feed-forward linears; --no-bias: none, as Cramming "
                                    "(zeros are written in their place, so transformers still loads the model)")
    dropout: float | None = setting(None, minimum=0, below=1,
                                    help="dropout while pre-training, hidden and attention (Cramming: 0); the saved "
                                         "model keeps its own for fine-tuning (default: the model's, 0.1)")
    vocab_multiple: int = setting(1, positive=True, metavar="N",
                                  help="pad the model's vocabulary to a multiple of N with unused tokens (Cramming: 64, "
                                       "for the matrix units); the saved tokenizer gets them too, as [unusedK]. "
                                       "A WordPiece vocabulary only")
    recipe: str | None = setting(None, choices=tuple(RECIPES),
                                 help="cramming: the changes of Cramming that paid on a 2-core CPU (no biases, "
                                      "gated GELU, no dropout, one-cycle to 2e-3, vocabulary padded to 64; "
                                      "docs/results/pretraining-recipe.md); cramming-all: all of its changes, as "
                                      "the paper trains. Set wherever a setting is left at its default; with "
                                      "--max-time and no --preset, also the model size that fits the time "
                                      "(default: none)")
    # Off by default: memory changes the data (a stream, not shuffled sequences) and the held-out
    # regime, so earlier runs stay comparable; on, --max-seq-len is a sensible N at the small presets.
    mem_len: int = setting(0, minimum=0, metavar="N",
                           help="xlnet: Transformer-XL's segment recurrence, as XLNet pre-trains: read the corpus as "
                                "a token stream, each batch row continuing its text, every token also attending to "
                                "the states of the last N positions its row read (per layer, no gradient; the model's "
                                "mem_len); held out, the same. 0: off, independent sequences (the release: 384 at "
                                "512 tokens; here --max-seq-len is a sensible N)")
    eval_fraction: float = setting(0.01, positive=True, below=1, help="share of the documents held out for evaluation")
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
        family = family_named(self.arch)
        spec = family.spec
        trained = [name for name, other in FAMILIES.items() if other.spec.objectives]
        if not spec.objectives:
            raise UserError(f"--arch {family.name}: pretrain trains the {', '.join(trained)} families; {family.name} "
                            f"({family.description}) is trained by its own command")
        if self.objective is None:
            self.objective = spec.objectives[0]
        if self.objective not in spec.objectives:
            takers = [name for name in trained if self.objective in FAMILIES[name].spec.objectives]
            raise UserError(f"--arch {family.name} trains with {' or '.join(spec.objectives)}, not --objective "
                            f"{self.objective} (which trains --arch {' or '.join(takers)})")
        for name in FAMILY_SWITCHES:
            if getattr(self, name) != default_setting(name) and name not in spec.pretrain_switches:
                takers = [other for other in trained if name in FAMILIES[other].spec.pretrain_switches]
                raise UserError(f"{self.flag_given(name)} is a switch of --arch {' or '.join(takers)}, not of --arch "
                                f"{family.name}")
        for name in OBJECTIVE_OPTIONS:
            if getattr(self, name) != default_setting(name) and name not in OBJECTIVES[self.objective].options:
                takers = [other for other, objective in OBJECTIVES.items() if name in objective.options]
                raise UserError(f"{self.flag_given(name)} is an option of the {' or '.join(takers)} objective, not of "
                                f"{self.objective}")
        if self.init is not None:
            if not Path(self.init).is_dir():
                raise UserError(f"{self.init}: no such model directory")
            if family_of(self.init).name != family.name:
                raise UserError(f"{self.init}: a {family_of(self.init).name} model; --init continues a model of --arch "
                                f"{family.name}")
            if self.model_config or self.model:
                raise UserError("--init takes the model's own config.json; --model-config and [model] do not apply")
        if self.layer_lr_decay != 1.0 and spec.layer_of is None:
            raise UserError(f"--layer-lr-decay scales the rates of a stack of layers; --arch {family.name} declares none")
        if self.layer_lr_decay > 1:
            raise UserError(f"--layer-lr-decay must be at most 1, got {self.layer_lr_decay}")
        if not 0 < self.noise_density < 1:
            raise UserError(f"--noise-density must be between 0 and 1, got {self.noise_density}")

    def apply_recipe(self) -> None:
        """Set --recipe's settings wherever a setting still has its default (see RECIPES), and with a time
        budget and the default preset, the recipe's size for the time (RECIPE_PRESETS). A family that
        lacks one of the recipe's switches or its objective is refused."""
        if self.recipe is None:
            return
        refusal = recipe_refusal(self.recipe, self.arch)
        if refusal:
            raise UserError(refusal)
        for name, value in RECIPES[self.recipe].items():
            if getattr(self, name) == default_setting(name):
                setattr(self, name, value)
        seconds = self.time_budget()
        if seconds and self.preset == default_setting("preset") and not self.model_config:
            self.preset = next(preset for limit, preset in RECIPE_PRESETS if seconds <= limit)

    def flag_given(self, name: str) -> str:
        """The flag a setting was given with, for messages: --share-layers, --no-segment-embeddings,
        --position relative."""
        return flag(name, getattr(self, name))

    def model_overrides(self, spec: FamilySpec) -> dict[str, Any]:
        """The config fields to set over the preset or --model-config: the `model` table, then the
        family's switches given (so a flag wins over the config file's table), those that hold while
        pre-training only (TRAINING_ONLY_SWITCHES) aside."""
        switches = {}
        for name, fields in spec.pretrain_switches.items():
            if name not in TRAINING_ONLY_SWITCHES:
                switches.update(fields(getattr(self, name)))
        return {**self.model, **switches}

    def training_overrides(self, spec: FamilySpec) -> dict[str, Any]:
        """The config fields the model pre-trains with beyond its saved config (TRAINING_ONLY_SWITCHES
        given: --dropout)."""
        switches = {}
        for name in TRAINING_ONLY_SWITCHES:
            if name in spec.pretrain_switches:
                switches.update(spec.pretrain_switches[name](getattr(self, name)))
        return switches

    def objective_options(self) -> dict[str, Any]:
        """The objective's settings, by name (see OBJECTIVES[name].options)."""
        return {name: getattr(self, name) for name in OBJECTIVES[self.objective].options}


def recipe_refusal(recipe: str, arch: str) -> str | None:
    """Why --arch `arch` cannot pre-train by `recipe` (it lacks one of the recipe's family switches or its
    objective), or None when it can."""
    family = family_named(arch)
    settings = RECIPES[recipe]
    lacking = [flag(name, value) for name, value in settings.items()
               if name in FAMILY_SWITCHES and name not in family.spec.pretrain_switches]
    if lacking:
        return f"--recipe {recipe} sets {', '.join(lacking)}, which --arch {family.name} does not take"
    objective = settings.get("objective")
    if objective is not None and objective not in family.spec.objectives:
        return f"--recipe {recipe} pre-trains with --objective {objective}, which --arch {family.name} does not take"
    return None


def flag(name: str, value: Any) -> str:
    """A setting's flag with its value, for messages: --share-layers, --no-bias, --position relative."""
    if isinstance(value, bool):
        return option_name(name if value else f"no_{name}")
    return f"{option_name(name)} {value}"


def default_setting(name: str) -> Any:
    """A PretrainConfig setting's default."""
    return default_of(setting_fields(PretrainConfig)[name])


def build_model_config(cfg: PretrainConfig, tokenizer: Tokenizer) -> ConfigFile:
    """Preset or config file, then the model overrides (the `model` table, the family's switches,
    the special token ids the vocabulary decides); the vocabulary decides vocab_size. --init's
    model keeps its own config."""
    spec = family_named(cfg.arch).spec
    vocab_size = tokenizer.vocab_size
    if cfg.init:
        config = spec.config_class.load(cfg.init)
        if config.vocab_size != vocab_size:
            raise UserError(f"{cfg.init}: the model has {config.vocab_size:,} tokens, the tokenizer {vocab_size:,}; "
                            "give --init's own tokenizer (the default)")
        return config
    overrides = {**cfg.model_overrides(spec), **spec.token_ids(tokenizer)}
    try:
        if cfg.model_config:
            config = dataclasses.replace(spec.config_class.load(cfg.model_config), **overrides, vocab_size=vocab_size)
        else:
            config = spec.config_class.from_preset(cfg.preset, vocab_size=vocab_size, **overrides)
    except TypeError as err:
        raise UserError(f"model settings: {err}") from None
    check = OBJECTIVES[cfg.objective].check
    if check is not None:
        check(cfg.objective_options(), config, tokenizer, cfg.max_seq_len)
    positions = spec.context_length(config)
    if positions is not None and cfg.max_seq_len > positions:
        raise UserError(f"--max-seq-len {cfg.max_seq_len} is larger than the model's context ({positions} positions)")
    return config


def check_training_memory(cfg: PretrainConfig, model_config) -> None:
    """Refuse, before anything is allocated, a run the machine cannot hold: each parameter four
    times in fp32 (the weights, their gradients, AdamW's two moments), and a micro-batch's logits
    over the vocabulary three times (the logits, their softmax, its gradient), the largest
    activations of the small models here."""
    if hasattr(type(model_config), "count_parameters"):
        parameters = parameters_of(model_config)
    else:  # a family whose config states no count: its model's shapes, built without allocating
        parameters = sum(shape.numel() for shape in tensor_shapes(spec_for(model_config).default_class,
                                                                  model_config).values())
    logits = cfg.batch_size * cfg.max_seq_len * model_config.vocab_size
    check_fits(FP32_BYTES * (4 * parameters + 3 * logits),
               f"--batch-size {cfg.batch_size:,} x --max-seq-len {cfg.max_seq_len:,} over {model_config.vocab_size:,} "
               f"tokens, with a model of {parameters:,} parameters,")



def load_or_train_tokenizer(cfg: PretrainConfig, dist: Distributed) -> Tokenizer:
    """The given tokenizer, or one trained on the corpus (by rank 0; the others wait and load it):
    the vocabulary the family's spec asks for (WordPiece; for T5 a unigram one with its sentinels)."""
    out = Path(cfg.out)
    spec = family_named(cfg.arch).spec
    if cfg.tokenizer or cfg.init:
        tokenizer = Tokenizer.from_pretrained(cfg.tokenizer or cfg.init)
    elif has_tokenizer(out) and cfg.resume:
        tokenizer = Tokenizer.from_pretrained(out)
    else:
        model, sentinels = spec.tokenizer_model, spec.tokenizer_sentinels
        if dist.is_main:
            print(f"training a {cfg.vocab_size}-token {model} vocabulary on the corpus", file=sys.stderr)
            # Lines it skips are the ones the corpus reading below skips and reports.
            train_tokenizer([Path(p) for p in cfg.corpus], vocab_size=cfg.vocab_size, cased=cfg.cased, out_dir=out,
                            skip_bad_lines=cfg.skip_bad_lines, text_field=cfg.text_field, model=model,
                            sentinels=sentinels)
        dist.barrier()
        tokenizer = Tokenizer.from_pretrained(out)
    if spec.tokenizer_sentinels and not tokenizer.sentinel_token_ids:
        raise UserError(f"{cfg.tokenizer}: the tokenizer has no sentinel tokens <extra_id_N> for span corruption; "
                        f"train one with `bertology tokenizer train --model {spec.tokenizer_model} --sentinels "
                        f"{spec.tokenizer_sentinels}`")
    return tokenizer


def mask_id(cfg: PretrainConfig, tokenizer: Tokenizer) -> int | None:
    """The [MASK] id for an objective that masks tokens; None for one that does not (GPT-2's byte-level
    BPE has no mask token)."""
    return tokenizer.mask_token_id if OBJECTIVES[cfg.objective].masks_tokens else None


def padded_tokenizer(tokenizer: Tokenizer, multiple: int) -> Tokenizer:
    """`tokenizer` with unused tokens appended ([unused0], [unused1], ...: BERT's names; WordPiece never
    produces them, since they are not words) up to a multiple of `multiple` entries, so that the model's
    embedding and output matrices have a size the matrix units tile evenly. Every text keeps its ids."""
    missing = -tokenizer.vocab_size % multiple
    if not missing:
        return tokenizer
    if tokenizer.model != "wordpiece" or tokenizer.do_lower_case is None:
        raise UserError(f"--vocab-multiple pads a WordPiece vocabulary; this tokenizer is a {tokenizer.kind} one")
    tokens = tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))
    taken = set(tokens)
    unused = (name for k in range(tokenizer.vocab_size + missing) if (name := f"[unused{k}]") not in taken)
    return Tokenizer(tokens + [next(unused) for _ in range(missing)], do_lower_case=tokenizer.do_lower_case,
                     strip_accents=tokenizer.strip_accents, tokenize_chinese_chars=tokenizer.tokenize_chinese_chars,
                     keep_hangul=tokenizer.keep_hangul, model_max_length=tokenizer.model_max_length,
                     special_tokens=tokenizer.special_tokens)


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

    prefetchable = True  # a pure function of the step, on the CPU: the loop may prepare steps ahead on a thread

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


def held_out_advice(cfg: PretrainConfig, documents: int, held_out: int) -> str:
    """What gives a run held-out text when its held-out documents give none: more documents when
    the corpus is one (none can be held out), else a larger share of them."""
    if documents < 2:
        return ("the corpus is one document, so none can be held out: give more files, or one file with blank lines "
                "between its documents (read with --doc-format lines or auto)")
    return f"raise --eval-fraction (now {cfg.eval_fraction:g}: {held_out:,} of the {documents:,} documents)"


def make_evaluator(dataset: PretrainingDataset, objective, batch_size: int, max_batches: int, seed: int,
                   pad_id: int, continuation: torch.Tensor | None, advice: str):
    """module -> held-out metrics over up to `max_batches` batches of the eval documents (`advice`:
    what to do when they give none).

    The instances and their masking are the same at every evaluation, so the curve is comparable.
    """
    instances = dataset.instances(0)
    if not instances:
        raise UserError(f"the held-out documents give no evaluation sequences; {advice}")
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


def sequence_training(cfg: PretrainConfig, model_config, corpus: TokenizedCorpus, train_docs, eval_docs,
                      tokenizer: Tokenizer, dist: Distributed):
    """(objective, step -> micro-batches, evaluator) for the Transformer families: independent
    sequences packed from the documents as the objective wants them, masked at batch time (with
    --static-masks, each by its own seed; the held-out batches are masked the same at every
    evaluation either way)."""
    spec = OBJECTIVES[cfg.objective]
    datasets = [PretrainingDataset(corpus, docs, cfg.max_seq_len, spec.data_format, spec.pair_task, cfg.short_seq_prob,
                                   tokenizer.start_token_id, tokenizer.end_token_id, cfg.seed, cfg.sop_balance)
                for docs in (train_docs, eval_docs)]
    objective = build_objective(cfg.objective, model_config, mask_id(cfg, tokenizer),
                                sentinel_ids=tokenizer.sentinel_token_ids, **cfg.objective_options())
    continuation = torch.from_numpy(continuation_table(tokenizer)) if cfg.whole_word_masking else None
    train_batches = PretrainingBatches(datasets[0], objective, cfg.batch_size, cfg.grad_accum, cfg.seed,
                                       tokenizer.pad_token_id, dist.rank, dist.world_size, continuation,
                                       cfg.static_masks)
    evaluate = make_evaluator(datasets[1], objective, cfg.batch_size, cfg.eval_batches, cfg.seed + 1,
                              tokenizer.pad_token_id, continuation,
                              held_out_advice(cfg, corpus.num_documents, len(eval_docs)))
    return objective, train_batches, evaluate


def token_streams(cfg: PretrainConfig, corpus: TokenizedCorpus, train_docs, eval_docs, tokenizer: Tokenizer,
                  dist: Distributed, reverse: bool = False) -> tuple[TokenStream, TokenStream]:
    """(training, held-out) token streams (data/token_stream.py), each document opened by [CLS]: the
    training documents in --batch-size rows per rank, read --max-seq-len tokens at a time; the held-out
    ones in order, in as many rows, fewer when their text is short (a full window each). `reverse`:
    the same streams read from their ends (ELMo's backward LM)."""
    stream = TokenStream(corpus, train_docs, cfg.batch_size * dist.world_size, cfg.max_seq_len, cfg.seed,
                         tokenizer.cls_token_id, reverse=reverse)
    if stream.batches_per_epoch < 1:
        raise UserError(f"{', '.join(cfg.corpus)}: {stream.num_tokens:,} training tokens, too few for one batch of "
                        f"{stream.rows} rows x {cfg.max_seq_len + 1} tokens (--batch-size x (--max-seq-len + 1)); "
                        "use more text, a smaller --batch-size or a shorter --max-seq-len")
    held_out = TokenStream(corpus, eval_docs, 1, cfg.max_seq_len, cfg.seed, tokenizer.cls_token_id, shuffle=False)
    if held_out.batches_per_epoch < 1:
        raise UserError(f"{', '.join(cfg.corpus)}: the held-out documents hold {held_out.num_tokens:,} tokens, fewer "
                        f"than one --max-seq-len window of {cfg.max_seq_len + 1}; "
                        f"{held_out_advice(cfg, corpus.num_documents, len(eval_docs))}")
    rows = min(cfg.batch_size, held_out.num_tokens // (cfg.max_seq_len + 1))
    return stream, TokenStream(corpus, eval_docs, rows, cfg.max_seq_len, cfg.seed, tokenizer.cls_token_id,
                               shuffle=False, reverse=reverse)


def stream_training(cfg: PretrainConfig, model_config: ConfigFile, corpus: TokenizedCorpus, train_docs, eval_docs,
                    tokenizer: Tokenizer, dist: Distributed):
    """(objective, step -> micro-batches, evaluator) for the LSTMs: the documents as one token
    stream (`token_streams`; an objective that reads it both ways, ELMo's, the same stream reversed
    too)."""
    objective = build_objective(cfg.objective, model_config, mask_id(cfg, tokenizer), rows=cfg.batch_size)
    directions = objective.directions
    streams = [token_streams(cfg, corpus, train_docs, eval_docs, tokenizer, dist, reverse)
               for reverse in (False, True)[:len(directions)]]
    held_out = [evaluation for _, evaluation in streams]

    def evaluate(module) -> dict:
        """Next-token loss, accuracy and perplexity over the held-out stream (each direction's),
        read from a zero state."""
        counts, loss_sum = Counter(), 0.0
        device = next(module.parameters()).device
        batches = min(cfg.eval_batches, held_out[0].batches_per_epoch)
        for direction, stream_of_direction in enumerate(held_out):
            state = None
            for index in range(batches):
                batch = {k: v.to(device) for k, v in stream_of_direction.batch(index).items()}
                out = module.score(batch, direction, state)
                state = out.recurrent_state
                loss_sum += out.loss.item() / len(held_out)
                counts.update(summed(lm_counts(out, batch["labels"], directions[direction])))
        return {"loss": loss_sum / batches, **metrics_from_counts(counts)}

    backward = streams[1][0] if len(streams) > 1 else None
    return objective, StreamBatches(streams[0][0], cfg.batch_size, cfg.grad_accum, dist.rank, backward), evaluate


def memory_training(cfg: PretrainConfig, model_config: ConfigFile, corpus: TokenizedCorpus, train_docs, eval_docs,
                    tokenizer: Tokenizer, dist: Distributed):
    """(objective, step -> micro-batches, evaluator) for XLNet with --mem-len: the LSTMs' token stream
    (`token_streams`), each row continuing its text from step to step, the objective carrying each
    row's memory (training/objectives.py: `PermutationLMObjective`). Held out, the same regime: the
    held-out stream read in order from an empty memory, carried from batch to batch; its
    factorisation orders are the same at every evaluation, so the curve is comparable."""
    objective = build_objective(cfg.objective, model_config, mask_id(cfg, tokenizer), rows=cfg.batch_size,
                                **cfg.objective_options())
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


def discriminative_rates(spec: FamilySpec, num_layers: int, decay: float):
    """Parameter name -> learning-rate factor: layer i of n trains at decay ** (n - 1 - i) of the
    top; the embeddings and the output layer (tied in a language model: fastai's last layer group)
    and anything above the layers at 1."""
    def scale(name: str) -> float:
        depth = spec.layer_of(name)
        return decay ** (num_layers - depth) if depth else 1.0
    return scale


def saved_config(trained_with: ConfigFile, model_config: ConfigFile, training_config: ConfigFile) -> ConfigFile:
    """The config written with a pre-trained model (`trained_with`: its own, a pre-training model's
    config of its family): the fields that differed only while pre-training (`training_config` against
    `model_config`: --dropout) back as `model_config` has them, for the fine-tuning that follows."""
    restored = {f.name: getattr(model_config, f.name) for f in dataclasses.fields(model_config)
                if getattr(training_config, f.name) != getattr(model_config, f.name)}
    return dataclasses.replace(trained_with, **restored) if restored else trained_with


def run_pretraining(cfg: PretrainConfig, on_speed: Callable[[float], None] | None = None) -> str:
    """Run a whole pre-training job; returns "completed" or "interrupted". `on_speed`: see `Trainer`."""
    cfg.validate()
    dist = Distributed(cfg.device)
    out = Path(cfg.out)
    check_writable(out, needed_bytes=0)  # the Trainer checks the space once the model's size is known
    if not cfg.resume:
        check_no_earlier_run(out)
    else:  # other settings than the run's are refused before any work
        check_resumed_record(out / RESOLVED_CONFIG_NAME, dataclasses.asdict(cfg))
    fresh, started = not any(out.iterdir()), []
    try:
        return _pretrain(cfg, dist, out, on_start=lambda: started.append(True), on_speed=on_speed)
    except BaseException:
        if fresh and not started and dist.is_main:  # all there is this run's, and it never began: leave nothing
            for path in out.iterdir():
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        raise


def _pretrain(cfg: PretrainConfig, dist: Distributed, out: Path, on_start: Callable[[], None],
              on_speed: Callable[[float], None] | None) -> str:
    """The run, once `run_pretraining` has checked its output folder: its record of the settings
    (pretrain_config.json) is written once the Trainer starts, after which `on_start` is called."""
    spec = family_named(cfg.arch).spec
    objective_spec = OBJECTIVES[cfg.objective]
    tokenizer = load_or_train_tokenizer(cfg, dist)
    # The model's vocabulary (the corpus is read with `tokenizer`: the same ids, and its cached shards)
    model_tokenizer = padded_tokenizer(tokenizer, cfg.vocab_multiple)
    model_config = build_model_config(cfg, model_tokenizer)
    # As it pre-trains (--dropout); saved as `model_config`
    training_config = dataclasses.replace(model_config, **cfg.training_overrides(spec))
    check_training_memory(cfg, model_config)

    def record_run() -> None:
        if dist.is_main:
            write_json_atomic(out / RESOLVED_CONFIG_NAME,
                              {**dataclasses.asdict(cfg), "model_config_resolved": model_config.to_dict()})
        on_start()

    corpus = load_corpus(cfg, tokenizer, dist)
    train_docs, eval_docs = corpus.split(cfg.eval_fraction, cfg.seed)
    if dist.is_main:
        print(f"corpus: {corpus.num_documents:,} documents, {corpus.num_tokens:,} tokens "
              f"({len(train_docs):,} documents for training, {len(eval_docs):,} held out)"
              f"{', reused tokenized shards' if corpus.reused else ''}", file=sys.stderr)
        for notes in (corpus_notes(corpus.formats), reading_notes(corpus.skipped_lines, corpus.control_characters)):
            if notes:
                print(notes, file=sys.stderr)

    torch.manual_seed(cfg.seed)
    if spec.reads_stream or objective_spec.data_format == "stream":
        objective, train_batches, evaluate = stream_training(cfg, training_config, corpus, train_docs, eval_docs,
                                                             tokenizer, dist)
    elif cfg.mem_len:
        objective, train_batches, evaluate = memory_training(cfg, training_config, corpus, train_docs, eval_docs,
                                                             tokenizer, dist)
    else:
        objective, train_batches, evaluate = sequence_training(cfg, training_config, corpus, train_docs, eval_docs,
                                                               tokenizer, dist)
    model = objective.model_to_save()
    if spec.vocabulary_hook is not None:
        spec.vocabulary_hook(model, tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size)))
    if cfg.init:
        start = load_pretrained(cfg.init)
        if type(start) is not type(model):
            raise UserError(f"{cfg.init}: a {type(start).__name__}; --objective {cfg.objective} trains a "
                            f"{type(model).__name__}")
        model.load_state_dict(start.state_dict())
    lr_scale = None
    if cfg.layer_lr_decay != 1.0:
        lr_scale = discriminative_rates(spec, spec.num_layers(model), cfg.layer_lr_decay)

    def save_model(module) -> None:
        model = module.model_to_save()
        trained_with = model.config
        model.config = saved_config(trained_with, model_config, training_config)
        try:
            model.save_pretrained(out)
        finally:
            model.config = trained_with
        model_tokenizer.save_pretrained(out)

    trainer = Trainer(objective, cfg, out, train_batches, evaluate, save_model, dist, lr_scale, on_speed,
                      on_start=record_run)
    status = trainer.fit()
    if dist.is_main:
        plot_training_curves({cfg.objective: trainer.log.rows()}, out / "training_curves.png",
                             accuracy_keys=objective_spec.metrics)
    return status
