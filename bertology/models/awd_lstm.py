"""AWD-LSTM: ULMFiT's recurrent language model and its text classifier, in one file.

Follows Merity et al. 2018, "Regularizing and Optimizing LSTM Language Models" (the AWD-LSTM)
and Howard & Ruder 2018, "Universal Language Model Fine-tuning for Text Classification"
(ULMFiT), as fastai implements them:

    input ids ─► embedding, whole rows dropped (embedding dropout, embed_p) ─► locked dropout (input_p)
      ─► LSTM 1 ─► locked dropout (hidden_p) ─► ... ─► LSTM n   (the last one emb_sz wide)
         every LSTM's hidden-to-hidden matrix is weight-dropped (DropConnect, weight_p)
    language model ─► locked dropout (output_p) ─► linear tied to the embedding ─► logits (B, T, V)
        loss = cross-entropy + alpha * mean(dropped output^2)            (activation regularisation)
                             + beta * mean((h_t - h_(t-1))^2)             (temporal activation regularisation)
    classifier: the text read in chunks of `bptt` tokens, the state carried from chunk to chunk
        ─► concat pooling over its last `max_len` tokens: [last state; max; mean] (B, 3 * emb_sz)
        ─► BatchNorm, dropout, linear (50), ReLU ─► BatchNorm, dropout, linear ─► logits (B, num_labels)

"Locked" dropout draws one mask per sequence and reuses it at every time step (fastai's
`RNNDropout`). Module and parameter names are fastai's (`encoder`, `rnns.0.weight_hh_l0_raw`,
`rnns.0.module.weight_ih_l0`, `decoder`, `layers.0.2.weight`), so a fastai state dict loads
by a prefix swap (`from_fastai`): its `0.`/`1.` are our `awd_lstm.` and `lm_head.` (language
model) or `awd_lstm.`/`classifier.` (classifier, where fastai's encoder sits under `0.module.`).

The LSTMs are PyTorch's fused `nn.LSTM`, one per layer since the widths differ; weight drop
swaps a freshly dropped copy of `weight_hh_l0` into the LSTM before each call (as fastai does)
and keeps the trained matrix as the parameter `weight_hh_l0_raw`. The recurrent state is passed
in and returned (detached: gradients stop at a chunk's start, truncated back-propagation
through time); the language-model objective (training/objectives.py) carries it from batch to
batch along the token stream, the classifier from chunk to chunk along a text.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..memory import check_model_size
from ..ops import IGNORE_INDEX, cross_entropy_with_accuracy
from .base import ConfigFile, FamilySpec, ModelOutput, PreTrainedModel

MODEL_TYPE = "awd-lstm"
STATE = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (h, c), each (1, B, width)

# name -> (emb_sz, n_hid, n_layers): the --preset names of the other families (base.SIZES), at LSTM sizes.
# "base" is the size of the AWD-LSTM and of ULMFiT's WikiText-103 model (fastai's awd_lstm_lm_config).
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (64, 192, 3),
    "mini": (128, 384, 3),
    "small": (200, 576, 3),
    "medium": (300, 864, 3),
    "base": (400, 1152, 3),
    "large": (400, 1840, 3),
}
# fastai's dropouts for a classifier (awd_lstm_clas_config), which ULMFiT scales by one `drop_mult`.
CLASSIFIER_DROPOUTS = {"output_p": 0.4, "hidden_p": 0.3, "input_p": 0.4, "embed_p": 0.05, "weight_p": 0.5}
DROPOUTS = ("output_p", "hidden_p", "input_p", "embed_p", "weight_p")


AWD_LSTM_SIZE_FIELDS = ("vocab_size", "emb_sz", "n_hid", "n_layers")


def awd_lstm_parameters(values: dict[str, Any]) -> int:
    """An AWD-LSTM's parameter count from its config's fields: the embedding (and an untied output
    layer), the output bias, and each LSTM's 4 gates over its input and its state."""
    widths = [values["emb_sz"]] + [values["n_hid"]] * (values["n_layers"] - 1) + [values["emb_sz"]]
    lstms = sum(4 * (inputs * size + size * size + 2 * size) for inputs, size in zip(widths, widths[1:]))
    vocab = values["vocab_size"]
    return vocab * values["emb_sz"] * (1 if values["tie_weights"] else 2) + vocab + lstms

@dataclass
class AWDLSTMConfig(ConfigFile):
    """Hyper-parameters of an AWD-LSTM (fastai's names; the dropouts are its language model's).

    Example: `AWDLSTMConfig.from_preset("tiny", vocab_size=8000)` is a 3-layer LSTM 192 wide
    over 64-wide embeddings; `from_preset("base")` is ULMFiT's 400/1152/3.
    """

    # memory.py's checks: this family's parameter count, and the fields that set its size
    count_parameters: ClassVar = staticmethod(awd_lstm_parameters)
    size_fields: ClassVar[tuple[str, ...]] = AWD_LSTM_SIZE_FIELDS
    MODEL_TYPE: ClassVar[str] = MODEL_TYPE
    WHAT: ClassVar[str] = "an AWD-LSTM"

    vocab_size: int = 30522
    emb_sz: int = 400  # the embedding width, and the last LSTM's (so the output matrix can be tied)
    n_hid: int = 1152  # the other LSTMs' width
    n_layers: int = 3
    pad_token_id: int = 0
    output_p: float = 0.1  # locked dropout on the last LSTM's output
    hidden_p: float = 0.15  # locked dropout between LSTMs
    input_p: float = 0.25  # locked dropout on the embeddings
    embed_p: float = 0.02  # embedding dropout: whole rows of the table
    weight_p: float = 0.2  # DropConnect on the hidden-to-hidden matrices
    tie_weights: bool = True
    out_bias: bool = True
    # The embedding (and an untied output matrix) start uniform in +-init_range. fastai and the
    # AWD-LSTM release use 0.1; measured here (WikiText-2 text, 2,000-token vocabulary, Adam at
    # 3e-3, no dropout), 2- and 3-layer stacks from that start stay at the unigram loss (6.4) for
    # 1,000 steps, while from 0.3-0.5 they leave it within 100 steps: the first LSTM's gate inputs
    # are otherwise too small to carry a signal up the stack. With `pretrain`'s defaults (lr 1e-2,
    # dropouts on) 0.1 reaches held-out perplexity 633 in 150 tiny steps where 0.5 reaches 570.
    # init_range=0.1 gives theirs.
    init_range: float = 0.5
    ar_alpha: float = 2.0  # activation regularisation (fastai's RNNRegularizer alpha)
    tar_beta: float = 1.0  # temporal activation regularisation (beta)
    # The classifier: chunk length and how many final tokens concat pooling sees (fastai: 72, 72 * 20),
    # the hidden widths of its head, and the labels (num_labels 1: regression).
    bptt: int = 72
    max_len: int = 72 * 20
    lin_ftrs: list[int] = field(default_factory=lambda: [50])
    head_p: float = 0.1  # dropout before the head's later linear layers
    num_labels: int = 2
    id2label: dict[int, str] | None = None
    architectures: list[str] = field(default_factory=lambda: ["AWDLSTMLMHeadModel"])
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # other config.json keys, kept

    def __post_init__(self) -> None:
        for name in ("vocab_size", "emb_sz", "n_hid", "n_layers", "bptt", "max_len", "num_labels"):
            value = getattr(self, name)
            if type(value) is not int or not 0 < value <= 2**24:
                raise UserError(f"config field {name!r} must be a positive integer, got {value!r}")
        for name in (*DROPOUTS, "head_p"):
            if type(getattr(self, name)) not in (int, float) or not 0.0 <= getattr(self, name) < 1.0:
                raise UserError(f"config field {name!r} must be a number in [0, 1), got {getattr(self, name)!r}")
        for name in ("ar_alpha", "tar_beta", "init_range"):
            if type(getattr(self, name)) not in (int, float) or not 0 <= getattr(self, name) < float("inf"):
                raise UserError(f"config field {name!r} must be a finite number >= 0, got {getattr(self, name)!r}")
        if not isinstance(self.lin_ftrs, list) or not all(type(n) is int and n > 0 for n in self.lin_ftrs):
            raise UserError(f"config field 'lin_ftrs' must be a list of positive integers, got {self.lin_ftrs!r}")
        if type(self.pad_token_id) is not int or not 0 <= self.pad_token_id < self.vocab_size:
            raise UserError(f"config field 'pad_token_id' must be a token id below vocab_size, got {self.pad_token_id!r}")
        check_model_size(self)  # last: the fields are known to be numbers

    @classmethod
    def preset(cls, name: str) -> dict[str, Any]:
        """A named size's fields, from the LSTM size table (PRESETS)."""
        if name not in PRESETS:
            raise UserError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        emb_sz, n_hid, n_layers = PRESETS[name]
        return dict(emb_sz=emb_sz, n_hid=n_hid, n_layers=n_layers)

    def for_task(self, num_labels: int, id2label: dict[int, str] | None,
                 drop_mult: float = 1.0) -> "AWDLSTMConfig":
        """This config for a classifier: fastai's classifier dropouts times `drop_mult` (ULMFiT's one knob)."""
        dropouts = {name: value * drop_mult for name, value in CLASSIFIER_DROPOUTS.items()}
        return dataclasses.replace(self, num_labels=num_labels, id2label=id2label, head_p=0.1 * drop_mult,
                                   architectures=["AWDLSTMForSequenceClassification"], **dropouts)


# ----- the three dropouts -----------------------------------------------------------------------


def dropout_mask(like: torch.Tensor, shape: tuple[int, ...], p: float) -> torch.Tensor:
    """A mask of `shape` with `like`'s dtype and device: 0 with probability p, else 1 / (1 - p)."""
    return like.new_empty(shape).bernoulli_(1 - p).div_(1 - p)


class RNNDropout(nn.Module):
    """Locked (variational) dropout: one mask per sequence and feature, the same at every step."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        if not self.training or self.p == 0:
            return x
        return x * dropout_mask(x, (x.shape[0], 1, x.shape[2]), self.p)


def embedding_dropout(embedding: nn.Embedding, input_ids: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Look `input_ids` (B, T) up in `embedding` after dropping whole rows of its table with
    probability p (a dropped word is dropped at every occurrence): (B, T, D)."""
    weight = embedding.weight
    if training and p > 0:
        weight = weight * dropout_mask(weight, (weight.shape[0], 1), p)
    return F.embedding(input_ids, weight, embedding.padding_idx)


class WeightDropout(nn.Module):
    """An LSTM whose hidden-to-hidden matrix is dropped afresh at every call (DropConnect).

    The trained matrix is the parameter `weight_hh_l0_raw`; the LSTM's own `weight_hh_l0` is a
    plain tensor set before each call to the dropped copy (or, in eval mode, to the raw matrix).
    """

    def __init__(self, module: nn.LSTM, weight_p: float):
        super().__init__()
        self.module, self.weight_p = module, weight_p
        raw = module.weight_hh_l0
        del module._parameters["weight_hh_l0"]
        self.weight_hh_l0_raw = nn.Parameter(raw.data)
        module.weight_hh_l0 = raw.data.clone()  # nn.LSTM's setattr keeps its flat weight list in step

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None):
        """x: (B, T, in) -> (output (B, T, out), (h, c) each (1, B, out))."""
        raw = self.weight_hh_l0_raw
        # Undropped, a view, not the Parameter itself (which the LSTM would adopt as its own).
        dropping = self.training and self.weight_p > 0
        self.module.weight_hh_l0 = F.dropout(raw, self.weight_p) if dropping else raw.view_as(raw)
        return self.module(x, state)


# ----- the model ----------------------------------------------------------------------------------


class AWDLSTMPreTrainedModel(PreTrainedModel):
    """Saving and loading (models/base.py's), shared by the language model and the classifier."""

    config_class = AWDLSTMConfig
    backbone = "awd_lstm"


class AWDLSTM(nn.Module):
    """The encoder: embedding and the stack of weight-dropped LSTMs (fastai's `AWD_LSTM`)."""

    def __init__(self, config: AWDLSTMConfig):
        super().__init__()
        self.config = config
        self.encoder = nn.Embedding(config.vocab_size, config.emb_sz, padding_idx=config.pad_token_id)
        nn.init.uniform_(self.encoder.weight, -config.init_range, config.init_range)
        widths = [config.emb_sz] + [config.n_hid] * (config.n_layers - 1) + [config.emb_sz]
        self.rnns = nn.ModuleList(
            WeightDropout(nn.LSTM(widths[i], widths[i + 1], batch_first=True), config.weight_p)
            for i in range(config.n_layers))
        self.input_dp = RNNDropout(config.input_p)
        self.hidden_dps = nn.ModuleList(RNNDropout(config.hidden_p) for _ in range(config.n_layers))

    def forward(self, input_ids: torch.Tensor, state: STATE | None = None) -> tuple[list[torch.Tensor], STATE]:
        """input_ids: (B, T); state: each layer's (h, c) from the previous chunk, or None (zeros).

        Returns every LSTM's output before the dropout that follows it ((B, T, n_hid), the last
        (B, T, emb_sz)) and the new state, detached (truncated back-propagation through time)."""
        x = self.input_dp(embedding_dropout(self.encoder, input_ids, self.config.embed_p, self.training))
        outputs, new_state = [], []
        for index, (rnn, dropout) in enumerate(zip(self.rnns, self.hidden_dps)):
            x, (h, c) = rnn(x, None if state is None else state[index])
            outputs.append(x)
            new_state.append((h.detach(), c.detach()))
            if index < len(self.rnns) - 1:
                x = dropout(x)
        return outputs, new_state

    def layer_states(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Every layer's states of input_ids (B, T), read from a zero state, for probes (eval mode:
        no dropout): the embedding output (B, T, emb_sz), then each LSTM's output (B, T, n_hid; the
        last (B, T, emb_sz)). The LSTMs read left to right only, so a position's states have read
        the tokens up to it and no further, and right padding leaves the real positions' states as
        they are alone."""
        outputs, _ = self(input_ids)
        return (self.encoder(input_ids), *outputs)


class LinearDecoder(nn.Module):
    """The language model's output layer: locked dropout, then a linear map to the vocabulary."""

    def __init__(self, config: AWDLSTMConfig):
        super().__init__()
        self.decoder = nn.Linear(config.emb_sz, config.vocab_size, bias=config.out_bias)
        nn.init.uniform_(self.decoder.weight, -config.init_range, config.init_range)
        if config.out_bias:
            nn.init.zeros_(self.decoder.bias)
        self.output_dp = RNNDropout(config.output_p)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, emb_sz) -> the dropped hidden (B, T, emb_sz) that the logits are taken from."""
        return self.output_dp(hidden)


class AWDLSTMLMHeadModel(AWDLSTMPreTrainedModel):
    """The AWD-LSTM with its tied output layer: next-token logits, and the AR/TAR-regularised loss."""

    def __init__(self, config: AWDLSTMConfig):
        super().__init__(config)
        self.awd_lstm = AWDLSTM(config)
        self.lm_head = LinearDecoder(config)
        if config.tie_weights:
            self.lm_head.decoder.weight = self.awd_lstm.encoder.weight

    def tied_keys(self) -> tuple[str, ...]:
        """The output matrix is the embedding, when tied."""
        return ("lm_head.decoder.weight",) if self.config.tie_weights else ()

    def state_widths(self) -> list[tuple[int, int]]:
        """Each LSTM's (h, c) widths, bottom up: the carried state of a token stream."""
        widths = [self.config.n_hid] * (self.config.n_layers - 1) + [self.config.emb_sz]
        return [(width, width) for width in widths]

    def forward(self, input_ids: torch.Tensor, state: STATE | None = None,
                labels: torch.Tensor | None = None) -> ModelOutput:
        """input_ids: (B, T); state as `AWDLSTM.forward`. Returns logits (B, T, V), hidden_states
        (each LSTM's output) and the new `recurrent_state`. With `labels` (B, T), the
        next token of each position (-100 = not scored): loss = cross-entropy + (in training)
        AR + TAR, masked_lm_loss the cross-entropy alone, logits (N, V) at the N scored positions
        and masked_lm_correct the argmax hits there."""
        outputs, new_state = self.awd_lstm(input_ids, state)
        raw = outputs[-1]
        dropped = self.lm_head(raw)
        if labels is None:
            return ModelOutput(logits=self.lm_head.decoder(dropped), hidden_states=outputs, recurrent_state=new_state)
        scored = labels != IGNORE_INDEX
        logits = self.lm_head.decoder(dropped[scored])
        lm_loss, correct = cross_entropy_with_accuracy(logits, labels[scored])
        loss = lm_loss
        if self.training:
            if self.config.ar_alpha:
                loss = loss + self.config.ar_alpha * dropped.float().pow(2).mean()
            if self.config.tar_beta and raw.shape[1] > 1:
                loss = loss + self.config.tar_beta * (raw[:, 1:] - raw[:, :-1]).float().pow(2).mean()
        return ModelOutput(loss=loss, logits=logits, hidden_states=outputs, recurrent_state=new_state,
                           masked_lm_loss=lm_loss, masked_lm_correct=correct)


class PoolingLinearClassifier(nn.Module):
    """ULMFiT's head: concat pooling, then blocks of BatchNorm, dropout, linear (and ReLU between)."""

    def __init__(self, config: AWDLSTMConfig):
        super().__init__()
        dims = [3 * config.emb_sz, *config.lin_ftrs, config.num_labels]
        dropouts = [config.output_p] + [config.head_p] * len(config.lin_ftrs)
        blocks = []
        for index, (width_in, width_out, p) in enumerate(zip(dims[:-1], dims[1:], dropouts)):
            block = [nn.BatchNorm1d(width_in), nn.Dropout(p), nn.Linear(width_in, width_out, bias=False)]
            if index < len(dims) - 2:
                block.append(nn.ReLU())
            blocks.append(nn.Sequential(*block))  # fastai's LinBnDrop: same order, same names
        self.layers = nn.Sequential(*blocks)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """pooled (B, 3 * emb_sz) -> logits (B, num_labels)."""
        return self.layers(pooled)


def concat_pool(output: torch.Tensor, keep: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """[state at the last token; max over kept tokens; mean over kept tokens]: (B, 3 * D), from
    output (B, T, D), keep (B, T) bool and last (B,) the index of each text's last token."""
    rows = torch.arange(len(output), device=output.device)
    masked = output.masked_fill(~keep[..., None], float("-inf"))
    mean = output.masked_fill(~keep[..., None], 0).sum(1) / keep.sum(1, keepdim=True).clamp(min=1).to(output.dtype)
    return torch.cat([output[rows, last], masked.max(1).values, mean], dim=-1)


class AWDLSTMForSequenceClassification(AWDLSTMPreTrainedModel):
    """ULMFiT's classifier: the AWD-LSTM read in chunks (BPTT for classification) under concat pooling."""

    def __init__(self, config: AWDLSTMConfig):
        super().__init__(config)
        self.awd_lstm = AWDLSTM(config)
        self.classifier = PoolingLinearClassifier(config)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Read right-padded texts (B, T) in chunks of `bptt` tokens, the state carried over, and
        pool: (B, 3 * emb_sz).

        Each text is read from its start; pooling sees its last max_len // bptt chunks (fastai:
        the chunks that start at most max_len tokens from the end), and only those chunks are
        run with gradients, so memory is bounded by max_len whatever a document's length."""
        bptt = self.config.bptt
        lengths = attention_mask.long().sum(1).clamp(min=1)
        chunks = (lengths + bptt - 1) // bptt  # (B,) each text's number of chunks
        kept_chunks = max(self.config.max_len // bptt, 1)
        first_kept = (chunks - kept_chunks).clamp(min=0)  # (B,) each text's first pooled chunk
        total = int(chunks.max())
        state, outputs, keeps = None, [], []
        for index in range(total):
            piece = input_ids[:, index * bptt:(index + 1) * bptt]
            with torch.set_grad_enabled(torch.is_grad_enabled() and index >= int(first_kept.min())):
                layer_outputs, state = self.awd_lstm(piece, state)
            if index >= int(first_kept.min()):
                outputs.append(layer_outputs[-1])
                positions = torch.arange(index * bptt, index * bptt + piece.shape[1], device=input_ids.device)
                keeps.append((positions[None] < lengths[:, None]) & (index >= first_kept)[:, None])
        output, keep = torch.cat(outputs, 1), torch.cat(keeps, 1)
        offset = int(first_kept.min()) * bptt  # the first position `output` holds
        return concat_pool(output, keep, lengths - 1 - offset)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> ModelOutput:
        """input_ids, attention_mask (B, T), right-padded ([CLS] text [SEP], or [CLS] A [SEP] B [SEP]
        for pairs: the LSTM tells the segments by the separator); token_type_ids are ignored.
        Returns logits (B, num_labels); with `labels` (B,) the loss (cross-entropy, or MSE for one label)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        logits = self.classifier(self.encode(input_ids, attention_mask))
        if labels is None:
            return ModelOutput(logits=logits)
        if self.config.num_labels == 1:
            loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
        else:
            loss = F.cross_entropy(logits.float(), labels)
        return ModelOutput(loss=loss, logits=logits)


def from_fastai(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A fastai AWD-LSTM state dict (`get_language_model` or `get_text_classifier`) under our names."""
    classifier = any(k.startswith("0.module.") for k in state)
    prefixes = (("0.module.", "awd_lstm."), ("1.", "classifier.")) if classifier else \
        (("0.", "awd_lstm."), ("1.", "lm_head."))
    converted = {}
    for name, tensor in state.items():
        if ".encoder_dp.emb." in name:  # fastai keeps the embedding twice (its EmbeddingDropout wraps it)
            continue
        for theirs, ours in prefixes:
            if name.startswith(theirs):
                converted[ours + name[len(theirs):]] = tensor
    return converted


def _layer_of(name: str) -> int | None:
    """A classifier's parameter -> its depth, fastai's layer groups: 0 the embedding, i + 1 LSTM i,
    None the head."""
    if match := re.search(r"(?:^|\.)rnns\.(\d+)\.", name):
        return int(match.group(1)) + 1
    return 0 if re.search(r"(?:^|\.)awd_lstm\.encoder", name) else None


SPEC = FamilySpec(
    config_class=AWDLSTMConfig,
    model_classes={**{cls.__name__: cls for cls in (AWDLSTMLMHeadModel, AWDLSTMForSequenceClassification)},
                   "AWDLSTMLanguageModel": AWDLSTMLMHeadModel},  # the name directories of bertology 0.1 hold
    default_class=AWDLSTMLMHeadModel,
    describe=lambda c: (f"AWD-LSTM ({c.n_layers} layers, {c.emb_sz}/{c.n_hid} wide, "
                        f"{c.vocab_size:,}-token vocabulary)"),
    objectives=("clm",),
    pretraining_models={"causal_lm": AWDLSTMLMHeadModel},
    reads_stream=True,
    token_ids=lambda tokenizer: {"pad_token_id": tokenizer.pad_token_id},
    heads={"sequence": AWDLSTMForSequenceClassification},
    heads_note="an AWD-LSTM is fine-tuned here as ULMFiT's classifier (classification, regression)",
    finetune_modes=("finetune",),
    finetune_options=("drop_mult",),
    random_twin=True,
    feature_encoder=lambda directory, config: SPEC.load(directory, config).awd_lstm,
    # it reads left to right, so its padding needs no mask
    hidden_states=lambda stack, ids, mask, types=None: stack.layer_states(ids),
    feature_layers=lambda c: c.n_layers,
    feature_width=lambda c: c.emb_sz,
    input_vectors=lambda stack: stack.encoder.weight,
    layer_names=("embeddings", "LSTM"),
    layer_of=_layer_of,
    num_layers=lambda model: len(model.awd_lstm.rnns),
)
