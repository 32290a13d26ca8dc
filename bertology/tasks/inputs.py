"""Task examples -> model inputs, and model outputs -> predictions.

Every row is framed by the tokenizer's own special tokens (`Tokenizer.frame`): BERT's
"[CLS] A [SEP] B [SEP]", RoBERTa's "<s> A </s></s> B </s>", GPT-2's "A B", T5's "A </s> B </s>",
XLNet's "A <sep> B <sep> <cls>" (written below as BERT's). Each task kind has one encoder and one decoder:

- sequence (single sentence or pair; classification or regression): "[CLS] A [SEP] B [SEP]".
  Too-long inputs are cut (longest first, and counted) or, with `long_inputs="window"`,
  covered by overlapping windows whose logits are averaged.
- token (tagging): words are joined with spaces and tokenized once; each word's label sits on
  its first piece (the BERT paper's choice), the other pieces carry no loss. In window
  mode each word is predicted from the window where it sits most centrally.
- span (SQuAD): "[CLS] question [SEP] context window [SEP]" with windows `doc_stride` tokens
  apart, as BERT's run_squad; answers are found by an n-best search over start/end scores,
  and SQuAD 2.0's "no answer" (the row's classification token: BERT's [CLS] first, XLNet's <cls>
  last) is chosen when its score beats the best span by the threshold.
- wic (a sentence pair with a target word in each): "[CLS] s1 [SEP] s2 [SEP]" and, for each
  sentence, the first and last token of its target word (found from the word index through the
  tokens' character offsets). Too-long pairs are cut longest first around the targets, which
  always stay; windows do not apply, since the head reads both targets from one row.

Batches are length-bucketed: examples of similar length share a batch, padded only to
that batch's longest row."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..data.padding import pad_rows
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..ops import IGNORE_INDEX
from .readers import SequenceExample, SpanExample, TaskSpec, TokenExample, WicExample


@dataclass
class Feature:
    """One model input row. `example` is the index of the example it came from."""

    input_ids: list[int]
    token_type_ids: list[int]
    example: int
    label: int | float | None = None  # sequence and wic tasks
    token_labels: list[int] | None = None  # token tasks (IGNORE_INDEX off first pieces)
    start: int = 0  # span tasks: gold token positions (`null_position` when the answer is not in this window)
    end: int = 0
    null_position: int = 0  # span tasks: the "no answer" position, the row's [CLS] (XLNet's <cls>: its last)
    word_ids: list[int | None] = field(default_factory=list)  # token tasks: word of each first piece
    centrality: list[int] = field(default_factory=list)  # token tasks: distance to the window's edge
    offsets: list[tuple[int, int] | None] = field(default_factory=list)  # span tasks: context chars per token
    targets: list[tuple[int, int]] = field(default_factory=list)  # wic: each sentence's target, first and last token


@dataclass
class Encoded:
    """The features of a list of examples, and how many examples had to be cut to fit."""

    features: list[Feature]
    num_examples: int
    too_long: int = 0  # examples longer than max_seq_len (cut, or covered by windows)


@dataclass
class InputSettings:
    """How examples become rows: length limits, windows, and SQuAD's search limits."""

    max_seq_len: int = 128
    long_inputs: str = "truncate"  # or "window"
    doc_stride: int = 128  # tokens between the starts of consecutive windows
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20
    null_score_threshold: float = 0.0  # SQuAD 2.0: answer "" when null score - best span score > this


@dataclass(frozen=True)
class Framing:
    """Where a tokenizer's special tokens put the texts of a row (see `framing`)."""

    before: int  # special tokens before text A
    between: int  # between text A and text B (pairs)
    specials: int  # in all

    def second(self, first_length: int) -> int:
        """The row position of text B's first token after a text A of `first_length` tokens."""
        return self.before + first_length + self.between


def framing(tokenizer: Tokenizer, pair: bool = False) -> Framing:
    """The layout of the tokenizer's frame (`Tokenizer.frame`) of one text or a pair: BERT's
    "[CLS] A [SEP] B [SEP]" is Framing(1, 1, 3), GPT-2's "A B" Framing(0, 0, 0)."""
    ids, _ = tokenizer.frame([-1], [-2] if pair else None)  # stand-ins no vocabulary has
    before = ids.index(-1)
    between = ids.index(-2) - before - 1 if pair else 0
    return Framing(before, between, len(ids) - (2 if pair else 1))


def unframed(tokenizer: Tokenizer, texts: list[str], offsets: bool = False) -> dict:
    """The texts' token ids (and character offsets) without special tokens, for rows framed here."""
    return tokenizer(texts, padding=False, truncation=False, return_tensors=None, return_offsets_mapping=offsets,
                     add_special_tokens=False)


def _windows(length: int, size: int, stride: int) -> list[tuple[int, int]]:
    """[start, end) windows of at most `size` covering range(length), starts `stride` apart."""
    if length <= size:
        return [(0, length)]
    spans, start = [], 0
    while True:
        end = min(start + size, length)
        spans.append((start, end))
        if end == length:
            return spans
        start += min(stride, size)


def _label_id(spec: TaskSpec, label) -> int | float | None:
    if label is None:
        return None
    if spec.regression:
        return float(label)
    return spec.labels.index(str(label))


def encode_sequences(spec: TaskSpec, examples: list[SequenceExample], tokenizer: Tokenizer,
                     settings: InputSettings) -> Encoded:
    """Sentence or sentence-pair examples -> one row each (cut), or windows of the longer text."""
    pairs = [e.text_b for e in examples] if spec.pair else None
    full = tokenizer([e.text_a for e in examples], pairs, padding=False, truncation=False, return_tensors=None)
    features, too_long = [], 0
    max_len = settings.max_seq_len
    for i, example in enumerate(examples):
        ids, types = full["input_ids"][i], full["token_type_ids"][i]
        label = _label_id(spec, example.label)
        if len(ids) <= max_len:
            features.append(Feature(ids, types, i, label))
            continue
        too_long += 1
        if settings.long_inputs == "window":
            texts = [example.text_a, example.text_b] if spec.pair else [example.text_a]
            features.extend(_sequence_windows(unframed(tokenizer, texts)["input_ids"], i, label, tokenizer, settings))
        else:
            cut = tokenizer([example.text_a], [example.text_b] if spec.pair else None, max_length=max_len,
                            padding=False, return_tensors=None)
            features.append(Feature(cut["input_ids"][0], cut["token_type_ids"][0], i, label))
    return Encoded(features, len(examples), too_long)


def _sequence_windows(texts: list[list[int]], index: int, label, tokenizer: Tokenizer,
                      settings: InputSettings) -> list[Feature]:
    """Windows over the last text's ids (text B of a pair, else the text), a pair's first text kept
    whole (cut to half the length if it alone is too long), each framed as the tokenizer frames."""
    head = texts[0][: settings.max_seq_len // 2] if len(texts) == 2 else None
    body = texts[-1]
    size = settings.max_seq_len - framing(tokenizer, pair=head is not None).specials - len(head or [])
    rows = []
    for start, end in _windows(len(body), size, settings.doc_stride):
        ids, types = tokenizer.frame(body[start:end]) if head is None else tokenizer.frame(head, body[start:end])
        rows.append(Feature(ids, types, index, label))
    return rows


def word_of_each_token(words: list[str], offsets: list[tuple[int, int]]) -> list[int | None]:
    """Map token character offsets (into " ".join(words)) back to word numbers.

    A token belongs to the word of its last character: a unigram (SentencePiece-style) piece
    like "▁word" starts at the space before its word."""
    starts, position = [], 0
    for word in words:
        starts.append(position)
        position += len(word) + 1
    mapped = []
    for begin, end in offsets:
        mapped.append(None if begin == end else bisect.bisect_right(starts, end - 1) - 1)
    return mapped


def encode_tokens(spec: TaskSpec, examples: list[TokenExample], tokenizer: Tokenizer, settings: InputSettings) -> Encoded:
    """Tagged sentences -> rows labelled on each word's first piece (windows when too long)."""
    encoded = unframed(tokenizer, [" ".join(e.words) for e in examples], offsets=True)
    frame = framing(tokenizer)
    size = settings.max_seq_len - frame.specials
    features, too_long = [], 0
    for i, example in enumerate(examples):
        ids = encoded["input_ids"][i]
        words = word_of_each_token(example.words, encoded["offset_mapping"][i])
        first = [w is not None and (t == 0 or words[t - 1] != w) for t, w in enumerate(words)]
        tags = [spec.labels.index(tag) for tag in example.tags] if example.tags is not None else None
        spans = _windows(len(ids), size, settings.doc_stride)
        if len(spans) > 1:
            too_long += 1
            if settings.long_inputs != "window":
                spans = spans[:1]
        for start, end in spans:
            row, types = tokenizer.frame(ids[start:end])
            after = [None] * (len(row) - frame.before - (end - start))  # the special tokens after the text
            word_ids = [None] * frame.before + [words[t] if first[t] else None for t in range(start, end)] + after
            labels = [IGNORE_INDEX if w is None or tags is None else tags[w] for w in word_ids]
            centrality = [0] * frame.before + [min(t - start, end - 1 - t) for t in range(start, end)] + [0] * len(after)
            features.append(Feature(row, types, i, token_labels=labels, word_ids=word_ids, centrality=centrality))
    return Encoded(features, len(examples), too_long)


def _answer_tokens(offsets: list[tuple[int, int]], answer_start: int, answer_end: int) -> tuple[int, int] | None:
    """First and last context token covering the answer's characters, or None if it is not covered."""
    start = next((t for t, (b, e) in enumerate(offsets) if e > answer_start), None)
    end = next((t for t in range(len(offsets) - 1, -1, -1) if offsets[t][0] < answer_end), None)
    if start is None or end is None or end < start:
        return None
    return start, end


def encode_spans(spec: TaskSpec, examples: list[SpanExample], tokenizer: Tokenizer, settings: InputSettings,
                 training: bool) -> Encoded:
    """Questions + contexts -> "[CLS] q [SEP] window [SEP]" rows; gold spans outside a window point at
    the row's classification token (BERT's [CLS] first, XLNet's <cls> last; the first position for a
    tokenizer without one), as transformers' question-answering scripts point them."""
    contexts = sorted({e.context for e in examples})
    context_ids = {c: i for i, c in enumerate(contexts)}
    ctx = unframed(tokenizer, contexts, offsets=True)
    questions = unframed(tokenizer, [e.question for e in examples])
    frame = framing(tokenizer, pair=True)
    cls = tokenizer.cls_token_id if "cls" in tokenizer.special_tokens else None
    features, too_long = [], 0
    for i, example in enumerate(examples):
        c = context_ids[example.context]
        ids, offsets = ctx["input_ids"][c], ctx["offset_mapping"][c]
        question = questions["input_ids"][i][: settings.max_query_length]
        size = settings.max_seq_len - len(question) - frame.specials
        gold = None
        if training and example.answers and not example.is_impossible:
            answer = example.answers[0]
            gold = _answer_tokens(offsets, answer["answer_start"], answer["answer_start"] + len(answer["text"]))
        spans = _windows(len(ids), size, settings.doc_stride)
        too_long += len(spans) > 1
        first = frame.second(len(question))  # the row position of the window's first token
        for start, end in spans:
            ids_row, types = tokenizer.frame(question, ids[start:end])
            null = ids_row.index(cls) if cls in ids_row else 0
            row = Feature(ids_row, types, i, start=null, end=null, null_position=null,
                          offsets=[None] * first + list(offsets[start:end]) + [None] * (len(ids_row) - first - (end - start)))
            if gold is not None and start <= gold[0] and gold[1] < end:
                row.start, row.end = gold[0] - start + first, gold[1] - start + first
            features.append(row)
    return Encoded(features, len(examples), too_long)


def _pair_lengths(len_a: int, len_b: int, keep_a: int, keep_b: int, budget: int) -> tuple[int, int]:
    """The lengths two texts are cut to so that together they take at most `budget` tokens:
    tokens come off the longer one first (BERT's longest-first), never below `keep_a` and
    `keep_b` (each text's target word), which must fit the budget together."""
    for _ in range(len_a + len_b - budget):
        if (len_a >= len_b and len_a > keep_a) or len_b <= keep_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def _window_start(length: int, size: int, first: int, last: int) -> int:
    """Where a window of `size` of `length` tokens starts so that it holds tokens first..last,
    centred on them as far as the text allows."""
    slack = size - (last - first + 1)
    return min(max(0, first - slack // 2), length - size)


def encode_word_pairs(spec: TaskSpec, examples: list[WicExample], tokenizer: Tokenizer,
                      settings: InputSettings) -> Encoded:
    """WiC pairs -> "[CLS] s1 [SEP] s2 [SEP]" rows with `targets`, the first and last token of
    the target word in each sentence (row positions). Each sentence is its words joined by
    spaces, so `word_of_each_token` maps its tokens back to the word indexes WiC gives.

    Raises:
        UserError: a target word that gives no token (naming the example's file and line), or two
            targets that alone take more tokens than `settings.max_seq_len` leaves.
    """
    sides = []  # per sentence of the pair: (token ids, first and last target token) of each example
    for side in (0, 1):
        encoded = unframed(tokenizer, [" ".join(e.sentences[side]) for e in examples], offsets=True)
        rows = []
        for i, example in enumerate(examples):
            words = word_of_each_token(example.sentences[side], encoded["offset_mapping"][i])
            target = [t for t, word in enumerate(words) if word == example.positions[side]]
            if not target:
                shown = example.sentences[side][example.positions[side]]
                raise UserError(f"{example.where}: the target word {shown[:40]!r} of sentence {side + 1} gives no token")
            rows.append((encoded["input_ids"][i], target[0], target[-1]))
        sides.append(rows)
    frame = framing(tokenizer, pair=True)
    budget = settings.max_seq_len - frame.specials
    features, too_long = [], 0
    for i, example in enumerate(examples):
        (a, a_first, a_last), (b, b_first, b_last) = sides[0][i], sides[1][i]
        keep_a, keep_b = a_last - a_first + 1, b_last - b_first + 1
        if keep_a + keep_b > budget:
            raise UserError(f"{example.where}: the two target words alone take {keep_a + keep_b} tokens, more than "
                            f"max_seq_len {settings.max_seq_len} leaves beside the special tokens")
        len_a, len_b = _pair_lengths(len(a), len(b), keep_a, keep_b, budget)
        too_long += len_a + len_b < len(a) + len(b)
        start_a, start_b = _window_start(len(a), len_a, a_first, a_last), _window_start(len(b), len_b, b_first, b_last)
        ids, types = tokenizer.frame(a[start_a:start_a + len_a], b[start_b:start_b + len_b])
        offset_a, offset_b = frame.before - start_a, frame.second(len_a) - start_b  # row positions of a's and b's token 0
        targets = [(offset_a + a_first, offset_a + a_last), (offset_b + b_first, offset_b + b_last)]
        features.append(Feature(ids, types, i, _label_id(spec, example.label), targets=targets))
    return Encoded(features, len(examples), too_long)


def encode(spec: TaskSpec, examples: list, tokenizer: Tokenizer, settings: InputSettings, training: bool) -> Encoded:
    """Examples of any task kind -> rows (see the module docstring)."""
    if spec.kind == "sequence":
        return encode_sequences(spec, examples, tokenizer, settings)
    if spec.kind == "token":
        return encode_tokens(spec, examples, tokenizer, settings)
    if spec.kind == "wic":
        return encode_word_pairs(spec, examples, tokenizer, settings)
    return encode_spans(spec, examples, tokenizer, settings, training)


def cache_key(model_dir: str, encoded: Encoded, *settings) -> str:
    """A key for outputs computed over `encoded`'s rows by the model in `model_dir`: the same
    weights file (path, size, modification time), the same rows and the same `settings` give
    the same key (feature_mode.py's features, distill.py's teacher targets)."""
    weights = next(Path(model_dir).glob("*.safetensors"), None) or next(Path(model_dir).glob("*.bin"))
    stat = weights.stat()
    digest = hashlib.sha256(f"{weights.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{settings}".encode())
    for feature in encoded.features:
        digest.update(np.asarray(feature.input_ids, np.int32).tobytes() + np.asarray(feature.token_type_ids, np.int8).tobytes())
    return digest.hexdigest()[:24]


def bucketed_batches(lengths: list[int], batch_size: int, rng: np.random.Generator | None,
                     bucket_batches: int = 50) -> list[list[int]]:
    """Row indices grouped into batches of similar length.

    Training (`rng` given): shuffle, sort within buckets of `bucket_batches` batches, cut, and
    shuffle the batch order, so batches are both random and tightly padded. Evaluation
    (`rng` None): simply sorted by length.
    """
    if rng is None:
        order = np.argsort(lengths, kind="stable").tolist()
        return [order[i: i + batch_size] for i in range(0, len(order), batch_size)]
    order = rng.permutation(len(lengths))
    bucket = batch_size * bucket_batches
    batches = []
    for b in range(0, len(order), bucket):
        chunk = sorted(order[b: b + bucket].tolist(), key=lambda i: lengths[i])
        batches.extend(chunk[i: i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def in_row_order(lengths: list[int], batch_size: int, predict_batch: Callable[[list[int]], list]) -> list:
    """Run `predict_batch(row indices) -> one output per row` over length-sorted batches and
    return the outputs in the rows' own order (sorting keeps padding to a minimum)."""
    outputs: list = [None] * len(lengths)
    for rows in bucketed_batches(lengths, batch_size, None):
        for i, output in zip(rows, predict_batch(rows)):
            outputs[i] = output
    return outputs


def collate(features: list[Feature], kind: str, pad_id: int, regression: bool = False) -> dict[str, torch.Tensor]:
    """Pad rows to the longest of the batch; add the labels the task's model takes (those of
    `kind`; "none" for none), and WiC's target spans (B, 2, 2), an input its model always takes."""
    batch = pad_rows([f.input_ids for f in features], [f.token_type_ids for f in features], pad_id)
    if features[0].targets:
        batch["target_spans"] = torch.tensor([f.targets for f in features])
    if kind in ("sequence", "wic") and features[0].label is not None:
        batch["labels"] = torch.tensor([f.label for f in features], dtype=torch.float if regression else torch.long)
    elif kind == "token" and features[0].token_labels is not None:
        labels = torch.full_like(batch["input_ids"], IGNORE_INDEX)
        for row, f in enumerate(features):
            labels[row, : len(f.token_labels)] = torch.tensor(f.token_labels)
        batch["labels"] = labels
    elif kind == "span":
        batch["start_positions"] = torch.tensor([f.start for f in features])
        batch["end_positions"] = torch.tensor([f.end for f in features])
    return batch


def example_logits(encoded: Encoded, logits: list[np.ndarray]) -> np.ndarray:
    """(examples, outputs): the mean of each example's window logits (one window when cut)."""
    sums = np.zeros((encoded.num_examples, logits[0].shape[-1]))
    counts = np.zeros(encoded.num_examples)
    for feature, row in zip(encoded.features, logits):
        sums[feature.example] += row
        counts[feature.example] += 1
    return sums / np.maximum(counts, 1)[:, None]


def decode_sequences(spec: TaskSpec, encoded: Encoded, logits: list[np.ndarray]) -> list:
    """Mean of each example's window logits -> label name, or the score for regression."""
    means = example_logits(encoded, logits)
    if spec.regression:
        return means[:, 0].tolist()
    return [spec.labels[i] for i in means.argmax(-1)]


def word_logits(encoded: Encoded, logits: list[np.ndarray], examples: list[TokenExample]) -> list[list[np.ndarray | None]]:
    """Each example's per-word logits, each word's row taken from the window where its
    first piece is most central; None for a word that produced no token (e.g. only control
    characters) or was cut off, in a list per example."""
    best: dict[tuple[int, int], tuple[int, np.ndarray]] = {}  # (example, word) -> (centrality, logits)
    for feature, row in zip(encoded.features, logits):
        for t, word in enumerate(feature.word_ids):
            if word is None:
                continue
            key = (feature.example, word)
            if key not in best or feature.centrality[t] > best[key][0]:
                best[key] = (feature.centrality[t], row[t])
    return [[best[(i, w)][1] if (i, w) in best else None for w in range(len(e.words))]
            for i, e in enumerate(examples)]


def decode_tokens(spec: TaskSpec, encoded: Encoded, logits: list[np.ndarray], examples: list[TokenExample]) -> list[list[str]]:
    """Each word's tag from the window where its first piece is most central; "O" for words
    that produced no token at all or were cut off (see `word_logits`)."""
    outside = spec.labels.index("O") if "O" in spec.labels else 0
    return [[spec.labels[outside if row is None else int(row.argmax())] for row in words]
            for words in word_logits(encoded, logits, examples)]


def find_answers(encoded: Encoded, starts: list[np.ndarray], ends: list[np.ndarray], examples: list[SpanExample],
                 settings: InputSettings, allow_no_answer: bool) -> list[dict]:
    """n-best search over each window's start/end scores -> each question's answer.

    Spans must lie in the context, end at or after their start and be at most
    `max_answer_length` tokens; the best start + end score over all windows wins. With
    `allow_no_answer` (SQuAD 2.0) there is no answer when the smallest no-answer score (at each
    row's [CLS], `Feature.null_position`) over the
    windows exceeds the best span's score by more than `null_score_threshold`.

    Returns one dict per example: "answer" (the context's text), "start" and "end" (character
    offsets, end exclusive) and "score", the span's probability within its window
    (softmax of the start scores x softmax of the end scores over the context tokens);
    {"answer": "", "start": None, "end": None, "score": None} when there is none.
    """
    best: list[tuple[float, dict] | None] = [None] * len(examples)
    null = [np.inf] * len(examples)
    for feature, start, end in zip(encoded.features, starts, ends):
        i = feature.example
        null[i] = min(null[i], float(start[feature.null_position] + end[feature.null_position]))
        valid = np.array([o is not None for o in feature.offsets])
        s_scores = np.where(valid, start[: len(valid)], -np.inf)
        e_scores = np.where(valid, end[: len(valid)], -np.inf)
        top_s = [s for s in np.argsort(-s_scores)[: settings.n_best] if valid[s]]
        top_e = [e for e in np.argsort(-e_scores)[: settings.n_best] if valid[e]]
        if not top_s or not top_e:
            continue
        pairs = s_scores[top_s][:, None] + e_scores[top_e][None, :]  # (starts, ends)
        length = np.array(top_e)[None, :] - np.array(top_s)[:, None] + 1
        pairs[(length < 1) | (length > settings.max_answer_length)] = -np.inf
        a, b = np.unravel_index(pairs.argmax(), pairs.shape)
        score = float(pairs[a, b])
        if np.isinf(score) or (best[i] is not None and score <= best[i][0]):
            continue
        s, e = top_s[a], top_e[b]
        probability = softmax(s_scores[valid])[valid[:s].sum()] * softmax(e_scores[valid])[valid[:e].sum()]
        char_start, char_end = feature.offsets[s][0], feature.offsets[e][1]
        context = examples[i].context
        while char_start < char_end and context[char_start].isspace():  # a "▁word" piece's leading space
            char_start += 1
        best[i] = (score, {"answer": context[char_start:char_end], "start": char_start,
                           "end": char_end, "score": float(probability)})
    no_answer = {"answer": "", "start": None, "end": None, "score": None}
    return [no_answer if found is None or (allow_no_answer and null[i] - found[0] > settings.null_score_threshold)
            else found[1] for i, found in enumerate(best)]


def softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, stable for large scores."""
    shifted = np.exp(scores - scores.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def decode_spans(encoded: Encoded, starts: list[np.ndarray], ends: list[np.ndarray], examples: list[SpanExample],
                 settings: InputSettings, allow_no_answer: bool) -> dict[str, str]:
    """{question id: answer text} ("" for no answer); see `find_answers`."""
    answers = find_answers(encoded, starts, ends, examples, settings, allow_no_answer)
    return {example.qid: answer["answer"] for example, answer in zip(examples, answers)}
