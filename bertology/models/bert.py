"""The BERT encoder and its task heads, in one file.

Follows Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers
for Language Understanding", and the reference `modeling.py` of its release:

    input ids ─► token + segment + position embeddings ─► LayerNorm ─► dropout
              ─► N x [ self-attention ─► add & LayerNorm ─► GELU feed-forward ─► add & LayerNorm ]
              ─► last_hidden_state (B, T, H);  tanh(dense(h_[CLS])) ─► pooler_output (B, H)
                 (with `causal` attention the pooler reads the last real token instead, as GPT's head does)

Variants are config switches over this one implementation (see `BertConfig`):
ALBERT's factorized embeddings (`embedding_size`) and cross-layer sharing
(`share_layers`), pre-LayerNorm blocks (`pre_layer_norm`), no segment embeddings
(`type_vocab_size=0`) and left-to-right attention (`causal`, GPT's objective); and two of
Cramming's (Geiping and Goldstein 2022, "Cramming: Training a Language Model on a Single GPU in
One Day"): no biases in the attention and feed-forward linears (`use_bias`) and a gated-GELU
feed-forward (`gated_feed_forward`).

Task models compose the encoder with one small head each (with `head_bilstm`, the paper's
Table 5 "+ BiLSTM": a randomly initialised BiLSTM between the encoder and the sequence, token or
span head); their names, forward arguments and output fields are those of Hugging Face
transformers, so habits carry over. Loading and saving live in `checkpoint.py`; the config, its size presets and the
model are all here, so this file is the whole BERT family."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .. import checkpoint
from ..errors import UserError
from ..ops import (
    IGNORE_INDEX,
    Dropout,
    Linear,
    cross_entropy_with_accuracy,
    dropout,
    last_token_states,
    linear,
    relative_position_bucket,
    span_loss,
)
from . import ConfigFile

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
POSITION_TYPES = ("absolute", "relative")

# Upper bounds for the size fields of a config.json: well above every published BERT-family
# model (BERT-large: 30,522 x 1,024, 24 layers, 512 positions; multilingual vocabularies
# ~250k), well below sizes that would exhaust memory before the weights are even read.
SIZE_LIMITS = {
    "vocab_size": 2**21,
    "hidden_size": 2**15,
    "num_hidden_layers": 2**10,
    "num_attention_heads": 2**10,
    "intermediate_size": 2**17,
    "max_position_embeddings": 2**17,
    "num_labels": 2**16,
}


@dataclass
class BertConfig(ConfigFile):
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
    # "absolute": learned position embeddings (BERT); "relative": none, and instead every attention
    # adds a learned scalar per head and bucket of distance (T5's, models/t5.py), one table shared by
    # all layers, so that relative vs absolute positions can be compared on one architecture.
    position_embedding_type: str = "absolute"
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    # Cramming's switches (Geiping and Goldstein 2022). use_bias False: no biases in the attention's and
    # the feed-forward's linears (LayerNorms and heads keep theirs); save_pretrained writes zeros in their
    # place, so transformers' BertModel loads such a model as it is.
    use_bias: bool = True
    # A gated feed-forward (GLU, Shazeer 2020): ffn_in's intermediate_size outputs are two halves, the
    # value and its gate, combined as value * hidden_act(gate); ffn_out reads intermediate_size // 2
    # (Cramming's layout: fewer parameters and products than the plain feed-forward of the same
    # intermediate_size). transformers' BERT has no such layer, so it cannot load the model.
    gated_feed_forward: bool = False

    # Task head.
    num_labels: int = 2
    id2label: dict[int, str] | None = None
    classifier_dropout: float | None = None  # None = hidden_dropout_prob
    # The BERT paper's Table 5 "+ BiLSTM": one randomly initialised bidirectional LSTM layer (hidden_size // 2
    # per direction) between the encoder and the sequence, token and span heads. bertology's own: transformers
    # ignores the key, so its classes would load such a model's encoder and head but not the BiLSTM.
    head_bilstm: bool = False

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
            and self.position_embedding_type == "absolute"
            and not self.gated_feed_forward  # zero biases stand in for use_bias=False
        )

    def validate(self) -> None:
        """Raise UserError naming the first field whose value cannot build a model.

        Every field is checked against its declared type (a boolean is a boolean, not 1 or
        "gelu"), sizes against bounds far above any published model but far below what would
        exhaust memory before the weights are even read, and the label map against num_labels.
        """
        for name, limit in SIZE_LIMITS.items():
            value = getattr(self, name)
            if type(value) is not int or not 0 < value <= limit:
                raise UserError(f"config field {name!r} must be a positive integer of at most {limit:,}, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise UserError(
                f"config field 'hidden_size' ({self.hidden_size}) must be divisible by "
                f"'num_attention_heads' ({self.num_attention_heads})"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise UserError(f"config field 'hidden_act' must be one of {ACTIVATIONS}, got {self.hidden_act!r}")
        if type(self.type_vocab_size) is not int or not 0 <= self.type_vocab_size <= 1024:
            raise UserError(f"config field 'type_vocab_size' must be an integer in [0, 1024], got {self.type_vocab_size!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if not (value is None and name == "classifier_dropout") and (
                    type(value) not in (int, float) or not 0.0 <= value < 1.0):
                raise UserError(f"config field {name!r} must be a number in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not 0.0 < value < 1.0:
                raise UserError(f"config field {name!r} must be a number in (0, 1), got {value!r}")
        if self.position_embedding_type not in POSITION_TYPES:
            raise UserError(f"config field 'position_embedding_type' must be one of {', '.join(POSITION_TYPES)}, got "
                            f"{self.position_embedding_type!r} (transformers' relative_key variants are not supported)")
        for name in ("relative_attention_num_buckets", "relative_attention_max_distance"):
            if type(getattr(self, name)) is not int or not 4 <= getattr(self, name) <= 4096:
                raise UserError(f"config field {name!r} must be an integer in [4, 4096], got {getattr(self, name)!r}")
        for name in ("share_layers", "pre_layer_norm", "causal", "head_bilstm", "use_bias", "gated_feed_forward"):
            if type(getattr(self, name)) is not bool:
                raise UserError(f"config field {name!r} must be true or false, got {getattr(self, name)!r}")
        if self.gated_feed_forward and self.intermediate_size % 2:
            raise UserError(f"config field 'gated_feed_forward' needs an even 'intermediate_size' (a value half and a "
                            f"gate half), got {self.intermediate_size}")
        if self.head_bilstm and self.hidden_size % 2:
            raise UserError(f"config field 'head_bilstm' needs an even 'hidden_size' (half each way), got "
                            f"{self.hidden_size}")
        if self.embedding_size is not None and (type(self.embedding_size) is not int
                                                or not 0 < self.embedding_size <= SIZE_LIMITS["hidden_size"]):
            raise UserError(f"config field 'embedding_size' must be a positive integer, got {self.embedding_size!r}")
        if type(self.pad_token_id) is not int or not 0 <= self.pad_token_id < self.vocab_size:
            raise UserError(f"config field 'pad_token_id' ({self.pad_token_id!r}) is outside the vocabulary")
        if self.id2label is not None:
            if not isinstance(self.id2label, dict) or sorted(self.id2label) != list(range(len(self.id2label))) or not all(
                    isinstance(label, str) for label in self.id2label.values()):
                raise UserError("config field 'id2label' must map 0..n-1 to label names, got "
                                f"{str(self.id2label)[:80]!r}")
            if len(self.id2label) != self.num_labels:
                raise UserError(f"config field 'id2label' has {len(self.id2label)} labels but 'num_labels' is "
                                f"{self.num_labels}")

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
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names and k != "label2id"}
        if known.get("id2label") is not None:
            labels = known["id2label"]
            if not isinstance(labels, dict) or not all(isinstance(k, str) and k.isdigit() for k in labels):
                raise UserError(f"{source}: config field 'id2label' must be an object from label ids to names, "
                                f"got {str(labels)[:80]!r}")
            known["id2label"] = {int(k): v for k, v in labels.items()}
            known.setdefault("num_labels", len(known["id2label"]))
        try:
            return cls(**known, extra=extra)
        except UserError as err:
            raise UserError(f"{source}: {err}") from None
        except TypeError as err:
            raise UserError(f"{source}: {err}") from None


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


def activation(name: str):
    """The feed-forward non-linearity named by `hidden_act`."""
    return {
        "gelu": F.gelu,  # exact erf form, as the BERT release
        "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "relu": F.relu,
    }[name]


class Embeddings(nn.Module):
    """Token + segment + position embeddings, LayerNorm and dropout (and ALBERT's projection)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        width = config.embedding_width
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        relative = config.position_embedding_type == "relative"  # positions enter as attention biases instead
        self.position_embeddings = None if relative else nn.Embedding(config.max_position_embeddings, width)
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, width) if config.type_vocab_size > 0 else None
        )
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        # ALBERT: embeddings live in a small space E and are projected up to H.
        self.projection = Linear(width, config.hidden_size) if width != config.hidden_size else None

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """(B, T) ids -> (B, T, H) input vectors for the first layer."""
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(torch.arange(input_ids.shape[1], device=input_ids.device))
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                x = x + self.token_type_embeddings.weight[0]  # all segment A
            else:
                x = x + self.token_type_embeddings(token_type_ids)
        x = self.dropout(self.norm(x))
        return x if self.projection is None else self.projection(x)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention with one fused Q/K/V projection."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        # One (H, 3H) product instead of three (H, H) ones: fewer, larger matrix products run faster.
        self.qkv = Linear(config.hidden_size, 3 * config.hidden_size, bias=config.use_bias)
        self.out = Linear(config.hidden_size, config.hidden_size, bias=config.use_bias)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, H), mask (B, 1, 1|T, T) bool, True = may attend, or float (B|1, heads|1, T, T)
        added to the scores (relative positions). Returns (B, T, H) and the attention
        probabilities (B, heads, T, T) when `need_weights`."""
        B, T, H = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)  # 3 x (B, nh, T, hs)
        dropout_p = self.dropout_p if self.training else 0.0
        # PyTorch's fused CPU attention has no dropout: with dropout on, SDPA falls back to this
        # same explicit form anyway, there with slower masks than ops.dropout.
        if need_weights or (dropout_p > 0 and x.device.type == "cpu"):
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_size)  # (B, nh, T, T)
            if mask is not None and mask.dtype == torch.bool:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            elif mask is not None:
                scores = scores + mask
            weights = scores.softmax(dim=-1)
            y = dropout(weights, dropout_p, self.training) @ v
        else:  # fused kernel (flash / memory-efficient attention where the device has one)
            weights = None
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, T, nh * hs)
        return self.out(y), weights if need_weights else None


class TransformerLayer(nn.Module):
    """Self-attention and a GELU feed-forward (or a gated one), each with a residual connection and LayerNorm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.gated = config.gated_feed_forward
        self.ffn_in = Linear(config.hidden_size, config.intermediate_size, bias=config.use_bias)
        inner = config.intermediate_size // 2 if self.gated else config.intermediate_size
        self.ffn_out = Linear(inner, config.hidden_size, bias=config.use_bias)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.act = activation(config.hidden_act)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.pre_layer_norm = config.pre_layer_norm

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, T, H) through the intermediate width."""
        h = self.ffn_in(x)  # (B, T, I)
        if self.gated:  # GLU: one half gates the other, (B, T, I/2)
            value, gate = h.chunk(2, dim=-1)
            return self.ffn_out(value * self.act(gate))
        return self.ffn_out(self.act(h))

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, H) -> (B, T, H), plus attention weights when asked."""
        if self.pre_layer_norm:  # normalise each sub-layer's input; the residual path stays raw
            attended, weights = self.attention(self.attention_norm(x), mask, need_weights)
            x = x + self.dropout(attended)
            return x + self.dropout(self.feed_forward(self.ffn_norm(x))), weights
        attended, weights = self.attention(x, mask, need_weights)  # BERT: normalise after each residual sum
        x = self.attention_norm(x + self.dropout(attended))
        return self.ffn_norm(x + self.dropout(self.feed_forward(x))), weights


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
        nn.init.zeros_(module.bias)


class BertPreTrainedModel(nn.Module):
    """Shared plumbing of every model: BERT initialisation, from_pretrained, save_pretrained."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config

    def init_weights(self) -> None:
        """BERT's initialisation of every module (see `init_module`).

        Modules of a nested model (the encoder inside a task model) are skipped: that model
        initialised them when it was built.
        """
        nested = [m for m in self.modules() if m is not self and isinstance(m, BertPreTrainedModel)]
        done = {id(module) for model in nested for module in model.modules()}
        for module in self.modules():
            if id(module) not in done:
                init_module(module, self.config.initializer_range)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, drop_head: bool = False, **config_overrides: Any):
        """Load a model from a directory in the transformers layout (ours or transformers').

        Args:
            directory: holds `config.json` and `model.safetensors` (or a legacy
                `pytorch_model.bin`, read with `torch.load(weights_only=True)`).
            drop_head: ignore the checkpoint's task-head weights, a BiLSTM head's too (a new task's
                head starts fresh).
            config_overrides: config fields to change, e.g. `num_labels=3` for a new head.
        Returns:
            The model in eval mode. Weights a head needs but the checkpoint lacks are
            freshly initialised (and listed in `model.newly_initialized`).
        """
        directory = Path(directory)
        if not directory.is_dir():
            raise UserError(f"{directory}: no such model directory")
        config = BertConfig.load(directory)
        if config_overrides:
            try:
                config = replace(config, **config_overrides)
            except TypeError as err:
                raise UserError(f"from_pretrained: {err}") from None
        state, source = checkpoint.load_state_dict(directory, config.vocab_size)
        if not config.use_bias:
            state = _without_zero_biases(state, tensor_shapes(cls, config), source)
        if drop_head:
            state = {k: v for k, v in state.items() if not k.startswith(checkpoint.TASK_HEAD_PREFIXES)}
        checkpoint.check_weights(state, tensor_shapes(cls, config), source)
        model = cls(config)
        model.newly_initialized = checkpoint.assign_state_dict(model, state)
        return model.eval()

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write `config.json` and `model.safetensors` (transformers' key names) atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.config.extra["architectures"] = [type(self).__name__]
        state = self.state_dict()
        # use_bias=False: zeros in place of the missing biases keep the file in BertModel's layout
        state |= {f"{name}.bias": torch.zeros(module.out_features) for name, module in self.named_modules()
                  if isinstance(module, nn.Linear) and module.bias is None}
        checkpoint.save_state_dict(state, directory)
        self.config.save(directory)

    def num_parameters(self) -> int:
        """Number of distinct parameters (tied and shared weights counted once)."""
        return sum(p.numel() for p in self.parameters())


class BertModel(BertPreTrainedModel):
    """The bare encoder: embeddings, N transformer layers and the [CLS] pooler.

    Example:
        >>> model = BertModel(BertConfig.from_preset("tiny", vocab_size=100))
        >>> out = model(torch.tensor([[2, 17, 42, 3]]))
        >>> out.last_hidden_state.shape, out.pooler_output.shape
        (torch.Size([1, 4, 128]), torch.Size([1, 128]))
    """

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = Embeddings(config)
        # ALBERT's sharing: one layer's weights, applied num_hidden_layers times.
        num_distinct = 1 if config.share_layers else config.num_hidden_layers
        self.layers = nn.ModuleList(TransformerLayer(config) for _ in range(num_distinct))
        # Pre-LN blocks leave the residual stream unnormalised, so the stack ends with one LayerNorm.
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.pre_layer_norm else None
        self.pooler = Linear(config.hidden_size, config.hidden_size) if add_pooling_layer else None
        if config.position_embedding_type == "relative":
            self.relative_attention_bias = nn.Embedding(config.relative_attention_num_buckets, config.num_attention_heads)
        self.init_weights()

    def attention_mask(self, attention_mask: torch.Tensor | None, seq_len: int, device) -> torch.Tensor | None:
        """(B, T) 1 = real token, 0 = padding -> bool (B, 1, 1|T, T) for SDPA; None = attend everywhere."""
        mask = None
        # An all-ones mask is dropped so SDPA can take its unmasked kernel; under torch.compile the
        # check would break the graph, so there the mask is always kept.
        if attention_mask is not None and (torch.compiler.is_compiling() or not bool(attention_mask.all())):
            mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        if self.config.causal:
            causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()  # (T, T)
            mask = causal[None, None] if mask is None else mask & causal
        return mask

    def position_bias(self, seq_len: int, mask: torch.Tensor | None, dtype: torch.dtype, device) -> torch.Tensor:
        """Relative positions: the bias (1|B, heads, T, T) of each query-key distance's bucket
        (T5's buckets: models/t5.py), with the `mask`'s hidden keys at the dtype's minimum."""
        positions = torch.arange(seq_len, device=device)
        buckets = relative_position_bucket(positions[None, :] - positions[:, None], not self.config.causal,
                                           self.config.relative_attention_num_buckets,
                                           self.config.relative_attention_max_distance)
        bias = self.relative_attention_bias(buckets).permute(2, 0, 1)[None].to(dtype)  # (1, heads, T, T)
        return bias if mask is None else bias.masked_fill(~mask, torch.finfo(dtype).min)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ModelOutput:
        """Encode a batch.

        Args:
            input_ids: (B, T) token ids.
            attention_mask: (B, T), 1 for real tokens and 0 for padding; None = no padding.
            token_type_ids: (B, T) segment ids (0 = sentence A, 1 = sentence B); None = all A.
        Returns:
            ModelOutput with last_hidden_state (B, T, H), pooler_output (B, H) when the
            model has a pooler, and hidden_states / attentions when asked.
        """
        seq_len = input_ids.shape[1]
        if seq_len > self.config.max_position_embeddings:
            raise UserError(
                f"sequence length {seq_len} exceeds the model's max_position_embeddings "
                f"({self.config.max_position_embeddings})"
            )
        mask = self.attention_mask(attention_mask, seq_len, input_ids.device)
        x = self.embeddings(input_ids, token_type_ids)
        if self.config.position_embedding_type == "relative":
            mask = self.position_bias(seq_len, mask, x.dtype, x.device)
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for i in range(self.config.num_hidden_layers):
            x, weights = self.layers[0 if self.config.share_layers else i](x, mask, output_attentions)
            if output_hidden_states:
                hidden_states.append(x)
            if output_attentions:
                attentions.append(weights)
        if self.final_norm is not None:
            x = self.final_norm(x)
            if output_hidden_states:
                hidden_states[-1] = x
        pooled = None
        if self.pooler is not None:
            # Under a causal mask [CLS] sees only itself; the last real token has read the whole input.
            summary = last_token_states(x, attention_mask) if self.config.causal else x[:, 0]
            pooled = torch.tanh(self.pooler(summary))
        return ModelOutput(
            last_hidden_state=x,
            pooler_output=pooled,
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
        )


class MaskedLMHead(nn.Module):
    """Masked-LM head: dense + GELU + LayerNorm, then a decoder tied to the word embeddings.

    Given `positions`, it scores only those positions (sparse prediction): the
    vocabulary product is the largest in the model, and most positions carry no label.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.embedding_width)
        self.act = activation(config.hidden_act)
        self.norm = nn.LayerNorm(config.embedding_width, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(
        self, hidden: torch.Tensor, word_embeddings: torch.Tensor, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """hidden (B, T, H), word_embeddings (V, E), positions bool (B, T) ->
        logits (B, T, V), or (N, V) for the N positions that are True."""
        if positions is not None:
            hidden = hidden[positions]  # (N, H)
        h = self.norm(self.act(self.dense(hidden)))
        return linear(h, word_embeddings, self.bias)


class ClassificationHead(nn.Module):
    """Dropout then a linear layer: on the pooled [CLS] vector, on every token, or on WiC's [CLS; targets]."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.dropout = Dropout(dropout)
        self.dense = Linear(hidden_size, num_labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., num_labels)."""
        return self.dense(self.dropout(x))


class HeadBiLSTM(nn.Module):
    """The BERT paper's Table 5 "+ BiLSTM": one bidirectional LSTM layer (PyTorch's fused nn.LSTM) between
    the encoder and a task head, hidden_size // 2 wide each way so that its states keep the encoder's width.

    Rows are packed by their lengths, so padding never reaches a real position, not even through the
    backward direction, which starts each row at its last real token. A causal encoder's states have read
    only their left context; the backward direction gives every position its right context back.

    Example:
        >>> bilstm = HeadBiLSTM(BertConfig.from_preset("tiny", vocab_size=100, head_bilstm=True))
        >>> states, summary = bilstm(torch.randn(2, 5, 128), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]))
        >>> states.shape, summary.shape
        (torch.Size([2, 5, 128]), torch.Size([2, 128]))
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.lstm = nn.LSTM(config.hidden_size, config.hidden_size // 2, batch_first=True, bidirectional=True)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (B, T, H), attention_mask (B, T) right-padded, 1 = real token (None: no padding) ->
        states (B, T, H), zero at padding, and the sentence summary (B, H): the forward direction's final
        state (at the last real token) beside the backward direction's (at the first), each having read
        the whole row whatever position a pooler would read."""
        B, T, _ = hidden.shape
        lengths = torch.full((B,), T) if attention_mask is None else attention_mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(hidden, lengths, batch_first=True, enforce_sorted=False)
        states, (final, _) = self.lstm(packed)  # final (2, B, H/2): forward, backward, in the rows' order
        states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=T)  # (B, T, H)
        return states, torch.cat([final[0], final[1]], dim=-1)


def _without_zero_biases(state: dict[str, torch.Tensor], expected: dict[str, torch.Size],
                         source: Path) -> dict[str, torch.Tensor]:
    """The stored tensors less the linears' biases that a use_bias=False model lacks, each checked to be
    zero (what save_pretrained writes): a bias that is not would change what the model computes."""
    encoder_keys = {name.removeprefix("bert.") for name in expected}  # the checkpoint's canonical names
    kept = {}
    for name, tensor in state.items():
        if name.endswith(".bias") and name not in encoder_keys and name.removesuffix(".bias") + ".weight" in encoder_keys:
            if bool(tensor.any()):
                raise UserError(f"{source}: {name} is not zero, but config.json has use_bias false")
            continue
        kept[name] = tensor
    return kept


def _classifier_dropout(config: BertConfig) -> float:
    return config.hidden_dropout_prob if config.classifier_dropout is None else config.classifier_dropout


def _task_output(encoded: ModelOutput, **fields: Any) -> ModelOutput:
    """A task model's output: its own fields, plus the encoder's hidden states and attentions when asked for."""
    return ModelOutput(**fields, hidden_states=encoded.hidden_states, attentions=encoded.attentions)


class _PreTrainingHeads(BertPreTrainedModel):
    """What the two language-model heads share: the one way a masked LM is scored.

    Every pre-training objective (training/objectives.py) reaches the masked LM through the
    model's forward, so the loss is computed in one place: at the labelled positions only,
    by `ops.cross_entropy_with_accuracy`, which forms the (N, V) gradient in the same pass
    and counts the argmax hits for the accuracy the training loop logs.
    """

    def score_masked_lm(self, hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """hidden (B, T, H), labels (B, T; IGNORE_INDEX where nothing is predicted) ->
        logits (N, V) at the N labelled positions, their mean cross-entropy, and the argmax hits."""
        positions = labels != IGNORE_INDEX
        logits = self.mlm(hidden, self.bert.embeddings.word_embeddings.weight, positions)
        loss, correct = cross_entropy_with_accuracy(logits, labels[positions])
        return logits, loss, correct


class BertForPreTraining(_PreTrainingHeads):
    """BERT's pre-training model: encoder + masked-LM head + next-sentence head.

    With `labels` (B, T; IGNORE_INDEX where nothing was masked) the masked-LM logits
    are computed at the labelled positions only, so `prediction_logits` is (N, V).
    """

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.mlm = MaskedLMHead(config)
        self.nsp = ClassificationHead(config.hidden_size, 2, dropout=0.0)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ModelOutput:
        """Returns loss (sum of the MLM and NSP losses given labels for), prediction_logits,
        seq_relationship_logits (B, 2), and with `labels` the MLM's own loss and argmax hits."""
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        nsp_logits = self.nsp(out.pooler_output)
        mlm_loss = mlm_correct = None
        if labels is None:
            prediction_logits = self.mlm(out.last_hidden_state, self.bert.embeddings.word_embeddings.weight)
        else:
            prediction_logits, mlm_loss, mlm_correct = self.score_masked_lm(out.last_hidden_state, labels)
        losses = [] if mlm_loss is None else [mlm_loss]
        if next_sentence_label is not None:
            losses.append(F.cross_entropy(nsp_logits.float(), next_sentence_label.view(-1)))
        return _task_output(out, loss=sum(losses) if losses else None, prediction_logits=prediction_logits,
                            seq_relationship_logits=nsp_logits, masked_lm_loss=mlm_loss, masked_lm_correct=mlm_correct)


class BertForMaskedLM(_PreTrainingHeads):
    """Encoder + masked-LM head. With `labels`, `logits` covers the labelled positions only: (N, V)."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.mlm = MaskedLMHead(config)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ModelOutput:
        """Returns logits (B, T, V), or with `labels` (N, V), the loss and the argmax hits."""
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        if labels is None:
            return _task_output(out, logits=self.mlm(out.last_hidden_state, self.bert.embeddings.word_embeddings.weight))
        logits, loss, correct = self.score_masked_lm(out.last_hidden_state, labels)
        return _task_output(out, loss=loss, logits=logits, masked_lm_loss=loss, masked_lm_correct=correct)


class _Classifier(BertPreTrainedModel):
    """What the sentence and token classifiers share: a linear head on encoder vectors (or on a BiLSTM's
    over them, with `head_bilstm`), and its loss."""

    def __init__(self, config: BertConfig, per_token: bool):
        super().__init__(config)
        self.per_token = per_token
        # With the BiLSTM, sentences are read from its summary (HeadBiLSTM.forward), not the pooler.
        self.bert = BertModel(config, add_pooling_layer=not per_token and not config.head_bilstm)
        self.bilstm = HeadBiLSTM(config) if config.head_bilstm else None
        self.classifier = ClassificationHead(config.hidden_size, config.num_labels, _classifier_dropout(config))
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ModelOutput:
        """Returns logits (B, num_labels) on the pooled [CLS] vector (with the BiLSTM, on its summary of
        the row), or (B, T, num_labels) per token.
        Loss: cross-entropy (tokens labelled IGNORE_INDEX carry none), or MSE when num_labels == 1."""
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        if self.bilstm is None:
            logits = self.classifier(out.last_hidden_state if self.per_token else out.pooler_output)
        else:
            states, summary = self.bilstm(out.last_hidden_state, attention_mask)
            logits = self.classifier(states if self.per_token else summary)
        loss = None
        if labels is not None and self.config.num_labels == 1:
            loss = F.mse_loss(logits.float().view(-1), labels.float().view(-1))
        elif labels is not None:
            loss = F.cross_entropy(logits.float().flatten(0, -2), labels.flatten(), ignore_index=IGNORE_INDEX)
        return _task_output(out, loss=loss, logits=logits)


class BertForSequenceClassification(_Classifier):
    """Encoder + linear head on the pooled [CLS] vector; regression when num_labels == 1.

    With `head_bilstm` the head reads the BiLSTM's final states instead: the forward direction's at the
    last real token beside the backward direction's at the first. Both have read every real token, so
    the summary is the same kind of vector for a causal encoder (whose pooler reads the last real token)
    as for a bidirectional one (whose pooler reads [CLS]); the BiLSTM's state at either pooled position
    would have read the row in one direction only, and so the pooler is left out."""

    def __init__(self, config: BertConfig):
        super().__init__(config, per_token=False)


class BertForTokenClassification(_Classifier):
    """Encoder + linear head on every token (tagging, e.g. named entities)."""

    def __init__(self, config: BertConfig):
        super().__init__(config, per_token=True)


class BertForQuestionAnswering(BertPreTrainedModel):
    """Encoder + span head: a start and an end score for every token (SQuAD), on the BiLSTM's states
    with `head_bilstm`."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.bilstm = HeadBiLSTM(config) if config.head_bilstm else None
        self.qa_outputs = Linear(config.hidden_size, 2)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ModelOutput:
        """Returns start_logits and end_logits (B, T); loss is the mean of the two
        cross-entropies when the gold positions (B,) are given."""
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        hidden = out.last_hidden_state if self.bilstm is None else self.bilstm(out.last_hidden_state, attention_mask)[0]
        start_logits, end_logits = self.qa_outputs(hidden).float().unbind(dim=-1)  # 2 x (B, T)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return _task_output(out, loss=loss, start_logits=start_logits, end_logits=end_logits)


class BertForWordInContext(BertPreTrainedModel):
    """Encoder + the SuperGLUE baseline's head for WiC (Wang et al. 2019; jiant): a linear classifier
    (logistic regression) on the pooled [CLS] vector concatenated with the target word's vector in
    each sentence, the mean of its tokens' last hidden states.

    Example (B = 1 pair, T = 9 tokens, target tokens 2..3 of sentence 1 and 6 of sentence 2):
        >>> model = BertForWordInContext(BertConfig.from_preset("tiny", vocab_size=100))
        >>> model(torch.randint(5, 100, (1, 9)), target_spans=torch.tensor([[[2, 3], [6, 6]]])).logits.shape
        torch.Size([1, 2])
    """

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.classifier = ClassificationHead(3 * config.hidden_size, config.num_labels, _classifier_dropout(config))
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        target_spans: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ModelOutput:
        """Args: input_ids, attention_mask, token_type_ids (B, T) as BertModel's; target_spans (B, 2, 2)
        long, required: for sentence 1 and sentence 2, the first and last position (inclusive) of the
        target word's tokens; labels (B,) class ids.
        Returns logits (B, num_labels) and, with labels, their cross-entropy."""
        if target_spans is None:
            raise ValueError("BertForWordInContext needs target_spans (B, 2, 2): each sentence's target tokens")
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        hidden = out.last_hidden_state  # (B, T, H)
        positions = torch.arange(hidden.shape[1], device=hidden.device)  # (T,)
        inside = (positions >= target_spans[..., :1]) & (positions <= target_spans[..., 1:])  # (B, 2, T)
        weights = inside.to(hidden.dtype) / inside.sum(-1, keepdim=True).clamp(min=1)  # each row averages its span
        targets = weights @ hidden  # (B, 2, H)
        logits = self.classifier(torch.cat([out.pooler_output, targets.flatten(1)], dim=-1))  # (B, 3H) -> (B, labels)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels.view(-1))
        return _task_output(out, loss=loss, logits=logits)


MODEL_CLASSES: dict[str, type[BertPreTrainedModel]] = {
    cls.__name__: cls
    for cls in (BertModel, BertForPreTraining, BertForMaskedLM, BertForSequenceClassification,
                BertForTokenClassification, BertForQuestionAnswering, BertForWordInContext)
}


def model_class(config: BertConfig) -> type[BertPreTrainedModel]:
    """The class a config.json names in `architectures` (BertModel when it names none we know)."""
    names = config.extra.get("architectures") or ["BertModel"]
    return MODEL_CLASSES.get(names[0], BertModel)


def load_pretrained(directory: str | os.PathLike) -> BertPreTrainedModel:
    """Open a BERT model directory as the class its config.json names (the family's entry point, see models/__init__.py)."""
    return model_class(BertConfig.load(directory)).from_pretrained(directory)


def evenly_spaced_layers(kept: int, total: int) -> list[int]:
    """The indices of `kept` evenly spaced layers out of `total`: i * total // kept for i < kept,
    every (total / kept)-th layer from the first.

    Keeping half is DistilBERT's "one layer out of two" (Sanh et al. 2019): 0, 2 of 4 and 0, 2, 4
    of 6. Otherwise e.g. 2 of 6 are 0, 3; 4 of 6 are 0, 1, 3, 4; 1 is layer 0 alone; all are all.
    (DistilBERT's released extraction script kept 0, 2, 4, 7, 9, 11 of BERT-base's 12, the last layer
    too: give such indices to `keep_layers` directly.)
    """
    if not 1 <= kept <= total:
        raise UserError(f"cannot keep {kept} of {total} layers: choose 1 to {total}")
    return [i * total // kept for i in range(kept)]


def keep_layers(model: BertPreTrainedModel, indices: Sequence[int]) -> BertPreTrainedModel:
    """A copy of `model` whose encoder keeps only the layers at `indices`: DistilBERT's
    initialisation of a shallower student from its teacher (Sanh et al. 2019).

    Everything outside the layers (embeddings, pooler, pre-LN's final LayerNorm, the relative
    position table, any head) is copied as it is, and `config.num_hidden_layers` becomes
    len(indices), so the copy saves and loads as an ordinary model of that depth. ALBERT's shared
    layers (`share_layers`) are one set of weights applied num_hidden_layers times: the cut applies
    it len(indices) times, whichever indices are given.

    Args:
        model: any model of this file, the bare encoder or a task model (its encoder is `model.bert`).
        indices: distinct layer indices in increasing order, each in [0, num_hidden_layers);
            e.g. `evenly_spaced_layers(n, model.config.num_hidden_layers)`.
    Returns:
        The cut model, of `model`'s class and mode; `model` itself is unchanged.
    """
    if not isinstance(model, BertPreTrainedModel):
        raise UserError(f"keep_layers cuts a BERT-family encoder; got {type(model).__name__}")
    total, indices = model.config.num_hidden_layers, list(indices)
    if not indices or indices != sorted(set(indices)) or not 0 <= indices[0] <= indices[-1] < total:
        raise UserError(f"layers to keep must be distinct, increasing indices in 0..{total - 1}, got {indices}")
    cut = copy.deepcopy(model)
    encoder = cut if isinstance(cut, BertModel) else cut.bert
    if not cut.config.share_layers:
        encoder.layers = nn.ModuleList(encoder.layers[i] for i in indices)
    config = replace(cut.config, num_hidden_layers=len(indices))
    for module in cut.modules():  # a task model and its encoder hold the same config
        if isinstance(module, BertPreTrainedModel):
            module.config = config
    return cut


def tensor_shapes(cls: type[BertPreTrainedModel], config: BertConfig) -> dict[str, torch.Size]:
    """The state-dict shapes of a `cls(config)` model, found without allocating it (PyTorch's meta
    device), so that weights are checked against the config before any memory is spent."""
    with torch.device("meta"), _skipped_init():
        return {name: tensor.shape for name, tensor in cls(config).state_dict().items()}


# torch.nn.init's in-place fills, made no-ops by `_skipped_init`.
_INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "constant_", "zeros_", "ones_", "xavier_uniform_",
                   "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_")


@contextlib.contextmanager
def _skipped_init():
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
