"""TagLM's tagger together with its biLM: what evaluate, predict and serve run for a TagLM directory.

A TagLM directory (recipes/tagger.py writes it) holds the tagger (models/taglm.py: config.json,
model.safetensors, words.txt) and, when it reads a biLM, that biLM in its `lm` folder (an ELMo
directory without the softmax, with its tokenizer). `Tagger` opens both and tags sentences of
words: the biLM's top layer for each word (`BiLMStates`), then the tagger's Viterbi path.

Example:
    >>> tagger = Tagger.from_pretrained("runs/taglm")
    >>> tagger.tag([["EU", "rejects", "German", "call"]])
    [['B-ORG', 'O', 'B-MISC', 'O']]
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from ..errors import UserError
from ..tasks.inputs import in_row_order
from .embedding import embed_tokens
from .modeldir import ModelDir, open_model_dir
from .predict import model_device

LM_FOLDER = "lm"
NO_LENGTH_LIMIT = 2**30  # an LSTM has no position table: every sentence is read whole, never cut


class BiLMStates:
    """A frozen ELMo's top layer for each word of a sentence: (words, 2 x projection_dim), the
    forward direction after the word's last piece and the backward one at its first."""

    def __init__(self, directory: str | os.PathLike):
        model_dir = open_model_dir(directory)
        if not model_dir.spec.two_directions:
            raise UserError(f"{directory}: a {model_dir.family.name} model, but TagLM's --lm is a bidirectional LM: an "
                            "ELMo directory from `bertology pretrain --arch elmo`")
        self.model, self.tokenizer = model_dir.feature_encoder("cpu")
        self.width = self.model.hidden_size

    def __call__(self, sentences: list[list[str]], batch_size: int = 64) -> list[torch.Tensor]:
        """Each sentence's (len(words), width) float32 states; a word the tokenizer drops entirely
        (only control characters) gets zeros."""
        texts = [" ".join(words) for words in sentences]
        found = embed_tokens(self.model, self.tokenizer, texts, layers="last", word_pieces="ends",
                             batch_size=batch_size, precision="fp32", max_seq_len=NO_LENGTH_LIMIT)
        states = []
        for words, vectors in zip(sentences, found):
            row, kept = torch.zeros(len(words), self.width), 0
            for i, word in enumerate(words):
                if kept < len(vectors.words) and vectors.words[kept] == word:
                    row[i] = torch.from_numpy(vectors.vectors[kept])
                    kept += 1
            states.append(row)
        return states

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """The biLM without its softmax, and its tokenizer."""
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)


def pad_states(states: list[torch.Tensor]) -> torch.Tensor:
    """Per-sentence (n_i, W) states -> (B, max n_i, W), zeros after each sentence."""
    return nn.utils.rnn.pad_sequence([s.float() for s in states], batch_first=True)


def tagger_inputs(model: nn.Module, sentences: list[list[str]],
                  states: list[torch.Tensor] | None) -> dict[str, torch.Tensor]:
    """A padded batch for the tagger: word_ids, char_ids, attention_mask (B, T) and, when the
    tagger reads a biLM, lm_states (B, T, width) from each sentence's states."""
    batch = model.encode_words(sentences)
    if states is not None:
        batch["lm_states"] = pad_states(states)
    return batch


@torch.no_grad()
def viterbi_tags(model: nn.Module, sentences: list[list[str]], states: list[torch.Tensor] | None,
                 batch_size: int) -> list[list[str]]:
    """Each sentence's tags (the CRF's best path) in length-sorted batches, from its biLM states
    when the tagger reads them; an empty sentence gets none. Leaves the model in eval mode."""
    model.eval()
    device = model_device(model)
    nonempty = [i for i, words in enumerate(sentences) if words]

    def tags(rows: list[int]) -> list[list[str]]:
        chosen = [nonempty[r] for r in rows]
        batch = tagger_inputs(model, [sentences[i] for i in chosen], [states[i] for i in chosen] if states else None)
        batch = {k: v.to(device) for k, v in batch.items()}
        return model.decode(model(**batch).logits, batch["attention_mask"])

    found = dict(zip(nonempty, in_row_order([len(sentences[i]) for i in nonempty], batch_size, tags)))
    return [found.get(i, []) for i in range(len(sentences))]


class Tagger(nn.Module):
    """A TagLM tagger and (when it reads one) its biLM, called on sentences of words."""

    def __init__(self, model: nn.Module, lm: BiLMStates | None):
        super().__init__()
        if (lm is None) != (model.config.lm_size == 0) or (lm is not None and lm.width != model.config.lm_size):
            raise UserError(f"this tagger reads biLM states {model.config.lm_size} wide; the biLM given has "
                            f"{lm.width if lm else 'none'}")
        self.model = model
        self.lm = lm
        self.lm_encoder = lm.model if lm is not None else None  # counted in parameters(), moved with the tagger

    @property
    def config(self):
        """The tagger's config (its task, labels and sizes)."""
        return self.model.config

    def tag(self, sentences: list[list[str]], batch_size: int = 64) -> list[list[str]]:
        """Each sentence's tags (the CRF's best path); an empty sentence gets none."""
        states = self.lm(sentences, batch_size) if self.lm is not None and any(sentences) else None
        return viterbi_tags(self.model, sentences, states, batch_size)

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """The tagger into `directory`, its biLM into `directory/lm` (written once: it is frozen)."""
        directory = Path(directory)
        self.model.save_pretrained(directory)
        if self.lm is not None and not (directory / LM_FOLDER / "config.json").is_file():
            self.lm.save_pretrained(directory / LM_FOLDER)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> "Tagger":
        """Open a TagLM directory: the tagger and, if it reads one, the biLM in its `lm` folder."""
        return cls.open(open_model_dir(directory))

    @classmethod
    def open(cls, model_dir: ModelDir) -> "Tagger":
        """`from_pretrained` of a directory already opened (its config.json read)."""
        directory = model_dir.path
        model = model_dir.load_model()
        lm = None
        if model.config.lm_size:
            if not (directory / LM_FOLDER).is_dir():
                raise UserError(f"{directory}: this tagger reads a biLM, but its {LM_FOLDER}/ folder is missing")
            lm = BiLMStates(directory / LM_FOLDER)
        return cls(model, lm).eval()
