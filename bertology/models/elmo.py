"""ELMo's biLM: a character-CNN token encoder under a 2-layer LSTM language model in each direction.

Follows Peters et al. 2018, "Deep contextualized word representations" (ELMo), and its
release (bilm-tf; AllenNLP's `_ElmoCharacterEncoder` and `ElmoLstm`):

    token ─► its characters (UTF-8 bytes between begin- and end-of-word marks, padded to 50)
      ─► character embedding (16) ─► convolutions of widths 1..7, max over time, ReLU (2,048 filters)
      ─► 2 highway layers ─► projection (512)                       = the token layer x (B, T, 512)
    forward:  x ─► LSTM (4,096 cells, projected to 512) ─► LSTM (+ residual) ─► softmax: next token
    backward: x ─► the same over the reversed text         ─► softmax: previous token
    the two directions share the token encoder and the softmax (vocabulary x 512 + bias).

ELMo's representations of a token are the three layers [x; x], [f1; b1], [f2; b2] (each
2 x 512 wide: `hidden_states` below), which a task mixes with softmax-normalised scalar
weights and a scale, learned with its head (models/features.py `ScalarMix`).

Where this differs from the original: the LSTMs are PyTorch's fused `nn.LSTM` with
`proj_size` (the cell and projection clipping at 3 of bilm-tf is not applied: the fused kernel
has no clipping, and pre-LN-free LSTMs at our sizes train without it); the tokens are the
project's WordPiece (or unigram) pieces rather than whole words, so the softmax is over that
vocabulary and the character CNN reads each piece's spelling (a continuation piece keeps its
"##"). The character ids of every vocabulary entry are a buffer of the model (`char_ids`,
vocabulary x 50), so a saved model is self-contained.

The recurrent state is passed in and returned detached, as in models/awd_lstm.py: the
language-model objective carries it along a token stream (training/objectives.py), and
`ELMoModel` (features) reads each text from a zero state in both directions.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..memory import check_model_size
from ..ops import IGNORE_INDEX, cross_entropy_with_accuracy
from .base import ConfigFile, FamilySpec, ModelOutput, PreTrainedModel

# PyTorch's CPU LSTM with proj_size runs its own kernel instead of oneDNN's and says so once per
# process; the speed it costs is measured in bench/elmo.py, and the warning tells a user nothing to do.
warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")

MODEL_TYPE = "elmo"
STATE = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (h (1, B, projection), c (1, B, cells))
# Character ids: 0 pads a position past the token's end; a byte b is b + 1; then the marks.
BEGIN_OF_WORD, END_OF_WORD = 257, 258
NUM_CHARACTERS = 259
ORIGINAL_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]

# name -> (filters, highway layers, projection_dim, LSTM cells). "small" and "medium" are
# AllenNLP's published small and medium ELMo; "base" is the original ELMo (93.6M parameters
# without the softmax, as the paper's Table 8 lists; `num_parameters(softmax=False)`).
PRESETS: dict[str, tuple[list[list[int]], int, int, int]] = {
    "tiny": ([[1, 16], [2, 16], [3, 32], [4, 64]], 1, 64, 256),
    "mini": ([[1, 32], [2, 32], [3, 64], [4, 128], [5, 128]], 1, 128, 512),
    "small": (ORIGINAL_FILTERS, 1, 128, 1024),
    "medium": (ORIGINAL_FILTERS, 1, 256, 2048),
    "base": (ORIGINAL_FILTERS, 2, 512, 4096),
    "large": (ORIGINAL_FILTERS, 2, 512, 4096),
}


ELMO_SIZE_FIELDS = ("vocab_size", "max_characters_per_token", "char_embedding_dim", "n_highway", "projection_dim",
                    "lstm_dim", "n_layers")


def elmo_parameters(values: dict[str, Any]) -> int:
    """An ELMo biLM's size from its config's fields, in fp32 parameters: the character CNN (its
    filters, highway layers and projection), each direction's LSTMs with projections, the softmax
    over the vocabulary, and the vocabulary's character ids (int64: two parameters' bytes each)."""
    filters = sum(count for _, count in values["filters"])
    projection, cells = values["projection_dim"], values["lstm_dim"]
    cnn = (262 * values["char_embedding_dim"] + sum(width * values["char_embedding_dim"] * count
                                                   for width, count in values["filters"])
           + values["n_highway"] * 2 * (filters * filters + filters) + filters * projection)
    lstms = 2 * values["n_layers"] * (4 * cells * (2 * projection + 2) + cells * projection)
    vocab = values["vocab_size"]
    return cnn + lstms + vocab * (projection + 1) + 2 * vocab * values["max_characters_per_token"]

@dataclass
class ELMoConfig(ConfigFile):
    """Hyper-parameters of an ELMo biLM (the names of bilm-tf's options file, flattened).

    Example: `ELMoConfig.from_preset("base", vocab_size=30522)` is the original ELMo's biLM.
    """

    # memory.py's checks: this family's parameter count, and the fields that set its size
    count_parameters: ClassVar = staticmethod(elmo_parameters)
    size_fields: ClassVar[tuple[str, ...]] = ELMO_SIZE_FIELDS
    MODEL_TYPE: ClassVar[str] = MODEL_TYPE
    WHAT: ClassVar[str] = "an ELMo biLM"

    vocab_size: int = 30522
    max_characters_per_token: int = 50
    char_embedding_dim: int = 16
    filters: list[list[int]] = field(default_factory=lambda: [list(f) for f in ORIGINAL_FILTERS])  # [width, count]
    n_highway: int = 2
    projection_dim: int = 512
    lstm_dim: int = 4096  # cells per LSTM
    n_layers: int = 2
    use_skip_connections: bool = True  # the second LSTM adds its input to its output
    dropout: float = 0.1
    pad_token_id: int = 0
    architectures: list[str] = field(default_factory=lambda: ["ELMoLMHeadModel"])
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_characters_per_token", "char_embedding_dim", "n_highway", "projection_dim",
                     "lstm_dim", "n_layers"):
            value = getattr(self, name)
            if type(value) is not int or not (0 <= value if name == "n_highway" else 0 < value) or value > 2**24:
                raise UserError(f"config field {name!r} must be a positive integer, got {value!r}")
        if not (isinstance(self.filters, list) and self.filters and all(
                isinstance(f, list) and len(f) == 2 and all(type(n) is int and n > 0 for n in f) for f in self.filters)):
            raise UserError(f"config field 'filters' must be a list of [width, count] pairs, got {self.filters!r}")
        if max(width for width, _ in self.filters) > self.max_characters_per_token:
            raise UserError("config field 'filters': a filter is wider than max_characters_per_token")
        if self.projection_dim >= self.lstm_dim:
            raise UserError(f"config field 'projection_dim' ({self.projection_dim}) must be below 'lstm_dim' "
                            f"({self.lstm_dim}): the LSTMs project their cells down to it")
        if type(self.dropout) not in (int, float) or not 0 <= self.dropout < 1:
            raise UserError(f"config field 'dropout' must be a number in [0, 1), got {self.dropout!r}")
        check_model_size(self)  # last: the fields are known to be numbers

    @property
    def hidden_size(self) -> int:
        """The width of each of ELMo's layers: both directions side by side."""
        return 2 * self.projection_dim

    @property
    def num_hidden_layers(self) -> int:
        """LSTM layers above the token layer (hidden_states holds n_layers + 1, as a BERT's)."""
        return self.n_layers

    @classmethod
    def preset(cls, name: str) -> dict[str, Any]:
        """A named size's fields, from ELMo's size table (PRESETS)."""
        if name not in PRESETS:
            raise UserError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        filters, n_highway, projection_dim, lstm_dim = PRESETS[name]
        return dict(filters=[list(f) for f in filters], n_highway=n_highway, projection_dim=projection_dim,
                    lstm_dim=lstm_dim)


def character_ids(tokens: list[str], max_characters: int) -> torch.Tensor:
    """Each token's characters as ELMo reads them: begin-of-word, its UTF-8 bytes (cut to fit),
    end-of-word, then 0s: (len(tokens), max_characters) int64."""
    table = torch.zeros(len(tokens), max_characters, dtype=torch.long)
    for row, token in enumerate(tokens):
        ids = [BEGIN_OF_WORD] + [b + 1 for b in token.encode("utf-8")[: max_characters - 2]] + [END_OF_WORD]
        table[row, : len(ids)] = torch.tensor(ids)
    return table


class Highway(nn.Module):
    """Highway layers (Srivastava et al. 2015): y = g * x + (1 - g) * relu(W x), g = sigmoid(V x);
    the gate's bias starts at 1 (AllenNLP's layout and start), so that each layer first mostly
    carries its input through, as bilm-tf's carry bias of -2 on the other gate does."""

    def __init__(self, width: int, num_layers: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(num_layers))
        for layer in self.layers:
            nn.init.constant_(layer.bias[width:], 1.0)  # the gate's half

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, width) -> (N, width)."""
        for layer in self.layers:
            transform, gate = layer(x).chunk(2, dim=-1)
            gate = torch.sigmoid(gate)
            x = gate * x + (1 - gate) * F.relu(transform)
        return x


class CharacterEncoder(nn.Module):
    """Token ids -> the token layer x (B, T, projection_dim), from each token's characters."""

    def __init__(self, config: ELMoConfig):
        super().__init__()
        self.register_buffer("char_ids", torch.zeros(config.vocab_size, config.max_characters_per_token,
                                                     dtype=torch.long))
        self.char_embedding = nn.Embedding(NUM_CHARACTERS, config.char_embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(nn.Conv1d(config.char_embedding_dim, count, width)
                                          for width, count in config.filters)
        width = sum(count for _, count in config.filters)
        self.highway = Highway(width, config.n_highway)
        self.projection = nn.Linear(width, config.projection_dim)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids (B, T) -> (B, T, projection_dim). Each distinct token of the batch is encoded once."""
        distinct, inverse = torch.unique(input_ids, return_inverse=True)
        chars = self.char_embedding(self.char_ids[distinct]).transpose(1, 2)  # (N, char dim, characters)
        pooled = torch.cat([F.relu(conv(chars).max(dim=-1).values) for conv in self.convolutions], dim=-1)
        return self.projection(self.highway(pooled))[inverse]


class ELMoBiLM(nn.Module):
    """The token encoder and the two directions' LSTM stacks (no softmax)."""

    def __init__(self, config: ELMoConfig):
        super().__init__()
        self.config = config
        self.token_encoder = CharacterEncoder(config)
        self.forward_lstms = nn.ModuleList(self._lstm() for _ in range(config.n_layers))
        self.backward_lstms = nn.ModuleList(self._lstm() for _ in range(config.n_layers))
        self.dropout = nn.Dropout(config.dropout)

    def _lstm(self) -> nn.LSTM:
        return nn.LSTM(self.config.projection_dim, self.config.lstm_dim, batch_first=True,
                       proj_size=self.config.projection_dim)

    def run_direction(self, x: torch.Tensor, lstms: nn.ModuleList, state: STATE | None) -> tuple[list[torch.Tensor], STATE]:
        """One direction over the token layer x (B, T, P), read left to right: each LSTM's output
        (B, T, P) (the second with its input added) and the new state, detached."""
        outputs, new_state = [], []
        for index, lstm in enumerate(lstms):
            y, (h, c) = lstm(self.dropout(x), None if state is None else state[index])
            if self.config.use_skip_connections and index > 0:
                y = y + x
            outputs.append(y)
            new_state.append((h.detach(), c.detach()))
            x = y
        return outputs, new_state


class ELMoPreTrainedModel(PreTrainedModel):
    """Saving and loading (models/base.py's), shared by the language model and the feature model
    (which opens a language model's directory and leaves its softmax out)."""

    config_class = ELMoConfig

    def num_parameters(self, softmax: bool = True) -> int:
        """Trained parameters (the character table is a buffer); softmax=False leaves the output layer out,
        as the ELMo paper's counts do."""
        return sum(p.numel() for name, p in self.named_parameters() if softmax or not name.startswith("softmax."))


class ELMoLMHeadModel(ELMoPreTrainedModel):
    """The biLM with its shared softmax: each direction predicts the next token in its reading order."""

    def __init__(self, config: ELMoConfig):
        super().__init__(config)
        self.bilm = ELMoBiLM(config)
        self.softmax = nn.Linear(config.projection_dim, config.vocab_size)

    def state_widths(self) -> list[tuple[int, int]]:
        """Each LSTM's (h, c) widths in one direction: the carried state of a token stream."""
        return [(self.config.projection_dim, self.config.lstm_dim)] * self.config.n_layers

    def learn_spellings(self, tokens: list[str]) -> None:
        """Give the character CNN every vocabulary entry's spelling (its `char_ids` buffer)."""
        self.bilm.token_encoder.char_ids.copy_(character_ids(tokens, self.config.max_characters_per_token))

    def direction_loss(self, input_ids: torch.Tensor, labels: torch.Tensor, backward: bool,
                       state: STATE | None) -> ModelOutput:
        """One direction as a language model over a stream window: input_ids and labels (B, T)
        in that direction's reading order (the backward one reads reversed text), labels -100 where
        not scored. Returns loss (cross-entropy), masked_lm_correct and the new recurrent_state."""
        x = self.bilm.token_encoder(input_ids)
        lstms = self.bilm.backward_lstms if backward else self.bilm.forward_lstms
        outputs, new_state = self.bilm.run_direction(x, lstms, state)
        scored = labels != IGNORE_INDEX
        logits = self.softmax(self.bilm.dropout(outputs[-1][scored]))
        loss, correct = cross_entropy_with_accuracy(logits, labels[scored])
        return ModelOutput(loss=loss, masked_lm_loss=loss, masked_lm_correct=correct, recurrent_state=new_state)


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's first lengths[b] positions of x (B, T, ...) and leave its padding in place."""
    positions = torch.arange(x.shape[1], device=x.device)
    index = (lengths[:, None] - 1 - positions).where(positions < lengths[:, None], positions)  # (B, T)
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


class ELMoModel(ELMoPreTrainedModel):
    """ELMo's representations of a text: the biLM's three layers, both directions side by side."""

    def __init__(self, config: ELMoConfig):
        super().__init__(config)
        self.bilm = ELMoBiLM(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_hidden_states: bool = True) -> ModelOutput:
        """input_ids, attention_mask (B, T), right-padded; token_type_ids are ignored. Returns
        hidden_states: ([x; x], [f1; b1], ..., [fn; bn]) each (B, T, 2 x projection_dim), the
        backward direction having read each text from its end, and last_hidden_state (the top)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        lengths = attention_mask.long().sum(1)
        x = self.bilm.token_encoder(input_ids)
        forward_outputs, _ = self.bilm.run_direction(x, self.bilm.forward_lstms, None)
        backward_outputs, _ = self.bilm.run_direction(reverse_padded(x, lengths), self.bilm.backward_lstms, None)
        layers = [torch.cat([x, x], dim=-1)] + [torch.cat([f, reverse_padded(b, lengths)], dim=-1)
                                                for f, b in zip(forward_outputs, backward_outputs)]
        return ModelOutput(last_hidden_state=layers[-1], hidden_states=tuple(layers))


def _token_layer(stack: "ELMoModel") -> torch.Tensor:
    """ELMo's context-free vectors: the character CNN's output for every vocabulary entry (V, 2 x projection)."""
    ids = torch.arange(stack.config.vocab_size, device=next(stack.parameters()).device)
    return torch.cat([stack.bilm.token_encoder(chunk[None])[0] for chunk in ids.split(4096)])


SPEC = FamilySpec(
    config_class=ELMoConfig,
    model_classes={**{cls.__name__: cls for cls in (ELMoLMHeadModel, ELMoModel)},
                   "ELMoLanguageModel": ELMoLMHeadModel},  # the name directories of bertology 0.1 hold
    default_class=ELMoLMHeadModel,
    describe=lambda c: (f"ELMo biLM (2 x {c.n_layers} layers, {c.projection_dim}/{c.lstm_dim} wide, "
                        f"{c.vocab_size:,}-token vocabulary)"),
    objectives=("bilm",),
    pretraining_models={"bidirectional_lm": ELMoLMHeadModel},
    reads_stream=True,
    token_ids=lambda tokenizer: {"pad_token_id": tokenizer.pad_token_id},
    vocabulary_hook=lambda model, tokens: model.learn_spellings(tokens),
    finetune_modes=("features",),  # a feature source, as in its paper
    feature_encoder=lambda directory, config: ELMoModel.from_pretrained(directory, config=config),
    feature_layers=lambda c: c.n_layers,
    feature_width=lambda c: c.hidden_size,
    input_vectors=_token_layer,
    layer_names=("token layer", "LSTM"),
    two_directions=True,
)
