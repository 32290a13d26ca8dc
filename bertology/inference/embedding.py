"""Sentence and word vectors from any BERT encoder: what `bertology embed` writes and `/embed` answers.

Any model directory works: a pre-trained encoder, a fine-tuned classifier, tagger or QA
model (its head is dropped), a feature-based model, or a transformers / sentence-transformers
BERT folder such as all-MiniLM-L6-v2. The layers to read come from features.py (the BERT
paper's feature-based choices: last, second_to_last, sum_last_four, concat_last_four, ...).

Sentence level: the chosen layers' token vectors are pooled into one vector per text ("cls",
"mean" over real tokens, as Sentence-BERT does, or "max"), optionally L2-normalised; with
mean pooling and normalisation this reproduces sentence-transformers' all-MiniLM-L6-v2.
Token level: one vector per whitespace-separated word (its first WordPiece, or the mean of
its pieces), or one per WordPiece.

Texts are batched by length, so little padding is computed, and returned in input order.
Texts longer than the model's limit are cut (and counted); for a sentence-transformers
folder the limit is its `max_seq_length`, the length it was trained with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..models.features import (
    LAYER_CHOICES,
    FeatureEncoder,
    combine_layers,
    feature_width,
    parse_layers,
    pool,
)
from ..ops import PRECISIONS, autocast, resolve_precision
from ..tasks.inputs import Feature, collate, framing, in_row_order, unframed, word_of_each_token
from .modeldir import open_model_dir

POOLINGS = ("mean", "cls", "max")


LEVELS = ("sentence", "token")


WORD_PIECES = ("first", "mean", "ends", "none")


def load_encoder(model_dir: str | Path, device: str | torch.device | None = "auto") -> tuple[FeatureEncoder, Tokenizer]:
    """Any model directory -> its layers as a feature source (task heads dropped) in eval mode, and
    its tokenizer (see inference/modeldir.py's `ModelDir.feature_encoder`).

    Args:
        model_dir: a model directory of any family with layers (a BERT, a transformers /
            sentence-transformers BERT folder, ELMo's biLM, a GPT, T5's encoder, ...), or the name
            of an installed model (`all-MiniLM-L6-v2`: see models.resolve_model_dir).
        device: where the encoder runs (the `--device` setting): "auto" is the GPU when there is one, else the CPU.
    Returns:
        (encoder, tokenizer). For a sentence-transformers folder the tokenizer's
        `model_max_length` is its `max_seq_length`, the length the model was trained with.
    """
    return open_model_dir(model_dir).feature_encoder(device)


@dataclass
class EmbedStats:
    """What was done to the input, for the summary line."""

    truncated: int = 0  # texts cut to the length limit
    skipped_empty: int = 0  # blank lines left out (--skip-empty)
    dropped_words: int = 0  # token level: words without a vector (cut off, or no WordPiece at all)


class WordVectors(NamedTuple):
    """The token-level vectors of one text."""

    words: list[str]  # the words (or WordPieces) that have a vector, in order
    vectors: np.ndarray  # (len(words), width) float32


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise UserError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def _layer_choice(model: FeatureEncoder, layers: str) -> tuple[list[int], str]:
    """parse_layers, without the trainable mix (there is no head here to learn its weights)."""
    indices, combine = parse_layers(layers, model.num_hidden_layers)
    if combine == "mix":
        fixed = ", ".join(name for name in LAYER_CHOICES if name != "mix")
        raise UserError(f"layers: 'mix' is learned while training a head (finetune --mode features); "
                        f"for embeddings pick {fixed}, or layer numbers like 4,5,6")
    return indices, combine


def length_limit(model: FeatureEncoder, tokenizer: Tokenizer, max_seq_len: int | None) -> int:
    """Tokens per text, the special tokens ([CLS] and [SEP]) included: the given limit, else the
    model's and tokenizer's (an LSTM's has none: the tokenizer's)."""
    positions = model.context_length or max(max_seq_len or 0, tokenizer.model_max_length)
    if max_seq_len is None:
        return min(positions, tokenizer.model_max_length)
    if not 2 < max_seq_len <= positions:
        raise UserError(f"max_seq_len must be between 3 and the model's {positions} positions, got {max_seq_len}")
    return max_seq_len


def _tokenize(tokenizer: Tokenizer, texts: Sequence[str], limit: int, stats: EmbedStats | None) -> list[list[int]]:
    """Ids of each text framed as the tokenizer frames one ("[CLS] text [SEP]"), its own tokens cut
    so that the row fits `limit`."""
    room = limit - framing(tokenizer).specials
    rows = unframed(tokenizer, list(texts))["input_ids"]
    if stats is not None:
        stats.truncated += sum(len(row) > room for row in rows)
    return [tokenizer.frame(row[:room])[0] for row in rows]


def _states(model: FeatureEncoder, rows: list[list[int]], pad_id: int, indices: list[int], combine: str,
            precision: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded forward pass over token-id rows -> combined layer states (B, T, W) fp32 and mask (B, T)."""
    device = next(model.parameters()).device
    batch = collate([Feature(row, [0] * len(row), i) for i, row in enumerate(rows)], "none", pad_id)
    mask = batch["attention_mask"].to(device)
    with autocast(precision, device):
        out = model(batch["input_ids"].to(device), mask, output_hidden_states=True)
    # Pooling and normalising in fp32 even under bf16: sums over many tokens lose precision in bf16.
    return combine_layers(out.hidden_states, indices, combine).float(), mask


@torch.inference_mode()
def embed_texts(model: FeatureEncoder, tokenizer: Tokenizer, texts: Sequence[str], *, layers: str = "last",
                pooling: str = "mean", normalize: bool = False, batch_size: int = 64, precision: str = "auto",
                max_seq_len: int | None = None, stats: EmbedStats | None = None) -> np.ndarray:
    """One vector per text.

    Args:
        model: from `load_encoder`.
        tokenizer: from `load_encoder`, with the model.
        texts: the texts; each is encoded alone as "[CLS] text [SEP]".
        layers: a name of features.LAYER_CHOICES except "mix", or layer numbers "4,5,6" (summed).
        pooling: "mean" over real tokens ([CLS] and [SEP] included, as sentence-transformers),
            "cls" (the [CLS] position's vector), or "max" over real tokens.
        normalize: scale each vector to unit L2 norm (cosine similarity becomes a dot product).
        batch_size: texts per forward pass; texts are grouped by length to save padding.
        precision: "fp32", "bf16", or "auto" (bf16 where the device runs it fast).
        max_seq_len: tokens per text, [CLS] and [SEP] included; longer texts are cut
            (counted in `stats.truncated`). Default: the model's and tokenizer's limit.
        stats: counts what was cut.
    Returns:
        (len(texts), width) float32 in input order; width is the hidden size, 4x for concat_last_four.
    """
    _check_choice("pooling", pooling, POOLINGS)
    _check_choice("precision", precision, PRECISIONS)
    indices, combine = _layer_choice(model, layers)
    width = feature_width(model.hidden_size, indices, combine)
    if not texts:
        return np.zeros((0, width), np.float32)
    rows = _tokenize(tokenizer, texts, length_limit(model, tokenizer, max_seq_len), stats)
    precision = resolve_precision(precision, next(model.parameters()).device)

    def vectors(batch: list[int]) -> list[np.ndarray]:
        states, mask = _states(model, [rows[i] for i in batch], tokenizer.pad_token_id, indices, combine, precision)
        pooled = pool(states, mask, pooling)  # (B, W)
        if normalize:
            pooled = F.normalize(pooled, dim=-1)
        return list(pooled.cpu().numpy())

    return np.stack(in_row_order([len(row) for row in rows], batch_size, vectors))


@dataclass
class _Aligned:
    """A framed text's ids, where its own tokens start in them, and for each of those tokens the
    number of its word in `words`."""

    ids: list[int]
    start: int
    owner: list[int]
    words: list[str]


def _align_words(tokenizer: Tokenizer, texts: Sequence[str], word_pieces: str, limit: int,
                 stats: EmbedStats | None) -> list[_Aligned]:
    """Tokenize and tie each piece to its whitespace-separated word (or to itself, for "none")."""
    frame = framing(tokenizer)
    if word_pieces == "none":
        rows = _tokenize(tokenizer, texts, limit, stats)
        pieces = [row[frame.before:len(row) - frame.specials + frame.before] for row in rows]
        return [_Aligned(row, frame.before, list(range(len(own))), tokenizer.convert_ids_to_tokens(own))
                for row, own in zip(rows, pieces)]
    split = [text.split() for text in texts]
    # Words joined by single spaces tokenize as the original text does (whitespace only separates).
    encoded = unframed(tokenizer, [" ".join(words) for words in split], offsets=True)
    room = limit - frame.specials
    aligned = []
    for words, pieces, spans in zip(split, encoded["input_ids"], encoded["offset_mapping"]):
        word_of_piece = word_of_each_token(words, spans)
        for k in range(len(word_of_piece)):  # a piece that covers no character (none do, commonly): its neighbour's word
            if word_of_piece[k] is None:
                word_of_piece[k] = word_of_piece[k - 1] if k else next((w for w in word_of_piece if w is not None), 0)
        cut = len(pieces) > room
        if cut:
            keep = room
            # A word cut in two would get a vector from part of its pieces: it is left out whole.
            while 0 < keep < len(pieces) and word_of_piece[keep] == word_of_piece[keep - 1]:
                keep -= 1
            pieces, word_of_piece = pieces[:keep], word_of_piece[:keep]
        kept = sorted(set(word_of_piece))  # words with pieces, in order
        rank = {word: k for k, word in enumerate(kept)}
        if stats is not None:
            stats.truncated += cut
            stats.dropped_words += len(words) - len(kept)
        aligned.append(_Aligned(tokenizer.frame(pieces)[0], frame.before, [rank[w] for w in word_of_piece],
                                [words[w] for w in kept]))
    return aligned


def _word_vectors(pieces: torch.Tensor, owner: list[int], count: int, how: str) -> torch.Tensor:
    """(P, W) WordPiece vectors -> (count, W) word vectors: each word's first piece, the mean of its
    pieces, or ("ends", for a biLM's [forward; backward] states) the forward half at its last piece
    and the backward half at its first, where each direction has read the whole word."""
    owner_t = torch.tensor(owner, device=pieces.device)
    if how == "mean":
        sums = torch.zeros(count, pieces.shape[1], device=pieces.device).index_add_(0, owner_t, pieces)
        return sums / torch.bincount(owner_t, minlength=count).unsqueeze(1)
    first = torch.ones_like(owner_t, dtype=torch.bool)
    first[1:] = owner_t[1:] != owner_t[:-1]  # words are numbered in order, so a change starts a word
    if how == "ends":
        last = first.roll(-1)  # the piece before a word's first piece ends the previous word
        half = pieces.shape[1] // 2
        return torch.cat([pieces[last, :half], pieces[first, half:]], dim=-1)
    return pieces[first]


@torch.inference_mode()
def embed_tokens(model: FeatureEncoder, tokenizer: Tokenizer, texts: Sequence[str], *, layers: str = "last",
                 word_pieces: str = "first", normalize: bool = False, batch_size: int = 64,
                 precision: str = "auto", max_seq_len: int | None = None,
                 stats: EmbedStats | None = None) -> list[WordVectors]:
    """Word vectors of each text.

    The other arguments are `embed_texts`'s. Words that do not fit whole within `max_seq_len`,
    and words the tokenizer drops entirely (only control characters), get no vector and
    are left out of `words` (counted in `stats.dropped_words`).

    Args:
        word_pieces: how a whitespace-separated word's WordPieces become its vector: "first"
            (the BERT paper's choice for tagging), "mean", or "ends" (an ELMo's: the forward
            direction at the word's last piece, the backward one at its first); "none" keeps one vector per
            WordPiece ([CLS] and [SEP] left out), and `words` then lists the pieces.
    Returns:
        One WordVectors(words, vectors (len(words), width) float32) per text, in input order.
    """
    _check_choice("word_pieces", word_pieces, WORD_PIECES)
    _check_choice("precision", precision, PRECISIONS)
    if word_pieces == "ends" and not model.spec.two_directions:
        raise UserError("word_pieces: 'ends' takes each direction of a biLM (an ELMo) where it has read the whole "
                        "word; this model's features are not a forward and a backward half: use first or mean")
    indices, combine = _layer_choice(model, layers)
    aligned = _align_words(tokenizer, texts, word_pieces, length_limit(model, tokenizer, max_seq_len), stats)
    precision = resolve_precision(precision, next(model.parameters()).device)

    def vectors(batch: list[int]) -> list[WordVectors]:
        rows = [aligned[i] for i in batch]
        states, _ = _states(model, [a.ids for a in rows], tokenizer.pad_token_id, indices, combine, precision)
        out = []
        for j, a in enumerate(rows):
            words = _word_vectors(states[j, a.start: a.start + len(a.owner)], a.owner, len(a.words), word_pieces)
            if normalize:
                words = F.normalize(words, dim=-1)
            out.append(WordVectors(a.words, words.cpu().numpy()))
        return out

    return in_row_order([len(a.ids) for a in aligned], batch_size, vectors)
