"""CoVe: the encoder of an English-to-German translation model as a source of contextual word vectors.

Follows McCann et al. 2017, "Learned in Translation: Contextualized Word Vectors" (CoVe; the
released MT-LSTM, salesforce/cove, trained with OpenNMT-py):

    English words ─► fixed GloVe vectors w (B, S, 300)            (never trained)
      ─► 2-layer bidirectional LSTM, 300 per direction           = the MT-LSTM; CoVe(w) = its top layer (B, S, 600)
    German words ─► embeddings z (B, T, 300)
      ─► 2-layer LSTM, 600 wide, fed [z_{t-1}; h~_{t-1}] (input feeding), started from the encoder's
         final states (both directions side by side, layer by layer, as OpenNMT's brnn bridge)
      ─► attention over the encoder states H:  a_t = softmax(H (W1 h_t + b1)),  c_t = H^T a_t
      ─► the context-adjusted state  h~_t = tanh(W2 [c_t; h_t] + b2)
      ─► softmax over the German vocabulary: p(y_t | y_<t, x) = softmax(W_out h~_t + b_out)

CoVe features of a word are the paper's concatenation [GloVe(w); CoVe(w)] (B, S, 300 + 600 in
the base preset): `CoVeModel`, which opens a translation model's directory and leaves its
decoder out. Decoding (`greedy_search`, `beam_search`) is batched; beam search keeps the best
`beam_size` hypotheses by their summed log-probability and returns the one with the best
length-normalised score (the sum divided by its length), stopping at `max_length` tokens.

Words: the English side is split by the static vectors' own tokenizer (models/static.py
`tokenize_words`, then `normalize_word` with the vectors' case), so every lookup matches how
the GloVe vectors were trained; a word without a vector reads a zero vector, as the paper's
unknown words do. The German side is a word-level vocabulary (words seen `min_count` times in
the training file; the rest `<unk>`), split by the same word pattern but case kept and every
other visible character (punctuation) a token of its own, so a translation can be joined back
into text and scored by sacrebleu against the raw references. Words rather than pieces: 29k
short captions have a small closed vocabulary (18.5k German types, 8k seen twice), so a
word softmax is cheap and what the paper's OpenNMT set-up used; pieces would lengthen every
decode for the few rare compounds.

Where this differs from the paper: the data. The paper's CoVe MT-LSTM saw 7M English-German
WMT 2017 sentence pairs (news, Europarl, Common Crawl); the one trained here sees the 29k image
captions of Multi30k (the paper trained a Multi30k model too, its MT-Small, and found the
downstream gains grow with the translation data), and its GloVe vectors are this project's (`bertology static train
--method glove`, trained on the shared books), not the 840B-token Common Crawl GloVe. The
optimiser is AdamW through the project's loop (OpenNMT's default then: SGD at 1.0, halved per
epoch). Everything else (layers, widths, input feeding, attention form) is the paper's.

A model directory holds config.json (model_type "cove"), model.safetensors (the weights and
the fixed English vectors, a buffer), source_words.txt (the English words, row i of the
vectors) and target_words.txt (the German vocabulary): self-contained, no GloVe folder needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..errors import UserError
from ..memory import FP32_BYTES, check_fits, check_model_size
from .base import ConfigFile, FamilySpec, ModelOutput, PreTrainedModel
from .static import normalize_word, tokenize_words

MODEL_TYPE = "cove"
SOURCE_WORDS_NAME = "source_words.txt"
TARGET_WORDS_NAME = "target_words.txt"
SOURCE_SPECIALS = ("<pad>", "<unk>")  # rows 0 and 1 of the English vectors: zeros
TARGET_SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0-3 of the German vocabulary
STATE = list[tuple[torch.Tensor, torch.Tensor]]  # per decoder layer: (h (N, 2H), c (N, 2H))

# name -> (hidden_size per encoder direction, target_embedding_size). "base" is the paper's MT-LSTM.
PRESETS: dict[str, tuple[int, int]] = {
    "tiny": (16, 16),
    "small": (150, 256),
    "base": (300, 300),
}

# A German token: a word as the static tokenizer spells it, or any other single visible character.
_TARGET_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)*|\S")
_NO_SPACE_BEFORE = re.compile(r" ([.,;:!?)\]}%])")
_NO_SPACE_AFTER = re.compile(r"([(\[{]) ")
_JOINERS = re.compile(r" ?([-/]) ?")


def source_words(text: str, lowercase: bool) -> list[str]:
    """English text -> the words the encoder reads, spelled as the vectors' vocabulary spells them."""
    return tokenize_words(text, lowercase)


def target_tokens(text: str) -> list[str]:
    """German text -> tokens: words (case kept) and punctuation marks.

    >>> target_tokens("Ein Mann im T-Shirt spielt Fußball.")
    ['Ein', 'Mann', 'im', 'T', '-', 'Shirt', 'spielt', 'Fußball', '.']
    """
    return _TARGET_TOKEN.findall(normalize_word(text, lowercase=False))


def detokenize(tokens: list[str]) -> str:
    """Tokens -> text: no space before closing punctuation, after an opening bracket, around - and /.

    >>> detokenize(['Ein', 'Mann', 'im', 'T', '-', 'Shirt', 'spielt', '.'])
    'Ein Mann im T-Shirt spielt.'
    """
    text = " ".join(tokens)
    return _JOINERS.sub(r"\1", _NO_SPACE_AFTER.sub(r"\1", _NO_SPACE_BEFORE.sub(r"\1", text)))


COVE_SIZE_FIELDS = ("input_size", "hidden_size", "num_layers", "target_embedding_size", "source_vocab_size",
                    "decoder_vocab_size")


def cove_parameters(values: dict[str, Any]) -> int:
    """A CoVe translation model's parameter count from its config's fields: the fixed English vectors,
    the encoder's BiLSTMs, the decoder's LSTMs (2 H wide, fed the attention's output too), the
    attention and the German embedding and output layers."""
    hidden, layers, target = values["hidden_size"], values["num_layers"], values["target_embedding_size"]
    encoder = sum(2 * 4 * (inputs * hidden + hidden * hidden + 2 * hidden)
                  for inputs in [values["input_size"]] + [2 * hidden] * (layers - 1))
    decoder = sum(4 * (inputs * 2 * hidden + 4 * hidden * hidden + 4 * hidden)
                  for inputs in [target + 2 * hidden] + [2 * hidden] * (layers - 1))
    german = values["decoder_vocab_size"] * (target + 2 * hidden + 1)
    return values["source_vocab_size"] * values["input_size"] + encoder + decoder + 8 * hidden * hidden + german

@dataclass
class CoVeConfig(ConfigFile):
    """Hyper-parameters of the MT-LSTM and its decoder (transformers' names where they exist).

    Example: `CoVeConfig.from_preset("base", input_size=300, source_vocab_size=40002,
    decoder_vocab_size=8004)` is the paper's MT-LSTM over 300-d GloVe vectors.
    """

    # memory.py's checks: this family's parameter count, and the fields that set its size
    count_parameters: ClassVar = staticmethod(cove_parameters)
    size_fields: ClassVar[tuple[str, ...]] = COVE_SIZE_FIELDS
    MODEL_TYPE: ClassVar[str] = MODEL_TYPE
    WHAT: ClassVar[str] = "a CoVe model"

    input_size: int = 300  # the English vectors' width (GloVe: 300), fixed
    hidden_size: int = 300  # per encoder direction; the decoder is 2 x hidden_size wide
    num_layers: int = 2  # encoder and decoder LSTM layers (the decoder starts from the encoder's states)
    target_embedding_size: int = 300
    source_vocab_size: int = 2  # English words with vectors, the 2 specials included
    decoder_vocab_size: int = 4  # German vocabulary (Marian's name), the 4 specials included
    dropout: float = 0.3  # OpenNMT-py's default: on embeddings, between layers, before the softmax
    lowercase: bool = True  # the English vectors were trained lower-cased: look words up lower-cased
    max_length: int = 80  # decoding stops after this many German tokens
    pad_token_id: int = 0
    bos_token_id: int = 1  # decoder_start_token_id
    eos_token_id: int = 2
    unk_token_id: int = 3
    architectures: list[str] = field(default_factory=lambda: ["CoVeForTranslation"])
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for name in ("input_size", "hidden_size", "num_layers", "target_embedding_size", "source_vocab_size",
                     "decoder_vocab_size", "max_length"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0 or value > 2**24:
                raise UserError(f"config field {name!r} must be a positive integer, got {value!r}")
        if self.source_vocab_size < len(SOURCE_SPECIALS) or self.decoder_vocab_size < len(TARGET_SPECIALS):
            raise UserError("config fields 'source_vocab_size' and 'decoder_vocab_size' must count the special "
                            f"tokens ({len(SOURCE_SPECIALS)} and {len(TARGET_SPECIALS)})")
        if type(self.dropout) not in (int, float) or not 0 <= self.dropout < 1:
            raise UserError(f"config field 'dropout' must be a number in [0, 1), got {self.dropout!r}")
        check_model_size(self)  # last: the fields are known to be numbers

    @property
    def features_size(self) -> int:
        """The width of a word's features [GloVe; CoVe]: input_size + 2 x hidden_size."""
        return self.input_size + 2 * self.hidden_size

    @classmethod
    def preset(cls, name: str) -> dict[str, Any]:
        """A named size's fields, from CoVe's size table (PRESETS)."""
        if name not in PRESETS:
            raise UserError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        hidden_size, target_embedding_size = PRESETS[name]
        return {"hidden_size": hidden_size, "target_embedding_size": target_embedding_size}


class MTLSTM(nn.Module):
    """The encoder: fixed English vectors -> a bidirectional LSTM stack. Its top layer is CoVe."""

    def __init__(self, config: CoVeConfig):
        super().__init__()
        # (V_src, D) fixed: a buffer, so the optimiser never sees it, and saved with the weights.
        self.register_buffer("source_vectors", torch.zeros(config.source_vocab_size, config.input_size))
        self.lstm = nn.LSTM(config.input_size, config.hidden_size, num_layers=config.num_layers, batch_first=True,
                            bidirectional=True, dropout=config.dropout if config.num_layers > 1 else 0.0)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, STATE]:
        """input_ids, attention_mask (B, S), right-padded, every row at least one word.

        Returns the vectors (B, S, D), the top layer's states (B, S, 2H) (zeros at padding) and each
        layer's final (h, c) with both directions side by side (B, 2H): the decoder's first state.
        Padding is packed away, so a word's states do not depend on how far its row is padded.
        """
        vectors = self.source_vectors[input_ids]  # (B, S, D)
        lengths = attention_mask.long().sum(1).cpu()
        packed = pack_padded_sequence(self.dropout(vectors), lengths, batch_first=True, enforce_sorted=False)
        outputs, (h, c) = self.lstm(packed)  # h, c: (layers x 2, B, H)
        outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=input_ids.shape[1])

        def both(x: torch.Tensor, layer: int) -> torch.Tensor:  # (B, 2H): forward then backward
            return torch.cat([x[2 * layer], x[2 * layer + 1]], dim=-1)

        state = [(both(h, layer), both(c, layer)) for layer in range(self.lstm.num_layers)]
        return vectors, outputs, state


class AttentionDecoder(nn.Module):
    """The German LSTM with input feeding, the paper's attention and the output softmax."""

    def __init__(self, config: CoVeConfig):
        super().__init__()
        width = 2 * config.hidden_size
        self.embeddings = nn.Embedding(config.decoder_vocab_size, config.target_embedding_size,
                                       padding_idx=config.pad_token_id)
        self.cells = nn.ModuleList(nn.LSTMCell(config.target_embedding_size + width if i == 0 else width, width)
                                   for i in range(config.num_layers))
        self.attention_in = nn.Linear(width, width)  # W1, b1
        self.attention_out = nn.Linear(2 * width, width)  # W2, b2
        self.output = nn.Linear(width, config.decoder_vocab_size)
        self.dropout = nn.Dropout(config.dropout)

    def step(self, tokens: torch.Tensor, state: STATE, feed: torch.Tensor, memory: torch.Tensor,
             memory_mask: torch.Tensor) -> tuple[torch.Tensor, STATE, torch.Tensor]:
        """One decoding step for N hypotheses.

        Args:
            tokens: (N,) the previous German token.
            state: per layer (h, c), each (N, 2H).
            feed: (N, 2H) the previous step's h~ (zeros at the first step).
            memory: (N, S, 2H) the encoder's top states; memory_mask (N, S), True at words.
        Returns:
            h~ (N, 2H) (`logits` turns it into the next token's scores) and the new state.
        """
        x = torch.cat([self.dropout(self.embeddings(tokens)), feed], dim=-1)
        new_state = []
        for index, cell in enumerate(self.cells):
            h, c = cell(x, state[index])
            new_state.append((h, c))
            x = self.dropout(h) if index < len(self.cells) - 1 else h
        scores = torch.bmm(memory, self.attention_in(x).unsqueeze(2)).squeeze(2)  # (N, S)
        weights = scores.masked_fill(~memory_mask.bool(), float("-inf")).softmax(-1)
        context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)  # (N, 2H)
        adjusted = torch.tanh(self.attention_out(torch.cat([context, x], dim=-1)))  # h~ (N, 2H)
        return adjusted, new_state

    def logits(self, adjusted: torch.Tensor) -> torch.Tensor:
        """h~ (..., 2H) -> scores over the German vocabulary (..., V_tgt). Kept out of `step`, so that
        training runs the softmax layer once over all steps: one large matrix product, not T small ones."""
        return self.output(self.dropout(adjusted))


class CoVePreTrainedModel(PreTrainedModel):
    """Saving and loading (models/base.py's, with the two word lists beside the weights), shared by
    the translation model and the feature model (which opens a translation model's directory and
    leaves the decoder out)."""

    config_class = CoVeConfig

    def __init__(self, config: CoVeConfig, source_words: list[str], target_words: list[str]):
        super().__init__(config)
        if len(source_words) != config.source_vocab_size or len(target_words) != config.decoder_vocab_size:
            raise ValueError(f"{len(source_words)} source and {len(target_words)} target words for a config of "
                             f"{config.source_vocab_size} and {config.decoder_vocab_size}")
        self.source_words = list(source_words)
        self.target_words = list(target_words)
        self.source_index = {word: i for i, word in enumerate(self.source_words)}
        self.target_index = {word: i for i, word in enumerate(self.target_words)}
        self.encoder = MTLSTM(config)

    def extra_files(self) -> dict[str, str]:
        """The English and the German word lists, one word a line."""
        return {SOURCE_WORDS_NAME: "".join(w + "\n" for w in self.source_words),
                TARGET_WORDS_NAME: "".join(w + "\n" for w in self.target_words)}

    @classmethod
    def read_extra_files(cls, directory: Path, config: CoVeConfig) -> dict[str, Any]:
        """The two word lists; one of the wrong length is a one-line error naming the file."""
        words = {}
        for name, size, what in ((SOURCE_WORDS_NAME, config.source_vocab_size, "source_vocab_size"),
                                 (TARGET_WORDS_NAME, config.decoder_vocab_size, "decoder_vocab_size")):
            path = directory / name
            if not path.is_file():
                raise UserError(f"{path}: no such file (a CoVe model directory holds its word lists)")
            words[name] = path.read_text(encoding="utf-8").split("\n")[:-1]
            if len(words[name]) != size:
                raise UserError(f"{path}: {len(words[name])} words, but {directory / 'config.json'} has {what} {size}")
        return {"source_words": words[SOURCE_WORDS_NAME], "target_words": words[TARGET_WORDS_NAME]}

    def source_ids(self, sentences: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """B word sequences (already split, e.g. by `source_words`) -> input_ids, attention_mask (B, S).
        A word is looked up as the vectors spell it (lower-cased if they were); unknown words are <unk>.
        An empty sequence reads one <unk>, so that every row has a word to encode."""
        length = max([len(s) for s in sentences] + [1])
        ids = torch.zeros(len(sentences), length, dtype=torch.long)  # <pad> = 0
        mask = torch.zeros(len(sentences), length, dtype=torch.long)
        unknown = SOURCE_SPECIALS.index("<unk>")
        for row, sentence in enumerate(sentences):
            words = sentence or ["<unk>"]
            ids[row, : len(words)] = torch.tensor([self.source_index.get(normalize_word(w, self.config.lowercase),
                                                                         unknown) for w in words])
            mask[row, : len(words)] = 1
        return ids, mask


class CoVeForTranslation(CoVePreTrainedModel):
    """The attentional encoder-decoder, trained on English -> German pairs."""

    def __init__(self, config: CoVeConfig, source_words: list[str], target_words: list[str]):
        super().__init__(config, source_words, target_words)
        self.decoder = AttentionDecoder(config)

    def target_ids(self, sentences: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """B German token sequences -> decoder_input_ids (<s> then the tokens) and labels (the tokens
        then </s>, -100 at padding), both (B, T + 1)."""
        length = max(len(s) for s in sentences) + 1
        inputs = torch.full((len(sentences), length), self.config.pad_token_id, dtype=torch.long)
        labels = torch.full((len(sentences), length), -100, dtype=torch.long)
        for row, sentence in enumerate(sentences):
            ids = [self.target_index.get(t, self.config.unk_token_id) for t in sentence]
            inputs[row, : len(ids) + 1] = torch.tensor([self.config.bos_token_id] + ids)
            labels[row, : len(ids) + 1] = torch.tensor(ids + [self.config.eos_token_id])
        return inputs, labels

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, STATE]:
        """The encoder's top states (B, S, 2H) and the decoder's first state."""
        _, memory, state = self.encoder(input_ids, attention_mask)
        return memory, state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor,
                labels: torch.Tensor | None = None) -> ModelOutput:
        """Teacher-forced decoding: input_ids, attention_mask (B, S); decoder_input_ids, labels (B, T).

        Returns logits (B, T, V_tgt) and, given labels, loss: the mean cross-entropy over the
        labelled tokens (-100 elsewhere)."""
        memory, state = self.encode(input_ids, attention_mask)
        feed = memory.new_zeros(memory.shape[0], memory.shape[2])
        adjusted = []
        for t in range(decoder_input_ids.shape[1]):  # input feeding: each step reads the last h~
            feed, state = self.decoder.step(decoder_input_ids[:, t], state, feed, memory, attention_mask)
            adjusted.append(feed)
        logits = self.decoder.logits(torch.stack(adjusted, dim=1))  # (B, T, V)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                                                           ignore_index=-100)
        return ModelOutput(loss=loss, logits=logits)

    def generation_log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, V) logits -> log-probabilities with <pad> and <s> ruled out: a hypothesis never produces them."""
        log_probs = logits.float().log_softmax(-1)
        log_probs[:, [self.config.pad_token_id, self.config.bos_token_id]] = float("-inf")
        return log_probs

    def _start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, copies: int):
        """The encoder run once, each row repeated `copies` times: memory, mask, state, feed, first tokens."""
        memory, state = self.encode(input_ids, attention_mask)
        memory = memory.repeat_interleave(copies, 0)
        mask = attention_mask.repeat_interleave(copies, 0)
        state = [(h.repeat_interleave(copies, 0), c.repeat_interleave(copies, 0)) for h, c in state]
        feed = memory.new_zeros(memory.shape[0], memory.shape[2])
        tokens = torch.full((memory.shape[0],), self.config.bos_token_id, dtype=torch.long, device=memory.device)
        return memory, mask, state, feed, tokens

    def _strip(self, ids: list[int]) -> list[int]:
        """A hypothesis up to (not including) its </s>."""
        return ids[: ids.index(self.config.eos_token_id)] if self.config.eos_token_id in ids else ids

    @torch.no_grad()
    def greedy_search(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      max_length: int | None = None) -> list[list[int]]:
        """The most probable next token at every step, for a batch (B, S); returns B lists of
        German ids without </s>, at most `max_length` (default: config.max_length) long."""
        max_length = max_length or self.config.max_length
        memory, mask, state, feed, tokens = self._start(input_ids, attention_mask, 1)
        finished = torch.zeros(len(tokens), dtype=torch.bool, device=tokens.device)
        steps = []
        for _ in range(max_length):
            feed, state = self.decoder.step(tokens, state, feed, memory, mask)
            logits = self.decoder.logits(feed)
            tokens = self.generation_log_probs(logits).argmax(-1).masked_fill(finished, self.config.pad_token_id)
            steps.append(tokens)
            finished |= tokens == self.config.eos_token_id
            if bool(finished.all()):
                break
        return [self._strip(row) for row in torch.stack(steps, 1).tolist()]

    @torch.no_grad()
    def beam_search(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, beam_size: int,
                    max_length: int | None = None, length_penalty: float = 1.0) -> list[list[int]]:
        """Beam search for a batch (B, S): B lists of German ids without </s>.

        Each row keeps `beam_size` hypotheses by summed log-probability; a finished one (it
        produced </s>) stays in its beam at no further cost. At the end (every beam finished, or
        `max_length` tokens) each row returns the hypothesis with the best score / length **
        `length_penalty`, the length counting its </s> (1.0: the mean log-probability per token;
        0: the raw sum). With beam_size 1 this is greedy search.
        """
        max_length = max_length or self.config.max_length
        batch, beams = input_ids.shape[0], beam_size
        memory, mask, state, feed, tokens = self._start(input_ids, attention_mask, beams)
        vocab = self.config.decoder_vocab_size
        device = memory.device
        scores = torch.zeros(batch, beams, device=device)
        scores[:, 1:] = float("-inf")  # all beams start as the same empty hypothesis: expand only one
        finished = torch.zeros(batch, beams, dtype=torch.bool, device=device)
        lengths = torch.zeros(batch, beams, device=device)
        history = torch.zeros(batch, beams, 0, dtype=torch.long, device=device)
        stay = torch.full((vocab,), float("-inf"), device=device)
        stay[self.config.pad_token_id] = 0.0  # a finished hypothesis continues with <pad> at no cost
        offsets = (torch.arange(batch, device=device) * beams)[:, None]
        for _ in range(max_length):
            feed, state = self.decoder.step(tokens, state, feed, memory, mask)
            logits = self.decoder.logits(feed)
            log_probs = self.generation_log_probs(logits).view(batch, beams, vocab)
            log_probs = torch.where(finished[..., None], stay, log_probs)
            top, index = (scores[..., None] + log_probs).view(batch, beams * vocab).topk(beams, dim=1)
            origin, token = index // vocab, index % vocab  # (B, K) each
            was_finished = finished.gather(1, origin)
            scores = top
            lengths = lengths.gather(1, origin) + (~was_finished).float()
            finished = was_finished | (token == self.config.eos_token_id)
            history = torch.cat([history.gather(1, origin[..., None].expand(-1, -1, history.shape[2])),
                                 token[..., None]], dim=2)
            rows = (origin + offsets).view(-1)
            state = [(h[rows], c[rows]) for h, c in state]
            feed, tokens = feed[rows], token.view(-1)
            if bool(finished.all()):
                break
        normalized = scores / lengths.clamp_min(1.0) ** length_penalty
        best = normalized.argmax(1)
        return [self._strip(history[b, best[b]].tolist()) for b in range(batch)]

    @torch.no_grad()
    def sequence_log_prob(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                          hypotheses: list[list[int]], finished: list[bool]) -> torch.Tensor:
        """(B,) the decoding log-probability of each row's German ids (with </s> where finished[b]),
        as the searches score them: the quantity beam search maximises per token."""
        memory, mask, state, feed, tokens = self._start(input_ids, attention_mask, 1)
        targets = [h + [self.config.eos_token_id] if done else list(h) for h, done in zip(hypotheses, finished)]
        total = torch.zeros(len(targets), device=memory.device)
        for t in range(max(len(x) for x in targets)):
            feed, state = self.decoder.step(tokens, state, feed, memory, mask)
            logits = self.decoder.logits(feed)
            log_probs = self.generation_log_probs(logits)
            tokens = torch.tensor([x[t] if t < len(x) else self.config.pad_token_id for x in targets],
                                  device=memory.device)
            active = torch.tensor([t < len(x) for x in targets], device=memory.device)
            total += torch.where(active, log_probs.gather(1, tokens[:, None]).squeeze(1), torch.zeros_like(total))
        return total

    def translate(self, texts: list[str], beam_size: int = 1, max_length: int | None = None,
                  batch_size: int = 64) -> list[str]:
        """English texts -> German texts (greedy for beam_size 1, else beam search), in order,
        batched by length. More beams than German words, or than the memory holds, is a one-line error."""
        vocab_size = self.config.decoder_vocab_size
        if beam_size > vocab_size:
            raise UserError(f"--beam-size {beam_size} is more than the model's {vocab_size:,} German words")
        check_fits(3 * FP32_BYTES * min(batch_size, len(texts)) * beam_size * vocab_size,
                   f"--beam-size {beam_size} x --batch-size {batch_size} over {vocab_size:,} German words")
        sentences = [source_words(text, self.config.lowercase) for text in texts]
        order = sorted(range(len(texts)), key=lambda i: len(sentences[i]))
        out: list[str] = [""] * len(texts)
        for start in range(0, len(order), batch_size):
            rows = order[start: start + batch_size]
            ids, mask = self.source_ids([sentences[i] for i in rows])
            ids, mask = ids.to(self.encoder.source_vectors.device), mask.to(self.encoder.source_vectors.device)
            if beam_size == 1:
                hypotheses = self.greedy_search(ids, mask, max_length)
            else:
                hypotheses = self.beam_search(ids, mask, beam_size, max_length)
            for row, hypothesis in zip(rows, hypotheses):
                out[row] = detokenize([self.target_words[i] for i in hypothesis])
        return out


class CoVeModel(CoVePreTrainedModel):
    """CoVe features: [GloVe(w); MT-LSTM(GloVe(w))] for each word of a text, as the paper feeds a task.

    Called like models/static.py's `StaticVectors` (B word sequences in, (B, T, D) features and a
    mask out), so the feature-based heads over static vectors take it as they are.
    """

    @property
    def hidden_size(self) -> int:
        """The features' width: input_size + 2 x hidden_size (900 in the base preset)."""
        return self.config.features_size

    def normalize(self, word: str) -> str:
        """A word as the English vocabulary spells it."""
        return normalize_word(word, self.config.lowercase)

    @torch.no_grad()
    def text_features(self, texts: list[list[str]], batch_size: int = 64) -> list[torch.Tensor]:
        """Each text's (words, D + 2H) float16 [GloVe; CoVe] features: the MT-LSTM run once over
        every text (sorted by length, batch_size at a time); a text with no word gives (0, D + 2H)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        encoded: list[torch.Tensor] = [torch.zeros(0, self.hidden_size, dtype=torch.float16)] * len(texts)
        for start in range(0, len(order), batch_size):
            rows = order[start: start + batch_size]
            features, _ = self([texts[i] for i in rows])  # (B, T, D + 2H)
            for j, i in enumerate(rows):
                encoded[i] = features[j, : len(texts[i])].half().cpu()  # kept for every epoch: in host memory
        return encoded

    @torch.no_grad()
    def forward(self, sentences: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Features of a batch of word sequences.

        Args:
            sentences: B sequences of English words (e.g. from `source_words`).
        Returns:
            features: (B, T, input_size + 2 x hidden_size) [GloVe; CoVe], T the longest sequence,
                zeros at padding (and the GloVe half zero for a word without a vector).
            mask: (B, T) bool, True at real words.
        """
        ids, mask = self.source_ids(sentences)
        vectors, states, _ = self.encoder(ids, mask)
        length = max((len(s) for s in sentences), default=0)
        real = torch.zeros(len(sentences), length, dtype=torch.bool)
        for row, sentence in enumerate(sentences):
            real[row, : len(sentence)] = True
        features = torch.cat([vectors, states], dim=-1)[:, :length] * real[..., None]
        return features, real


def _target_views(model: CoVeModel, targets: list[tuple[list[str], int]],
                  batch_size: int) -> tuple[dict[str, np.ndarray], int]:
    """WiC's views of the target word: the paper's [GloVe; CoVe], and each half alone beside it
    (the GloVe half is its context-free control)."""
    rows = []
    for first in range(0, len(targets), batch_size):
        chunk = targets[first:first + batch_size]
        features, _ = model([words for words, _ in chunk])  # (B, T, D + 2H)
        rows.append(features[torch.arange(len(chunk)), [position for _, position in chunk]].numpy())
    both = np.concatenate(rows)
    glove_width = model.config.input_size
    return {"GloVe (context-free)": both[:, :glove_width], "CoVe": both[:, glove_width:], "[GloVe; CoVe]": both}, 0


SPEC = FamilySpec(
    config_class=CoVeConfig,
    model_classes={cls.__name__: cls for cls in (CoVeForTranslation, CoVeModel)},
    default_class=CoVeForTranslation,
    describe=lambda c: f"CoVe MT-LSTM ({c.num_layers} layers, {c.hidden_size} wide)",
    runner="word_features",
    tokenized=False,
    translates=True,
    finetune_modes=("features",),  # a fixed feature source, as in its paper
    word_features=lambda directory, config: CoVeModel.from_pretrained(directory, config=config),
    word_views=_target_views,
)
