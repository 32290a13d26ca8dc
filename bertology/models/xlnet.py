"""XLNet: permutation language modelling with two-stream attention, in one file.

Follows Yang et al. 2019, "XLNet: Generalized Autoregressive Pretraining for Language
Understanding", on Transformer-XL's relative positions and segment recurrence (Dai et al. 2019):

    input ids ─► word_embedding ─► dropout ─► content stream h (B, T, D)
    mask_emb (one learned vector) per prediction ─► dropout ─► query stream g (B, P, D)
        N x [ h = LN(h + attention(q=h, kv=[mems; h]));  g = LN(g + attention(q=g, kv=[mems; h]))
              h = LN(h + FFN(h));                         g = LN(g + FFN(g)) ]
    ─► dropout ─► g (or h without target_mapping) ─► lm_loss (tied to word_embedding, + bias) ─► logits

What is where:
- `XLNetRelativeAttention`: one attention score per (query i, key j) from three terms, as the
  paper's appendix: content (q_i + r_w_bias) . k_j, position (q_i + r_r_bias) . r_{i-j} with
  r a sinusoid of the relative distance (`relative_positional_encoding`, aligned by
  `rel_shift`), and segment (q_i + r_s_bias) . seg_embed[same or different segment]; the two
  streams share every weight. The query stream sees the content of the tokens before it in the
  factorisation order but not its own; the content stream also sees itself.
- `perm_mask` (B, T, T), 1 = query i may not see token j (data/permutation.py builds it from a
  sampled factorisation order), or (B, T, M + T) when some memory positions are hidden too; `target_mapping` (B, P, T) one-hot rows: the P positions whose
  tokens the query stream predicts (partial prediction).
- `mems`: per layer, the content states (B, M, D) of the previous segment (Transformer-XL's
  recurrence), attended to by every query and given no gradient; `mem_len` keeps the last M.
- `XLNetLMHeadModel` (pre-training, permutation LM) and the task models, transformers' classes:
  `XLNetForSequenceClassification` (transformers' sequence summary: the last token's state, a
  dense layer and tanh, then a linear layer to the labels), `XLNetForTokenClassification` (a
  linear layer on every position's state: tagging) and `XLNetForQuestionAnsweringSimple` (a
  linear layer from every position's state to a start and an end score: extractive QA). The
  content stream reads the whole input both ways, as BERT's encoder does; relative positions
  make a row's outputs the same whichever side it is padded on (XLNet's tokenizer pads on the
  left, bertology's batches on the right).

Module names are those of transformers' `XLNetLMHeadModel` (`transformer.layer.0.rel_attn.r_w_bias`,
...) except the five attention projections: transformers keeps them as (D, heads, head size)
tensors used in einsums, ours are `nn.Linear`s; `to_transformers` / `from_transformers` below
reshape them. transformers' tensors are sequence-first (T, B, D), ours batch-first, and so are
the mems (transformers': (M, B, D) per layer).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..memory import check_model_size
from ..ops import IGNORE_INDEX, cross_entropy_with_accuracy, span_loss
from .base import ConfigFile, FamilySpec, ModelOutput, PreTrainedModel, activation

MODEL_TYPE = "xlnet"
ATTENTION_TYPES = ("bi", "uni")  # XLNet's bidirectional attention, or Transformer-XL's causal one
SUMMARY_ACTIVATIONS = ("tanh", "linear", None)


XLNET_SIZE_FIELDS = ("vocab_size", "d_model", "n_layer", "d_inner")


def xlnet_parameters(values: dict[str, Any]) -> int:
    """An XLNet's parameter count from its config's fields: the embedding, then per layer the query,
    key, value, output and position projections (5 D^2), the feed-forward (2 D I) and the small rest."""
    width, inner = values["d_model"], values["d_inner"]
    per_layer = 5 * width * width + 2 * width * inner + 12 * width + inner
    return values["vocab_size"] * width + values["n_layer"] * per_layer

@dataclass
class XLNetConfig(ConfigFile):
    """Hyper-parameters of an XLNet (transformers' XLNetConfig field names and defaults: xlnet-large).

    Example: `XLNetConfig.from_preset("base", vocab_size=32000)` has xlnet-base-cased's sizes
    (12 layers, 768 wide, 12 heads, 3072 feed-forward); "tiny" is 2 layers, 128 wide.
    """

    MODEL_TYPE: ClassVar[str] = MODEL_TYPE
    WHAT: ClassVar[str] = "an XLNet"

    # memory.py's checks: this family's parameter count, and the fields that set its size
    count_parameters: ClassVar = staticmethod(xlnet_parameters)
    size_fields: ClassVar[tuple[str, ...]] = XLNET_SIZE_FIELDS
    vocab_size: int = 32000
    d_model: int = 1024
    n_layer: int = 24
    n_head: int = 16
    d_inner: int = 4096  # the feed-forward width
    ff_activation: str = "gelu"
    attn_type: str = "bi"  # "uni": Transformer-XL's causal attention
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1
    mem_len: int | None = 512  # content states kept for the next segment; None or 0 = all of them
    reuse_len: int | None = None  # only the first reuse_len tokens of a segment go into the memory
    use_mems_eval: bool = True  # return mems from a forward in eval mode (unless told otherwise)
    use_mems_train: bool = False  # ... and in training mode
    bi_data: bool = False  # the batch's second half reads its positions backwards (the release's pre-training)
    clamp_len: int = -1  # relative distances beyond this share its encoding; -1 = no clamping
    same_length: bool = False  # "uni": every query attends to the same number of keys
    untie_r: bool = True  # per-layer r_w_bias / r_r_bias (transformers' only layout)
    # Fine-tuning (XLNetForSequenceClassification): transformers' sequence summary and the labels.
    summary_type: str = "last"
    summary_use_proj: bool = True
    summary_activation: str | None = "tanh"
    summary_last_dropout: float = 0.1
    num_labels: int = 2
    id2label: dict[int, str] | None = None
    pad_token_id: int | None = 5
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # other config.json keys, kept

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layer", "n_head", "d_inner"):
            value = getattr(self, name)
            if type(value) is not int or not 0 < value <= 2**21:
                raise UserError(f"config field {name!r} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise UserError(f"config field 'd_model' ({self.d_model}) must be divisible by 'n_head' ({self.n_head})")
        if self.d_model % 2:
            raise UserError(f"config field 'd_model' must be even (sine and cosine halves), got {self.d_model}")
        for name in ("mem_len", "reuse_len"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 0):
                raise UserError(f"config field {name!r} must be a non-negative integer or null, got {value!r}")
        if type(self.clamp_len) is not int:
            raise UserError(f"config field 'clamp_len' must be an integer, got {self.clamp_len!r}")
        if type(self.initializer_range) not in (int, float) or not 0 <= self.initializer_range < float("inf"):
            raise UserError(f"config field 'initializer_range' must be a finite number >= 0, got "
                            f"{self.initializer_range!r}")
        for name in ("dropout", "summary_last_dropout"):
            if type(getattr(self, name)) not in (int, float) or not 0.0 <= getattr(self, name) < 1.0:
                raise UserError(f"config field {name!r} must be a number in [0, 1), got {getattr(self, name)!r}")
        if self.attn_type not in ATTENTION_TYPES:
            raise UserError(f"config field 'attn_type' must be one of {', '.join(ATTENTION_TYPES)}, "
                            f"got {self.attn_type!r}")
        try:
            activation(self.ff_activation)
        except (KeyError, TypeError):
            raise UserError(f"config field 'ff_activation' {self.ff_activation!r} is not known") from None
        if self.untie_r is not True:
            raise UserError("config field 'untie_r' must be true: each layer has its own r_w_bias and r_r_bias "
                            "(transformers' layout)")
        if self.summary_type != "last":
            raise UserError(f"config field 'summary_type' must be 'last' (XLNet's), got {self.summary_type!r}")
        if self.summary_activation not in SUMMARY_ACTIVATIONS:
            raise UserError(f"config field 'summary_activation' must be 'tanh', 'linear' or null, "
                            f"got {self.summary_activation!r}")
        if type(self.num_labels) is not int or self.num_labels < 1:
            raise UserError(f"config field 'num_labels' must be a positive integer, got {self.num_labels!r}")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if getattr(self, name) is not None and (type(getattr(self, name)) is not int or getattr(self, name) < 0):
                raise UserError(f"config field {name!r} must be a token id or null, got {getattr(self, name)!r}")
        check_model_size(self)  # last: the fields are known to be numbers

    @property
    def model_type(self) -> str:
        """transformers' name for this family."""
        return MODEL_TYPE

    @property
    def d_head(self) -> int:
        """The width of each attention head."""
        return self.d_model // self.n_head

    @classmethod
    def sizes(cls, layers: int, width: int) -> dict[str, Any]:
        """A named size's fields: heads of 64 and a feed-forward of 4 x width, as xlnet-base-cased
        and xlnet-large-cased."""
        return dict(n_layer=layers, d_model=width, n_head=max(width // 64, 1), d_inner=4 * width)

    def stored_extras(self) -> dict[str, Any]:
        """transformers' XLNetConfig also stores the head width."""
        return {"d_head": self.d_head}

    @classmethod
    def from_stored(cls, data: dict[str, Any], model_type: str, source: str) -> dict[str, Any]:
        """The release's `n_token` as vocab_size; `d_head` checked against d_model / n_head, then dropped."""
        if "n_token" in data:  # the release's name, which transformers still reads
            data.setdefault("vocab_size", data.pop("n_token"))
        d_head, d_model, n_head = data.pop("d_head", None), data.get("d_model"), data.get("n_head")
        if d_head is not None and type(d_model) is int and type(n_head) is int and n_head > 0 \
                and d_head != d_model // n_head:
            raise UserError(f"{source}: config field 'd_head' ({d_head!r}) must be d_model / n_head ({d_model // n_head})")
        return data


def rel_shift(scores: torch.Tensor, key_length: int) -> torch.Tensor:
    """Align position scores to keys: (B, heads, T, R) scores of each query against the R relative
    encodings (distances klen, klen - 1, ..., down to -T + 1) -> (B, heads, T, klen), where entry
    [i, j] is the score for the distance between query i (at mlen + i) and key j.

    Query i's distance to key j, (mlen + i) - j, is encoding number T - i + j: a reshape that
    drops one row shifts row i left by T - i, Transformer-XL's trick (no gather)."""
    batch, heads, length, width = scores.shape
    shifted = scores.reshape(batch, heads, width, length)[:, :, 1:, :].reshape(batch, heads, length, width - 1)
    return shifted[..., :key_length]


class XLNetRelativeAttention(nn.Module):
    """Two-stream multi-head attention with relative positions and segments, then the residual
    and LayerNorm (post-LN, as Transformer-XL)."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.n_head, self.d_head = config.n_head, config.d_head
        width = config.n_head * config.d_head
        self.q = nn.Linear(config.d_model, width, bias=False)
        self.k = nn.Linear(config.d_model, width, bias=False)
        self.v = nn.Linear(config.d_model, width, bias=False)
        self.r = nn.Linear(config.d_model, width, bias=False)  # projects the position encodings
        self.o = nn.Linear(width, config.d_model, bias=False)
        self.r_w_bias = nn.Parameter(torch.zeros(config.n_head, config.d_head))  # content bias ("u" in the paper)
        self.r_r_bias = nn.Parameter(torch.zeros(config.n_head, config.d_head))  # position bias ("v")
        self.r_s_bias = nn.Parameter(torch.zeros(config.n_head, config.d_head))  # segment bias ("b")
        self.seg_embed = nn.Parameter(torch.zeros(2, config.n_head, config.d_head))  # same / different segment
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.attention_dropout = config.dropout

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, heads * head size) -> (B, heads, T, head size)."""
        return x.view(x.shape[0], x.shape[1], self.n_head, self.d_head).transpose(1, 2)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, position_key: torch.Tensor,
               different_segment: torch.Tensor | None, hidden: torch.Tensor | None) -> torch.Tensor:
        """The attention itself. query (B, heads, T, d); key, value (B, heads, klen, d); position_key
        (B or 1, heads, R, d): the projected relative encodings; different_segment (B, T, klen) bool or
        None; hidden (B, T, klen) bool, True = may not attend, or None. Returns (B, heads, T, d)."""
        position = rel_shift((query + self.r_r_bias[:, None]) @ position_key.transpose(-2, -1), key.shape[2])
        bias = position
        if different_segment is not None:
            segment = (query + self.r_s_bias[:, None]) @ self.seg_embed.permute(1, 2, 0)  # (B, heads, T, 2)
            bias = bias + torch.where(different_segment[:, None], segment[..., 1:], segment[..., :1])
        bias = bias * self.d_head ** -0.5
        if hidden is not None:  # the dtype's minimum, not -inf: a row with nothing to see averages, no NaN
            bias = bias.masked_fill(hidden[:, None], torch.finfo(bias.dtype).min)
        # The content term (query + r_w_bias) . key, scaled, plus the bias above, in one fused kernel.
        return F.scaled_dot_product_attention(query + self.r_w_bias[:, None], key, value, attn_mask=bias,
                                              dropout_p=self.attention_dropout if self.training else 0.0)

    def output(self, residual: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """(B, heads, T, d) -> LN(residual + dropout(o(heads concatenated))) (B, T, D)."""
        merged = attended.transpose(1, 2).reshape(residual.shape[0], residual.shape[1], -1)
        return self.layer_norm(residual + self.dropout(self.o(merged)))

    def forward(self, h: torch.Tensor, g: torch.Tensor | None, hidden_h: torch.Tensor | None,
                hidden_g: torch.Tensor | None, positions: torch.Tensor, different_segment: torch.Tensor | None,
                mem: torch.Tensor | None = None, target_mapping: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """h: the content stream (B, T, D); g: the query stream (B, P, D) or None; hidden_h, hidden_g:
        (B, T, klen) what each stream may not see (klen = M + T); positions: the relative encodings
        (B or 1, R, D); mem (B, M, D); target_mapping (B, P, T). Returns both streams' outputs."""
        context = h if mem is None else torch.cat([mem, h], dim=1)
        key, value = self._heads(self.k(context)), self._heads(self.v(context))
        position_key = self._heads(self.r(positions))
        out_h = self.output(h, self.attend(self._heads(self.q(h)), key, value, position_key, different_segment,
                                           hidden_h))
        if g is None:
            return out_h, None
        query_g = self._heads(self.q(g))  # (B, heads, P, d)
        if target_mapping is None:
            attended_g = self.attend(query_g, key, value, position_key, different_segment, hidden_g)
        else:  # each prediction's query moves to its token's position, attends there, and moves back
            mapping = target_mapping[:, None].to(query_g.dtype)  # (B, 1, P, T)
            attended_g = self.attend(mapping.transpose(-2, -1) @ query_g, key, value, position_key,
                                     different_segment, hidden_g)
            attended_g = mapping @ attended_g
        return out_h, self.output(g, attended_g)


class XLNetFeedForward(nn.Module):
    """The position-wise feed-forward, then the residual and LayerNorm."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.layer_1 = nn.Linear(config.d_model, config.d_inner)
        self.layer_2 = nn.Linear(config.d_inner, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.act = activation(config.ff_activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D)."""
        return self.layer_norm(x + self.dropout(self.layer_2(self.dropout(self.act(self.layer_1(x))))))


class XLNetLayer(nn.Module):
    """One block: two-stream relative attention, then the feed-forward on each stream."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.rel_attn = XLNetRelativeAttention(config)
        self.ff = XLNetFeedForward(config)

    def forward(self, h: torch.Tensor, g: torch.Tensor | None, hidden_h: torch.Tensor | None,
                hidden_g: torch.Tensor | None, positions: torch.Tensor, different_segment: torch.Tensor | None,
                mem: torch.Tensor | None = None, target_mapping: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The content stream h (B, T, D) and query stream g (B, P, D) or None -> both, updated
        (the arguments as `XLNetRelativeAttention.forward`'s)."""
        h, g = self.rel_attn(h, g, hidden_h, hidden_g, positions, different_segment, mem, target_mapping)
        return self.ff(h), (self.ff(g) if g is not None else None)


@dataclass
class XLNetOutput(ModelOutput):
    """ModelOutput with XLNet's memory: per layer, the content states (B, M, D) to attend to next."""

    mems: list[torch.Tensor] | None = None


class XLNetPreTrainedModel(PreTrainedModel):
    """Initialisation, saving and loading, shared by the bare model and the task models."""

    config_class = XLNetConfig
    repeated_blocks = (XLNetLayer,)
    backbone = "transformer"

    def init_weights(self) -> None:
        """normal(0, initializer_range) for every matrix, bias vector of the attention and mask_emb,
        zero linear biases, unit LayerNorms (transformers' initialisation)."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=std)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, XLNetRelativeAttention):
                for parameter in (module.r_w_bias, module.r_r_bias, module.r_s_bias, module.seg_embed):
                    nn.init.normal_(parameter, std=std)
            elif isinstance(module, XLNetModel):
                nn.init.normal_(module.mask_emb, std=std)

    def tied_keys(self) -> tuple[str, ...]:
        """The output matrix is the word embeddings."""
        return TIED

    def to_checkpoint(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Our names -> transformers' (the attention projections as its (d_model, n_head, d_head) tensors)."""
        return to_transformers(state, self.config)

    @classmethod
    def from_checkpoint(cls, stored: dict[str, torch.Tensor], config: XLNetConfig,
                        source: Path) -> dict[str, torch.Tensor]:
        """transformers' tensors -> our names."""
        return from_transformers(stored, config, source)


class XLNetModel(XLNetPreTrainedModel):
    """The stack: word embedding and mask_emb, N two-stream layers over relative positions."""

    def __init__(self, config: XLNetConfig):
        super().__init__(config)
        self.word_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.mask_emb = nn.Parameter(torch.zeros(1, 1, config.d_model))  # the query stream's input
        self.layer = nn.ModuleList(XLNetLayer(config) for _ in range(config.n_layer))
        self.dropout = nn.Dropout(config.dropout)
        self.init_weights()

    def relative_positional_encoding(self, length: int, key_length: int, batch: int, device: torch.device
                                     ) -> torch.Tensor:
        """Sinusoids (B or 1, R, D) of the relative distances key_length, key_length - 1, ... down to
        -length + 1 ("bi"; "uni": down to 1), R of them, each [sin(d * f), cos(d * f)] over the
        frequencies f = 10000^(-2k/D), distances clamped to clamp_len if > 0. With bi_data, the
        batch's second half gets the negated distances (its text read backwards)."""
        config = self.config
        inv_freq = 1 / torch.pow(10000, torch.arange(0, config.d_model, 2.0, device=device) / config.d_model)
        end = -length if config.attn_type == "bi" else -1
        distances = [torch.arange(key_length, end, -1, device=device).float()]
        if config.bi_data:
            if batch % 2:
                raise UserError(f"bi_data reads half of each batch backwards: the batch size must be even, got {batch}")
            distances.append(-distances[0])
        encodings = []
        for distance in distances:
            if config.clamp_len > 0:
                distance = distance.clamp(-config.clamp_len, config.clamp_len)
            angles = distance[:, None] * inv_freq
            encodings.append(torch.cat([angles.sin(), angles.cos()], dim=-1)[None])
        if not config.bi_data:
            return encodings[0]
        return torch.cat([e.expand(batch // 2, -1, -1) for e in encodings])

    def cache_mem(self, hidden: torch.Tensor, previous: torch.Tensor | None) -> torch.Tensor:
        """The memory for the next segment: the last mem_len of previous + hidden (B, M + T, D)
        (hidden cut to its first reuse_len tokens if set; all of them if mem_len is None or 0), detached."""
        if self.config.reuse_len:
            hidden = hidden[:, :self.config.reuse_len]
        memory = hidden if previous is None else torch.cat([previous, hidden], dim=1)
        if self.config.mem_len:
            memory = memory[:, -self.config.mem_len:]
        return memory.detach()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, perm_mask: torch.Tensor | None = None,
                target_mapping: torch.Tensor | None = None, mems: list[torch.Tensor] | None = None,
                use_mems: bool | None = None, output_hidden_states: bool = False) -> XLNetOutput:
        """input_ids (B, T); attention_mask (B, T), 1 = a real token; token_type_ids (B, T) segments;
        perm_mask (B, T, T), 1 = token i may not see token j (the query stream; the content stream
        also sees itself), every memory position visible; or (B, T, M + T) over the memory and the
        segment, to hide memory positions too (a new document's tokens); target_mapping (B, P, T): predict at these positions (the query stream),
        none = the content stream's output; mems: per layer (B, M, D) from the previous segment.

        Returns last_hidden_state (B, P or T, D), if use_mems (default: config.use_mems_eval,
        or use_mems_train in training) the mems for the next segment, and when asked hidden_states:
        the content stream's word embeddings output, then each layer's output (B, T, D) (the query
        stream's states are not kept)."""
        batch, length = input_ids.shape
        device = input_ids.device
        mem_length = mems[0].shape[1] if mems is not None and mems[0] is not None else 0
        key_length = mem_length + length
        if use_mems is None:
            use_mems = self.config.use_mems_train if self.training else self.config.use_mems_eval

        # What each query may not see, (B, T, klen), True = hidden; the memory is visible to all.
        hidden = torch.zeros(1, length, key_length, dtype=torch.bool, device=device)
        if self.config.attn_type == "uni":  # causal, over the memory and the segment
            rows = torch.arange(length, device=device)[:, None] + mem_length
            columns = torch.arange(key_length, device=device)[None, :]
            hidden = hidden | (columns > rows)
            if self.config.same_length:  # and as many keys for every query: M + 1
                hidden = hidden | (columns < rows - mem_length)
        if attention_mask is not None:
            hidden = hidden | F.pad(attention_mask[:, None, :] == 0, (mem_length, 0))
        if perm_mask is not None:  # over the segment (memory visible), or over [memory; segment]
            hidden = hidden | F.pad(perm_mask > 0, (key_length - perm_mask.shape[-1], 0))
        if self.config.attn_type == "bi" and attention_mask is None and perm_mask is None:
            hidden_g = hidden_h = None  # nothing hidden: no mask at all (the fused kernel's fast path)
        else:
            hidden_g = hidden
            itself = F.pad(torch.eye(length, dtype=torch.bool, device=device), (mem_length, 0))
            hidden_h = hidden & ~itself  # the content stream always sees its own token

        h = self.dropout(self.word_embedding(input_ids))
        g = None
        if target_mapping is not None:  # the same learned vector for every prediction: it knows its position only
            g = self.dropout(self.mask_emb.expand(batch, target_mapping.shape[1], -1))
        different_segment = None
        if token_type_ids is not None:  # memory tokens count as segment 0, as transformers'
            segments = F.pad(token_type_ids, (mem_length, 0))
            different_segment = token_type_ids[:, :, None] != segments[:, None, :]  # (B, T, klen)
        positions = self.dropout(self.relative_positional_encoding(length, key_length, batch, device).to(h.dtype))

        new_mems, hidden_states = [], [h]
        for index, layer in enumerate(self.layer):
            mem = mems[index] if mems is not None else None
            if use_mems:
                new_mems.append(self.cache_mem(h, mem))
            h, g = layer(h, g, hidden_h, hidden_g, positions, different_segment, mem, target_mapping)
            hidden_states.append(h)
        return XLNetOutput(last_hidden_state=self.dropout(g if g is not None else h),
                           mems=new_mems if use_mems else None,
                           hidden_states=tuple(hidden_states) if output_hidden_states else None)


class XLNetLMHeadModel(XLNetPreTrainedModel):
    """XLNet with its language-model head: the tied embedding table and a bias of its own."""

    def __init__(self, config: XLNetConfig):
        super().__init__(config)
        self.transformer = XLNetModel(config)
        self.lm_loss = nn.Linear(config.d_model, config.vocab_size)  # transformers' name
        self.lm_loss.weight = self.transformer.word_embedding.weight
        nn.init.zeros_(self.lm_loss.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, perm_mask: torch.Tensor | None = None,
                target_mapping: torch.Tensor | None = None, mems: list[torch.Tensor] | None = None,
                use_mems: bool | None = None, labels: torch.Tensor | None = None) -> XLNetOutput:
        """As `XLNetModel.forward`; returns logits (B, P or T, V) and mems. With `labels` (B, P or T;
        -100 = ignored): the mean cross-entropy, logits (N, V) at the N scored predictions only, and
        for the training loop's accuracy masked_lm_loss and masked_lm_correct."""
        encoded = self.transformer(input_ids, attention_mask, token_type_ids, perm_mask, target_mapping, mems, use_mems)
        hidden = encoded.last_hidden_state
        if labels is None:
            return XLNetOutput(logits=self.lm_loss(hidden), mems=encoded.mems)
        scored = labels != IGNORE_INDEX
        logits = self.lm_loss(hidden[scored])  # only the scored predictions: no (B, P, V) tensor in training
        loss, correct = cross_entropy_with_accuracy(logits, labels[scored])
        return XLNetOutput(loss=loss, logits=logits, mems=encoded.mems, masked_lm_loss=loss, masked_lm_correct=correct)


class SequenceSummary(nn.Module):
    """transformers' sequence summary for XLNet: the last token's state, a dense layer and tanh."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.summary = nn.Linear(config.d_model, config.d_model) if config.summary_use_proj else nn.Identity()
        self.activation = torch.tanh if config.summary_activation == "tanh" else nn.Identity()
        self.last_dropout = nn.Dropout(config.summary_last_dropout)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, T, D) -> (B, D), from each row's last real token: XLNet's tokenizer pads on the left,
        so that is position T - 1 (transformers' choice); bertology's batches pad on the right."""
        if attention_mask is None:
            last = torch.full((hidden.shape[0],), hidden.shape[1] - 1, device=hidden.device)
        else:
            last = hidden.shape[1] - 1 - attention_mask.flip(1).long().argmax(1)
        state = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return self.last_dropout(self.activation(self.summary(state)))


class XLNetForSequenceClassification(XLNetPreTrainedModel):
    """XLNet fine-tuned for a sequence task: the summary of the last token, then a linear layer
    to the labels (transformers' XLNetForSequenceClassification)."""

    def __init__(self, config: XLNetConfig):
        super().__init__(config)
        self.transformer = XLNetModel(config)
        self.sequence_summary = SequenceSummary(config)
        self.logits_proj = nn.Linear(config.d_model, config.num_labels)
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                mems: list[torch.Tensor] | None = None, use_mems: bool | None = None) -> XLNetOutput:
        """input_ids, attention_mask, token_type_ids (B, T), padded on either side. Returns logits
        (B, num_labels) (and mems); with `labels` (B,) the loss: cross-entropy, or MSE for one label."""
        encoded = self.transformer(input_ids, attention_mask, token_type_ids, mems=mems, use_mems=use_mems)
        logits = self.logits_proj(self.sequence_summary(encoded.last_hidden_state, attention_mask))
        if labels is None:
            return XLNetOutput(logits=logits, mems=encoded.mems)
        if self.config.num_labels == 1:
            loss = F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))
        else:
            loss = F.cross_entropy(logits, labels)
        return XLNetOutput(loss=loss, logits=logits, mems=encoded.mems)


class XLNetForTokenClassification(XLNetPreTrainedModel):
    """XLNet fine-tuned for tagging: a linear layer on every position's content-stream state, after
    the stack's last dropout (transformers' XLNetForTokenClassification). Each token's state has
    read the whole input, left and right."""

    def __init__(self, config: XLNetConfig):
        super().__init__(config)
        self.transformer = XLNetModel(config)
        self.classifier = nn.Linear(config.d_model, config.num_labels)  # transformers' name
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                mems: list[torch.Tensor] | None = None, use_mems: bool | None = None) -> XLNetOutput:
        """input_ids, attention_mask, token_type_ids (B, T), padded on either side. Returns logits
        (B, T, num_labels) (and mems); with `labels` (B, T; -100 = no label, e.g. a word's later
        pieces and padding) their cross-entropy."""
        encoded = self.transformer(input_ids, attention_mask, token_type_ids, mems=mems, use_mems=use_mems)
        logits = self.classifier(encoded.last_hidden_state)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        return XLNetOutput(loss=loss, logits=logits, mems=encoded.mems)


class XLNetForQuestionAnsweringSimple(XLNetPreTrainedModel):
    """XLNet fine-tuned for extractive QA: a linear layer from every position's state to a start
    and an end score (transformers' XLNetForQuestionAnsweringSimple; not its XLNetForQuestionAnswering,
    the release's beam search over start and end). transformers sizes this layer by num_labels, so
    the config says 2 whatever it was given."""

    def __init__(self, config: XLNetConfig):
        config = dataclasses.replace(config, num_labels=2, id2label=None)  # start and end
        super().__init__(config)
        self.transformer = XLNetModel(config)
        self.qa_outputs = nn.Linear(config.d_model, 2)  # transformers' name
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, start_positions: torch.Tensor | None = None,
                end_positions: torch.Tensor | None = None, mems: list[torch.Tensor] | None = None,
                use_mems: bool | None = None) -> XLNetOutput:
        """input_ids, attention_mask, token_type_ids (B, T), padded on either side. Returns
        start_logits and end_logits (B, T) (and mems); with the gold positions (B,) the span loss
        (ops.span_loss: the mean of the start and end cross-entropies)."""
        encoded = self.transformer(input_ids, attention_mask, token_type_ids, mems=mems, use_mems=use_mems)
        start_logits, end_logits = self.qa_outputs(encoded.last_hidden_state).float().unbind(dim=-1)  # 2 x (B, T)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return XLNetOutput(loss=loss, start_logits=start_logits, end_logits=end_logits, mems=encoded.mems)


# The task models by class name, which is also transformers' name and config.json's `architectures`.
MODEL_CLASSES = {cls.__name__: cls for cls in (XLNetLMHeadModel, XLNetForSequenceClassification,
                                               XLNetForTokenClassification, XLNetForQuestionAnsweringSimple)}
TIED = ("lm_loss.weight",)
# The key table: transformers keeps the attention projections as (D, heads, head size) tensors:
# q, k, v, r map the input with einsum("ibh,hnd->ibnd"), the transpose of nn.Linear's (out, in)
# weight; o maps back with einsum("ibnd,hnd->ibh"), nn.Linear's layout already. Every other
# name and shape is transformers' own.
_IN_PROJECTIONS = (".rel_attn.q", ".rel_attn.k", ".rel_attn.v", ".rel_attn.r")
_OUT_PROJECTION = ".rel_attn.o"
_TOP_LEVEL = ("transformer.", "lm_loss.", "sequence_summary.", "logits_proj.", "classifier.", "qa_outputs.")


def to_transformers(state: dict[str, torch.Tensor], config: XLNetConfig) -> dict[str, torch.Tensor]:
    """Our state dict under transformers' names and shapes (the tied output matrix left out)."""
    converted = {}
    for name, tensor in state.items():
        if name in TIED:
            continue
        module = name.removesuffix(".weight")
        if module.endswith(_IN_PROJECTIONS):
            name, tensor = module, tensor.t().reshape(config.d_model, config.n_head, config.d_head)
        elif module.endswith(_OUT_PROJECTION):
            name, tensor = module, tensor.reshape(config.d_model, config.n_head, config.d_head)
        converted[name] = tensor.contiguous()
    return converted


def from_transformers(state: dict[str, torch.Tensor], config: XLNetConfig, source: Path | str
                      ) -> dict[str, torch.Tensor]:
    """transformers' XLNet tensors (with or without the `transformer.` prefix, as the bare model
    saves them) under our names and shapes. A projection of the wrong shape is a one-line error
    naming `source`, the file they were read from."""
    converted = {}
    for name, tensor in state.items():
        if name in TIED:
            continue
        if not name.startswith(_TOP_LEVEL):
            name = "transformer." + name
        if name.endswith(_IN_PROJECTIONS + (_OUT_PROJECTION,)):
            expected = (config.d_model, config.n_head, config.d_head)
            if tuple(tensor.shape) != expected:
                raise UserError(f"{source}: shape mismatch for {name}: checkpoint {tuple(tensor.shape)}, "
                                f"config.json expects {expected}")
            flat = tensor.reshape(config.d_model, config.n_head * config.d_head)
            name, tensor = name + ".weight", flat if name.endswith(_OUT_PROJECTION) else flat.t()
        converted[name] = tensor.contiguous()
    return converted


def _layer_of(name: str) -> int | None:
    """A task model's parameter -> its depth: 0 the embeddings (and the mask embedding), i + 1 layer i,
    None the head."""
    if match := re.search(r"(?:^|\.)layer\.(\d+)\.", name):
        return int(match.group(1)) + 1
    return 0 if re.search(r"(?:^|\.)word_embedding\.|(?:^|\.)mask_emb$", name) else None


SPEC = FamilySpec(
    config_class=XLNetConfig,
    model_classes=MODEL_CLASSES,
    default_class=XLNetLMHeadModel,
    describe=lambda c: f"XLNet (two-stream; {c.n_layer} layers, {c.d_model} wide, {c.vocab_size:,}-token vocabulary)",
    objectives=("plm",),
    pretraining_models={"permutation_lm": XLNetLMHeadModel},
    pretrain_switches={"mem_len": lambda n: {"mem_len": n} if n else {}},
    # bos: the [CLS] that opens each document of the token stream read with --mem-len
    token_ids=lambda tokenizer: {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.cls_token_id,
                                 "eos_token_id": tokenizer.sep_token_id},
    heads={"sequence": XLNetForSequenceClassification, "token": XLNetForTokenClassification,
           "span": XLNetForQuestionAnsweringSimple},
    heads_note="an XLNet is fine-tuned here for sequence, token and span tasks",
    finetune_modes=("finetune",),
    feature_encoder=lambda directory, config: SPEC.load(directory, config).transformer,
    hidden_states=lambda stack, ids, mask, types=None: stack(ids, mask, types, output_hidden_states=True).hidden_states,
    feature_layers=lambda c: c.n_layer,
    feature_width=lambda c: c.d_model,
    input_vectors=lambda stack: stack.word_embedding.weight,
    layer_of=_layer_of,
    num_layers=lambda model: len(model.transformer.layer),
    tokenizer_classes={"xlnet": "XLNetTokenizer"},
)
