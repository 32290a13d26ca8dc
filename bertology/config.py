"""Model configuration: one dataclass, the named size presets, and config.json I/O.

Field names are those of the original `bert_config.json` and of Hugging Face
transformers, so a `config.json` written here loads in transformers and vice
versa. The variant switches at the end (ALBERT's factorized embeddings and shared
layers, pre-LayerNorm, no segment embeddings) each change one visible branch in
`model.py`; a vanilla BERT leaves them at their defaults. `OBJECTIVES` says what data
each pre-training objective of `objectives.py` needs (kept here, free of PyTorch, so the
command line can list the choices without loading it).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError
from .files import write_json_atomic

CONFIG_NAME = "config.json"

# name -> (num_hidden_layers, hidden_size). Heads = hidden/64 and intermediate = 4*hidden,
# as in the BERT paper and Turc et al. 2019 ("Well-Read Students Learn Better").
PRESETS: dict[str, tuple[int, int]] = {
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")


@dataclass
class ObjectiveSpec:
    """How a pre-training objective (objectives.py) wants its data: the packing format and the pair task."""

    data_format: str  # "pairs" (BERT's segment pairs), "full_sentences" (RoBERTa) or "contiguous"
    pair_task: str | None  # "nsp", "sop" or None


OBJECTIVES: dict[str, ObjectiveSpec] = {
    "bert": ObjectiveSpec("pairs", "nsp"),
    "roberta": ObjectiveSpec("full_sentences", None),
    "albert": ObjectiveSpec("pairs", "sop"),
    "electra": ObjectiveSpec("pairs", None),
    "clm": ObjectiveSpec("contiguous", None),
}


@dataclass
class EpochLoop:
    """The loop settings fine-tuning and distillation share: epochs over a training set with the
    BERT paper's recipe (AdamW, warmup then linear decay, clipping). Kept here, free of PyTorch,
    so the command line can show the defaults; each field is a flag and a config-file key."""

    epochs: float = 3.0
    lr: float = 5e-5
    batch_size: int = 32
    eval_batch_size: int = 128
    warmup: float = 0.1  # a fraction of the steps (< 1) or a step count
    weight_decay: float = 0.01
    schedule: str = "linear"  # or "slanted_triangular" (ULMFiT), "constant"
    max_grad_norm: float = 1.0
    precision: str = "auto"
    seed: int = 42
    progress: bool = True
    resume: bool = False

    def validate_loop(self) -> None:
        """The checks every epoch loop needs."""
        if self.epochs <= 0 or self.lr <= 0 or self.batch_size <= 0:
            raise UserError("epochs, lr and batch_size must be positive")


@dataclass
class BertConfig:
    """Hyper-parameters of a BERT encoder and its task head.

    Example: `BertConfig.from_preset("mini", vocab_size=8000)` is a 4-layer,
    256-wide encoder with 4 heads and a 1024-wide feed-forward.
    """

    vocab_size: int = 30522  # the uncased English WordPiece vocabulary of the BERT release
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072  # feed-forward width, 4 * hidden_size
    hidden_act: str = "gelu"  # exact (erf) GELU, as BERT; "gelu_new" is the tanh approximation
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # segment A/B; 0 drops segment embeddings (RoBERTa-style)
    initializer_range: float = 0.02  # std of the normal initialisation
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    # Variant switches (all off = the BERT paper).
    embedding_size: int | None = None  # ALBERT: factorized embeddings of this width; None = hidden_size
    share_layers: bool = False  # ALBERT: one set of layer weights applied num_hidden_layers times
    pre_layer_norm: bool = False  # LayerNorm before each sub-layer (GPT-2 style) instead of after
    causal: bool = False  # left-to-right attention: GPT's objective, the BERT paper's LTR baseline

    # Task head.
    num_labels: int = 2
    id2label: dict[int, str] | None = None
    classifier_dropout: float | None = None  # None = hidden_dropout_prob

    # Anything else found in a config.json (e.g. transformers' bookkeeping), kept for round trips.
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def head_size(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_attention_heads

    @property
    def embedding_width(self) -> int:
        """Width of the token/segment/position embeddings (hidden_size unless factorized)."""
        return self.embedding_size or self.hidden_size

    @property
    def is_vanilla_bert(self) -> bool:
        """True when transformers' BertModel can represent this architecture exactly."""
        return (
            self.embedding_width == self.hidden_size
            and not self.share_layers
            and not self.pre_layer_norm
            and self.type_vocab_size > 0
            and not self.causal
        )

    def validate(self) -> None:
        """Raise UserError naming the first field whose value cannot build a model."""
        positive = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "num_labels")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise UserError(f"config field {name!r} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise UserError(
                f"config field 'hidden_size' ({self.hidden_size}) must be divisible by "
                f"'num_attention_heads' ({self.num_attention_heads})"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise UserError(f"config field 'hidden_act' must be one of {ACTIVATIONS}, got {self.hidden_act!r}")
        if not isinstance(self.type_vocab_size, int) or self.type_vocab_size < 0:
            raise UserError(f"config field 'type_vocab_size' must be >= 0, got {self.type_vocab_size!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise UserError(f"config field {name!r} must be in [0, 1), got {value!r}")
        if self.embedding_size is not None and (not isinstance(self.embedding_size, int) or self.embedding_size <= 0):
            raise UserError(f"config field 'embedding_size' must be a positive integer, got {self.embedding_size!r}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise UserError(f"config field 'pad_token_id' ({self.pad_token_id}) is outside the vocabulary")

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "BertConfig":
        """Build a config from a named size preset (see PRESETS), with field overrides."""
        if name not in PRESETS:
            raise UserError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        layers, hidden = PRESETS[name]
        sizes = dict(num_hidden_layers=layers, hidden_size=hidden,
                     num_attention_heads=hidden // 64, intermediate_size=4 * hidden)
        return cls(**{**sizes, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """The config as a transformers-compatible dict (what config.json holds)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        data = {**self.extra, **data, "model_type": "bert"}
        if self.id2label is not None:
            data["id2label"] = {str(k): v for k, v in self.id2label.items()}
            data["label2id"] = {v: int(k) for k, v in self.id2label.items()}
        else:
            del data["id2label"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> "BertConfig":
        """Build a config from a dict; unknown keys are kept in `extra` for round trips."""
        if not isinstance(data, dict):
            raise UserError(f"{source}: expected a JSON object")
        data = dict(data)
        model_type = data.pop("model_type", "bert")
        if model_type not in ("bert", "bertology"):
            raise UserError(f"{source}: model_type {model_type!r} is not a BERT encoder")
        if data.get("position_embedding_type", "absolute") != "absolute":
            raise UserError(f"{source}: position_embedding_type {data['position_embedding_type']!r} is not supported "
                            "(bertology's BERT uses absolute positions)")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names and k != "label2id"}
        if known.get("id2label") is not None:
            known["id2label"] = {int(k): v for k, v in known["id2label"].items()}
            known.setdefault("num_labels", len(known["id2label"]))
        try:
            return cls(**known, extra=extra)
        except UserError as err:
            raise UserError(f"{source}: {err}") from None
        except TypeError as err:
            raise UserError(f"{source}: {err}") from None

    def save(self, directory: str | os.PathLike) -> Path:
        """Write `config.json` into `directory` (atomically) and return its path."""
        path = Path(directory) / CONFIG_NAME
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BertConfig":
        """Read a config from a `config.json` file or a directory that holds one."""
        path = Path(path)
        if path.is_dir():
            path = path / CONFIG_NAME
        if not path.is_file():
            raise UserError(f"{path}: no such file (a model directory needs a {CONFIG_NAME})")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            raise UserError(f"{path}: not UTF-8 text") from None
        except json.JSONDecodeError as err:
            raise UserError(f"{path}: invalid JSON at line {err.lineno}: {err.msg}") from None
        return cls.from_dict(data, source=str(path))


def _has_type(value: Any, annotation: str) -> bool:
    """Whether a config-file value fits a field annotation such as "int", "str | None", "list[str]"."""
    if value is None:
        return "None" in annotation
    base = annotation.replace(" | None", "")
    if base.startswith(("list", "dict")):
        return isinstance(value, list if base.startswith("list") else dict)
    if isinstance(value, bool):
        return base == "bool"
    return isinstance(value, {"int": int, "float": (int, float), "str": str, "bool": bool}[base])


def read_settings(cls: type, path: str | os.PathLike) -> dict[str, Any]:
    """Read a TOML or JSON config file into a dict of values for the dataclass `cls`,
    each checked against its field's type (unknown keys and wrong types are one-line errors)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such config file")
    text = path.read_bytes()
    try:
        if path.suffix == ".toml":
            import tomllib

            values = tomllib.loads(text.decode("utf-8"))
        else:
            values = json.loads(text)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    except Exception as err:  # tomllib.TOMLDecodeError names the line in its message
        raise UserError(f"{path}: invalid TOML: {err}") from None
    types = {f.name: f.type for f in dataclasses.fields(cls)}  # annotations as strings, e.g. "int | None"
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise UserError(f"{path}: unknown setting(s) {', '.join(unknown)}")
    for key, value in values.items():
        if not _has_type(value, types[key]):
            raise UserError(f"{path}: setting {key!r} must be {types[key]}, got {value!r}")
    return values
