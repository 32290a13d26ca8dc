"""TagLM: a BiLSTM-CRF sequence tagger that reads a pre-trained bidirectional LM's states.

Follows Peters et al. 2017, "Semi-supervised sequence tagging with bidirectional language
models" (TagLM), the step between static vectors and ELMo:

    word ─► [word embedding (learned, or started from static vectors); character CNN]
         ─► BiLSTM 1 ─► [its states; the biLM's top states for the word] ─► BiLSTM 2
         ─► linear (one score per tag) ─► CRF: Viterbi decoding, forward-algorithm loss

The biLM is frozen (the paper keeps its weights fixed) and lives outside this module: its
states arrive as `lm_states`, computed once per sentence by inference/tagging.py from an
ELMo directory (each word's forward state after its last piece, backward state at its first,
so that each direction has read the whole word). Without a biLM (`lm_size` 0) this is the
paper's baseline tagger, the comparison its claim rests on.

The character CNN is Ma and Hovy's (2016), which TagLM uses: 30-wide character embeddings,
30 filters of width 3, max over the word. The CRF is a linear-chain CRF with start and end
scores (AllenNLP's `ConditionalRandomField` and pytorch-crf lay it out the same way);
tests/models/test_taglm.py checks its loss and decoding against enumerating every tag
sequence. Where this differs from the paper: LSTMs instead of GRUs (the issue's and ELMo's
choice) and the biLM here is this project's ELMo (pieces of its own vocabulary, see elmo.py),
not the paper's 1B-word-benchmark CNN-BIG-LSTM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from ..errors import UserError
from .base import ConfigFile, FamilySpec, ModelOutput, PreTrainedModel
from .elmo import NUM_CHARACTERS, character_ids
from .static import normalize_word

MODEL_TYPE = "taglm"
WORDS_NAME = "words.txt"  # the word vocabulary, one per line, in embedding-row order
PAD_WORD, UNKNOWN_WORD = "[PAD]", "[UNK]"


@dataclass
class TagLMConfig(ConfigFile):
    """Hyper-parameters of a TagLM tagger (sizes of Ma and Hovy 2016 and Lample et al. 2016).

    Example: `TagLMConfig(num_labels=9, word_vocab_size=20000, lm_size=128)` reads a biLM whose
    states are 128 wide (an ELMo with projection_dim 64) after its first BiLSTM layer.
    """

    MODEL_TYPE: ClassVar[str] = MODEL_TYPE
    WHAT: ClassVar[str] = "a TagLM tagger"

    word_vocab_size: int = 2
    word_embedding_dim: int = 100
    lowercase: bool = True  # words are looked up lower-cased (the characters keep the case)
    char_embedding_dim: int = 30
    char_filters: int = 30
    char_kernel_size: int = 3
    max_characters_per_token: int = 50
    lstm_size: int = 200  # per direction, both BiLSTM layers
    lm_size: int = 0  # width of the biLM states joined after BiLSTM 1 (0: the tagger without a biLM)
    dropout: float = 0.5
    num_labels: int = 2
    id2label: dict[int, str] | None = None
    architectures: list[str] = field(default_factory=lambda: ["TagLMForTokenClassification"])
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # other config.json keys, kept

    def __post_init__(self) -> None:
        for name in ("word_vocab_size", "word_embedding_dim", "char_embedding_dim", "char_filters",
                     "char_kernel_size", "max_characters_per_token", "lstm_size", "num_labels"):
            value = getattr(self, name)
            if type(value) is not int or not 0 < value <= 2**24:
                raise UserError(f"config field {name!r} must be a positive integer, got {value!r}")
        if type(self.lm_size) is not int or self.lm_size < 0:
            raise UserError(f"config field 'lm_size' must be an integer >= 0, got {self.lm_size!r}")
        if type(self.dropout) not in (int, float) or not 0 <= self.dropout < 1:
            raise UserError(f"config field 'dropout' must be a number in [0, 1), got {self.dropout!r}")


class CRF(nn.Module):
    """A linear-chain conditional random field over tag scores.

    The score of tags y_1..y_n for emissions e is start[y_1] + sum_t e_t[y_t] +
    sum_t transitions[y_{t-1}, y_t] + end[y_n]; the loss is the log of the sum of exp(score)
    over all tag sequences (the forward algorithm) minus the gold sequence's score.
    Masks are (B, T) booleans, true on a sentence's words, which come first (right padding).
    """

    def __init__(self, num_tags: int):
        super().__init__()
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [from, to]
        self.start_transitions = nn.Parameter(torch.zeros(num_tags))
        self.end_transitions = nn.Parameter(torch.zeros(num_tags))

    def sequence_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The score of the given tags: emissions (B, T, L), tags and mask (B, T) -> (B,)."""
        mask = mask.to(emissions.dtype)
        batch = torch.arange(tags.shape[0], device=tags.device)
        emitted = emissions.gather(-1, tags.unsqueeze(-1)).squeeze(-1)  # (B, T)
        moved = self.transitions[tags[:, :-1], tags[:, 1:]]  # (B, T - 1)
        last = tags[batch, mask.long().sum(1) - 1]
        return (self.start_transitions[tags[:, 0]] + (emitted * mask).sum(1) + (moved * mask[:, 1:]).sum(1)
                + self.end_transitions[last])

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log sum over every tag sequence of exp(score): emissions (B, T, L), mask (B, T) -> (B,)."""
        alpha = self.start_transitions + emissions[:, 0]  # (B, L): ending at each tag so far
        for t in range(1, emissions.shape[1]):
            step = torch.logsumexp(alpha.unsqueeze(2) + self.transitions + emissions[:, t].unsqueeze(1), dim=1)
            alpha = torch.where(mask[:, t, None], step, alpha)
        return torch.logsumexp(alpha + self.end_transitions, dim=1)

    def forward(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The negative log-likelihood of `tags` (B, T), averaged over the B sentences."""
        emissions = emissions.float()
        return (self.log_partition(emissions, mask) - self.sequence_score(emissions, tags, mask)).mean()

    @torch.no_grad()
    def viterbi(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The highest-scoring tag sequence of each sentence: emissions (B, T, L), mask (B, T)."""
        emissions = emissions.float()
        score = self.start_transitions + emissions[:, 0]  # (B, L)
        backpointers = []
        for t in range(1, emissions.shape[1]):
            candidates = score.unsqueeze(2) + self.transitions  # (B, from, to)
            best, previous = candidates.max(dim=1)
            backpointers.append(previous)
            score = torch.where(mask[:, t, None], best + emissions[:, t], score)
        score = score + self.end_transitions
        lengths = mask.long().sum(1).tolist()
        paths = []
        for b, length in enumerate(lengths):
            tag = int(score[b].argmax())
            path = [tag]
            for t in range(length - 1, 0, -1):  # backpointers[t - 1] leads from word t to word t - 1
                tag = int(backpointers[t - 1][b, tag])
                path.append(tag)
            paths.append(path[::-1])
        return paths


class CharacterCNN(nn.Module):
    """Each word's characters -> one vector: embedding, a convolution, max over the word, (N, filters)."""

    def __init__(self, config: TagLMConfig):
        super().__init__()
        self.embedding = nn.Embedding(NUM_CHARACTERS, config.char_embedding_dim, padding_idx=0)
        self.convolution = nn.Conv1d(config.char_embedding_dim, config.char_filters, config.char_kernel_size,
                                     padding=config.char_kernel_size // 2)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """char_ids (..., C) -> (..., filters)."""
        shape = char_ids.shape[:-1]
        chars = self.embedding(char_ids.flatten(0, -2)).transpose(1, 2)  # (N, char dim, C)
        return self.convolution(chars).max(dim=-1).values.view(*shape, -1)


class TagLMForTokenClassification(PreTrainedModel):
    """The tagger: word and character representations, two BiLSTMs with the biLM's states between
    them, tag scores, and a CRF. `words` is the vocabulary (row i of the word embedding), saved
    beside the weights as words.txt."""

    config_class = TagLMConfig

    def __init__(self, config: TagLMConfig, words: list[str]):
        super().__init__(config)
        if len(words) != config.word_vocab_size:
            raise UserError(f"a TagLM config for {config.word_vocab_size:,} words was given {len(words):,}")
        self.words = words
        self.index = {word: i for i, word in enumerate(words)}
        self.word_embeddings = nn.Embedding(config.word_vocab_size, config.word_embedding_dim, padding_idx=0)
        self.char_cnn = CharacterCNN(config)
        self.dropout = nn.Dropout(config.dropout)
        size = config.lstm_size
        self.lstm1 = nn.LSTM(config.word_embedding_dim + config.char_filters, size, batch_first=True, bidirectional=True)
        self.lstm2 = nn.LSTM(2 * size + config.lm_size, size, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(2 * size, config.num_labels)
        self.crf = CRF(config.num_labels)

    def encode_words(self, sentences: list[list[str]]) -> dict[str, torch.Tensor]:
        """Sentences of words -> word_ids (B, T), char_ids (B, T, C) and attention_mask (B, T), right-padded."""
        width = max(len(words) for words in sentences)
        word_ids = torch.zeros(len(sentences), width, dtype=torch.long)
        char_ids = torch.zeros(len(sentences), width, self.config.max_characters_per_token, dtype=torch.long)
        unknown = self.index[UNKNOWN_WORD]
        for row, words in enumerate(sentences):
            word_ids[row, : len(words)] = torch.tensor(
                [self.index.get(normalize_word(w, self.config.lowercase), unknown) for w in words])
            char_ids[row, : len(words)] = character_ids(words, self.config.max_characters_per_token)
        return {"word_ids": word_ids, "char_ids": char_ids, "attention_mask": (word_ids != 0).long()}

    def _bilstm(self, lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]

    def forward(self, word_ids: torch.Tensor, char_ids: torch.Tensor, attention_mask: torch.Tensor,
                lm_states: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> ModelOutput:
        """word_ids, attention_mask (B, T), char_ids (B, T, C), lm_states (B, T, lm_size) when the
        tagger reads a biLM, labels (B, T) tag ids (padding ignored) -> logits (B, T, num_labels),
        the CRF's emission scores, and with labels the CRF loss."""
        if (lm_states is None) != (self.config.lm_size == 0):
            raise UserError("this tagger " + ("reads" if self.config.lm_size else "does not read")
                            + " a biLM's states (lm_states)")
        lengths = attention_mask.long().sum(1).cpu()
        x = torch.cat([self.word_embeddings(word_ids), self.char_cnn(char_ids)], dim=-1)
        x = self._bilstm(self.lstm1, self.dropout(x), lengths)
        if lm_states is not None:
            x = torch.cat([x, lm_states.to(x.dtype)], dim=-1)
        x = self._bilstm(self.lstm2, self.dropout(x), lengths)
        logits = self.classifier(self.dropout(x))
        mask = attention_mask.bool()
        loss = self.crf(logits, labels.clamp(min=0), mask) if labels is not None else None
        return ModelOutput(loss=loss, logits=logits)

    def decode(self, logits: torch.Tensor, attention_mask: torch.Tensor) -> list[list[str]]:
        """The CRF's best tag names for each sentence: logits (B, T, L), attention_mask (B, T)."""
        names = self.config.id2label or {}
        return [[names.get(tag, str(tag)) for tag in path] for path in self.crf.viterbi(logits, attention_mask.bool())]

    def num_parameters(self) -> int:
        """Trained parameters (the biLM, kept outside, not counted)."""
        return sum(p.numel() for p in self.parameters())

    def extra_files(self) -> dict[str, str]:
        """The word vocabulary, one word a line."""
        return {WORDS_NAME: "".join(f"{word}\n" for word in self.words)}

    @classmethod
    def read_extra_files(cls, directory: Path, config: TagLMConfig) -> dict[str, Any]:
        """The word vocabulary; one that does not match the config is a one-line error naming the file."""
        try:
            words = (directory / WORDS_NAME).read_text(encoding="utf-8").split("\n")[:-1]
        except (OSError, UnicodeDecodeError) as err:
            raise UserError(f"{directory / WORDS_NAME}: cannot read the tagger's vocabulary ({err})") from None
        if len(words) != config.word_vocab_size or words[:2] != [PAD_WORD, UNKNOWN_WORD]:
            raise UserError(f"{directory / WORDS_NAME}: {len(words):,} words starting {words[:2]}, but config.json "
                            f"says {config.word_vocab_size:,} starting {[PAD_WORD, UNKNOWN_WORD]}")
        return {"words": words}


SPEC = FamilySpec(
    config_class=TagLMConfig,
    model_classes={"TagLMForTokenClassification": TagLMForTokenClassification},
    default_class=TagLMForTokenClassification,
    describe=lambda c: f"TagLM tagger ({c.word_vocab_size:,} words, {c.num_labels} tags)",
    runner="tagger",
    tokenized=False,
)
