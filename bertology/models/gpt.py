"""GPT: a left-to-right Transformer language model that generates text, in one file.

Follows Radford et al. 2018, "Improving Language Understanding by Generative
Pre-Training" (GPT-1), with GPT-2's layout (Radford et al. 2019) as one switch:

    input ids ─► token + position embeddings ─► dropout
        GPT-1 (post-LN):  N x [ x = LN(x + causal-attention(x));  x = LN(x + MLP(x)) ]
        GPT-2 (pre-LN):   N x [ x = x + causal-attention(LN(x));  x = x + MLP(LN(x)) ]  ─► final LN
    ─► hidden (B, T, H) ─► logits = hidden @ token-embedding table^T (tied)  (B, T, V)

Module names are those of transformers' `GPT2LMHeadModel` (`transformer.wte`, `.h.0.attn.c_attn`,
...); a directory saved here is in transformers' layout for `OpenAIGPTLMHeadModel`
(`pre_layer_norm=False`, model_type "openai-gpt") or `GPT2LMHeadModel` (`pre_layer_norm=True`,
model_type "gpt2"), and either of those loads here. transformers stores the four projection
matrices as `Conv1D` weights, (in, out); ours are `nn.Linear`'s (out, in): the key table below
transposes them. Attention keeps a key/value cache (`past_key_values`) so that generation
(inference/generation.py) costs one token's work per new token: either grown by concatenation (a
list of each layer's keys and values so far) or a `StaticCache`, preallocated for a fixed number of
positions and written in place at `cache_position`, so that every new token runs at the same
shapes and a compiled decode step (CUDA graphs) can replay it.

Task models, fine-tuned with the language model's loss on the task's inputs as an auxiliary term
(`lm_coef`, the GPT paper's): `GPTForSequenceClassification` (the last real token's state),
`GPTForTokenClassification` (every token's state: a tag) and `GPTForQuestionAnswering` (every
token's state: a start and an end score), in the layouts of transformers'
`GPT2ForSequenceClassification`, `GPT2ForTokenClassification` and `GPT2ForQuestionAnswering`
(and `OpenAIGPTForSequenceClassification`; transformers has no GPT-1 class for the token and
span heads, so a GPT-1 directory with one of them names our class and loads here only).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..memory import check_model_size
from ..ops import IGNORE_INDEX, cross_entropy_with_accuracy, last_token_states, span_loss
from .base import ConfigFile, FamilySpec, ModelOutput, PreTrainedModel, activation, init_module

# The sizes are every family's (base.SIZES: name -> layers, width), so that `--preset` means
# the same for every family; n_head = width / 64, 512 positions. "base" is GPT-1's size (117M
# parameters with its 40,478-token vocabulary).
MODEL_TYPES = ("openai-gpt", "gpt2")
# OpenAIGPTConfig's `afn` names -> ours: its "gelu" is the tanh approximation (transformers' gelu_new).
OPENAI_GPT_AFN = {"gelu": "gelu_new", "relu": "relu"}
CACHE = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values, each (B, heads, S, head size)


GPT_SIZE_FIELDS = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_inner")


def gpt_parameters(values: dict[str, Any]) -> int:
    """A GPT's parameter count from its config's fields: embeddings, then per block the attention
    (4 E^2), the feed-forward (2 E I) and their biases and LayerNorms."""
    width = values["n_embd"]
    inner = values["n_inner"] or 4 * width
    return (values["vocab_size"] + values["n_positions"]) * width + values["n_layer"] * (
        4 * width * width + 2 * width * inner + 9 * width + inner) + 2 * width

@dataclass
class GPTConfig(ConfigFile):
    """Hyper-parameters of a GPT language model (transformers' GPT-2 field names).

    Example: `GPTConfig.from_preset("tiny", vocab_size=8000)` is a 2-layer, 128-wide model
    with GPT-1's post-LN blocks; `pre_layer_norm=True` gives GPT-2's.
    """

    MODEL_TYPES: ClassVar[tuple[str, ...]] = MODEL_TYPES
    WHAT: ClassVar[str] = "a GPT"
    NOT_STORED: ClassVar[tuple[str, ...]] = ("pre_layer_norm",)  # the model_type says it

    # memory.py's checks: this family's parameter count, and the fields that set its size
    count_parameters: ClassVar = staticmethod(gpt_parameters)
    size_fields: ClassVar[tuple[str, ...]] = GPT_SIZE_FIELDS
    vocab_size: int = 40478
    n_positions: int = 512  # the context length
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None  # feed-forward width; None = 4 * n_embd
    activation_function: str = "gelu_new"  # tanh-approximated GELU, as both GPT releases
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    pre_layer_norm: bool = False  # GPT-2: LayerNorm before each sub-layer and after the last block
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    # Fine-tuning (the task models below): the labels, and the weight of the auxiliary
    # language-model loss on the task's own inputs (the GPT paper's lambda, 0.5).
    num_labels: int = 2
    id2label: dict[int, str] | None = None
    lm_coef: float = 0.5
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # other config.json keys, kept

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
            value = getattr(self, name)
            if type(value) is not int or not 0 < value <= 2**21:
                raise UserError(f"config field {name!r} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise UserError(f"config field 'n_embd' ({self.n_embd}) must be divisible by 'n_head' ({self.n_head})")
        if self.n_inner is not None and (type(self.n_inner) is not int or self.n_inner <= 0):
            raise UserError(f"config field 'n_inner' must be a positive integer or null, got {self.n_inner!r}")
        for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
            if type(getattr(self, name)) not in (int, float) or not 0.0 <= getattr(self, name) < 1.0:
                raise UserError(f"config field {name!r} must be a number in [0, 1), got {getattr(self, name)!r}")
        try:
            activation(self.activation_function)
        except KeyError:
            raise UserError(f"config field 'activation_function' {self.activation_function!r} is not known") from None
        if type(self.num_labels) is not int or self.num_labels < 1:
            raise UserError(f"config field 'num_labels' must be a positive integer, got {self.num_labels!r}")
        for name in ("lm_coef", "initializer_range"):  # `nan < 0` is False: the range is written to fail on NaN
            if type(getattr(self, name)) not in (int, float) or not 0 <= getattr(self, name) < math.inf:
                raise UserError(f"config field {name!r} must be a finite number >= 0, got {getattr(self, name)!r}")
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            # Not checked against vocab_size: transformers' GPT-2 config keeps 50256 at any size.
            if getattr(self, name) is not None and (type(getattr(self, name)) is not int or getattr(self, name) < 0):
                raise UserError(f"config field {name!r} must be a token id or null, got {getattr(self, name)!r}")
        check_model_size(self)  # last: the fields are known to be numbers

    @property
    def model_type(self) -> str:
        """transformers' name for this layout: "openai-gpt" (post-LN) or "gpt2" (pre-LN)."""
        return "gpt2" if self.pre_layer_norm else "openai-gpt"

    @property
    def inner_size(self) -> int:
        """The feed-forward width."""
        return self.n_inner or 4 * self.n_embd

    @classmethod
    def sizes(cls, layers: int, width: int) -> dict[str, Any]:
        """A named size's fields: heads of 64."""
        return dict(n_layer=layers, n_embd=width, n_head=max(width // 64, 1))

    def to_dict(self) -> dict[str, Any]:
        """config.json's content, in the keys of the transformers class for this layout."""
        data = super().to_dict()
        if not self.pre_layer_norm:  # OpenAIGPTConfig: `afn`, and the feed-forward is always 4 * n_embd
            activation_name = data.pop("activation_function")
            if activation_name not in OPENAI_GPT_AFN.values():
                raise UserError(f"GPT-1's layout (openai-gpt) has no {activation_name!r} activation; choose one of "
                                f"{', '.join(OPENAI_GPT_AFN.values())}")
            data["afn"] = next(afn for afn, ours in OPENAI_GPT_AFN.items() if ours == activation_name)
            if self.n_inner not in (None, 4 * self.n_embd):
                raise UserError("GPT-1's layout (openai-gpt) has a feed-forward of 4 * n_embd; n_inner needs "
                                "pre_layer_norm (GPT-2's layout)")
            del data["n_inner"]
        return data

    @classmethod
    def from_stored(cls, data: dict[str, Any], model_type: str, source: str) -> dict[str, Any]:
        """GPT-1's `afn` as our activation name; the layout (pre-LN or not) from the model_type."""
        if "afn" in data:
            data["activation_function"] = OPENAI_GPT_AFN.get(data["afn"], data["afn"])
            del data["afn"]
        return {**data, "pre_layer_norm": model_type == "gpt2"}


class GPTAttention(nn.Module):
    """Causal multi-head self-attention with a key/value cache."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head, self.head_size = config.n_head, config.n_embd // config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # query, key and value in one product
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_pdrop = config.attn_pdrop
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x: torch.Tensor, bias: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None,
                cache_position: torch.Tensor | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x: (B, T, H); bias: (B, 1, T, S) additive, 0 where allowed. `past`: the keys and values
        (B, heads, S - T, head size) of the tokens before, S = past length + T; or with
        `cache_position` (T,) a static cache's buffers (B, heads, S, head size), S its length, into
        which the new keys and values are written at those positions.
        Returns the output (B, T, H) and this layer's keys and values (B, heads, S, head size)."""
        batch, length, width = x.shape
        query, key, value = (t.view(batch, length, self.n_head, self.head_size).transpose(1, 2)
                             for t in self.c_attn(x).split(width, dim=2))
        # In place: the buffers keep their shape and address from token to token. (The casts do nothing
        # unless autocast computes in another precision than the cache holds.)
        if cache_position is not None:
            past[0].index_copy_(2, cache_position, key.to(past[0].dtype))
            past[1].index_copy_(2, cache_position, value.to(past[1].dtype))
            key, value = past[0].to(query.dtype), past[1].to(query.dtype)
        elif past is not None:
            key, value = torch.cat([past[0], key], dim=2), torch.cat([past[1], value], dim=2)
        context = F.scaled_dot_product_attention(query, key, value, attn_mask=bias,
                                                 dropout_p=self.attn_pdrop if self.training else 0.0)
        output = self.c_proj(context.transpose(1, 2).reshape(batch, length, width))
        return self.resid_dropout(output), (key, value)


class GPTMLP(nn.Module):
    """The position-wise feed-forward: expand, GELU, project back."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.inner_size)
        self.c_proj = nn.Linear(config.inner_size, config.n_embd)
        self.act = activation(config.activation_function)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, T, H)."""
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPTBlock(nn.Module):
    """One Transformer decoder block, LayerNorm after (GPT-1) or before (GPT-2) each sub-layer."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.pre_layer_norm = config.pre_layer_norm
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPTAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPTMLP(config)

    def forward(self, x: torch.Tensor, bias: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None,
                cache_position: torch.Tensor | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x: (B, T, H) -> (B, T, H), and this layer's keys and values (see GPTAttention)."""
        if self.pre_layer_norm:
            attended, present = self.attn(self.ln_1(x), bias, past, cache_position)
            x = x + attended
            return x + self.mlp(self.ln_2(x)), present
        attended, present = self.attn(x, bias, past, cache_position)
        x = self.ln_1(x + attended)
        return self.ln_2(x + self.mlp(x)), present


def attention_bias(attention_mask: torch.Tensor | None, cache_position: torch.Tensor, total: int, batch: int,
                   dtype: torch.dtype) -> torch.Tensor:
    """The additive attention bias (B, 1, T, S) of T new tokens at `cache_position` (T,) among S
    keys: causal (a key at a later position is hidden, and so is every unfilled position of a
    static cache), and padding (`attention_mask` (B, S), 1 = a real token) hidden. A row with
    nothing to see (a pad position before its sequence starts) attends to itself, so that no NaN arises."""
    rows = cache_position[:, None]
    columns = torch.arange(total, device=cache_position.device)[None, :]
    allowed = (columns <= rows)[None, None]  # (1, 1, T, S)
    if attention_mask is not None:
        allowed = (allowed & attention_mask[:, None, None, :].bool()) | (columns == rows)[None, None]
    bias = torch.zeros(allowed.shape, dtype=dtype, device=cache_position.device)
    bias = bias.masked_fill(~allowed, torch.finfo(dtype).min)
    return bias.expand(batch, 1, len(cache_position), total)


class StaticCache:
    """Keys and values preallocated for `max_cache_len` positions (transformers' name): per layer
    two buffers (B, heads, max_cache_len, head size), written in place at each new token's
    position (`cache_position`). Every new token then runs at the same shapes on the same memory,
    which a compiled decode step captures once (CUDA graphs) and replays; attention reads the whole
    buffer, its unfilled positions hidden by the causal mask. The buffers may be reused by the next
    generation that fits them: every position it reads, it has written first."""

    def __init__(self, config: GPTConfig, max_batch_size: int, max_cache_len: int, device: torch.device | str,
                 dtype: torch.dtype):
        if max_cache_len > config.n_positions:
            raise UserError(f"a cache of {max_cache_len} positions is beyond the model's context of "
                            f"{config.n_positions} (n_positions)")
        shape = (max_batch_size, config.n_head, max_cache_len, config.n_embd // config.n_head)
        self.layers = [(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))
                       for _ in range(config.n_layer)]
        for buffers in self.layers:
            for buffer in buffers:  # one address for every replay: CUDA graphs read them in place, never copied in
                torch._dynamo.mark_static_address(buffer)

    @property
    def max_batch_size(self) -> int:
        """The rows it holds."""
        return self.layers[0][0].shape[0]

    @property
    def max_cache_len(self) -> int:
        """The positions it holds."""
        return self.layers[0][0].shape[2]


class GPTPreTrainedModel(PreTrainedModel):
    """Initialisation, and the key table of saving and loading, shared by the bare model, the LM and
    the task models (transformers' OpenAIGPT or GPT-2 layout, the tied output matrix stored once)."""

    config_class = GPTConfig
    repeated_blocks = (GPTBlock,)
    backbone = "transformer"

    def init_weights(self) -> None:
        """normal(0, initializer_range) for every matrix, as the GPT releases; GPT-2 also scales
        the projections into the residual stream by 1/sqrt(2 * n_layer), as its paper says."""
        for module in self.modules():
            init_module(module, self.config.initializer_range)
        if self.config.pre_layer_norm:
            for name, parameter in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(parameter, std=self.config.initializer_range / math.sqrt(2 * self.config.n_layer))

    def tied_keys(self) -> tuple[str, ...]:
        """The output matrix is the token embeddings."""
        return TIED

    def architecture_name(self) -> str:
        """transformers' class for this layout, or ours where transformers has none (GPT-1's token and span heads)."""
        return ARCHITECTURES.get(type(self).__name__, ARCHITECTURES["GPTLMHeadModel"])[self.config.model_type]

    def to_checkpoint(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Our names -> transformers' for the config's layout (Conv1D weights transposed)."""
        return to_transformers(state, self.config)

    @classmethod
    def from_checkpoint(cls, stored: dict[str, torch.Tensor], config: GPTConfig, source: Path) -> dict[str, torch.Tensor]:
        """transformers' GPT-1 or GPT-2 tensors -> our names."""
        return from_transformers(stored, config)


class GPTModel(GPTPreTrainedModel):
    """The decoder stack: embeddings, N blocks (and GPT-2's final LayerNorm)."""

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList(GPTBlock(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon) if config.pre_layer_norm else None
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, past_key_values: CACHE | StaticCache | None = None,
                output_hidden_states: bool = False, cache_position: torch.Tensor | None = None) -> ModelOutput:
        """input_ids: (B, T); attention_mask: (B, S) over the cached and the new tokens, 1 = real
        (S = past length + T; with a StaticCache, S = its max_cache_len); position_ids: (B, T),
        default cache_position; cache_position: (T,) the new tokens' positions in the cache,
        default past length + 0, 1, ... (a StaticCache is written there).
        Returns last_hidden_state (B, T, H), past_key_values (this call's cache: the StaticCache
        given, or the dynamic one grown) and, when asked, hidden_states: the embeddings output,
        then each block's output (B, T, H), GPT-2's last one after its final LayerNorm
        (transformers' convention: the last is last_hidden_state)."""
        batch, length = input_ids.shape
        static = isinstance(past_key_values, StaticCache)
        if static:  # its length was checked against the context when it was made
            layers, total = past_key_values.layers, past_key_values.max_cache_len
            if cache_position is None:
                raise UserError("a StaticCache needs cache_position: where the new tokens go")
        else:
            layers = past_key_values or [None] * len(self.h)
            past_length = past_key_values[0][0].shape[2] if past_key_values else 0
            total = past_length + length
            if total > self.config.n_positions:
                raise UserError(f"{total} tokens do not fit the model's context of "
                                f"{self.config.n_positions} (n_positions)")
            if cache_position is None:
                cache_position = torch.arange(past_length, total, device=input_ids.device)
        if position_ids is None:  # as transformers: 0, 1, ... whatever the padding (see position_ids_for)
            position_ids = cache_position.expand(batch, length)
        x = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        bias = attention_bias(attention_mask, cache_position, total, batch, x.dtype)
        presents, hidden_states = [], [x]
        for block, past in zip(self.h, layers):
            x, present = block(x, bias, past, cache_position if static else None)
            presents.append(present)
            hidden_states.append(x)
        if self.ln_f is not None:
            x = hidden_states[-1] = self.ln_f(x)
        return ModelOutput(last_hidden_state=x, past_key_values=past_key_values if static else presents,
                           hidden_states=tuple(hidden_states) if output_hidden_states else None)


class GPTLMHeadModel(GPTPreTrainedModel):
    """GPT with its language-model head: next-token logits from the tied embedding table."""

    shifts_labels = True  # its labels are the inputs; position t is scored on token t + 1 (transformers')

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.transformer = GPTModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as both GPT releases

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, past_key_values: CACHE | StaticCache | None = None,
                labels: torch.Tensor | None = None, cache_position: torch.Tensor | None = None) -> ModelOutput:
        """As `GPTModel.forward`; returns logits (B, T, V) and past_key_values. With `labels`
        (B, T; -100 = ignored): the mean next-token loss (position t predicts labels[t + 1]),
        logits (N, V) at the N scored positions only, and for the training loop's accuracy
        masked_lm_loss and masked_lm_correct (argmax hits)."""
        encoded = self.transformer(input_ids, attention_mask, position_ids, past_key_values,
                                   cache_position=cache_position)
        hidden = encoded.last_hidden_state
        if labels is None:
            return ModelOutput(logits=self.lm_head(hidden), past_key_values=encoded.past_key_values)
        # Only the scored positions go through the (H x V) output product: what training needs,
        # without a (B, T, V) tensor (as BertForMaskedLM does with its labels).
        targets = labels[:, 1:]
        scored = targets != IGNORE_INDEX
        logits = self.lm_head(hidden[:, :-1][scored])
        loss, correct = cross_entropy_with_accuracy(logits, targets[scored])
        return ModelOutput(loss=loss, logits=logits, past_key_values=encoded.past_key_values,
                           masked_lm_loss=loss, masked_lm_correct=correct)


class GPTForSequenceClassification(GPTPreTrainedModel):
    """GPT fine-tuned the GPT paper's way: the task's text framed by task tokens ([CLS] text
    [SEP], or [CLS] A [SEP] B [SEP] for pairs: start, delimiter, extract), a linear layer on the
    last real token's state (the only one that has read the whole input), and the language
    model's loss on the input as an auxiliary term, weighted `lm_coef` (0.5)."""

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.transformer = GPTModel(config)
        self.score = nn.Linear(config.n_embd, config.num_labels, bias=False)  # transformers' name
        nn.init.normal_(self.score.weight, std=config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> ModelOutput:
        """input_ids, attention_mask (B, T), right-padded; token_type_ids are ignored (a GPT tells
        the segments by the delimiter). Returns logits (B, num_labels); with `labels` (B,) the
        task's loss (cross-entropy, or MSE for one label) + lm_coef x the next-token loss."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.transformer(input_ids, attention_mask).last_hidden_state
        logits = self.score(last_token_states(hidden, attention_mask))
        if labels is None:
            return ModelOutput(logits=logits)
        if self.config.num_labels == 1:
            loss = F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))
        else:
            loss = F.cross_entropy(logits, labels)
        return ModelOutput(loss=loss + auxiliary_lm_loss(self, hidden, input_ids, attention_mask), logits=logits)


def auxiliary_lm_loss(model: GPTPreTrainedModel, hidden: torch.Tensor, input_ids: torch.Tensor,
                      attention_mask: torch.Tensor) -> torch.Tensor | float:
    """The GPT paper's auxiliary fine-tuning term: lm_coef x the next-token loss of the task's own
    inputs (input_ids, attention_mask (B, T), right-padded), from the decoder's states hidden (B, T, H)
    through the tied embedding table; 0 when lm_coef is 0."""
    if model.config.lm_coef == 0:
        return 0.0
    targets = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, IGNORE_INDEX)
    scored = targets != IGNORE_INDEX
    lm_logits = F.linear(hidden[:, :-1][scored], model.transformer.wte.weight)
    return model.config.lm_coef * cross_entropy_with_accuracy(lm_logits, targets[scored])[0]


# transformers' GPT2ForTokenClassification: its classifier_dropout, which GPT-2's config does not set.
CLASSIFIER_DROPOUT = 0.1


class GPTForTokenClassification(GPTPreTrainedModel):
    """GPT fine-tuned for tagging: dropout and a linear layer on every token's state (transformers'
    GPT2ForTokenClassification), plus the auxiliary language-model loss (`lm_coef`).

    A left-to-right model tags each token from the tokens up to it only: under the causal mask a
    word's state has read its left context and never its right one (a word's label sits on its
    first piece, which has not seen the word's other pieces either). The BERT paper's point
    about left-to-right models: tagging is where the missing right context costs.
    """

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.transformer = GPTModel(config)
        self.dropout = nn.Dropout(CLASSIFIER_DROPOUT)
        self.classifier = nn.Linear(config.n_embd, config.num_labels)  # transformers' name
        init_module(self.classifier, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> ModelOutput:
        """input_ids, attention_mask (B, T), right-padded; token_type_ids are ignored (as by
        GPTForSequenceClassification). Returns logits (B, T, num_labels); with `labels` (B, T;
        -100 = no label, e.g. a word's later pieces and padding) their cross-entropy + lm_coef x
        the next-token loss."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.transformer(input_ids, attention_mask).last_hidden_state
        logits = self.classifier(self.dropout(hidden))
        if labels is None:
            return ModelOutput(logits=logits)
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        return ModelOutput(loss=loss + auxiliary_lm_loss(self, hidden, input_ids, attention_mask), logits=logits)


class GPTForQuestionAnswering(GPTPreTrainedModel):
    """GPT fine-tuned for extractive QA: a linear layer from every token's state to a start and an
    end score (transformers' GPT2ForQuestionAnswering), plus the auxiliary language-model loss.

    The input is "[CLS] question [SEP] context [SEP]", so every context token has read the question;
    but a left-to-right model scores each token as an answer's start or end from its left context
    only: the start of a span is chosen before the model has read the span, and SQuAD 2.0's
    no-answer score ([CLS], position 0) has read nothing. The BERT paper (section 5.1) measured
    what that costs on SQuAD.
    """

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.transformer = GPTModel(config)
        self.qa_outputs = nn.Linear(config.n_embd, 2)  # transformers' name: start and end
        init_module(self.qa_outputs, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, start_positions: torch.Tensor | None = None,
                end_positions: torch.Tensor | None = None) -> ModelOutput:
        """input_ids, attention_mask (B, T), right-padded; token_type_ids are ignored (the [SEP]
        delimiter tells question from context). Returns start_logits and end_logits (B, T); with the
        gold positions (B,) the span loss (see `ops.span_loss`) + lm_coef x the next-token loss."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.transformer(input_ids, attention_mask).last_hidden_state
        start_logits, end_logits = self.qa_outputs(hidden).float().unbind(dim=-1)  # 2 x (B, T)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
            loss = loss + auxiliary_lm_loss(self, hidden, input_ids, attention_mask)
        return ModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits)


# Our model class -> the `architectures` name saved for each layout: transformers' class, or ours
# where transformers has none (GPT-1 with a token or span head).
ARCHITECTURES = {
    "GPTLMHeadModel": {"openai-gpt": "OpenAIGPTLMHeadModel", "gpt2": "GPT2LMHeadModel"},
    "GPTForSequenceClassification": {"openai-gpt": "OpenAIGPTForSequenceClassification",
                                     "gpt2": "GPT2ForSequenceClassification"},
    "GPTForTokenClassification": {"openai-gpt": "GPTForTokenClassification", "gpt2": "GPT2ForTokenClassification"},
    "GPTForQuestionAnswering": {"openai-gpt": "GPTForQuestionAnswering", "gpt2": "GPT2ForQuestionAnswering"},
}
# A directory's `architectures` name (ours, or either layout's) -> the class that loads it; any other
# (a bare GPT2Model's included) opens as the language model.
MODEL_CLASSES = {name: cls for cls in (GPTLMHeadModel, GPTForSequenceClassification, GPTForTokenClassification,
                                       GPTForQuestionAnswering)
                 for name in (cls.__name__, *ARCHITECTURES[cls.__name__].values())}
TIED = ("lm_head.weight",)
# transformers stores these as Conv1D weights, (in, out): the transpose of nn.Linear's.
_CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
# (ours, GPT-1's) where the names differ; GPT-2's names are ours.
_OPENAI_GPT_NAMES = (("transformer.wte.", "transformer.tokens_embed."), ("transformer.wpe.", "transformer.positions_embed."))
# Buffers some transformers versions store: the causal mask, rebuilt here from the config.
_BUFFERS = (".attn.bias", ".attn.masked_bias")


def to_transformers(state: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Our LM state dict under transformers' names and shapes for config.model_type."""
    converted = {}
    for name, tensor in state.items():
        if name in TIED:
            continue
        if name.endswith(_CONV1D):
            tensor = tensor.t()
        if not config.pre_layer_norm:
            for ours, theirs in _OPENAI_GPT_NAMES:
                if name.startswith(ours):
                    name = theirs + name[len(ours):]
        converted[name] = tensor
    return converted


def from_transformers(state: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """transformers' GPT-1 or GPT-2 tensors (with or without the `transformer.` prefix, as the
    bare models save them) under our names and shapes."""
    converted = {}
    for name, tensor in state.items():
        if name.endswith(_BUFFERS) or name in TIED:
            continue
        if not name.startswith(("transformer.", "score.", "classifier.", "qa_outputs.")):  # a bare model's: no prefix
            name = "transformer." + name
        for ours, theirs in _OPENAI_GPT_NAMES:
            if name.startswith(theirs):
                name = ours + name[len(theirs):]
        if name.endswith(_CONV1D):
            tensor = tensor.t()
        converted[name] = tensor
    return converted


def _layer_of(name: str) -> int | None:
    """A task model's parameter -> its depth: 0 the embeddings, i + 1 block i, None the final LayerNorm and head."""
    if match := re.search(r"(?:^|\.)h\.(\d+)\.", name):
        return int(match.group(1)) + 1
    return 0 if re.search(r"(?:^|\.)(wte|wpe)\.", name) else None


SPEC = FamilySpec(
    config_class=GPTConfig,
    model_classes=MODEL_CLASSES,
    default_class=GPTLMHeadModel,
    describe=lambda c: f"{c.model_type} decoder ({c.n_layer} layers, {c.n_embd} wide, {c.vocab_size:,}-token vocabulary)",
    objectives=("clm",),
    pretraining_models={"causal_lm": GPTLMHeadModel},
    tokenizer_model="bpe",  # GPT-2's byte-level BPE
    # <|endoftext|> as bos and eos in config.json, so that transformers' generate stops there too
    token_ids=lambda tokenizer: {f"{role}_token_id": tokenizer.special_token_id(role) for role in ("bos", "eos")
                                 if role in tokenizer.special_tokens},
    pretrain_switches={"pre_layer_norm": lambda on: {"pre_layer_norm": True} if on else {}},
    context_length=lambda c: c.n_positions,
    heads={"sequence": GPTForSequenceClassification, "token": GPTForTokenClassification,
           "span": GPTForQuestionAnswering},
    heads_note="a GPT is fine-tuned here for sequence, token and span tasks",
    finetune_modes=("finetune",),
    feature_encoder=lambda directory, config: SPEC.load(directory, config).transformer,
    feature_layers=lambda c: c.n_layer,
    feature_width=lambda c: c.n_embd,
    input_vectors=lambda stack: stack.wte.weight,
    layer_of=_layer_of,
    num_layers=lambda model: len(model.transformer.h),
    generation="causal",
    static_cache=StaticCache,
    tokenizer_classes={"gpt2": "GPT2Tokenizer", "openai-gpt": "OpenAIGPTTokenizer"},
)
