"""Pre-training instances and batches: token shards -> instances -> masked batches.

Follows the data recipes of three papers:

- BERT (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for
  Language Understanding") and its `create_pretraining_data.py`: documents are lists of
  sentences; each instance is "[CLS] A [SEP] B [SEP]" where A is a run of whole sentences
  and B either continues it or, half the time, is a span of another document (next
  sentence prediction, NSP); 15% of the tokens are chosen for the masked LM, of which 80%
  become [MASK], 10% a random token and 10% stay.
- RoBERTa (Liu et al. 2019, "RoBERTa: A Robustly Optimized BERT Pretraining Approach"):
  FULL-SENTENCES packing (no pair objective; sentences packed up to the length limit,
  crossing document boundaries with an extra [SEP]) and dynamic masking (a fresh mask
  every time a sequence is seen; here drawn at batch time, never cached). BERT's static
  masking, its Table 1 baseline, is the option: N copies of the data, each instance masked
  once per copy (`static_mask_seeds`).
- ALBERT (Lan et al. 2020, "ALBERT: A Lite BERT for Self-supervised Learning of Language
  Representations"): sentence order prediction (SOP), where B is always the true
  continuation and half the time A and B are swapped.

The stages, each a function or class below:

1. (data/corpus.py) `read_documents`: text files -> documents (lists of sentences).
2. (data/shards.py) `build_corpus`: tokenize once, in parallel, into memory-mapped shards under a cache
   folder; `TokenizedCorpus` reads them back without loading the corpus into memory.
3. `PretrainingDataset.instances(epoch)`: cheap descriptors of one epoch's sequences,
   drawn afresh for each epoch; token ids are gathered from the shards only when an
   instance is indexed.
4. `mask_tokens`: masking of a batch, dynamic, or static with a seed per instance
   (whole-word masking optional).
5. `collate` and `make_batches`: padding and the shuffled batch order of an epoch.

All randomness comes from a numpy Generator seeded with (seed, epoch) or from the
torch.Generator passed in, so the same seed gives the same data on every machine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from ..errors import UserError
from ..ops import IGNORE_INDEX
from .padding import pad_rows
from .shards import TokenizedCorpus

_BATCH_ORDER_STREAM = 1  # keeps make_batches' random stream apart from instance building's
_STATIC_MASK_STREAM = 2  # and static_mask_seeds' apart from both


INSTANCE_FORMATS = ("pairs", "full_sentences", "contiguous")


PAIR_TASKS = ("nsp", "sop", None)


class Instance(NamedTuple):
    """One pre-training sequence, before padding and masking."""

    input_ids: np.ndarray  # (T,) int64: [CLS] ... [SEP]
    token_type_ids: np.ndarray  # (T,) int64: 0 for [CLS] A [SEP], 1 for B [SEP]
    pair_label: int  # NSP: 1 = B is random, 0 = B follows A; SOP: 1 = swapped; -1: no pair task


class Instances(Sequence):
    """One epoch's instances, held as token spans and built into `Instance`s when indexed.

    Instance i is [CLS] seg_1 [SEP] seg_2 [SEP] ... [SEP] over its segments (spans of corpus
    tokens). With `typed`, segment k gets token type k (pairs: A = 0, B = 1); otherwise all 0.
    A few ints per instance instead of its tokens, so an epoch of a corpus larger than
    memory still fits.
    """

    def __init__(
        self,
        corpus: TokenizedCorpus,
        cls_id: int,
        sep_id: int,
        segment_starts: np.ndarray,
        segment_lengths: np.ndarray,
        instance_offsets: np.ndarray,
        pair_labels: np.ndarray,
        typed: bool,
    ):
        self.corpus, self.cls_id, self.sep_id = corpus, cls_id, sep_id
        self.segment_starts, self.segment_lengths = segment_starts, segment_lengths
        self.instance_offsets = instance_offsets  # instance i owns segments offsets[i] .. offsets[i+1]-1
        self.pair_labels = pair_labels
        self.typed = typed

    def __len__(self) -> int:
        return len(self.pair_labels)

    @property
    def lengths(self) -> np.ndarray:
        """(num_instances,) int64: the length of each instance, special tokens included."""
        content = np.add.reduceat(self.segment_lengths, self.instance_offsets[:-1]) if len(self) else np.zeros(0)
        return content.astype(np.int64) + np.diff(self.instance_offsets) + 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(f"instance {index} out of range ({len(self)})")
        index %= len(self)
        first, last = self.instance_offsets[index], self.instance_offsets[index + 1]
        starts = self.segment_starts[first:last].tolist()
        lengths = self.segment_lengths[first:last].tolist()
        input_ids = np.empty(sum(lengths) + len(lengths) + 1, np.int64)
        token_type_ids = np.zeros(len(input_ids), np.int64)
        input_ids[0] = self.cls_id
        at = 1
        for segment, (start, length) in enumerate(zip(starts, lengths)):
            input_ids[at : at + length] = self.corpus.tokens(start, start + length)
            input_ids[at + length] = self.sep_id
            if self.typed:
                token_type_ids[at : at + length + 1] = segment
            at += length + 1
        return Instance(input_ids, token_type_ids, int(self.pair_labels[index]))


class PretrainingDataset:
    """The pre-training sequences of a set of documents, drawn afresh for each epoch.

    Formats:
        "pairs": BERT's "[CLS] A [SEP] B [SEP]" (see `_pairs`), with `pair_task`
            "nsp" (next sentence prediction), "sop" (sentence order prediction) or None
            (B always the true continuation, no label).
        "full_sentences": RoBERTa's packing: whole sentences, in an order of documents
            shuffled each epoch, packed into "[CLS] ... [SEP]" of at most max_seq_length
            tokens; a [SEP] separates documents inside a sequence; a sentence longer than
            the whole budget is cut into pieces. All token types 0, no pair label.
        "contiguous": for the left-to-right LM: the same stream, but each sequence is
            filled to exactly max_seq_length tokens, cutting sentences at the boundary
            (only the last sequence of an epoch is shorter): no padding is wasted, and a
            causal model has no use for sentence boundaries.

    Args:
        corpus: the tokenized corpus.
        doc_ids: the documents to draw from (e.g. one side of `corpus.split`); random
            NSP segments come from these documents too, so held-out text never leaks in.
        max_seq_length: the longest instance, special tokens included.
        format: "pairs", "full_sentences" or "contiguous".
        pair_task: "nsp", "sop" or None; must be None unless format is "pairs".
        short_seq_prob: the chance (BERT: 0.1) that a pair aims at a random shorter length,
            so the model also sees short sequences as in fine-tuning.
        cls_id, sep_id: ids of [CLS] and [SEP]; for a tokenizer without them, the tokens that open
            and end its texts (`Tokenizer.start_token_id`, `end_token_id`: GPT-2's <|endoftext|>
            both, so documents are parted as GPT-2's were).
        seed: with the epoch, fixes every random choice.
        sop_balance: SOP whose segment lengths say nothing of the order: each chunk is cut
            at the sentence boundary nearest the middle of its tokens, and both segments are
            cut to the same length (A keeps its end and B its start, the text on either side
            of the cut) before the swap, so a swapped pair holds the same tokens as it would
            in order.
    """

    def __init__(
        self,
        corpus: TokenizedCorpus,
        doc_ids: Sequence[int] | np.ndarray,
        max_seq_length: int,
        format: str,
        pair_task: str | None,
        short_seq_prob: float,
        cls_id: int,
        sep_id: int,
        seed: int = 0,
        sop_balance: bool = False,
    ):
        if format not in INSTANCE_FORMATS:
            raise UserError(f"unknown instance format {format!r}: use one of {', '.join(INSTANCE_FORMATS)}")
        if pair_task not in PAIR_TASKS:
            raise UserError(f"unknown pair task {pair_task!r}: use 'nsp', 'sop' or None")
        if pair_task is not None and format != "pairs":
            raise UserError(f"pair task {pair_task!r} needs format 'pairs', not {format!r}")
        smallest = 5 if format == "pairs" else 3  # room for the special tokens and one token per segment
        if max_seq_length < smallest:
            raise UserError(f"max_seq_length={max_seq_length} is too small for {format!r}: use at least {smallest}")
        if sop_balance and pair_task != "sop":
            raise UserError(f"balanced sentence order needs the pair task 'sop', not {pair_task!r}")
        if not 0 <= short_seq_prob <= 1:
            raise UserError(f"short_seq_prob must be in [0, 1], got {short_seq_prob}")
        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        if len(self.doc_ids) and not (0 <= self.doc_ids.min() and self.doc_ids.max() < corpus.num_documents):
            raise ValueError(f"doc_ids must lie in [0, {corpus.num_documents})")
        self.corpus = corpus
        self.max_seq_length = max_seq_length
        self.format = format
        self.pair_task = pair_task
        self.short_seq_prob = short_seq_prob
        self.cls_id, self.sep_id = cls_id, sep_id
        self.seed = seed
        self.sop_balance = sop_balance

    def instances(self, epoch: int) -> Instances:
        """The instances of `epoch`, in document order (`make_batches` shuffles them).

        The same (seed, epoch) always gives the same instances; each epoch differs (new
        split points, random segments and short targets; for packing, a new document order).
        """
        rng = np.random.default_rng([self.seed, epoch])
        if self.format == "pairs":
            segments, labels = self._pairs(rng)
        else:
            segments, labels = self._packed(rng, cut_sentences=self.format == "contiguous")
        starts, lengths, offsets = segments
        return Instances(
            self.corpus,
            self.cls_id,
            self.sep_id,
            np.asarray(starts, np.int64),
            np.asarray(lengths, np.int64),
            np.asarray(offsets, np.int64),
            np.asarray(labels, np.int64),
            typed=self.format == "pairs",
        )

    def _pairs(self, rng: np.random.Generator):
        """Segment pairs, as `create_instances_from_document` of BERT's release.

        Per document: sentences are gathered into a chunk until it reaches the target length
        (max_seq_length - 3, or with probability short_seq_prob a random length in
        [2, max_seq_length - 3]); the chunk is cut at a random sentence boundary into A and
        B. NSP: with probability 1/2, or always when the chunk is one sentence, B is instead
        a span of about the remaining length from a random other document (label 1), and the
        sentences of the chunk after A are put back for the next chunk. SOP: B is the true
        continuation and A, B are swapped with probability 1/2 (label 1); a one-sentence
        chunk is cut at a random token (ALBERT would use a random B here, against the task).
        The pair is then trimmed to fit by `_truncation`, each removed token coming from
        the front or the back at random, as BERT's `truncate_seq_pair`.

        As in ALBERT's release, the true B always holds the chunk's last sentence, the one that
        crosses the target length, and a sentence that crosses a threshold tends to be a long
        one; so B is on average the longer segment, even after trimming (64 vs 56 tokens on
        the bench corpus). SOP can thus be guessed above chance without reading a word: "the
        first segment is the longer, so swapped" scores 0.54 there (bench/objectives.py prints it).

        One deviation: the reference draws the short target once per document; here it is
        drawn afresh for each instance, so that "10% of sequences are short" also holds for
        corpora of few, long documents (whole books).
        """
        draw = _UniformStream(rng)
        offsets, doc_offsets = self.corpus.sentence_offsets, self.corpus.document_offsets.tolist()
        doc_ids = self.doc_ids.tolist()
        budget = self.max_seq_length - 3

        def target() -> int:
            return draw.integer(2, budget) if draw.random() < self.short_seq_prob else budget

        def random_span(document: int, wanted: int) -> tuple[int, int]:
            for _ in range(10):  # as the reference: give up on finding another document after 10 tries
                other = doc_ids[draw.integer(0, len(doc_ids) - 1)]
                if other != document:
                    break
            first_sentence = draw.integer(doc_offsets[other], doc_offsets[other + 1] - 1)
            start = int(offsets[first_sentence])
            # Whole sentences until `wanted` tokens are reached (or the document ends).
            ends = offsets[first_sentence + 1 : doc_offsets[other + 1] + 1]
            stop = int(ends[min(np.searchsorted(ends, start + wanted), len(ends) - 1)])
            return start, stop

        starts: list[int] = []  # instance k owns segments 2k (A) and 2k + 1 (B)
        lengths: list[int] = []
        labels: list[int] = []

        def add(a: tuple[int, int], b: tuple[int, int], label: int) -> None:
            """Record the pair of token spans (start, stop) A and B, swapped for SOP at random."""
            if self.sop_balance:  # equal lengths before the swap: both orders hold the same tokens
                length = min(a[1] - a[0], b[1] - b[0], budget // 2)
                a, b = (a[1] - length, a[1]), (b[0], b[0] + length)
            if self.pair_task == "sop":
                label = int(draw.random() < 0.5)
                if label:
                    a, b = b, a
            for start, length in _truncate_pair(a[0], a[1] - a[0], b[0], b[1] - b[0], budget, rng):
                starts.append(start)
                lengths.append(length)
            labels.append(label)

        for document in doc_ids:
            bounds = offsets[doc_offsets[document] : doc_offsets[document + 1] + 1].tolist()
            num_sentences = len(bounds) - 1
            chunk_first, wanted = 0, target()
            i = 0
            while i < num_sentences:
                if i < num_sentences - 1 and bounds[i + 1] - bounds[chunk_first] < wanted:
                    i += 1
                    continue
                # The chunk is sentences chunk_first .. i; A ends before sentence a_end.
                size = i - chunk_first + 1
                if self.sop_balance and size >= 2:  # the boundary nearest the middle of the chunk's tokens
                    middle = (bounds[chunk_first] + bounds[i + 1]) / 2
                    a_end = min(range(chunk_first + 1, i + 1), key=lambda k: abs(bounds[k] - middle))
                else:
                    a_end = chunk_first + (draw.integer(1, size - 1) if size >= 2 else 1)
                a = (bounds[chunk_first], bounds[a_end])
                if self.pair_task == "nsp" and (size == 1 or draw.random() < 0.5):
                    add(a, random_span(document, wanted - (a[1] - a[0])), 1)
                    i = a_end - 1  # the chunk's sentences after A go back into the pool
                elif size >= 2:
                    add(a, (bounds[a_end], bounds[i + 1]), 0 if self.pair_task == "nsp" else -1)
                elif bounds[i + 1] - bounds[i] >= 2:  # one sentence: cut it inside
                    if self.sop_balance:
                        cut = (bounds[i] + bounds[i + 1]) // 2
                    else:
                        cut = draw.integer(bounds[i] + 1, bounds[i + 1] - 1)
                    add((bounds[i], cut), (cut, bounds[i + 1]), -1)
                # (else: a one-token sentence ending its document cannot make a pair)
                chunk_first, wanted = i + 1, target()
                i += 1
        return (starts, lengths, range(0, 2 * len(labels) + 1, 2)), labels

    def _packed(self, rng: np.random.Generator, cut_sentences: bool):
        """FULL-SENTENCES packing (or, with `cut_sentences`, exact-length contiguous blocks).

        Documents are visited in a random order; their sentences fill "[CLS] ... [SEP]" up
        to max_seq_length tokens, a [SEP] (counted in the budget) separating documents. A
        sentence that does not fit starts the next sequence, unless `cut_sentences` (or the
        sentence alone exceeds the budget), in which case it is cut at the boundary.
        """
        offsets, doc_offsets = self.corpus.sentence_offsets, self.corpus.document_offsets
        budget = self.max_seq_length - 2  # [CLS] and the final [SEP]
        starts: list[int] = []
        lengths: list[int] = []
        instance_offsets = [0]
        used = 0  # tokens of the sequence being filled, separators included
        for document in rng.permutation(self.doc_ids).tolist():
            bounds = offsets[doc_offsets[document] : doc_offsets[document + 1] + 1].tolist()
            in_sequence = False  # does the sequence being filled hold a span of this document?
            for start, stop in zip(bounds, bounds[1:]):
                while start < stop:
                    separator = 1 if used and not in_sequence else 0
                    room = budget - used - separator
                    if room <= 0 or (stop - start > room and used and not cut_sentences):
                        instance_offsets.append(len(starts))
                        used, in_sequence = 0, False
                        continue
                    take = min(stop - start, room)
                    if in_sequence:  # the same document continues: extend its span
                        lengths[-1] += take
                    else:
                        starts.append(start)
                        lengths.append(take)
                        in_sequence = True
                    used += separator + take
                    start += take
        if used:
            instance_offsets.append(len(starts))
        return (starts, lengths, instance_offsets), [-1] * (len(instance_offsets) - 1)


class _UniformStream:
    """Scalar random draws from a numpy Generator, fetched in blocks: a Python loop over
    sentences calls this often, and one `Generator.integers` call costs ~50x a list lookup."""

    _BLOCK = 1 << 16

    def __init__(self, rng: np.random.Generator):
        self._rng = rng
        self._values: list[float] = []
        self._next = 0

    def random(self) -> float:
        """A uniform float in [0, 1)."""
        if self._next == len(self._values):
            self._values = self._rng.random(self._BLOCK).tolist()
            self._next = 0
        self._next += 1
        return self._values[self._next - 1]

    def integer(self, low: int, high: int) -> int:
        """A uniform integer in [low, high], both included."""
        return low + int(self.random() * (high - low + 1))


def _truncation(a_length: int, b_length: int, limit: int) -> tuple[int, int]:
    """How many tokens BERT's `truncate_seq_pair` removes from A and from B.

    The reference removes one token at a time from the longer segment (B on ties) until
    a_length + b_length <= limit; this counts the same removals without the loop.
    """
    excess = a_length + b_length - limit
    if excess <= 0:
        return 0, 0
    if a_length > b_length:
        # A shrinks until it equals B; then removals alternate B, A, B, ...
        first = min(excess, a_length - b_length)
        rest = excess - first
        return first + rest // 2, (rest + 1) // 2
    # B shrinks until it is one shorter than A; then removals alternate A, B, A, ...
    first = min(excess, b_length - a_length + 1)
    rest = excess - first
    return (rest + 1) // 2, first + rest // 2


def _truncate_pair(
    a_start: int, a_length: int, b_start: int, b_length: int, limit: int, rng: np.random.Generator
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Trim spans A and B to at most `limit` tokens together, longest first; each removed
    token is taken from the front or the back of its span with equal chance, so the number
    taken from the front is Binomial(removed, 1/2). Returns the new (start, length) of each."""
    cut_a, cut_b = _truncation(a_length, b_length, limit)
    front_a = int(rng.binomial(cut_a, 0.5)) if cut_a else 0
    front_b = int(rng.binomial(cut_b, 0.5)) if cut_b else 0
    return (a_start + front_a, a_length - cut_a), (b_start + front_b, b_length - cut_b)


def mask_tokens(
    input_ids: torch.Tensor,
    special_mask: torch.Tensor,
    vocab_size: int,
    mask_token_id: int,
    generator: torch.Generator,
    mlm_probability: float = 0.15,
    max_predictions: int | None = None,
    word_continuation: torch.Tensor | None = None,
    replace_with_mask: float = 0.8,
    replace_with_random: float = 0.1,
    row_seeds: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose masked-LM targets and corrupt them, as BERT: 80% [MASK], 10% random, 10% kept
    (ELECTRA's release feeds its generator 85% [MASK], 15% kept: `replace_with_mask` 0.85,
    `replace_with_random` 0).

    Each sequence gets round(mlm_probability * n) targets, where n counts its non-special
    tokens (at least 1, at most `max_predictions`); the reference counts [CLS] and [SEP]
    in n as well, which masks a hair more than 15% of the text. Random replacements are
    uniform over the whole vocabulary, as in the reference and transformers.

    Whole-word masking (`word_continuation` given): whole words are chosen in a random
    order, each taken if all its pieces still fit the sequence's budget of tokens (so a
    word is never split), as the reference does.

    Args:
        input_ids: (B, T) token ids.
        special_mask: (B, T) bool, True at [CLS], [SEP] and [PAD]: never chosen.
        vocab_size: the range of random replacement ids.
        mask_token_id: the id of [MASK].
        generator: the source of all randomness (on CPU or on the inputs' device).
        mlm_probability: the share of tokens chosen.
        max_predictions: the most targets per sequence (BERT: 20 at length 128).
        word_continuation: (B, T) bool, True at "##" pieces (e.g.
            `torch.from_numpy(continuation_table(tokenizer))[input_ids]`).
        replace_with_mask, replace_with_random: the shares of the targets that become [MASK] and
            a random token; the rest keep their token.
        row_seeds: static masking: (B,) int64, one seed per row (`static_mask_seeds`); each row is
            then masked alone by a generator of its seed, over its tokens up to its last eligible
            one, so its mask depends on the row and its seed only, not on the other rows, the
            padding or `generator`.

    Returns:
        (masked_input_ids, labels): (B, T) each; labels hold the original id at chosen
        positions and IGNORE_INDEX (-100) elsewhere.
    """
    if row_seeds is not None:
        return _mask_rows_apart(input_ids, special_mask, word_continuation, row_seeds, vocab_size=vocab_size,
                                mask_token_id=mask_token_id, mlm_probability=mlm_probability,
                                max_predictions=max_predictions, replace_with_mask=replace_with_mask,
                                replace_with_random=replace_with_random)
    batch, length = input_ids.shape
    device = input_ids.device

    def uniform() -> torch.Tensor:
        return torch.rand(batch, length, generator=generator, device=generator.device).to(device)

    eligible = ~special_mask
    eligible_count = eligible.sum(1)  # (B,)
    budget = torch.round(eligible_count * mlm_probability).long().clamp(min=1)
    if max_predictions is not None:
        budget = budget.clamp(max=max_predictions)
    budget = torch.minimum(budget, eligible_count)  # (B,)

    if word_continuation is None:
        # Rank the eligible positions of each row in a random order; take the first `budget`.
        order = uniform().masked_fill(~eligible, -1.0).argsort(1, descending=True)  # ineligible last
        first = torch.arange(length, device=device)[None, :] < budget[:, None]  # (B, T): the first `budget` ranks
        chosen = torch.zeros_like(eligible).scatter_(1, order, first)
    else:
        chosen = _choose_whole_words(eligible, word_continuation, budget, uniform())

    draw = uniform()
    to_mask = chosen & (draw < replace_with_mask)
    to_random = chosen & (draw >= replace_with_mask) & (draw < replace_with_mask + replace_with_random)
    random_ids = torch.randint(vocab_size, (batch, length), generator=generator, device=generator.device).to(device)
    masked = torch.where(to_mask, torch.full_like(input_ids, mask_token_id), input_ids)
    masked = torch.where(to_random, random_ids, masked)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return masked, labels


def _mask_rows_apart(
    input_ids: torch.Tensor,
    special_mask: torch.Tensor,
    word_continuation: torch.Tensor | None,
    row_seeds: torch.Tensor,
    **masking,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`mask_tokens` of each (B, T) row alone, cut after its last eligible token, by a CPU
    generator seeded with its (B,) `row_seeds`: the same row and seed give the same mask in any
    batch. Returns (masked_input_ids, labels), (B, T) each."""
    masked, labels = input_ids.clone(), torch.full_like(input_ids, IGNORE_INDEX)
    for row, seed in enumerate(row_seeds.tolist()):
        eligible = torch.nonzero(~special_mask[row])
        if not len(eligible):  # nothing to mask: the row stays as it is, without targets
            continue
        end = int(eligible.max()) + 1
        continuation = None if word_continuation is None else word_continuation[row : row + 1, :end]
        row_masked, row_labels = mask_tokens(input_ids[row : row + 1, :end], special_mask[row : row + 1, :end],
                                             generator=torch.Generator().manual_seed(seed),
                                             word_continuation=continuation, **masking)
        masked[row, :end], labels[row, :end] = row_masked[0], row_labels[0]
    return masked, labels


def static_mask_seeds(seed: int, copy: int, indices: Sequence[int]) -> torch.Tensor:
    """(B,) int64: the masking seeds of instances `indices` (their places in `instances(copy)`) of
    static copy `copy`, for `mask_tokens(row_seeds=...)`. A pure function of (seed, copy, index),
    so an instance gets the same mask whenever its copy is read, whatever batch it falls in."""
    return torch.tensor([int(np.random.SeedSequence([seed, _STATIC_MASK_STREAM, copy, index]).generate_state(
        1, np.uint64)[0] >> 1) for index in indices], dtype=torch.int64)  # >> 1: a non-negative int64


def _choose_whole_words(
    eligible: torch.Tensor, continuation: torch.Tensor, budget: torch.Tensor, scores: torch.Tensor
) -> torch.Tensor:
    """(B, T) bool: whole words chosen in the random order of `scores`, each if it fits the budget."""
    batch, length = eligible.shape
    previous_eligible = torch.nn.functional.pad(eligible[:, :-1], (1, 0), value=False)
    # A word starts at an eligible token that is not a continuation (or follows a special one).
    starts = eligible & (~continuation | ~previous_eligible)
    word = (starts.long().cumsum(1) - 1).clamp(min=0)  # (B, T): index of each token's word
    word_lengths = torch.zeros(batch, length, dtype=torch.long, device=eligible.device)
    word_lengths.scatter_add_(1, word, eligible.long())  # (B, W=T): tokens per word
    word_count = starts.sum(1)
    is_word = torch.arange(length, device=eligible.device)[None, :] < word_count[:, None]
    order = scores.masked_fill(~is_word, -1.0).argsort(1, descending=True)  # real words first
    ordered_lengths = word_lengths.gather(1, order)
    ordered_real = is_word.gather(1, order)
    taken = torch.zeros_like(is_word)
    total = torch.zeros_like(budget)
    # The reference's greedy pass: skip a word that would overshoot, try the next. Rows
    # fill after ~budget words (most words are one piece), so the loop usually stops early.
    for j in range(int(word_count.max())):
        fits = ordered_real[:, j] & (total + ordered_lengths[:, j] <= budget)
        taken[:, j] = fits
        total += fits * ordered_lengths[:, j]
        if bool((total == budget).all()):
            break
    chosen_words = torch.zeros_like(taken).scatter_(1, order, taken)  # (B, W), back in word order
    return eligible & chosen_words.gather(1, word)


def collate(instances: Sequence[Instance], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad a list of instances into a batch.

    Every instance starts with [CLS] and ends with [SEP] (the formats here build them so),
    so `special_mask` marks those two ids, wherever they occur, plus the padding.

    Returns:
        input_ids, token_type_ids, attention_mask: (B, T) int64, T = the longest instance;
        special_mask: (B, T) bool; pair_labels: (B,) int64, only when the instances carry one.
    """
    batch = pad_rows([i.input_ids for i in instances], [i.token_type_ids for i in instances], pad_id)
    input_ids, real = batch["input_ids"], batch["attention_mask"].bool()
    lengths = real.sum(1)
    cls_ids = input_ids[:, :1]
    sep_ids = input_ids[torch.arange(len(instances)), lengths - 1][:, None]
    batch["special_mask"] = ~real | (input_ids == cls_ids) | (input_ids == sep_ids)
    labels = [instance.pair_label for instance in instances]
    if any(label >= 0 for label in labels):
        if min(labels) < 0:
            raise ValueError("a batch mixes instances with and without pair labels")
        batch["pair_labels"] = torch.tensor(labels, dtype=torch.long)
    return batch


def make_batches(num_instances: int, batch_size: int, epoch: int, seed: int) -> list[list[int]]:
    """The batches of one epoch: instance indices in a random order, cut into `batch_size` groups.

    The last partial batch is dropped, so every step sees the same batch size (and the
    dropped instances differ from epoch to epoch); fewer instances than one batch give [].
    The same (seed, epoch) always gives the same batches.
    """
    order = np.random.default_rng([seed, epoch, _BATCH_ORDER_STREAM]).permutation(num_instances)
    full = num_instances // batch_size
    return order[: full * batch_size].reshape(full, batch_size).tolist()
