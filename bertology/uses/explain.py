"""What an encoder does inside, as pictures: attention maps, and contextual vs static word vectors.

`bertology explain attention` draws the attention weights of one head, of every head of a layer,
or of every head of every layer, with the WordPiece tokens on both axes (Clark et al. 2019,
"What Does BERT Look At?").

`bertology explain senses` shows what "contextual" means (Peters et al. 2018; Ethayarajh 2019,
"How Contextual are Contextualized Word Representations?"): the encoder's vectors of an ambiguous
word ("bank") fall apart by sense, while its input embedding is one and the same vector in every
sentence. It also measures the separation: mean cosine similarity within a sense vs across senses,
and how often a vector's nearest sense centroid is its own sense.

Layers are numbered as in `features.py`: 0 is the embeddings output, 1..L the transformer layers
(-1 the last). Attention heads are numbered 1..heads."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np
import torch

from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..inference.embedding import load_encoder
from ..inference.modeldir import open_static_vectors
from ..models.features import FeatureEncoder, combine_layers, parse_layers
from ..plots import plot_attention, plot_word_senses
from ..tasks.readers import read_text_lines

# "bank" in its two commonest senses, for the default picture: plain sentences, "bank" once in each.
DEFAULT_SENTENCES: dict[str, list[tuple[str, str]]] = {
    "bank": [
        ("river", "We sat on the bank of the river and watched the boats go by."),
        ("river", "The fisherman cast his line from the muddy bank."),
        ("river", "Wild flowers grew all along the grassy bank of the stream."),
        ("river", "After the storm the water rose over the bank and flooded the fields."),
        ("river", "The canoe drifted slowly toward the far bank of the lake."),
        ("river", "Children slid down the steep bank into the shallow water."),
        ("river", "A heron stood still on the bank, waiting for fish."),
        ("river", "They pitched their tent on the west bank of the creek."),
        ("money", "She deposited her paycheck at the bank on Monday morning."),
        ("money", "The bank approved our loan for the new house."),
        ("money", "He opened a savings account at a local bank."),
        ("money", "The central bank raised interest rates again this year."),
        ("money", "I need to go to the bank to withdraw some cash."),
        ("money", "The bank charged a fee for the international transfer."),
        ("money", "Thieves robbed the bank and escaped with the money."),
        ("money", "My bank sent me a new credit card in the mail."),
    ],
}


def check_png(path: str | os.PathLike) -> Path:
    """The pictures are PNG files: refuse another suffix rather than write a PNG under it."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise UserError(f"--out {path}: the picture is a PNG; give a file name ending in .png")
    return path


@dataclass
class AttentionMaps:
    """One text's attention weights in every layer and head.

    `weights[l, h, i, j]` is how much token i attends to token j in layer l + 1, head h + 1;
    each row sums to 1 (a softmax over the keys).
    """

    tokens: list[str]  # the WordPieces, [CLS] and [SEP] included
    weights: np.ndarray  # (layers, heads, T, T) float32


def attention_maps(model: FeatureEncoder, tokenizer: Tokenizer, text: str, text_pair: str | None = None) -> AttentionMaps:
    """Encode one text (or pair) and return the attention probabilities of every layer and head
    (of a family whose spec has `attention_maps`).

    The model computes them explicitly when asked (`output_attentions=True`): the fused attention
    kernel it uses otherwise never materialises them.
    """
    batch = tokenizer(text, text_pair, max_length=_max_length(model, tokenizer))
    device = next(model.parameters()).device
    with torch.no_grad():  # a family whose spec has `attention_maps`: its stack returns `attentions` when asked
        out = model.stack(batch["input_ids"].to(device), token_type_ids=batch["token_type_ids"].to(device),
                          output_attentions=True)
    weights = torch.stack(out.attentions)[:, 0].float()  # (L, nh, T, T) of the one row
    return AttentionMaps(batch.tokens(0), weights.cpu().numpy())


def _max_length(model: FeatureEncoder, tokenizer: Tokenizer) -> int:
    """The longest input: the tokenizer's limit (a sentence-transformers model's training length), within
    the model's context (an LSTM has none)."""
    return min(tokenizer.model_max_length, model.context_length or tokenizer.model_max_length)


def parse_choice(spec: str, count: int, what: str) -> list[int]:
    """A --layer or --head value -> 0-based indices: "all", or a number 1..count (-1 = the last)."""
    if spec == "all":
        return list(range(count))
    if spec == "last":
        return [count - 1]
    try:
        number = int(spec)
    except ValueError:
        raise UserError(f"--{what}: expected a number 1..{count}, -1 (the last) or all; got {spec!r}") from None
    if number == -1:
        return [count - 1]
    if not 1 <= number <= count:
        raise UserError(f"--{what} {number} is out of range: this model has {count} {what}s (1..{count}, -1 = the last)")
    return [number - 1]


def explain_attention(model_dir: str | os.PathLike, text: str, out: str | os.PathLike, text_pair: str | None = None,
                      layer: str = "last", head: str = "all", model_name: str | None = None,
                      device: str = "auto") -> Path:
    """`bertology explain attention`: draw the chosen layers' and heads' attention maps as a PNG.

    Args:
        layer, head: "all", or a number (layers 1..L, heads 1..heads; -1 = the last).
        model_name: shown in the title; default the directory's name.
        device: where the model runs (the `--device` setting).
    Returns:
        The PNG's path.
    """

    out = check_png(out)
    model, tokenizer = load_encoder(model_dir, device)
    if not model.spec.attention_maps:
        raise UserError(f"{model_dir}: {model.describe()} has no attention maps to draw here; "
                        "`bertology explain senses` compares its contextual vectors")
    layers = parse_choice(layer, model.num_hidden_layers, "layer")
    heads = parse_choice(head, model.config.num_attention_heads, "head")
    maps = attention_maps(model, tokenizer, text, text_pair)
    chosen = maps.weights[np.ix_(layers, heads)]  # (len(layers), len(heads), T, T)
    name = model_name or Path(model_dir).resolve().name
    return plot_attention(maps.tokens, chosen, [i + 1 for i in layers], [h + 1 for h in heads], name, out)


def read_sentences(path: str | os.PathLike) -> list[tuple[str, str]]:
    """A senses file: one "sense<TAB>sentence" per line (blank lines skipped) -> (sense, sentence) pairs."""

    examples = []
    for number, line in read_text_lines(path):
        sense, tab, sentence = line.partition("\t")
        if not tab or not sense.strip() or not sentence.strip():
            raise UserError(f"{path}:{number}: expected 'sense<TAB>sentence', got {line[:60]!r}")
        examples.append((sense.strip(), sentence.strip()))
    return examples


def find_word(tokens: list[str], pieces: list[str]) -> slice | None:
    """Where the word made of `pieces` first occurs as a whole word in `tokens`, or None.

    A whole word starts a word (no "##" piece) and is not continued by one, so "bank" is not
    found inside "banker" (["banker"]) or "banks" (["bank", "##s"]).
    """
    n = len(pieces)
    for start in range(len(tokens) - n + 1):
        end = start + n
        if tokens[start:end] == pieces and not (end < len(tokens) and tokens[end].startswith("##")):
            return slice(start, end)
    return None


@dataclass
class SenseVectors:
    """A word's vectors in sentences that use it in different senses.

    The contextual vectors come from the encoder's chosen layer, the static ones from its input
    embedding table alone (no position, segment or LayerNorm), as a word2vec-style model has them.
    Each is the mean over the word's WordPieces.
    """

    word: str
    layer: str  # the layer choice, as given
    senses: list[str]  # the sense of each sentence
    contextual: np.ndarray  # (N, H)
    static: np.ndarray  # (N, E): one row per sentence, identical rows by construction
    context_words: list[str]  # the other distinct words of the sentences
    context_static: np.ndarray  # (W, E) their static vectors
    context_senses: list[set[str]]  # the senses of the sentences each one occurs in


def check_examples(examples: list[tuple[str, str]], word: str, source: str) -> None:
    """Two senses with two sentences each at least: the fewest for within- and across-sense pairs."""
    counts: dict[str, int] = {}
    for sense, _ in examples:
        counts[sense] = counts.get(sense, 0) + 1
    if len(counts) < 2 or min(counts.values()) < 2:
        found = ", ".join(f"{sense}: {n}" for sense, n in counts.items())
        raise UserError(f"{source}: need at least two senses of {word!r} with two sentences each, got {found}")


def sense_vectors(model: FeatureEncoder, tokenizer: Tokenizer, word: str, examples: list[tuple[str, str]],
                  layer: str = "last", source: str = "sentences") -> SenseVectors:
    """The contextual and static vectors of `word` in each (sense, sentence) of `examples`.

    Args:
        layer: a layer choice of `features.parse_layers` ("last", "6", "sum_last_four", ...).
        source: names the sentences in error messages (a file name).
    Raises:
        UserError: the word is not a whole word of some sentence, too few senses or sentences,
            or a bad layer.
    """
    pieces = tokenizer.tokenize(word)
    if not pieces:
        raise UserError(f"--word: {word!r} has no tokens")
    indices, combine = parse_layers(layer, model.num_hidden_layers)
    if combine == "mix":
        raise UserError("--layer mix is learned with a task head; choose a layer, or a sum or concatenation of layers")
    check_examples(examples, word, source)
    senses, sentences = [sense for sense, _ in examples], [sentence for _, sentence in examples]
    batch = tokenizer(sentences, max_length=_max_length(model, tokenizer))
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model(*(batch[key].to(device) for key in ("input_ids", "attention_mask", "token_type_ids")),
                    output_hidden_states=True)
    states = combine_layers(out.hidden_states, indices, combine).float().cpu()  # (N, T, H')
    table = model.input_vectors()  # (V, E)
    contextual, static, context = [], [], {}
    for row, (sense, sentence) in enumerate(examples):
        tokens = batch.tokens(row)
        span = find_word(tokens, pieces)
        if span is None:
            raise UserError(f"{source}: {sentence[:60]!r} does not contain the word {word!r} "
                            f"(as the tokenizer sees it: {' '.join(pieces)})")
        contextual.append(states[row, span].mean(0))
        static.append(table[batch["input_ids"][row, span]].mean(0))
        for key, text in _other_words(tokens, batch.word_ids(row), batch["input_ids"][row], span):
            context.setdefault(key, (text, set()))[1].add(sense)
    keys = list(context)
    return SenseVectors(
        word=word, layer=layer, senses=senses,
        contextual=torch.stack(contextual).numpy(), static=torch.stack(static).numpy(),
        context_words=[context[k][0] for k in keys],
        context_static=np.stack([table[list(k)].mean(0).numpy() for k in keys]),
        context_senses=[context[k][1] for k in keys],
    )


def with_static_vectors(vectors: SenseVectors, static) -> SenseVectors:
    """The same sentences with the static view taken from word2vec/GloVe/fastText vectors instead of
    the encoder's input embeddings: the word's one vector, and the vectors of the other words
    (those without one, e.g. outside a word2vec vocabulary, are left out).

    Raises:
        UserError: the word itself has no static vector.
    """
    own = static.vector(vectors.word)
    if own is None:
        raise UserError(f"--word {vectors.word!r} has no vector in the static vectors (not in their vocabulary)")
    kept = [(word, senses, vector) for word, senses in zip(vectors.context_words, vectors.context_senses)
            if (vector := static.vector(word)) is not None]
    return dataclasses.replace(
        vectors, static=own.numpy()[None].repeat(len(vectors.senses), 0),
        context_words=[word for word, _, _ in kept], context_senses=[senses for _, senses, _ in kept],
        context_static=np.stack([vector.numpy() for _, _, vector in kept]) if kept else own.numpy()[None][:0])


def _other_words(tokens: list[str], word_ids: list[int | None], ids: torch.Tensor, target: slice):
    """(piece ids, text) of each word of a sentence but the target; specials, padding and
    punctuation left out."""
    groups: dict[int, list[int]] = {}
    for position, word_id in enumerate(word_ids):
        if word_id is not None and not target.start <= position < target.stop:
            groups.setdefault(word_id, []).append(position)
    for positions in groups.values():
        text = "".join(tokens[p].removeprefix("##") for p in positions)
        if any(ch.isalnum() for ch in text):
            yield tuple(int(ids[p]) for p in positions), text


@dataclass
class Separation:
    """How well a set of vectors separates by sense."""

    within: float  # mean cosine similarity of pairs of the same sense
    across: float  # mean cosine similarity of pairs of different senses
    centroid_hits: int  # vectors whose nearest sense centroid (without themselves) is their own sense
    count: int  # vectors in all


def separation(vectors: np.ndarray, senses: list[str]) -> Separation:
    """Within- vs across-sense cosine similarity and leave-one-out nearest-centroid hits of (N, D) vectors.

    Every sense needs two vectors at least, so that each vector's own sense keeps a centroid
    when the vector itself is left out.
    """
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
    cosine = unit @ unit.T
    pairs = list(combinations(range(len(senses)), 2))
    within = [cosine[i, j] for i, j in pairs if senses[i] == senses[j]]
    across = [cosine[i, j] for i, j in pairs if senses[i] != senses[j]]
    names = sorted(set(senses))
    hits = 0
    for i, sense in enumerate(senses):
        others = [j for j in range(len(senses)) if j != i]
        centroids = np.stack([vectors[[j for j in others if senses[j] == name]].mean(0) for name in names])
        centroids /= np.linalg.norm(centroids, axis=1, keepdims=True).clip(min=1e-12)
        hits += names[int(np.argmax(centroids @ unit[i]))] == sense
    return Separation(float(np.mean(within)), float(np.mean(across)), hits, len(senses))


def pca_2d(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Project (N, D) vectors on their first two principal components.

    Returns the (N, 2) coordinates and the share of the variance each component explains (2,).
    """
    centred = vectors - vectors.mean(0)
    _, singular, axes = np.linalg.svd(centred, full_matrices=False)
    variance = singular**2
    total = variance.sum()
    shares = variance[:2] / total if total > 0 else np.zeros(2)
    return centred @ axes[:2].T, shares


@dataclass
class SenseReport:
    """What `explain senses` measured: the separation of the contextual and of the static vectors."""

    word: str
    layer: str  # as titles show it, e.g. "6 (last)"
    contextual: Separation
    static: Separation

    def summary(self) -> str:
        """One line for the terminal."""
        c, s = self.contextual, self.static
        return (f"{self.word!r} at layer {self.layer}, {c.count} sentences: contextual cosine within sense "
                f"{c.within:.3f} vs across senses {c.across:.3f}, nearest sense centroid right for "
                f"{c.centroid_hits}/{c.count} (leave-one-out); static input embedding {s.within:.3f} vs "
                f"{s.across:.3f} (one vector in every sentence)")


def layer_label(layer: str, num_layers: int) -> str:
    """A layer choice as titles show it: "last" and "-1" -> "6 (last)"; other choices as given."""
    indices, _ = parse_layers(layer, num_layers)
    if indices == [num_layers] and layer in ("last", "-1", str(num_layers)):
        return f"{num_layers} (last)"
    return layer


def explain_senses(model_dir: str | os.PathLike, word: str, out: str | os.PathLike,
                   sentences: str | os.PathLike | None = None, layer: str = "last",
                   model_name: str | None = None, static: str | os.PathLike | None = None,
                   device: str = "auto") -> SenseReport:
    """`bertology explain senses`: draw a word's contextual and static vectors side by side as a PNG.

    Args:
        sentences: a "sense<TAB>sentence" file; default the built-in sentences of `word`.
        layer: a layer choice of `features.parse_layers` (default the last layer).
        model_name: shown in the title; default the directory's name.
        static: a static vectors directory (`bertology static train`): its vectors make the
            static view, instead of the encoder's input embeddings.
        device: where the model runs (the `--device` setting).
    Returns:
        The separation of the contextual vectors and of the static ones.
    """

    out = check_png(out)
    if sentences is not None:
        examples, source = read_sentences(sentences), str(sentences)
    elif word.lower() in DEFAULT_SENTENCES:
        examples, source = DEFAULT_SENTENCES[word.lower()], "built-in sentences"
    else:
        raise UserError(f"no built-in sentences for {word!r} (only for {', '.join(DEFAULT_SENTENCES)}): "
                        "give --sentences FILE with 'sense<TAB>sentence' lines")
    model, tokenizer = load_encoder(model_dir, device)
    vectors = sense_vectors(model, tokenizer, word, examples, layer, source)
    static_source = "input embeddings"
    if static is not None:
        vectors = with_static_vectors(vectors, open_static_vectors(static, "--vectors"))
        static_source = f"{Path(static).resolve().name} vectors"
    report = SenseReport(word, layer_label(layer, model.num_hidden_layers),
                         separation(vectors.contextual, vectors.senses), separation(vectors.static, vectors.senses))
    contextual_xy, contextual_shares = pca_2d(vectors.contextual)
    # The static panel places the word among the other words of the sentences: its own vectors
    # are all one point, so a projection of them alone would show nothing.
    static_xy, static_shares = pca_2d(np.vstack([vectors.static[:1], vectors.context_static]))
    plot_word_senses(
        word, vectors.senses, contextual_xy, contextual_shares,
        target_xy=static_xy[0], context_xy=static_xy[1:], static_shares=static_shares,
        context_words=vectors.context_words, context_senses=vectors.context_senses,
        title=f"{model_name or Path(model_dir).resolve().name}, layer {report.layer}",
        contextual_note=f"cosine within sense {report.contextual.within:.2f}, across {report.contextual.across:.2f}",
        path=out, static_source=static_source,
    )
    return report
