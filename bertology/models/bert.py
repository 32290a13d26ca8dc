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
feed-forward (`gated_feed_forward`). The layouts of
transformers' RoBERTa, ALBERT, ELECTRA and DistilBERT are a config's `BertLayout` (positions after
the padding id, the projection always there, no pooler, a dense summary in the sentence head), which
their own files (models/roberta.py, ...) set with their key tables.

Task models compose the encoder with one small head each (with `head_bilstm`, the paper's
Table 5 "+ BiLSTM": a randomly initialised BiLSTM between the encoder and the sequence, token or
span head); their names, forward arguments and output fields are those of Hugging Face
transformers, so habits carry over. Loading and saving live in `checkpoint.py`; the config, its size presets and the
model are all here, so this file is the whole BERT family."""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from .. import checkpoint
from ..errors import UserError
from ..memory import check_model_size
from ..ops import (
    IGNORE_INDEX,
    Dropout,
    Linear,
    Unpadding,
    cross_entropy_with_accuracy,
    dropout,
    last_token_states,
    linear,
    relative_position_bucket,
    span_loss,
)
from .base import (
    ACTIVATIONS,
    ConfigFile,
    FamilySpec,
    ModelOutput,
    PreTrainedModel,
    activation,
    init_module,
    tensor_shapes,
)

POSITION_TYPES = ("absolute", "relative")
# BertConfig's switches of bertology's own, which no transformers class reads: a family that is a
# transformers layout (RoBERTa, ALBERT, ...) neither stores them nor takes them (`BertLayout.strict`).
BERTOLOGY_SWITCHES = ("share_layers", "pre_layer_norm", "causal", "position_embedding_type",
                      "relative_attention_num_buckets", "relative_attention_max_distance", "head_bilstm")


@dataclass(frozen=True)
class BertLayout:
    """What a model_type says of the layers beyond its config.json's fields: BERT's by default; the
    families built on this file (models/roberta.py, albert.py, electra.py, distilbert.py) set their
    own as their config's `LAYOUT`. Each switch has one visible branch below."""

    # RoBERTa: position ids count the real tokens from pad_token_id + 1 (fairseq's make_positions),
    # so the table holds pad_token_id + 1 more rows than the longest input.
    positions_after_padding: bool = False
    always_project: bool = False  # ALBERT: the embeddings' projection to hidden_size even when as wide
    pooler: bool = True  # a [CLS] pooler (dense + tanh) in the encoder; ELECTRA and DistilBERT have none
    mlm_activation: str | None = None  # the masked-LM head's activation; None: hidden_act
    # The sequence head: None for BERT's linear layer on the pooler's output; an activation for
    # RoBERTa's, ELECTRA's and DistilBERT's dense + activation + linear layer on the first token.
    summary_activation: str | None = None
    summary_input_dropout: bool = True  # dropout before that dense layer too (RoBERTa, ELECTRA; not DistilBERT)
    # A transformers layout: none of bertology's switches, and only these variants of the table in
    # `BertConfig.variants` ("factorized embeddings", "shared layers", "no segment embeddings").
    strict: bool = False
    variants: tuple[str, ...] = ()

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


BERT_SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "max_position_embeddings",
                    "type_vocab_size", "embedding_size")


def bert_parameters(values: dict[str, Any]) -> int:
    """A BERT's parameter count from its config's fields: the embeddings (ALBERT's factorized ones
    with their projection), each layer (one when shared) and the pooler."""
    hidden, inner = values["hidden_size"], values["intermediate_size"]
    width = values["embedding_size"] or hidden
    embeddings = (values["vocab_size"] + values["max_position_embeddings"] + values["type_vocab_size"]) * width
    layers = 1 if values["share_layers"] else values["num_hidden_layers"]
    return (embeddings + (width * hidden if width != hidden else 0)
            + layers * (4 * hidden * hidden + 2 * hidden * inner + 9 * hidden + inner) + hidden * hidden)

@dataclass
class BertConfig(ConfigFile):
    """Hyper-parameters of a BERT encoder and its task head (transformers' BertConfig names).

    Example: `BertConfig.from_preset("mini", vocab_size=8000)` is a 4-layer,
    256-wide encoder with 4 heads and a 1024-wide feed-forward.
    """

    MODEL_TYPE: ClassVar[str] = "bert"
    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("bert", "bertology")  # a config.json without one is BERT's too
    WHAT: ClassVar[str] = "a BERT encoder"

    # memory.py's checks: this family's parameter count, and the fields that set its size
    count_parameters: ClassVar = staticmethod(bert_parameters)
    size_fields: ClassVar[tuple[str, ...]] = BERT_SIZE_FIELDS
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

    # The masked-LM head's output matrix is the word embeddings (transformers' key); false: its own.
    tie_word_embeddings: bool = True

    # Anything else found in a config.json (e.g. transformers' bookkeeping), kept for round trips.
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    LAYOUT: ClassVar[BertLayout] = BertLayout()

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
    def context_length(self) -> int:
        """The longest input: max_position_embeddings, less RoBERTa's pad_token_id + 1 offset rows."""
        offset = self.pad_token_id + 1 if self.LAYOUT.positions_after_padding else 0
        return self.max_position_embeddings - offset

    def variants(self) -> list[str]:
        """The variants of BERT's architecture this config uses."""
        used = {"factorized embeddings": self.embedding_width != self.hidden_size,
                "shared layers": self.share_layers, "pre-LayerNorm": self.pre_layer_norm,
                "no segment embeddings": self.type_vocab_size == 0, "causal attention": self.causal,
                "relative positions": self.position_embedding_type != "absolute", "BiLSTM head": self.head_bilstm,
                "a gated feed-forward": self.gated_feed_forward}  # use_bias=False: zero biases stand in
        return [name for name, on in used.items() if on]

    def transformers_incompatibility(self) -> str | None:
        """Which variant transformers' class for this model_type lacks (BertModel: any), or None when it
        represents this architecture exactly (a BiLSTM head's is exports' own question)."""
        found = [name for name in self.variants() if name not in (*self.LAYOUT.variants, "BiLSTM head")]
        return ", ".join(found) if found else None

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
        for name in ("share_layers", "pre_layer_norm", "causal", "head_bilstm", "tie_word_embeddings", "use_bias",
                     "gated_feed_forward"):
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
        if self.LAYOUT.strict:
            unsupported = [name for name in self.variants() if name not in self.LAYOUT.variants]
            if unsupported:
                raise UserError(f"{self.WHAT} ({self.MODEL_TYPE}, transformers' layout) has no "
                                f"{', '.join(unsupported)}: use the bert family for bertology's variants")
        if self.context_length < 1:
            raise UserError(f"config field 'max_position_embeddings' ({self.max_position_embeddings}) leaves no "
                            f"position after the {self.pad_token_id + 1} that pad_token_id offsets")
        check_model_size(self)  # last: the fields are known to be numbers

    @classmethod
    def sizes(cls, layers: int, width: int) -> dict[str, Any]:
        """A named size's fields: heads of 64 and a feed-forward 4 x as wide."""
        return dict(num_hidden_layers=layers, hidden_size=width, num_attention_heads=width // 64,
                    intermediate_size=4 * width)


class BertEmbeddings(nn.Module):
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
        # ALBERT: embeddings live in a small space E and are projected up to H (ALBERT's layout always has it).
        projects = width != config.hidden_size or config.LAYOUT.always_project
        self.projection = Linear(width, config.hidden_size) if projects else None
        self.padding_idx = config.pad_token_id if config.LAYOUT.positions_after_padding else None

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """(B, T) ids -> (B, T, H) input vectors for the first layer."""
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None and self.padding_idx is not None:
            # RoBERTa: real tokens are numbered padding_idx + 1, ... wherever they sit; padding keeps padding_idx.
            real = (input_ids != self.padding_idx).long()
            x = x + self.position_embeddings(real.cumsum(dim=1) * real + self.padding_idx)
        elif self.position_embeddings is not None:
            x = x + self.position_embeddings(torch.arange(input_ids.shape[1], device=input_ids.device))
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                x = x + self.token_type_embeddings.weight[0]  # all segment A
            else:
                x = x + self.token_type_embeddings(token_type_ids)
        x = self.dropout(self.norm(x))
        return x if self.projection is None else self.projection(x)


class BertSelfAttention(nn.Module):
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
        self, x: torch.Tensor, mask: torch.Tensor | Unpadding | None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, H), mask (B, 1, 1|T, T) bool, True = may attend, or float (B|1, heads|1, T, T)
        added to the scores (relative positions); or, under an `Unpadding`, x the packed real tokens
        (N, H). Returns x's shape and the attention probabilities (B, heads, T, T) when `need_weights`."""
        qkv = self.qkv(x)  # (B, T, 3H) or (N, 3H)
        dropout_p = self.dropout_p if self.training else 0.0
        unpadding = mask if isinstance(mask, Unpadding) else None
        if unpadding is not None and not need_weights and unpadding.has_kernel(qkv, dropout_p):
            q, k, v = qkv.view(-1, 3, self.num_heads, self.head_size).unbind(1)  # 3 x (N, nh, hs)
            return self.out(unpadding.attend(q, k, v).flatten(1)), None
        if unpadding is not None:  # no packed kernel here: pad for the attention alone
            qkv, mask = unpadding.pad(qkv), unpadding.mask
        B, T, _ = qkv.shape
        q, k, v = qkv.view(B, T, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)  # 3 x (B, nh, T, hs)
        # PyTorch's fused CPU attention has no dropout: with dropout on, SDPA falls back to this
        # same explicit form anyway, there with slower masks than ops.dropout.
        if need_weights or (dropout_p > 0 and qkv.device.type == "cpu"):
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
        y = y.transpose(1, 2).reshape(B, T, -1)  # (B, T, nh * hs)
        if unpadding is not None:
            y = unpadding.unpad(y)  # (N, H)
        return self.out(y), weights if need_weights else None


class BertLayer(nn.Module):
    """Self-attention and a GELU feed-forward (or a gated one), each with a residual connection and LayerNorm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertSelfAttention(config)
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
        """(..., H) -> (..., H) through the intermediate width."""
        h = self.ffn_in(x)  # (B, T, I)
        if self.gated:  # GLU: one half gates the other, (B, T, I/2)
            value, gate = h.chunk(2, dim=-1)
            return self.ffn_out(value * self.act(gate))
        return self.ffn_out(self.act(h))

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, H) -> (B, T, H), plus attention weights when asked; under an `Unpadding` mask,
        the packed real tokens (N, H) -> (N, H)."""
        if self.pre_layer_norm:  # normalise each sub-layer's input; the residual path stays raw
            attended, weights = self.attention(self.attention_norm(x), mask, need_weights)
            x = x + self.dropout(attended)
            return x + self.dropout(self.feed_forward(self.ffn_norm(x))), weights
        attended, weights = self.attention(x, mask, need_weights)  # BERT: normalise after each residual sum
        x = self.attention_norm(x + self.dropout(attended))
        return self.ffn_norm(x + self.dropout(self.feed_forward(x))), weights


class BertPreTrainedModel(PreTrainedModel):
    """BERT's initialisation and its loading, lenient where a new task's head starts fresh; saving,
    under transformers' names (`keys`, the family's key table), is models/base.py's."""

    config_class = BertConfig
    backbone = "bert"
    repeated_blocks = (BertLayer,)
    keys: ClassVar[checkpoint.KeyTable] = checkpoint.BERT_KEYS  # a family built on this file sets its own

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

    onnx_output_names: ClassVar[tuple[str, ...]] = ("logits",)  # what its ONNX graph returns (uses/export.py)

    def to_checkpoint(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Our names -> transformers' names of the family (the fused Q/K/V split in three). With
        use_bias=False, zeros in place of the missing biases keep the file in transformers' layout."""
        if self.config.use_bias:  # an untied output matrix has no bias of its own either: `mlm.bias` is its bias
            return self.keys.to_transformers(state)
        zeros = {f"{name}.bias": torch.zeros(module.out_features) for name, module in self.named_modules()
                 if isinstance(module, nn.Linear) and module.bias is None and _ENCODER_LAYER.search(name)}
        return self.keys.to_transformers({**state, **zeros})

    def onnx_inputs(self) -> tuple[str, ...]:
        """The inputs of its ONNX graph (no token_type_ids when the model has no segment embeddings)."""
        return ("input_ids", "attention_mask") + (("token_type_ids",) if self.config.type_vocab_size > 0 else ())

    def onnx_outputs(self) -> tuple[str, ...]:
        """The ModelOutput fields its forward fills without labels, which its ONNX graph returns."""
        return self.onnx_output_names

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, drop_head: bool = False, config: BertConfig | None = None,
                        **config_overrides: Any):
        """Load a model from a directory in the transformers layout (ours or transformers').

        Args:
            directory: holds `config.json` and `model.safetensors` (or a legacy
                `pytorch_model.bin`, read with `torch.load(weights_only=True)`).
            drop_head: ignore the checkpoint's task-head weights, a BiLSTM head's too (a new task's
                head starts fresh).
            config: the directory's config, already read (default: read config.json).
            config_overrides: config fields to change, e.g. `num_labels=3` for a new head.
        Returns:
            The model in eval mode. Weights a head needs but the checkpoint lacks are
            freshly initialised (and listed in `model.newly_initialized`).
        """
        directory = Path(directory)
        if not directory.is_dir():
            raise UserError(f"{directory}: no such model directory")
        config = config if config is not None else cls.config_class.load(directory)
        if config_overrides:
            try:
                config = replace(config, **config_overrides)
            except TypeError as err:
                raise UserError(f"from_pretrained: {err}") from None
        state, source = checkpoint.load_state_dict(directory, config.vocab_size, cls.keys, config.tie_word_embeddings)
        if not config.use_bias:
            state = _without_zero_biases(state, tensor_shapes(cls, config), source)
        if drop_head:
            state = {k: v for k, v in state.items() if not k.startswith(checkpoint.TASK_HEAD_PREFIXES)}
        checkpoint.check_weights(state, tensor_shapes(cls, config), source)
        model = cls(config)
        model.newly_initialized = checkpoint.assign_state_dict(model, state)
        return model.eval()

    @classmethod
    def checkpoint_problems(cls, directory: str | os.PathLike, config: BertConfig) -> list[str]:
        """Every problem of the weights at once (a head or pooler may be missing: it starts fresh), without
        allocating the model: each tensor against the config's shapes, dtype and finiteness."""
        try:
            raw, path = checkpoint.read_weights(Path(directory))
        except UserError as err:
            return [str(err)]
        state, _ = cls.keys.from_transformers(raw, path, config.tie_word_embeddings)
        expected = tensor_shapes(cls, config)
        if not config.use_bias:
            try:
                state = _without_zero_biases(state, expected, path)
            except UserError as err:
                return [str(err)]
        return [f"{path}: {problem}" for problem in checkpoint.weight_problems(state, expected)]

    @classmethod
    def from_language_model(cls, directory: str | os.PathLike, num_labels: int, id2label: dict[int, str] | None,
                            config: BertConfig | None = None, head_bilstm: bool = False):
        """This task model with a fresh head (`num_labels` labels named by `id2label`; with
        `head_bilstm`, a fresh BiLSTM under it) on the encoder of a directory of the family."""
        return cls.from_pretrained(directory, drop_head=True, config=config, num_labels=num_labels, id2label=id2label,
                                   head_bilstm=head_bilstm)

    @classmethod
    def keeps_head(cls, config: BertConfig, head_bilstm: bool = False) -> bool:
        """Whether a directory's head (trained for the task at hand) can be kept: not when a BiLSTM
        is asked for under a head that was trained without one."""
        return config.head_bilstm or not head_bilstm


class BertModel(BertPreTrainedModel):
    """The bare encoder: embeddings, N transformer layers and the [CLS] pooler.

    Example:
        >>> model = BertModel(BertConfig.from_preset("tiny", vocab_size=100))
        >>> out = model(torch.tensor([[2, 17, 42, 3]]))
        >>> out.last_hidden_state.shape, out.pooler_output.shape
        (torch.Size([1, 4, 128]), torch.Size([1, 128]))
    """

    unpad = True  # padded batches run on their real tokens alone (False: the padded computation, for comparison)

    def onnx_outputs(self) -> tuple[str, ...]:
        """The states, and the pooled [CLS] vector when the model has a pooler."""
        return ("last_hidden_state", "pooler_output") if self.pooler is not None else ("last_hidden_state",)

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        # ALBERT's sharing: one layer's weights, applied num_hidden_layers times.
        num_distinct = 1 if config.share_layers else config.num_hidden_layers
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(num_distinct))
        # Pre-LN blocks leave the residual stream unnormalised, so the stack ends with one LayerNorm.
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.pre_layer_norm else None
        self.pooler = Linear(config.hidden_size, config.hidden_size) if add_pooling_layer and config.LAYOUT.pooler else None
        if config.position_embedding_type == "relative":
            self.relative_attention_bias = nn.Embedding(config.relative_attention_num_buckets, config.num_attention_heads)
        self.init_weights()

    def attention_mask(self, attention_mask: torch.Tensor | None, seq_len: int, device) -> torch.Tensor | None:
        """(B, T) 1 = real token, 0 = padding -> bool (B, 1, 1|T, T) for SDPA; None = attend everywhere."""
        mask = None
        # An all-ones mask is dropped so SDPA can take its unmasked kernel; under torch.compile the
        # check would break the graph (or, with compiled blocks, give them a second kind of mask), so
        # there the mask is always kept.
        keep = torch.compiler.is_compiling() or self.blocks_compiled
        if attention_mask is not None and (keep or not bool(attention_mask.all())):
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
        if seq_len > self.config.context_length:
            raise UserError(
                f"sequence length {seq_len} exceeds the model's {self.config.context_length} positions "
                f"(max_position_embeddings {self.config.max_position_embeddings})"
            )
        mask = self.attention_mask(attention_mask, seq_len, input_ids.device)
        x = self.embeddings(input_ids, token_type_ids)
        if self.config.position_embedding_type == "relative":
            mask = self.position_bias(seq_len, mask, x.dtype, x.device)
        # Padding costs every layer's arithmetic; the real tokens alone go through the layers (ops.py's
        # Unpadding). Relative positions' per-pair biases and asked-for attention maps stay padded.
        unpadding = None
        if (self.unpad and not self.blocks_compiled and self.config.position_embedding_type != "relative"
                and not output_attentions and Unpadding.applies(attention_mask)):
            unpadding = Unpadding.of(attention_mask, mask, causal=self.config.causal)
            mask, x = unpadding, unpadding.unpad(x)  # (N, H)
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
        if unpadding is not None:
            x = unpadding.pad(x)  # (B, T, H), zeros at the padding
            if output_hidden_states:
                hidden_states = [unpadding.pad(h) for h in hidden_states]
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


class BertMaskedLMHead(nn.Module):
    """Masked-LM head: dense + GELU + LayerNorm, then a decoder tied to the word embeddings.

    Given `positions`, it scores only those positions (sparse prediction): the
    vocabulary product is the largest in the model, and most positions carry no label.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.embedding_width)
        self.act = activation(config.LAYOUT.mlm_activation or config.hidden_act)
        self.norm = nn.LayerNorm(config.embedding_width, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        # An untied output matrix (tie_word_embeddings false); tied, the word embeddings are given to forward.
        self.decoder = None if config.tie_word_embeddings else Linear(config.embedding_width, config.vocab_size, bias=False)

    def forward(
        self, hidden: torch.Tensor, word_embeddings: torch.Tensor, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """hidden (B, T, H), word_embeddings (V, E), positions bool (B, T) ->
        logits (B, T, V), or (N, V) for the N positions that are True."""
        if positions is not None:
            hidden = hidden[positions]  # (N, H)
        h = self.norm(self.act(self.dense(hidden)))
        return linear(h, word_embeddings if self.decoder is None else self.decoder.weight, self.bias)


class BertClassificationHead(nn.Module):
    """Dropout then a linear layer: on the pooled [CLS] vector, on every token, or on WiC's [CLS; targets]."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.dropout = Dropout(dropout)
        self.dense = Linear(hidden_size, num_labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., num_labels)."""
        return self.dense(self.dropout(x))


class BertSummary(nn.Module):
    """RoBERTa's, ELECTRA's and DistilBERT's sentence vector, where BERT has its pooler: a dense layer
    and an activation (`BertLayout.summary_activation`) on the first token's state, after dropout
    where the layout has it; the classifier's dropout and linear layer follow."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dropout = Dropout(_classifier_dropout(config) if config.LAYOUT.summary_input_dropout else 0.0)
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.LAYOUT.summary_activation)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, H) states -> (B, H), from the first token's."""
        return self.act(self.dense(self.dropout(hidden[:, 0])))


def sentence_vector(model: nn.Module, encoded: ModelOutput) -> torch.Tensor:
    """A task model's (B, H) vector of each row: its encoder's pooler output, or its `summary` of the
    first token's state where the layout has no pooler there (RoBERTa's, ELECTRA's, DistilBERT's heads)."""
    return encoded.pooler_output if model.summary is None else model.summary(encoded.last_hidden_state)


class BertHeadBiLSTM(nn.Module):
    """The BERT paper's Table 5 "+ BiLSTM": one bidirectional LSTM layer (PyTorch's fused nn.LSTM) between
    the encoder and a task head, hidden_size // 2 wide each way so that its states keep the encoder's width.

    Rows are packed by their lengths, so padding never reaches a real position, not even through the
    backward direction, which starts each row at its last real token. A causal encoder's states have read
    only their left context; the backward direction gives every position its right context back.

    Example:
        >>> bilstm = BertHeadBiLSTM(BertConfig.from_preset("tiny", vocab_size=100, head_bilstm=True))
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


_ENCODER_LAYER = re.compile(r"(?:^|\.)layers\.\d+\.")  # the linears use_bias governs live in the layers


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

    onnx_output_names = ("prediction_logits", "seq_relationship_logits")

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.mlm = BertMaskedLMHead(config)
        self.nsp = BertClassificationHead(config.hidden_size, 2, dropout=0.0)
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
        self.mlm = BertMaskedLMHead(config)
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
        # With the BiLSTM, sentences are read from its summary (BertHeadBiLSTM.forward), not the pooler;
        # with a summary activation, from a dense layer on the first token (RoBERTa's head), not the pooler.
        summarized = not per_token and not config.head_bilstm and config.LAYOUT.summary_activation is not None
        self.bert = BertModel(config, add_pooling_layer=not per_token and not config.head_bilstm and not summarized)
        self.summary = BertSummary(config) if summarized else None
        self.bilstm = BertHeadBiLSTM(config) if config.head_bilstm else None
        self.classifier = BertClassificationHead(config.hidden_size, config.num_labels, _classifier_dropout(config))
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
            logits = self.classifier(out.last_hidden_state if self.per_token else sentence_vector(self, out))
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

    onnx_output_names = ("start_logits", "end_logits")
    transformers_config_fields = {"num_labels": 2, "id2label": None}  # transformers sizes the span head by num_labels

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        # The span loss is a softmax over every position, padding included (transformers' too), so the
        # padding's states must be the padded computation's, not the unpadded encoder's zeros.
        self.bert.unpad = False
        self.bilstm = BertHeadBiLSTM(config) if config.head_bilstm else None
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

    extra_inputs = ("target_spans",)  # beyond the token inputs: no transformers class or ONNX graph takes them

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.summary = None if config.LAYOUT.pooler else BertSummary(config)  # the [CLS] vector without a pooler
        self.classifier = BertClassificationHead(3 * config.hidden_size, config.num_labels, _classifier_dropout(config))
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
        logits = self.classifier(torch.cat([sentence_vector(self, out), targets.flatten(1)], dim=-1))  # (B, 3H) -> (B, labels)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels.view(-1))
        return _task_output(out, loss=loss, logits=logits)


class BertDiscriminatorHead(nn.Module):
    """ELECTRA's discriminator head (transformers' ElectraDiscriminatorPredictions): dense + activation
    + one logit per token, replaced or original."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act)
        self.out = BertClassificationHead(config.hidden_size, 1, dropout=0.0)
        for module in self.modules():
            init_module(module, config.initializer_range)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, T) logits."""
        return self.out(self.act(self.dense(hidden))).squeeze(-1)


def electra_generator_config(config: BertConfig, size: float = 0.25) -> BertConfig:
    """ELECTRA's generator: the discriminator's depth at `size` of its width (ELECTRA's best ratio is
    1/4; the paper also studies 1/8, 1/2 and 1), reading the discriminator's embeddings (same width E)
    through its own projection."""
    hidden = max(32, round(config.hidden_size * size))
    return replace(config, hidden_size=hidden, num_attention_heads=max(1, hidden // 64),
                   intermediate_size=4 * hidden, embedding_size=config.embedding_width)


def electra_models(config: BertConfig, generator_size: float = 0.25
                   ) -> tuple[BertModel, BertDiscriminatorHead, BertForMaskedLM]:
    """ELECTRA's three parts (Clark et al. 2020): the discriminator's encoder (the model it saves),
    its head, and the small generator, sharing the token, position and segment embeddings and their
    LayerNorm, as the release does."""
    discriminator = BertModel(config, add_pooling_layer=False)
    generator = BertForMaskedLM(electra_generator_config(config, generator_size))
    for part in ("word_embeddings", "position_embeddings", "token_type_embeddings", "norm"):
        setattr(generator.bert.embeddings, part, getattr(discriminator.embeddings, part))
    return discriminator, BertDiscriminatorHead(config), generator


def causal_masked_lm(config: BertConfig) -> BertForMaskedLM:
    """The BERT paper's left-to-right baseline: the encoder under a causal mask, with the masked-LM
    head scoring each position's next token (its labels come shifted: position t holds token t + 1)."""
    return BertForMaskedLM(replace(config, causal=True))


MODEL_CLASSES: dict[str, type[BertPreTrainedModel]] = {
    cls.__name__: cls
    for cls in (BertModel, BertForPreTraining, BertForMaskedLM, BertForSequenceClassification,
                BertForTokenClassification, BertForQuestionAnswering, BertForWordInContext)
}


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


def _layer_of(name: str) -> int | None:
    """A task model's parameter -> its depth: 0 the embeddings, i + 1 layer i, None the pooler and head."""
    if match := re.search(r"(?:^|\.)layers\.(\d+)\.", name):
        return int(match.group(1)) + 1
    return 0 if re.search(r"(?:^|\.)embeddings\.", name) else None


def _switch(field_name: str):
    """A `pretrain` switch that sets the config field of its name when given."""
    return lambda value: {field_name: value} if value else {}


SPEC = FamilySpec(
    config_class=BertConfig,
    model_classes=MODEL_CLASSES,
    default_class=BertModel,
    describe=lambda c: f"encoder ({c.num_hidden_layers} layers, {c.hidden_size} wide, {c.vocab_size:,}-token vocabulary)",
    objectives=("bert", "roberta", "albert", "electra", "clm"),
    pretraining_models={"masked_lm": BertForMaskedLM, "masked_lm_with_pair": BertForPreTraining,
                        "causal_lm": causal_masked_lm, "replaced_token_detection": electra_models},
    pretrain_switches={"pre_layer_norm": _switch("pre_layer_norm"), "share_layers": _switch("share_layers"),
                       "embedding_size": _switch("embedding_size"),
                       "segment_embeddings": lambda on: {} if on else {"type_vocab_size": 0},
                       "position": lambda kind: {"position_embedding_type": kind} if kind != "absolute" else {},
                       # Cramming's (Geiping and Goldstein 2022)
                       "bias": lambda on: {} if on else {"use_bias": False},
                       "gated_gelu": _switch("gated_feed_forward"),
                       "dropout": lambda p: {} if p is None else {"hidden_dropout_prob": p,
                                                                  "attention_probs_dropout_prob": p}},
    context_length=lambda c: c.context_length,
    heads={"sequence": BertForSequenceClassification, "token": BertForTokenClassification,
           "span": BertForQuestionAnswering, "wic": BertForWordInContext},
    finetune_modes=("finetune", "features"),
    finetune_options=("head_bilstm",),
    random_twin=True,
    feature_encoder=lambda directory, config: BertModel.from_pretrained(directory, config=config),
    hidden_states=lambda stack, ids, mask, types=None: stack(ids, mask, types, output_hidden_states=True).hidden_states,
    feature_layers=lambda c: c.num_hidden_layers,
    feature_width=lambda c: c.hidden_size,
    input_vectors=lambda stack: stack.embeddings.word_embeddings.weight,
    layer_of=_layer_of,
    num_layers=lambda model: len(model.bert.layers),
    attention_maps=True,
    student_config=lambda teacher, preset, **head: BertConfig.from_preset(
        preset, vocab_size=teacher.vocab_size, max_position_embeddings=teacher.max_position_embeddings,
        type_vocab_size=teacher.type_vocab_size, **head),
    keep_layers=keep_layers,
    export_formats=("hf", "int8", "onnx"),
    tokenizer_classes={"bert": "BertTokenizer"},
)


def encoder_variant(config_class: type[BertConfig], model_classes: tuple[type[nn.Module], ...],
                    heads: dict[str, type[nn.Module]], describe: Callable[[Any], str],
                    tokenizer_classes: dict[str, str]) -> FamilySpec:
    """The spec of a family that is this encoder under another config and other names (RoBERTa, ALBERT,
    ELECTRA, DistilBERT, each in its own file): BERT's abilities with its own classes, the first of
    `model_classes` the bare encoder. Its directories are read, fine-tuned, distilled and exported
    here; it is pre-trained as `pretrain --arch bert --objective ...`, so it has no objectives of its own."""
    encoder = model_classes[0]

    def student_config(teacher: BertConfig, preset: str, **head: Any) -> BertConfig:
        return config_class.from_preset(preset, vocab_size=teacher.vocab_size,
                                        max_position_embeddings=teacher.max_position_embeddings,
                                        type_vocab_size=teacher.type_vocab_size, pad_token_id=teacher.pad_token_id,
                                        **head)

    return replace(SPEC, config_class=config_class, model_classes={cls.__name__: cls for cls in model_classes},
                   default_class=encoder, describe=describe, objectives=(), pretraining_models={},
                   pretrain_switches={}, heads=heads, finetune_options=(),
                   feature_encoder=lambda directory, config: encoder.from_pretrained(directory, config=config),
                   student_config=student_config, tokenizer_classes=tokenizer_classes)
