"""T5: a Transformer encoder-decoder that casts every task as text to text, in one file.

Follows Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", with T5 v1.1's changes as switches:

    input ids ─► shared embedding ─► dropout ─► N x encoder block ─► RMS norm ─► encoder states (B, S, D)
    target ids shifted right (decoder_start_token_id first) ─► shared embedding ─► dropout
        ─► M x decoder block ─► RMS norm ─► (x D^-0.5 when tied) ─► lm_head ─► logits (B, T, V)

    encoder block:  x = x + self-attention(norm(x));  x = x + feed-forward(norm(x))
    decoder block:  x = x + causal self-attention(norm(x));  x = x + cross-attention(norm(x), encoder states);
                    x = x + feed-forward(norm(x))

What makes it T5 rather than the Transformer of Vaswani et al.:
- the layer norm scales only: x / sqrt(mean(x^2) + eps) * weight (no mean subtraction, no bias);
  the linear layers have no biases either;
- no position embeddings: each attention adds a learned scalar per head and *bucket* of
  relative distance (key - query): 32 buckets, exact for small distances, logarithmic up to
  128, everything further shares the last; bidirectional (the sign has its own buckets) in
  the encoder, causal (only keys before the query) in the decoder. Each stack's first layer
  owns the table and every layer of the stack reuses its bias;
- attention logits are not divided by sqrt(head size): the initialisation of the query
  projection carries that factor instead;
- the feed-forward is ReLU (v1.0) or, with `feed_forward_proj="gated-gelu"` (v1.1), a gated
  GELU: wo(gelu(wi_0 x) * wi_1 x); v1.1 also unties the output matrix from the embedding
  (`tie_word_embeddings=False`); a tied output rescales the decoder's states by d_model^-0.5.

Module names are transformers' `T5ForConditionalGeneration` (`encoder.block.0.layer.0.SelfAttention.q`,
...), so a state dict needs no key table: a directory saved here loads there and the other
way round. The decoder keeps a key/value cache (the cross-attention's keys and values of the
encoder states are computed once) so that generation (inference/generation.py) costs one
token's work per new token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..memory import check_model_size
from ..ops import IGNORE_INDEX, Dropout, Linear, cross_entropy_with_accuracy, dropout, relative_position_bucket
from .base import ConfigFile, FamilySpec, ModelOutput, PreTrainedModel, activation

MODEL_TYPE = "t5"
FEED_FORWARD_PROJ = {"relu": "relu", "gated-gelu": "gelu_new"}  # transformers' name -> the activation
# Per decoder layer: self-attention keys, values (B, heads, T, d_kv), cross-attention keys, values (B, heads, S, d_kv).
CACHE = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]


T5_SIZE_FIELDS = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
                  "relative_attention_num_buckets")


def t5_parameters(values: dict[str, Any]) -> int:
    """A T5's parameter count from its config's fields: the embedding (and an untied output layer),
    encoder blocks (attention, feed-forward, 2 norms), decoder blocks (two attentions, 3 norms)."""
    width, inner = values["d_model"], values["num_heads"] * values["d_kv"]
    gated = str(values["feed_forward_proj"]).startswith("gated")
    feed_forward = (3 if gated else 2) * width * values["d_ff"]
    decoder_layers = values["num_decoder_layers"] or values["num_layers"]
    embeddings = values["vocab_size"] * width * (1 if values["tie_word_embeddings"] else 2)
    return (embeddings + values["num_layers"] * (4 * width * inner + feed_forward + 2 * width)
            + decoder_layers * (8 * width * inner + feed_forward + 3 * width) + 2 * width
            + 2 * values["relative_attention_num_buckets"] * values["num_heads"])

@dataclass
class T5Config(ConfigFile):
    """Hyper-parameters of a T5 encoder-decoder (transformers' field names and defaults: t5-small).

    Example: `T5Config.from_preset("tiny", vocab_size=8000)` is a 2+2-layer, 128-wide v1.0
    model; `feed_forward_proj="gated-gelu", tie_word_embeddings=False` gives v1.1's.
    """

    MODEL_TYPE: ClassVar[str] = MODEL_TYPE
    WHAT: ClassVar[str] = "a T5"

    # memory.py's checks: this family's parameter count, and the fields that set its size
    count_parameters: ClassVar = staticmethod(t5_parameters)
    size_fields: ClassVar[tuple[str, ...]] = T5_SIZE_FIELDS
    vocab_size: int = 32128
    d_model: int = 512
    d_kv: int = 64  # the width of each head (heads x d_kv need not be d_model)
    d_ff: int = 2048
    num_layers: int = 6  # encoder blocks
    num_decoder_layers: int | None = None  # None = num_layers
    num_heads: int = 8
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    dropout_rate: float = 0.1
    layer_norm_epsilon: float = 1e-6
    initializer_factor: float = 1.0
    feed_forward_proj: str = "relu"  # or "gated-gelu" (T5 v1.1)
    tie_word_embeddings: bool = True  # v1.1: False
    pad_token_id: int = 0
    eos_token_id: int = 1
    decoder_start_token_id: int = 0  # T5 starts the decoder with the padding id
    n_positions: int = 512  # the longest input and target trained on; the relative bias has no hard limit
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # other config.json keys, kept

    def __post_init__(self) -> None:
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers
        for name in ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
                     "relative_attention_num_buckets", "relative_attention_max_distance", "n_positions"):
            value = getattr(self, name)
            if type(value) is not int or not 0 < value <= 2**21:
                raise UserError(f"config field {name!r} must be a positive integer, got {value!r}")
        if self.relative_attention_num_buckets < 4:
            raise UserError("config field 'relative_attention_num_buckets' must be at least 4 (half of them per "
                            f"direction, half of those exact), got {self.relative_attention_num_buckets}")
        if self.feed_forward_proj not in FEED_FORWARD_PROJ:
            raise UserError(f"config field 'feed_forward_proj' {self.feed_forward_proj!r} is not one of "
                            f"{', '.join(FEED_FORWARD_PROJ)}")
        if type(self.dropout_rate) not in (int, float) or not 0.0 <= self.dropout_rate < 1.0:
            raise UserError(f"config field 'dropout_rate' must be a number in [0, 1), got {self.dropout_rate!r}")
        if type(self.initializer_factor) not in (int, float) or not 0 <= self.initializer_factor < float("inf"):
            raise UserError(f"config field 'initializer_factor' must be a finite number >= 0, got "
                            f"{self.initializer_factor!r}")
        for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value < self.vocab_size:
                raise UserError(f"config field {name!r} must be a token id below vocab_size ({self.vocab_size}), "
                                f"got {value!r}")
        check_model_size(self)  # last: the fields are known to be numbers

    @property
    def is_gated(self) -> bool:
        """T5 v1.1's gated feed-forward."""
        return self.feed_forward_proj.startswith("gated-")

    @classmethod
    def sizes(cls, layers: int, width: int) -> dict[str, Any]:
        """A named size's fields (layers per stack): heads of 64 and a feed-forward of 4 x width, as
        t5-small and t5-base."""
        return dict(num_layers=layers, d_model=width, num_heads=max(width // 64, 1), d_kv=min(width, 64),
                    d_ff=4 * width)

    def stored_extras(self) -> dict[str, Any]:
        """transformers' T5Config marks the encoder-decoder."""
        return {"is_encoder_decoder": True}

    @classmethod
    def from_stored(cls, data: dict[str, Any], model_type: str, source: str) -> dict[str, Any]:
        """transformers 5's `scale_decoder_outputs` as tie_word_embeddings; `is_encoder_decoder` dropped."""
        if "scale_decoder_outputs" in data:
            # transformers 5 always ties the output matrix and keeps v1.0/v1.1's difference in this
            # key; its checkpoints then hold shared.weight only, which an untied model here copies.
            data["tie_word_embeddings"] = data.pop("scale_decoder_outputs")
        data.pop("is_encoder_decoder", None)
        return data


class T5LayerNorm(nn.Module):
    """T5's layer norm: scale by the root mean square, then by a learned weight (no shift)."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., D); the mean square in fp32 whatever the input's precision."""
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.variance_epsilon)).to(x.dtype)


class T5Attention(nn.Module):
    """Multi-head attention without scaling, with an optional relative position bias table."""

    def __init__(self, config: T5Config, has_relative_attention_bias: bool, is_decoder: bool):
        super().__init__()
        self.n_heads, self.key_value_proj_dim = config.num_heads, config.d_kv
        inner = config.num_heads * config.d_kv
        self.q = Linear(config.d_model, inner, bias=False)
        self.k = Linear(config.d_model, inner, bias=False)
        self.v = Linear(config.d_model, inner, bias=False)
        self.o = Linear(inner, config.d_model, bias=False)
        self.is_decoder = is_decoder
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.dropout = config.dropout_rate
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.num_buckets, self.n_heads)

    def compute_bias(self, query_length: int, key_length: int, past_length: int = 0,
                     device: torch.device | None = None) -> torch.Tensor:
        """The relative position bias (1, heads, T, S) of queries at positions past_length ...
        past_length + T - 1 over keys at 0 ... S - 1."""
        queries = torch.arange(past_length, past_length + query_length, device=device)[:, None]
        keys = torch.arange(key_length, device=device)[None, :]
        buckets = relative_position_bucket(keys - queries, not self.is_decoder, self.num_buckets, self.max_distance)
        return self.relative_attention_bias(buckets).permute(2, 0, 1)[None]

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, heads * d_kv) -> (B, heads, T, d_kv)."""
        return x.view(x.shape[0], x.shape[1], self.n_heads, self.key_value_proj_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, bias: torch.Tensor, keys_values: tuple[torch.Tensor, torch.Tensor] | None = None,
                past: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x: (B, T, D) queries; bias: additive (B or 1, heads or 1, T, S), position bias and masks.

        Self-attention attends over x (after the cached `past` keys and values); cross-attention
        is given the encoder's `keys_values` (B, heads, S, d_kv) ready made (see `project_keys_values`).
        Returns the output (B, T, D) and the keys and values attended over."""
        if keys_values is None:
            key, value = self._heads(self.k(x)), self._heads(self.v(x))
            if past is not None:
                key, value = torch.cat([past[0], key], dim=2), torch.cat([past[1], value], dim=2)
        else:
            key, value = keys_values
        query = self._heads(self.q(x))
        if self.training and self.dropout > 0 and x.device.type == "cpu":
            # PyTorch's fused CPU attention has no dropout and falls back to this form anyway,
            # with a slower dropout mask than ops.dropout's (as bert.py's BertSelfAttention).
            weights = (query @ key.transpose(-2, -1) + bias).softmax(dim=-1)
            context = dropout(weights, self.dropout, True) @ value
        else:
            context = F.scaled_dot_product_attention(query, key, value, attn_mask=bias, scale=1.0,
                                                     dropout_p=self.dropout if self.training else 0.0)
        batch, _, length, _ = context.shape
        return self.o(context.transpose(1, 2).reshape(batch, length, -1)), (key, value)

    def project_keys_values(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention's keys and values (B, heads, S, d_kv) of the encoder states (B, S, D)."""
        return self._heads(self.k(states)), self._heads(self.v(states))


class T5LayerSelfAttention(nn.Module):
    """x + self-attention(norm(x))."""

    def __init__(self, config: T5Config, has_relative_attention_bias: bool, is_decoder: bool):
        super().__init__()
        self.SelfAttention = T5Attention(config, has_relative_attention_bias, is_decoder)
        self.layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = Dropout(config.dropout_rate)

    def forward(self, x: torch.Tensor, bias: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(B, T, D) -> (B, T, D), and the keys and values (for the decoder's cache)."""
        attended, present = self.SelfAttention(self.layer_norm(x), bias, past=past)
        return x + self.dropout(attended), present


class T5LayerCrossAttention(nn.Module):
    """x + cross-attention(norm(x), encoder states)."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.EncDecAttention = T5Attention(config, has_relative_attention_bias=False, is_decoder=True)
        self.layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = Dropout(config.dropout_rate)

    def forward(self, x: torch.Tensor, bias: torch.Tensor, keys_values: tuple[torch.Tensor, torch.Tensor]
                ) -> torch.Tensor:
        """(B, T, D) -> (B, T, D); keys_values from the encoder states (B, heads, S, d_kv)."""
        attended, _ = self.EncDecAttention(self.layer_norm(x), bias, keys_values=keys_values)
        return x + self.dropout(attended)


class T5DenseActDense(nn.Module):
    """The feed-forward: wo(act(wi x)), or gated (v1.1) wo(act(wi_0 x) * wi_1 x)."""

    def __init__(self, config: T5Config):
        super().__init__()
        if config.is_gated:
            self.wi_0 = Linear(config.d_model, config.d_ff, bias=False)
            self.wi_1 = Linear(config.d_model, config.d_ff, bias=False)
        else:
            self.wi = Linear(config.d_model, config.d_ff, bias=False)
        self.wo = Linear(config.d_ff, config.d_model, bias=False)
        self.act = activation(FEED_FORWARD_PROJ[config.feed_forward_proj])
        self.dropout = Dropout(config.dropout_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D)."""
        hidden = self.act(self.wi_0(x)) * self.wi_1(x) if hasattr(self, "wi_0") else self.act(self.wi(x))
        return self.wo(self.dropout(hidden))


class T5LayerFF(nn.Module):
    """x + feed-forward(norm(x))."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.DenseReluDense = T5DenseActDense(config)
        self.layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = Dropout(config.dropout_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D)."""
        return x + self.dropout(self.DenseReluDense(self.layer_norm(x)))


class T5Block(nn.Module):
    """One encoder block (self-attention, feed-forward) or decoder block (+ cross-attention between)."""

    def __init__(self, config: T5Config, has_relative_attention_bias: bool, is_decoder: bool):
        super().__init__()
        self.is_decoder = is_decoder
        self.layer = nn.ModuleList([T5LayerSelfAttention(config, has_relative_attention_bias, is_decoder)])
        if is_decoder:
            self.layer.append(T5LayerCrossAttention(config))
        self.layer.append(T5LayerFF(config))

    def forward(self, x: torch.Tensor, bias: torch.Tensor, cross_bias: torch.Tensor | None = None,
                cross_keys_values: tuple[torch.Tensor, torch.Tensor] | None = None,
                past: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(B, T, D) -> (B, T, D), and the self-attention's keys and values."""
        x, present = self.layer[0](x, bias, past)
        if self.is_decoder:
            x = self.layer[1](x, cross_bias, cross_keys_values)
        return self.layer[-1](x), present


def padding_bias(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, S) mask, 1 = a real token -> additive bias (B, 1, 1, S): 0, or the dtype's minimum
    (not -inf, so that a row of padding gives a uniform average rather than NaN)."""
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


class T5Stack(nn.Module):
    """The encoder or the decoder: blocks over the shared embedding, then the final norm."""

    def __init__(self, config: T5Config, embed_tokens: nn.Embedding, is_decoder: bool):
        super().__init__()
        self.is_decoder = is_decoder
        self.embed_tokens = embed_tokens  # the model's `shared` table
        layers = config.num_decoder_layers if is_decoder else config.num_layers
        self.block = nn.ModuleList(T5Block(config, index == 0, is_decoder) for index in range(layers))
        self.final_layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = Dropout(config.dropout_rate)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                encoder_hidden_states: torch.Tensor | None = None, encoder_attention_mask: torch.Tensor | None = None,
                past_key_values: CACHE | None = None, output_hidden_states: bool = False) -> ModelOutput:
        """input_ids (B, T); attention_mask (B, T) (encoder: padding; decoder: over the cached and
        new tokens, default all real). The decoder also takes the encoder states (B, S, D) and
        their mask (B, S), and its cache. Returns last_hidden_state (B, T, D) (and the decoder's
        past_key_values) and, when asked, hidden_states: the embeddings output, then each block's
        output (B, T, D), the last one after the final norm (transformers' convention: the last
        is last_hidden_state)."""
        x = self.dropout(self.embed_tokens(input_ids))
        length = input_ids.shape[1]
        past_length = past_key_values[0][0].shape[2] if past_key_values else 0
        bias = self.block[0].layer[0].SelfAttention.compute_bias(length, past_length + length, past_length, x.device)
        bias = bias.to(x.dtype)
        if self.is_decoder:
            future = torch.ones(length, past_length + length, dtype=torch.bool, device=x.device).triu(past_length + 1)
            bias = bias.masked_fill(future, torch.finfo(x.dtype).min)
        if attention_mask is not None:
            bias = bias + padding_bias(attention_mask, x.dtype)
        cross_bias, presents = None, []
        if self.is_decoder:
            encoder_mask = (encoder_attention_mask if encoder_attention_mask is not None
                            else torch.ones(encoder_hidden_states.shape[:2], device=x.device))
            cross_bias = padding_bias(encoder_mask, x.dtype)
        hidden_states = [x]
        for index, block in enumerate(self.block):
            if not self.is_decoder:
                x, _ = block(x, bias)
                hidden_states.append(x)
                continue
            past = past_key_values[index] if past_key_values else None
            if past is not None:
                cross = past[2:]
            else:  # the encoder states' keys and values: computed once per generation
                cross = block.layer[1].EncDecAttention.project_keys_values(encoder_hidden_states)
            x, (key, value) = block(x, bias, cross_bias, cross, past[:2] if past is not None else None)
            presents.append((key, value, *cross))
            hidden_states.append(x)
        x = hidden_states[-1] = self.dropout(self.final_layer_norm(x))
        return ModelOutput(last_hidden_state=x, past_key_values=presents if self.is_decoder else None,
                           hidden_states=tuple(hidden_states) if output_hidden_states else None)


def shift_right(labels: torch.Tensor, start_id: int, pad_id: int) -> torch.Tensor:
    """Teacher forcing's decoder inputs (B, T): the start id, then the labels (B, T) but the
    last, with ignored positions (-100) as padding."""
    shifted = labels.new_full(labels.shape, start_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad_id)


class T5ForConditionalGeneration(PreTrainedModel):
    """T5: encoder, decoder and language-model head; text in, text out."""

    config_class = T5Config
    repeated_blocks = (T5Block,)

    def __init__(self, config: T5Config):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = T5Stack(config, self.shared, is_decoder=False)
        self.decoder = T5Stack(config, self.shared, is_decoder=True)
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.shared.weight
        self.init_weights()

    def init_weights(self) -> None:
        """T5's initialisation (Mesh TensorFlow's, as transformers has it): normal with std
        factor x fan-in^-0.5 per matrix, the query's also divided by sqrt(d_kv) since the
        attention logits are not; embeddings std factor; norms 1."""
        factor, d_model = self.config.initializer_factor, self.config.d_model
        for module in self.modules():
            if isinstance(module, T5LayerNorm):
                nn.init.constant_(module.weight, factor)
            elif isinstance(module, T5Attention):
                inner = module.n_heads * module.key_value_proj_dim
                nn.init.normal_(module.q.weight, std=factor * (d_model * module.key_value_proj_dim) ** -0.5)
                nn.init.normal_(module.k.weight, std=factor * d_model ** -0.5)
                nn.init.normal_(module.v.weight, std=factor * d_model ** -0.5)
                nn.init.normal_(module.o.weight, std=factor * inner ** -0.5)
                if hasattr(module, "relative_attention_bias"):
                    nn.init.normal_(module.relative_attention_bias.weight, std=factor * d_model ** -0.5)
            elif isinstance(module, T5DenseActDense):
                for name in ("wi", "wi_0", "wi_1"):
                    if hasattr(module, name):
                        nn.init.normal_(getattr(module, name).weight, std=factor * d_model ** -0.5)
                nn.init.normal_(module.wo.weight, std=factor * self.config.d_ff ** -0.5)
        nn.init.normal_(self.shared.weight, std=factor)
        if not self.config.tie_word_embeddings:
            nn.init.normal_(self.lm_head.weight, std=factor)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder states (B, S, D) of input_ids (B, S)."""
        return self.encoder(input_ids, attention_mask).last_hidden_state

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None, decoder_attention_mask: torch.Tensor | None = None,
                encoder_outputs: torch.Tensor | None = None, past_key_values: CACHE | None = None,
                labels: torch.Tensor | None = None) -> ModelOutput:
        """input_ids, attention_mask: (B, S) the input text (or its `encoder_outputs` (B, S, D),
        already encoded); decoder_input_ids (B, T), default the labels shifted right.

        Returns logits (B, T, V), past_key_values and encoder_last_hidden_state. With `labels`
        (B, T; -100 = ignored): the mean cross-entropy, logits (N, V) at the N scored positions
        only, and for the training loop's accuracy masked_lm_loss and masked_lm_correct."""
        if encoder_outputs is None:
            encoder_outputs = self.encode(input_ids, attention_mask)
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("give decoder_input_ids or labels")
            decoder_input_ids = shift_right(labels, self.config.decoder_start_token_id, self.config.pad_token_id)
        decoded = self.decoder(decoder_input_ids, decoder_attention_mask, encoder_outputs, attention_mask,
                               past_key_values)
        hidden = decoded.last_hidden_state
        if self.config.tie_word_embeddings:  # the embedding's scale (std 1) is not the states' (norm 1)
            hidden = hidden * self.config.d_model ** -0.5
        common = dict(past_key_values=decoded.past_key_values, encoder_last_hidden_state=encoder_outputs)
        if labels is None:
            return ModelOutput(logits=self.lm_head(hidden), **common)
        scored = labels != IGNORE_INDEX
        logits = self.lm_head(hidden[scored])  # only the scored positions: no (B, T, V) tensor in training
        loss, correct = cross_entropy_with_accuracy(logits, labels[scored])
        return ModelOutput(loss=loss, logits=logits, masked_lm_loss=loss, masked_lm_correct=correct, **common)

    def tied_keys(self) -> tuple[str, ...]:
        """State-dict names that are `shared.weight` under another name (stored once, as transformers does)."""
        tied = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
        return tied + ("lm_head.weight",) if self.config.tie_word_embeddings else tied

    @classmethod
    def from_checkpoint(cls, stored: dict[str, torch.Tensor], config: T5Config, source: Path) -> dict[str, torch.Tensor]:
        """transformers' names are ours; the shared table and an untied v1.1 output filled in where
        a checkpoint stores them once."""
        if "shared.weight" not in stored and "encoder.embed_tokens.weight" in stored:
            stored["shared.weight"] = stored["encoder.embed_tokens.weight"]
        if not config.tie_word_embeddings and "lm_head.weight" not in stored and "shared.weight" in stored:
            stored["lm_head.weight"] = stored["shared.weight"]  # transformers 5 stores a v1.1 output tied
        return stored


SPEC = FamilySpec(
    config_class=T5Config,
    model_classes={"T5ForConditionalGeneration": T5ForConditionalGeneration},
    default_class=T5ForConditionalGeneration,
    describe=lambda c: (f"encoder-decoder ({c.num_layers}+{c.num_decoder_layers} layers, {c.d_model} wide, "
                        f"{c.vocab_size:,}-token vocabulary)"),
    objectives=("t5",),
    pretraining_models={"span_corruption": T5ForConditionalGeneration},
    tokenizer_model="unigram",
    tokenizer_sentinels=100,
    pretrain_switches={"gated_gelu": lambda on: {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}
                       if on else {}},
    # [PAD] starts the decoder and pads, [SEP] ends a text
    token_ids=lambda tokenizer: {"pad_token_id": tokenizer.pad_token_id, "decoder_start_token_id": tokenizer.pad_token_id,
                                 "eos_token_id": tokenizer.sep_token_id},
    context_length=lambda c: c.n_positions,
    runner="text_to_text",
    finetune_modes=("finetune",),
    random_twin=True,
    feature_encoder=lambda directory, config: SPEC.load(directory, config).encoder,
    feature_layers=lambda c: c.num_layers,
    feature_width=lambda c: c.d_model,
    input_vectors=lambda stack: stack.embed_tokens.weight,
    layer_names=("encoder embeddings", "encoder layer"),
    leading_summary_token=False,  # span corruption trained it on "text [SEP]"
    generation="seq2seq",
    tokenizer_classes={"t5": "T5Tokenizer"},
)
