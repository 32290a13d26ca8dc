"""What every model family shares: its config file, saving and loading, the output record, and its spec.

A family file (`models/bert.py`, `models/gpt.py`, ...) builds on four pieces of this one:

- `ConfigFile`, the base of its config dataclass: config.json written and read, unknown keys kept
  in `extra` for round trips, the class a directory holds in `architectures`;
- `PreTrainedModel`, the base of its models: `save_pretrained` and `from_pretrained` in one place,
  with three hooks a family overrides where it needs to: `tied_keys` (parameters stored once, under
  another name), `to_checkpoint` / `from_checkpoint` (its transformers key table), and
  `extra_files` / `read_extra_files` (files beside the weights, such as a word list);
- `ModelOutput`, what every forward returns, with transformers' field names; `activation`; `SIZES`,
  the named sizes every family's `--preset` means;
- `FamilySpec`, the family's declaration of what it is and can do, at the end of its file: its
  config class and model classes, presets, pre-training objectives (by name), task heads, layer
  stack, generation, feature modes, export formats and the summary line. Every command asks the
  spec; none outside `models/` branches on a family's name or class.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from .. import checkpoint
from ..errors import UserError
from ..files import write_json_atomic, write_text_atomic
from . import CONFIG_NAME, family_of, read_config

# name -> (layers, width), for every family's `--preset`: heads = width / 64 and a feed-forward
# 4 x width wide, as the BERT paper and Turc et al. 2019 ("Well-Read Students Learn Better").
SIZES: dict[str, tuple[int, int]] = {
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}


def size_of(preset: str) -> tuple[int, int]:
    """(layers, width) of a named size; an unknown name is a one-line error listing the sizes."""
    if preset not in SIZES:
        raise UserError(f"unknown preset {preset!r}; choose one of {', '.join(SIZES)}")
    return SIZES[preset]


class ConfigFile:
    """The base of every family's config dataclass: config.json written and read, and named sizes.

    A family sets `MODEL_TYPE` (and `MODEL_TYPES`, every `model_type` it reads, when transformers
    has several for it) and `WHAT` ("an ELMo biLM", for the error naming a directory of another
    family), declares an `extra` dict field for the keys it does not know (kept for round trips),
    and overrides the hooks it needs: `sizes` (a named size's fields), `from_stored` (transformers'
    aliases and derived keys on the way in), `stored_extras` (derived keys on the way out). An
    `id2label` field is written with string keys and `label2id` beside it, as transformers writes them.
    """

    MODEL_TYPE: ClassVar[str] = ""
    MODEL_TYPES: ClassVar[tuple[str, ...]] = ()  # every model_type read; default (MODEL_TYPE,)
    WHAT: ClassVar[str] = ""
    NOT_STORED: ClassVar[tuple[str, ...]] = ()  # fields that config.json holds by other means (a model_type)

    @property
    def model_type(self) -> str:
        """config.json's `model_type`."""
        return self.MODEL_TYPE

    @property
    def architecture_names(self) -> list[str]:
        """The model classes config.json names (transformers' `architectures`), [] when it names none."""
        names = getattr(self, "architectures", None) or self.extra.get("architectures")
        return list(names) if isinstance(names, (list, tuple)) else []

    def name_architecture(self, name: str) -> None:
        """Record the class a directory holds (written with the config)."""
        if any(f.name == "architectures" for f in fields(self)):
            self.architectures = [name]
        else:
            self.extra["architectures"] = [name]

    @classmethod
    def sizes(cls, layers: int, width: int) -> dict[str, Any]:
        """The fields of a named size of `layers` layers, `width` wide (see SIZES)."""
        raise UserError(f"{cls.WHAT} has no named sizes")

    @classmethod
    def preset(cls, name: str) -> dict[str, Any]:
        """The fields of a named size (SIZES: tiny ... large); a family with a size table of its own
        (the LSTMs') overrides this."""
        return cls.sizes(*size_of(name))

    @classmethod
    def from_preset(cls, name: str, **overrides: Any):
        """A config of a named size (see `preset`), with field overrides."""
        return cls(**{**cls.preset(name), **overrides})

    def for_task(self, num_labels: int, id2label: dict[int, str] | None, **options: Any):
        """This config with a task head of `num_labels` outputs named by `id2label` (`options`: a
        family's own, such as ULMFiT's drop_mult)."""
        if options:
            raise UserError(f"{self.WHAT} takes no head options ({', '.join(options)})")
        return dataclasses.replace(self, num_labels=num_labels, id2label=id2label)

    def transformers_incompatibility(self) -> str | None:
        """Why transformers' class for this family cannot represent this config (a variant it lacks),
        or None when it can."""
        return None

    def stored_extras(self) -> dict[str, Any]:
        """Keys config.json holds beside the fields (derived ones, such as transformers' `d_head`)."""
        return {}

    @classmethod
    def from_stored(cls, data: dict[str, Any], model_type: str, source: str) -> dict[str, Any]:
        """config.json's content (less `model_type`) -> field values: transformers' aliases renamed,
        derived keys checked and dropped, fields held by the model_type set."""
        return data

    def to_dict(self) -> dict[str, Any]:
        """config.json's content."""
        skipped = ("extra", *self.NOT_STORED)
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skipped}
        if data.get("id2label") is not None:
            data["id2label"] = {str(k): v for k, v in data["id2label"].items()}
            data["label2id"] = {v: int(k) for k, v in data["id2label"].items()}
        elif "id2label" in data:
            del data["id2label"]
        return {**self.extra, **data, **self.stored_extras(), "model_type": self.model_type}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config"):
        """Read config.json's content; unknown keys are kept in `extra`, bad values are one-line errors."""
        if not isinstance(data, dict):
            raise UserError(f"{source}: expected a JSON object")
        data = dict(data)
        accepted = cls.MODEL_TYPES or (cls.MODEL_TYPE,)
        model_type = data.pop("model_type", accepted[0])
        if model_type not in accepted:
            raise UserError(f"{source}: model_type {model_type!r} is not {cls.WHAT} ({' or '.join(accepted)})")
        data = cls.from_stored(data, model_type, source)
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names and k != "label2id"}
        labels = known.get("id2label")
        if labels is not None:
            if not isinstance(labels, dict) or not all(isinstance(k, str) and k.isdigit() for k in labels):
                raise UserError(f"{source}: config field 'id2label' must be an object from label ids to names, "
                                f"got {str(labels)[:80]!r}")
            known["id2label"] = {int(k): v for k, v in labels.items()}
            known.setdefault("num_labels", len(known["id2label"]))
        try:
            return cls(**known, extra=extra)
        except (UserError, TypeError, ValueError) as err:
            raise UserError(f"{source}: {err}") from None

    def save(self, directory: str | os.PathLike) -> Path:
        """Write `config.json` into `directory` (atomically) and return its path."""
        path = Path(directory) / CONFIG_NAME
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, data: dict[str, Any] | None = None):
        """Read a config from a `config.json` file or a directory that holds one (`data`: its
        content, already read by the caller, so that the file is parsed once)."""
        path = Path(path)
        source = str(path / CONFIG_NAME if path.is_dir() else path)
        return cls.from_dict(read_config(path) if data is None else data, source=source)


@dataclass
class ModelOutput:
    """What every model's forward returns; fields a model does not produce stay None.

    Shapes: B = batch, T = sequence length, H = hidden size, V = vocabulary, N = number
    of labelled (masked) positions in the batch.
    """

    loss: torch.Tensor | None = None  # scalar
    logits: torch.Tensor | None = None  # (B, num_labels), (B, T, num_labels), or MLM (B, T, V) / (N, V)
    prediction_logits: torch.Tensor | None = None  # masked LM: (B, T, V), or (N, V) when labels are given
    seq_relationship_logits: torch.Tensor | None = None  # next-sentence: (B, 2)
    start_logits: torch.Tensor | None = None  # (B, T)
    end_logits: torch.Tensor | None = None  # (B, T)
    last_hidden_state: torch.Tensor | None = None  # (B, T, H)
    pooler_output: torch.Tensor | None = None  # (B, H)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings output, then each layer: (B, T, H)
    attentions: tuple[torch.Tensor, ...] | None = None  # each layer: (B, heads, T, T)
    past_key_values: list[tuple[torch.Tensor, ...]] | None = None  # decoders: per layer keys, values (B, heads, S, H/heads)
    encoder_last_hidden_state: torch.Tensor | None = None  # encoder-decoders: the encoder's states (B, S, H)
    recurrent_state: list[tuple[torch.Tensor, ...]] | None = None  # LSTMs: per layer (h, c), each (1, B, width)
    # bertology's own, for the pre-training loop's metrics (pre-training models given labels):
    masked_lm_loss: torch.Tensor | None = None  # scalar: the masked LM's part of `loss`
    masked_lm_correct: torch.Tensor | None = None  # scalar: labelled positions whose argmax is the label

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def keys(self) -> list[str]:
        """Names of the fields that are set, as in transformers' ModelOutput."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]


ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The feed-forward non-linearity named by a config's `hidden_act` (transformers' names), or
    "tanh" (RoBERTa's sequence head, BERT's pooler)."""
    return {
        "gelu": F.gelu,  # exact erf form, as the BERT release
        "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "relu": F.relu,
        "tanh": torch.tanh,
    }[name]


def init_module(module: nn.Module, std: float) -> None:
    """BERT's initialisation of one module: normal(0, std) weights, zero biases, unit LayerNorms."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


class PreTrainedModel(nn.Module):
    """Saving and loading for every model of every family, in transformers' directory layout.

    `save_pretrained(directory)` writes the weights (tied ones once; under transformers' names
    through `to_checkpoint`), the files the model needs beside them (`extra_files`), and
    config.json last, naming the class; `from_pretrained(directory)` reads them back through
    `from_checkpoint` and `read_extra_files`, checking every tensor before it is copied in
    (present, of the model's shape, finite). A subclass sets `config_class` and, for task models
    built on a pre-trained stack, `backbone`: the attribute that holds it (`from_language_model`).
    """

    config_class: ClassVar[type[ConfigFile]]
    backbone: ClassVar[str] = ""
    # The layer a stack repeats (BERT's BertLayer, GPT's GPTBlock): what `compile_repeated_blocks`
    # compiles one by one, so that twelve identical layers are compiled once.
    repeated_blocks: ClassVar[tuple[type[nn.Module], ...]] = ()
    # Set by `compile_repeated_blocks`: the blocks run compiled, so the model makes none of the choices
    # that depend on a batch's values (dropping an all-ones mask, unpadding), each of which would hand the
    # blocks another kind of input and cost a compilation.
    blocks_compiled: bool = False

    def __init__(self, config: ConfigFile):
        super().__init__()
        self.config = config

    # ----- hooks -------------------------------------------------------------------------------

    def tied_keys(self) -> tuple[str, ...]:
        """State-dict keys that alias another parameter, so are not stored (an output matrix tied
        to the input embeddings)."""
        return ()

    def architecture_name(self) -> str:
        """The class name config.json's `architectures` records (transformers' where it has one)."""
        return type(self).__name__

    def to_checkpoint(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Our state dict (tied keys left out) -> the names and layouts stored on disk (the family's
        transformers key table; the same names by default)."""
        return state

    @classmethod
    def from_checkpoint(cls, stored: dict[str, torch.Tensor], config: ConfigFile,
                        source: Path) -> dict[str, torch.Tensor]:
        """The tensors as stored on disk -> our state-dict names (the inverse of `to_checkpoint`)."""
        return stored

    def extra_files(self) -> dict[str, str]:
        """Text files written beside the weights, by name (a word list); none by default."""
        return {}

    @classmethod
    def read_extra_files(cls, directory: Path, config: ConfigFile) -> dict[str, Any]:
        """What the constructor needs beyond the config, read from `directory` (none by default)."""
        return {}

    # ----- saving and loading ------------------------------------------------------------------

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write the model directory atomically, file by file: the weights (model.safetensors), the
        extra files, then config.json naming this class."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {k: v for k, v in self.state_dict().items() if k not in self.tied_keys()}
        checkpoint.write_weights(self.to_checkpoint(state), directory)
        for name, text in self.extra_files().items():
            write_text_atomic(directory / name, text)
        self.config.name_architecture(self.architecture_name())
        self.config.save(directory)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, config: ConfigFile | None = None):
        """Load a directory written by `save_pretrained` (or transformers' equivalent); eval mode.

        `config`: the directory's config, already read (default: read config.json). A weight
        missing, misshapen or not finite is a one-line error naming the file."""
        directory = Path(directory)
        if not directory.is_dir():
            raise UserError(f"{directory}: no such model directory")
        config = config if config is not None else cls.config_class.load(directory)
        stored, source = checkpoint.read_weights(directory)
        state = cls.from_checkpoint(stored, config, source)
        model = cls(config, **cls.read_extra_files(directory, config))
        prefix = f"{cls.backbone}." if cls.backbone else ""
        if prefix and not any(name.startswith(prefix) for name in model.state_dict()):
            # the bare stack opening a language or task model's directory: its weights are under `backbone.`
            state = {name.removeprefix(prefix): tensor for name, tensor in state.items()}
        checkpoint.load_checked(model, state, source, f"{config.WHAT} of this config", skip=model.tied_keys())
        return model.eval()

    @classmethod
    def from_language_model(cls, directory: str | os.PathLike, num_labels: int, id2label: dict[int, str] | None,
                            config: ConfigFile | None = None, **options: Any):
        """This task model with a fresh head (`num_labels` labels, named by `id2label`) on the
        pre-trained stack (`backbone`) of a directory of the same family (a language model, or a
        task model of any head). `options` go to the config's `for_task` (ULMFiT's drop_mult)."""
        source = load_pretrained(directory, config)
        task_config = source.config.for_task(num_labels, id2label, **options)
        model = cls(task_config)
        getattr(model, cls.backbone).load_state_dict(getattr(source, cls.backbone).state_dict())
        return model

    @classmethod
    def checkpoint_problems(cls, directory: str | os.PathLike, config: ConfigFile) -> list[str]:
        """Everything wrong with a directory's weights for this class, one line each ([] when they
        load: every tensor present, of the model's shape and finite)."""
        try:
            cls.from_pretrained(directory, config=config)
        except UserError as err:
            return [str(err)]
        return []

    @classmethod
    def keeps_head(cls, config: ConfigFile, **options: Any) -> bool:
        """Whether a directory's head, trained for the task at hand, can be kept with these task
        `options` (a family's own: BERT's `head_bilstm`); yes by default."""
        return True

    def num_parameters(self) -> int:
        """Distinct parameters (tied and shared weights counted once)."""
        return sum(p.numel() for p in self.parameters())


def compile_repeated_blocks(module: nn.Module, **options: Any) -> bool:
    """Regional compilation: compile in place (`nn.Module.compile` with torch.compile's `options`) every
    repeated block of every model inside `module`; the embeddings, heads and losses around them run
    eagerly. A stack's blocks share one compiled graph (dynamo guards on their code, not on which block
    it is), so a 12-layer BERT compiles in about the time of one layer rather than twelve: with cold
    caches on 2 CPU cores, base's first training step took 23 s compiled by blocks and 70 s as one
    graph, and the steps after took the same time. State-dict names are unchanged. -> whether
    `module` had any repeated block."""
    compiled: set[int] = set()
    for model in module.modules():
        if isinstance(model, PreTrainedModel) and model.repeated_blocks:
            for block in model.modules():
                if isinstance(block, model.repeated_blocks) and id(block) not in compiled:
                    block.compile(**options)
                    compiled.add(id(block))
            model.blocks_compiled = True
    return bool(compiled)


def evenly_spaced_layers(kept: int, total: int) -> list[int]:
    """The indices of `kept` evenly spaced layers out of `total`: i * total // kept for i < kept,
    every (total / kept)-th layer from the first.

    Keeping half is DistilBERT's "one layer out of two" (Sanh et al. 2019): 0, 2 of 4 and 0, 2, 4
    of 6. Otherwise e.g. 2 of 6 are 0, 3; 4 of 6 are 0, 1, 3, 4; 1 is layer 0 alone; all are all.
    (DistilBERT's released extraction script kept 0, 2, 4, 7, 9, 11 of BERT-base's 12, the last layer
    too: give such indices to the family's `keep_layers` (models/bert.py) directly.)
    """
    if not 1 <= kept <= total:
        raise UserError(f"cannot keep {kept} of {total} layers: choose 1 to {total}")
    return [i * total // kept for i in range(kept)]


def tensor_shapes(cls: type[nn.Module], config: ConfigFile) -> dict[str, torch.Size]:
    """The state-dict shapes of a `cls(config)` model, found without allocating it (PyTorch's meta
    device), so that weights are checked against the config before any memory is spent."""
    with torch.device("meta"), skipped_init():
        return {name: tensor.shape for name, tensor in cls(config).state_dict().items()}


# torch.nn.init's in-place fills, made no-ops by `skipped_init`.
_INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "constant_", "zeros_", "ones_", "xavier_uniform_",
                   "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_")


@contextlib.contextmanager
def skipped_init():
    """torch.nn.init's fills as no-ops, as transformers' `no_init_weights` makes them: a meta tensor
    holds nothing to fill, and filling one at random goes through torch._refs, whose first use
    imports torch._dynamo (0.7 s, on every model load)."""
    saved = {name: getattr(nn.init, name) for name in _INIT_FUNCTIONS}
    try:
        for name in _INIT_FUNCTIONS:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, function in saved.items():
            setattr(nn.init, name, function)


# ----- the family spec --------------------------------------------------------------------------


def _no_tokens(tokenizer: Any) -> dict[str, Any]:
    return {}


def _hidden_states(stack: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """A stack's states of every layer, as transformers' `hidden_states` (segments ignored)."""
    return stack(input_ids, attention_mask, output_hidden_states=True).hidden_states


@dataclass(frozen=True)
class FamilySpec:
    """What a model family is and can do, declared once at the end of its file (`SPEC`).

    Every command reads it: `pretrain` asks for the config of a size, the objectives and the model
    each trains; `finetune` for the head of a task kind; evaluate, predict and serve for the runner;
    embed, explain and WiC for the layer stack; generate for the generation kind; export for the
    formats. A capability a family lacks is its field's empty default, and the command that needs
    it says so in one line.
    """

    config_class: type[ConfigFile]
    # Every class a directory of the family may hold, by the name config.json's `architectures`
    # gives (transformers' names included); `default_class` opens a directory that names none.
    model_classes: dict[str, type[nn.Module]]
    default_class: type[nn.Module]
    # config -> one line for the CLI: "encoder (4 layers, 256 wide, 30,522-token vocabulary)".
    describe: Callable[[Any], str]

    # ---- pre-training (`bertology pretrain --arch NAME`) ----
    # Objective names (training/objectives.py's registry), the default first; () = trained by a
    # command of its own (static vectors, CoVe, TagLM).
    objectives: tuple[str, ...] = ()
    # The model each objective trains, by role (see training/objectives.py): config -> model.
    pretraining_models: dict[str, Callable[..., nn.Module]] = field(default_factory=dict)
    # An LSTM: pre-trained over a token stream, carrying its state from batch to batch.
    reads_stream: bool = False
    # The vocabulary `pretrain` trains when given none: "wordpiece", "unigram" (with this many of
    # T5's sentinels) or "bpe".
    tokenizer_model: str = "wordpiece"
    tokenizer_sentinels: int = 0
    # PretrainConfig switches this family takes: field -> (value -> the config fields it sets).
    pretrain_switches: dict[str, Callable[[Any], dict[str, Any]]] = field(default_factory=dict)
    # tokenizer -> the config fields its vocabulary decides (special token ids).
    token_ids: Callable[[Any], dict[str, Any]] = _no_tokens
    # config -> the longest sequence it reads, None for no hard limit (an LSTM, relative positions).
    context_length: Callable[[Any], int | None] = lambda config: None
    # (model, the vocabulary's entries) -> None: what a model learns from its vocabulary's spellings (ELMo).
    vocabulary_hook: Callable[[nn.Module, list[str]], None] | None = None

    # ---- fine-tuning, evaluate, predict, serve ----
    # task kind ("sequence", "token", "span", "wic") -> the task model class; kinds not here are refused
    # with `heads_note` ("a GPT is fine-tuned here for sequence, token and span tasks").
    heads: dict[str, type[nn.Module]] = field(default_factory=dict)
    heads_note: str = ""
    # How a fine-tuned directory runs (inference/runners.py): "head" (a task head on the model),
    # "text_to_text" (answers written as text), "word_features" (a head over word vectors), "tagger".
    runner: str = "head"
    # How `finetune` may train on it: "finetune" (the whole model), "features" (a head on frozen features).
    finetune_modes: tuple[str, ...] = ()
    # FinetuneConfig options of this family alone ("head_bilstm", "drop_mult").
    finetune_options: tuple[str, ...] = ()
    # Whether `bertology.inference.modeldir.save_random_weights` builds its random twin (default_class(config)).
    random_twin: bool = False
    # One vector per word type (static vectors): what --vectors takes.
    word_vectors: bool = False
    # A translation model (CoVe's): what `bertology translate evaluate` and `translate text` run.
    translates: bool = False
    # Whether it reads its input through a tokenizer saved beside it (vocab.txt, tokenizer.json); not
    # static vectors, CoVe or TagLM, which read words.
    tokenized: bool = True
    # model_type -> the transformers tokenizer class its directories hold when their tokenizer files do
    # not name one (AutoTokenizer's choice): "BertTokenizer", "RobertaTokenizer", ...
    tokenizer_classes: dict[str, str] = field(default_factory=dict)

    # ---- features: embed, explain, WiC, feature-based heads, layer-wise rates ----
    # (directory, config) -> its layer stack in eval mode (task heads and an LM's output left out).
    feature_encoder: Callable[[Any, Any], nn.Module] | None = None
    # (stack, input_ids, attention_mask, token_type_ids) -> every layer's states (B, T, H), the embeddings' output first.
    hidden_states: Callable[..., tuple[torch.Tensor, ...]] = _hidden_states
    feature_layers: Callable[[Any], int] = lambda config: 0  # config -> the layers above the embeddings
    feature_width: Callable[[Any], int] = lambda config: 0  # config -> the width of its last layer's states
    # stack -> the context-free vector of every vocabulary entry (V, E): its input embeddings.
    input_vectors: Callable[[nn.Module], torch.Tensor] | None = None
    # A family that reads words, not tokens (static vectors, CoVe): (directory, config) -> its word
    # feature source, whose `text_features(texts)` gives each text's (words, D) vectors; and
    # (source, [(sentence words, target index)], batch size) -> ({view name: (N, D) vectors}, targets
    # without a vector), WiC's views of the target word.
    word_features: Callable[[Any, Any], nn.Module] | None = None
    word_views: Callable[..., tuple[dict[str, Any], int]] | None = None
    layer_names: tuple[str, str] = ("embeddings", "layer")  # what the first layer and the others are called
    leading_summary_token: bool = True  # rows open with a summary token ([CLS]); False: "text [SEP]" (T5)
    # A task model's parameter name -> its depth: 0 the embeddings, i + 1 layer i, None above every layer.
    layer_of: Callable[[str], int | None] | None = None
    num_layers: Callable[[nn.Module], int] | None = None  # a task model -> the layers under its head
    # Its features are a forward and a backward half side by side (ELMo): `embed --word-pieces ends`.
    two_directions: bool = False
    attention_maps: bool = False  # `explain attention` can draw its attention (forward returns `attentions`)

    # ---- distillation (`bertology distill`) ----
    # (teacher config, preset, num_labels=, id2label=) -> a student's config of that size sharing the
    # teacher's vocabulary; None: the family is no teacher or student here.
    student_config: Callable[..., Any] | None = None
    # (task model, layer indices) -> a copy keeping only those layers (DistilBERT's initialisation).
    keep_layers: Callable[[nn.Module, list[int]], nn.Module] | None = None

    # ---- generation and export ----
    generation: str | None = None  # "causal" (GPT), "seq2seq" (T5), or None: `bertology generate` refuses it
    # (config, max_batch_size, max_cache_len, device, dtype) -> a key/value cache preallocated for that
    # many positions and written in place (the model's forward takes it as past_key_values, with
    # cache_position): greedy and sampled generation then run every new token at the same shapes, which
    # `generate --compile` captures once. None: the cache grows by concatenation, and nothing is compiled.
    static_cache: Callable[..., Any] | None = None
    export_formats: tuple[str, ...] = ()  # what `bertology export --format` writes: "hf", "int8", "onnx"

    def model_class(self, config: ConfigFile) -> type[nn.Module]:
        """The class a directory's config names, or the family's default."""
        names = config.architecture_names
        return self.model_classes.get(names[0], self.default_class) if names else self.default_class

    def load(self, directory: str | os.PathLike, config: ConfigFile | None = None) -> nn.Module:
        """Open a model directory of this family as the class its config.json names (`config`: read already)."""
        config = config if config is not None else self.config_class.load(directory)
        return self.model_class(config).from_pretrained(directory, config=config)


def load_pretrained(directory: str | os.PathLike, config: ConfigFile | None = None) -> nn.Module:
    """Any model directory, opened by its family's spec (`config`: read already)."""
    spec = family_of(directory).spec
    return spec.load(directory, config)
