"""Contextual features from an encoder's layers: which layers, how to combine them, how to pool.

The BERT paper's feature-based experiment (CoNLL-2003 NER with a frozen encoder) compares
the embeddings output, the last layer, the second-to-last, the sum or concatenation of the
last four, and the sum of all layers. ELMo instead learns a softmax-weighted mix of all
layers times a scale (`ScalarMix`). Fine-tuning's feature-based mode and `bertology embed`
both take their layers from here.

The feature-based model itself (`FeatureModel`: a frozen encoder and a small `FeatureHead`)
lives here too; training its head is the recipe in recipes/feature_mode.py. ELMo's paper adds
its vectors to the task model's own word vectors rather than replacing them ("concatenate the
ELMo vector ELMo_k with x_k and pass the enhanced representation [x_k; ELMo_k] into the task
RNN"): `PieceWordVectors` gives every piece the static vector of its word, which the head
puts in front of the encoder's features.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from ..checkpoint import write_tensors
from ..errors import UserError
from ..files import loads_json, write_json_atomic
from ..ops import IGNORE_INDEX
from . import family_of
from .base import FamilySpec, ModelOutput
from .static import StaticVectors, tokenize_words

# name -> (layers relative to the stack, how to combine them). Layer 0 is the embeddings output.
LAYER_CHOICES = {
    "embeddings": "the embeddings output (layer 0)",
    "last": "the last layer",
    "second_to_last": "the second-to-last layer",
    "sum_last_four": "the sum of the last four layers",
    "concat_last_four": "the last four layers side by side (4x wide)",
    "sum_all": "the sum of all layers, embeddings included",
    "mix": "ELMo's learned scalar mix of all layers (trained with the head)",
}


def parse_layers(spec: str, num_layers: int) -> tuple[list[int], str]:
    """A layer choice -> (indices into hidden_states, combination "sum" | "concat" | "mix").

    `spec` is a name of LAYER_CHOICES or a comma-separated list of layer numbers (0 =
    embeddings, -1 = last), whose vectors are summed; `num_layers` counts transformer layers.
    """
    total = num_layers + 1  # hidden_states holds the embeddings output plus every layer
    named = {
        "embeddings": ([0], "sum"),
        "last": ([total - 1], "sum"),
        "second_to_last": ([total - 2], "sum"),
        "sum_last_four": (list(range(max(total - 4, 0), total)), "sum"),
        "concat_last_four": (list(range(max(total - 4, 0), total)), "concat"),
        "sum_all": (list(range(total)), "sum"),
        "mix": (list(range(total)), "mix"),
    }
    if spec in named:
        return named[spec]
    try:
        indices = [int(part) for part in spec.split(",")]
    except ValueError:
        raise UserError(f"layers: expected one of {', '.join(LAYER_CHOICES)} or numbers like 4,5,6; got {spec!r}") from None
    resolved = [i + total if i < 0 else i for i in indices]
    if any(not 0 <= i < total for i in resolved):
        raise UserError(f"layers: {spec!r} is out of range for a model with {num_layers} layers (0..{num_layers}, or -1 for the last)")
    return resolved, "sum"


def feature_width(hidden_size: int, indices: list[int], combine: str) -> int:
    """Width of the combined feature vector."""
    return hidden_size * len(indices) if combine == "concat" else hidden_size


def combine_layers(hidden_states: tuple[torch.Tensor, ...] | torch.Tensor, indices: list[int], combine: str) -> torch.Tensor:
    """Combine the chosen layers' (B, T, H) states by sum or concatenation.

    For "mix" the chosen layers are returned stacked as (B, T, L, H) for a `ScalarMix` to weigh.
    """
    chosen = [hidden_states[i] for i in indices]
    if combine == "concat":
        return torch.cat(chosen, dim=-1)
    if combine == "mix":
        return torch.stack(chosen, dim=-2)
    return torch.stack(chosen).sum(0) if len(chosen) > 1 else chosen[0]


class ScalarMix(nn.Module):
    """ELMo's layer mix: gamma * sum_j softmax(w)_j * h_j, with w and gamma learned.

    Input (..., L, H) stacked layer states; output (..., H). The weights start equal, so
    an untrained mix is the mean of the layers.
    """

    def __init__(self, num_layers: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        """Mix the L layer vectors of each position into one."""
        weights = self.weights.softmax(-1).to(layers.dtype)
        return self.gamma.to(layers.dtype) * torch.einsum("...lh,l->...h", layers, weights)


def pool(states: torch.Tensor, attention_mask: torch.Tensor, how: str) -> torch.Tensor:
    """Sentence vectors from (B, T, H) token states: "cls", "mean" or "max" over real tokens."""
    if how == "cls":
        return states[:, 0]
    mask = attention_mask.to(states.dtype).unsqueeze(-1)  # (B, T, 1)
    if how == "mean":
        return (states * mask).sum(1) / mask.sum(1).clamp(min=1)
    if how == "max":
        return states.masked_fill(mask == 0, torch.finfo(states.dtype).min).max(1).values
    raise UserError(f"pooling must be cls, mean or max, got {how!r}")


HEAD_CONFIG = "feature_head.json"


HEAD_WEIGHTS = "feature_head.safetensors"


@dataclass
class HeadConfig:
    """What a feature head is: which layers feed it, how, and its shape."""

    kind: str  # "sequence" or "token"
    layers: list[int]
    combine: str  # "sum", "concat" or "mix"
    width: int  # feature width after combining
    num_labels: int
    head: str = "linear"  # or "bilstm"
    pooling: str = "mean"
    lstm_size: int = 256
    dropout: float = 0.1
    word_vector_size: int = 0  # > 0: static word vectors of this width go in front of the features


class FeatureHead(nn.Module):
    """[ScalarMix] -> [word vectors in front] -> [2-layer BiLSTM] -> dropout -> linear, per token or on pooled tokens."""

    def __init__(self, config: HeadConfig):
        super().__init__()
        self.config = config
        self.mix = ScalarMix(len(config.layers)) if config.combine == "mix" else None
        width = config.width + config.word_vector_size
        self.lstm = None
        if config.head == "bilstm":
            self.lstm = nn.LSTM(width, config.lstm_size, num_layers=2, bidirectional=True, batch_first=True,
                                dropout=config.dropout)
            width = 2 * config.lstm_size
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(width, config.num_labels)

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor,
                word_vectors: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, [L,] H) features [and (B, T, S) word vectors] -> logits (B, num_labels) or (B, T, num_labels)."""
        x = features.float()
        if self.mix is not None:
            x = self.mix(x)
        if self.config.word_vector_size:
            if word_vectors is None:
                raise ValueError("this head reads word vectors beside the features ([x_k; features_k])")
            x = torch.cat([word_vectors.float(), x], dim=-1)
        if self.lstm is not None:
            lengths = attention_mask.sum(1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            x, _ = self.lstm(packed)
            x, _ = nn.utils.rnn.pad_packed_sequence(x, batch_first=True, total_length=attention_mask.shape[1])
        if self.config.kind == "sequence":
            x = pool(x, attention_mask, self.config.pooling)
        return self.classifier(self.dropout(x))


def head_loss(logits: torch.Tensor, labels: torch.Tensor, kind: str, regression: bool) -> torch.Tensor:
    """Cross-entropy (or MSE for regression; ignoring unlabelled tokens for tagging)."""
    if regression:
        return F.mse_loss(logits.view(-1), labels.float().view(-1))
    if kind == "token":
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
    return F.cross_entropy(logits, labels)


class FeatureEncoder(nn.Module):
    """Any family's layer stack as a feature source, called like a BERT encoder.

    `stack` is what the family's spec gives as its `feature_encoder` (a BERT's BertModel, a GPT's
    decoder stack, a T5's encoder, ELMo's biLM, an AWD-LSTM's LSTMs), read through the spec's
    `hidden_states`: forward returns every layer's states, the embeddings' output first, as
    transformers' `hidden_states`. `num_hidden_layers` counts the layers above the embeddings.
    """

    def __init__(self, stack: nn.Module, spec: FamilySpec, config):
        super().__init__()
        self.stack = stack
        self.spec = spec
        self.config = config

    @property
    def num_hidden_layers(self) -> int:
        """Layers above the embeddings (hidden_states holds this many plus one)."""
        return self.spec.feature_layers(self.config)

    @property
    def hidden_size(self) -> int:
        """The width of the last layer's states."""
        return self.spec.feature_width(self.config)

    @property
    def context_length(self) -> int | None:
        """The longest input the stack reads (None: no hard limit)."""
        return self.spec.context_length(self.config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_hidden_states: bool = True) -> ModelOutput:
        """input_ids, attention_mask, token_type_ids (B, T), right-padded -> hidden_states, each
        (B, T, H) (an AWD-LSTM's differ in width), and last_hidden_state."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        states = tuple(self.spec.hidden_states(self.stack, input_ids, attention_mask, token_type_ids))
        return ModelOutput(last_hidden_state=states[-1], hidden_states=states)

    def describe(self) -> str:
        """What the family's spec says of this model ("encoder (6 layers, 384 wide, ...)")."""
        return self.spec.describe(self.config)

    def input_vectors(self) -> torch.Tensor:
        """The context-free vector of every vocabulary entry, (V, E) fp32 on the CPU: the input
        embeddings (ELMo: its token layer, the same in every context)."""
        with torch.no_grad():
            return self.spec.input_vectors(self.stack).detach().float().cpu()

    def save_pretrained(self, directory: str | Path) -> None:
        """The stack's own directory (a feature model keeps its encoder so)."""
        self.stack.save_pretrained(directory)


def load_feature_encoder(directory: str | Path, config_data: dict | None = None) -> FeatureEncoder:
    """A model directory's layer stack as a feature source, in eval mode (task heads and an LM's
    softmax left out); `config_data`: its config.json, read already. A family without a layer
    stack (static vectors) is a one-line error."""
    family = family_of(directory, config_data)
    spec = family.spec
    if spec.feature_encoder is None:
        raise UserError(f"{directory}: a {family.name} model has no layers to read features from")
    config = spec.config_class.load(directory, config_data)
    return FeatureEncoder(spec.feature_encoder(directory, config).eval(), spec, config).eval()


WORD_VECTORS_DIR = "word_vectors"  # a feature model's static vectors, when its head reads them
PIECES_NAME = "pieces.json"


class PieceWordVectors(nn.Module):
    """Static word vectors for the pieces of a contextual encoder's input: each piece gets the
    vector of the word it is part of, ELMo's x_k beside ELMo_k.

    Words are the pieces put back together: a WordPiece "##" piece continues the word before
    it, and a unigram piece continues it unless it begins with "▁". The word is then looked up
    as the vectors' own tokenizer spells it (`tokenize_words`: lower-cased if they were
    trained so; the mean when it splits into several words). Special tokens, words the
    vectors do not know (fastText: unless an n-gram does) and words that are punctuation only
    (which the static tokenizer drops) get zeros.

    Args:
        vectors: the static vectors (`bertology static train`).
        pieces: the encoder's vocabulary, pieces[i] the string of id i.
        tokenizer_model: "wordpiece" or "unigram", how pieces mark words.
        special_ids: ids that belong to no word ([CLS], [SEP], [PAD], ...).
    """

    def __init__(self, vectors: StaticVectors, pieces: list[str], tokenizer_model: str, special_ids: list[int]):
        super().__init__()
        if tokenizer_model not in ("wordpiece", "unigram"):
            raise ValueError(f"tokenizer_model must be wordpiece or unigram, got {tokenizer_model!r}")
        self.vectors, self.pieces, self.tokenizer_model = vectors, list(pieces), tokenizer_model
        self.special_ids = frozenset(special_ids)
        self._word_vectors: dict[str, torch.Tensor] = {}  # word as spelled by the pieces -> (S,)

    @property
    def hidden_size(self) -> int:
        """S, the width of a word's vector."""
        return self.vectors.hidden_size

    def words(self, ids: list[int]) -> list[str | None]:
        """The word each piece of one sequence belongs to, None for special tokens."""
        words: list[str] = []
        owner: list[int | None] = []  # owner[t]: the number of the word piece t belongs to
        for i in ids:
            if i in self.special_ids:
                owner.append(None)
                continue
            piece = self.pieces[i]
            if self.tokenizer_model == "wordpiece":
                continues, text = piece.startswith("##"), piece[2:] if piece.startswith("##") else piece
            else:
                continues, text = not piece.startswith("\u2581"), piece.lstrip("\u2581")
            if continues and owner and owner[-1] is not None:
                words[owner[-1]] += text
            else:
                words.append(text)
            owner.append(len(words) - 1)
        return [None if k is None else words[k] for k in owner]

    def word_vector(self, word: str) -> torch.Tensor:
        """(S,) a word's vector: the mean of what `tokenize_words` makes of it, zeros if nothing."""
        if word not in self._word_vectors:
            found = [v for w in tokenize_words(word, self.vectors.config.lowercase)
                     if (v := self.vectors.vector(w)) is not None]
            self._word_vectors[word] = torch.stack(found).mean(0) if found else torch.zeros(self.hidden_size)
        return self._word_vectors[word]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) piece ids -> (B, T, S) float32, each piece's word vector (zeros at padding)."""
        out = torch.zeros(*input_ids.shape, self.hidden_size)
        for b, row in enumerate(input_ids.tolist()):
            for t, word in enumerate(self.words(row)):
                if word is not None:
                    out[b, t] = self.word_vector(word)
        return out.to(input_ids.device)

    def save_pretrained(self, directory: str | Path) -> None:
        """The vectors' directory, and the pieces the lookup reads (pieces.json)."""
        directory = Path(directory)
        self.vectors.save_pretrained(directory)
        write_json_atomic(directory / PIECES_NAME, {"tokenizer_model": self.tokenizer_model, "pieces": self.pieces,
                                                    "special_ids": sorted(self.special_ids)})

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> PieceWordVectors:
        """Load what `save_pretrained` wrote."""
        directory = Path(directory)
        try:
            data = loads_json((directory / PIECES_NAME).read_text(encoding="utf-8"))
            return cls(StaticVectors.from_pretrained(directory), data["pieces"], data["tokenizer_model"],
                       data["special_ids"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UserError(f"{directory}: cannot load the word vectors beside the feature head ({err})") from None


class FeatureModel(nn.Module):
    """A frozen encoder (a BERT or ELMo's biLM, as a `FeatureEncoder`) and a feature head, called
    like a task model (logits out); with `word_vectors`, each piece's static word vector goes in
    front of its features, ELMo's [x_k; ELMo_k]."""

    def __init__(self, encoder: FeatureEncoder, head: FeatureHead, word_vectors: PieceWordVectors | None = None):
        super().__init__()
        if bool(head.config.word_vector_size) != (word_vectors is not None):
            raise ValueError("the head's word_vector_size and the word vectors given disagree")
        self.encoder = encoder
        self.head = head
        self.word_vectors = word_vectors

    def features(self, input_ids, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        """The combined layer features (B, T, [L,] H) the head reads."""
        out = self.encoder(input_ids, attention_mask, token_type_ids, output_hidden_states=True)
        return combine_layers(out.hidden_states, self.head.config.layers, self.head.config.combine)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> ModelOutput:
        """Logits of the head over the encoder's features."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        word_vectors = None if self.word_vectors is None else self.word_vectors(input_ids)
        return ModelOutput(logits=self.head(self.features(input_ids, attention_mask, token_type_ids), attention_mask,
                                            word_vectors))

    def save_pretrained(self, directory: str | Path) -> None:
        """The encoder in the usual layout plus feature_head.json / feature_head.safetensors
        (and the word vectors in word_vectors/)."""
        directory = Path(directory)
        self.encoder.save_pretrained(directory)
        if self.word_vectors is not None:
            self.word_vectors.save_pretrained(directory / WORD_VECTORS_DIR)
        write_tensors(self.head.state_dict(), directory / HEAD_WEIGHTS)
        write_json_atomic(directory / HEAD_CONFIG, dataclasses.asdict(self.head.config))

    @classmethod
    def from_pretrained(cls, directory: str | Path, config_data: dict | None = None) -> FeatureModel:
        """Load what `save_pretrained` wrote (`config_data`: its config.json, read already)."""
        directory = Path(directory)
        try:
            config = HeadConfig(**loads_json((directory / HEAD_CONFIG).read_text(encoding="utf-8")))
            head = FeatureHead(config)
            head.load_state_dict(load_file(str(directory / HEAD_WEIGHTS)))
        except (OSError, ValueError, TypeError, RuntimeError) as err:
            raise UserError(f"{directory}: cannot load the feature head ({err})") from None
        word_vectors = PieceWordVectors.from_pretrained(directory / WORD_VECTORS_DIR) if config.word_vector_size else None
        return cls(load_feature_encoder(directory, config_data), head, word_vectors).eval()
