"""A T5 fine-tuned text to text, read: each task cast as input and target strings, greedy
decoding, and the outputs read back as labels, scores, answers or tags.

T5 (Raffel et al. 2020) casts every task as text: the input names the task and its fields,
the target is the answer written out. The casts (T5's own for GLUE and SQuAD):

| task | input | target |
|---|---|---|
| sst2 | `sst2 sentence: a gorgeous, witty movie` | `positive` |
| mrpc (pairs) | `mrpc sentence1: ... sentence2: ...` | `equivalent` |
| stsb | `stsb sentence1: ... sentence2: ...` | `3.8` (the score rounded to 0.2) |
| other classification | `NAME sentence: ...` | the label's name |
| squad, squad_v2 | `question: Q context: C` | the first gold answer; `unanswerable` (v2.0) |
| conll2003 | `ner: EU rejects German call to boycott British lamb .` | `EU [ORG] ; German [MISC] ; British [MISC]` |

GLUE's 0/1 tasks write T5's words for their labels. SQuAD's input is T5's `squad`
preprocessor's (which also spaces out punctuation; the unigram vocabulary splits it by itself,
so the texts are kept as they are); SQuAD 2.0's unanswerable questions, which T5 did not train
on, get the fixed word `unanswerable`, read back as the empty answer (no answer).

CoNLL's target is the sentence's entity span sequence in reading order, each span's words then
its type, `;` between, and nothing when the sentence names no entity (Yan et al. 2021, "A
Unified Generative Framework for Various NER Subtasks", with the words written out rather than
pointed at; T5's preprocessors have no NER task). It decodes back to per-word IOB2 tags: each
entity is placed on the first run of words that spells it and that no earlier entity took,
looking after the previous entity first, then from the start; words no entity names are O.
Words are compared as the vocabulary writes them back (lower-cased by an uncased one), spaces
ignored. Every gold target of CoNLL-2003's train, dev and test files decodes to its gold tags
exactly; through an uncased vocabulary one training sentence does not ("Said" the author after
"said" the verb). Entity F1 is then seqeval's, as for every CoNLL run.

The model generates greedily and its output is read back (`parse`). An output that cannot be
read is T5's "invalid" prediction: in its place stands a label other than the gold one (without
gold: the first label), the middle of a score's range, for SQuAD no answer; CoNLL keeps the
entities of an output that it can place, and the output is invalid when some part of it is not
an entity of the sentence (TANL, Paolini et al. 2021, also drops those). Generation stops at the
end of text or at a length no valid answer needs: the longest label; SQuAD's
--max-answer-length; for CoNLL, every word its own entity. Inputs longer than --max-seq-len are
cut at the end (no windows).

Fine-tuning and `bertology evaluate` / `predict` (recipes/text_to_text_finetuning.py) and `bertology serve`
(inference/predictor.py) all read a fine-tuned directory through `open_directory`,
`generation_inputs` and `predict_text`, so they agree.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ..data.padding import pad_rows
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..tasks.inputs import InputSettings
from ..tasks.metrics import normalize_answer
from ..tasks.readers import SequenceExample, SpanExample, TaskSpec, TokenExample
from .generation import GenerationConfig, generate
from .predict import score

# T5's words for GLUE's numbered labels (its preprocessors' label names).
VERBALIZERS = {
    "sst2": {"0": "negative", "1": "positive"},
    "mrpc": {"0": "not_equivalent", "1": "equivalent"},
    "qqp": {"0": "not_duplicate", "1": "duplicate"},
    "cola": {"0": "unacceptable", "1": "acceptable"},
    "wnli": {"0": "not_entailment", "1": "entailment"},
}
SCORE_STEP = 0.2  # STS-B's targets: the score rounded to the nearest 0.2, as T5 does
NO_ANSWER = "unanswerable"  # SQuAD 2.0's target for a question the context does not answer
ENTITY_SEPARATOR = " ; "  # between the entities of a CoNLL target


@dataclass
class Casting:
    """How a sequence task's examples (classification, regression) become input and target strings,
    and outputs become labels or scores."""

    spec: TaskSpec
    answers_in_input = False  # the answer is no part of the input, so cutting the input cannot lose it
    stand_in = "a label other than the gold one (without gold: the first label), or a score's middle"

    def __post_init__(self) -> None:
        if self.spec.kind != "sequence":
            raise ValueError(f"{self.spec.name}: Casting casts sequence tasks; casting_for picks a {self.spec.kind} "
                             "task's")
        names = VERBALIZERS.get(self.spec.name) or {label: label.replace("_", " ") for label in self.spec.labels or ()}
        self.words = names
        self.labels_of = {word: label for label, word in names.items()}

    def source(self, example: SequenceExample) -> str:
        """The input: the task's name and its fields ("sst2 sentence: ...")."""
        if self.spec.pair:
            return f"{self.spec.name} sentence1: {example.text_a} sentence2: {example.text_b}"
        return f"{self.spec.name} sentence: {example.text_a}"

    def target(self, example: SequenceExample) -> str:
        """The answer as text: a label's word, or a score rounded to SCORE_STEP."""
        if self.spec.regression:
            return f"{round(float(example.label) / SCORE_STEP) * SCORE_STEP:.1f}"
        return self.words[str(example.label)]

    def answer_end(self, example: SequenceExample, training: bool) -> int | None:
        """Where in the input the answer ends: nowhere, for a label or a score."""
        return None

    def parse(self, text: str, example: SequenceExample) -> tuple[str | float, bool]:
        """(the prediction an output means, whether it was valid). Invalid outputs count as wrong."""
        text = text.strip()
        if self.spec.regression:
            try:
                return float(text), True
            except ValueError:
                low, high = self.spec.label_range or (0.0, 1.0)
                return (low + high) / 2, False
        if text in self.labels_of:
            return self.labels_of[text], True
        return next(label for label in self.spec.labels if label != str(example.label)), False

    def reads_back(self, text: str, example: SequenceExample) -> bool:
        """Whether `text` (a target as the vocabulary writes it back) parses as the gold label."""
        prediction, valid = self.parse(text, example)
        if self.spec.regression:
            return valid and f"{prediction:.1f}" == self.target(example)
        return valid and prediction == str(example.label)

    def answer_tokens(self, tokenizer: Tokenizer) -> int:
        """The most tokens an answer needs (the longest label word, or a score such as "3.8"),
        its end included: what generation is allowed, plus one token of slack."""
        answers = ["5.0"] if self.spec.regression else list(self.words.values())
        return max(len(tokenizer.encode(answer, add_special_tokens=False, truncation=False)) for answer in answers) + 2

    def answer_limits(self, tokenizer: Tokenizer, examples: list) -> list[int]:
        """Generation's limit for each example (`answer_tokens`, the same for all)."""
        return [self.answer_tokens(tokenizer)] * len(examples)

    def collect(self, examples: list, predictions: list) -> list:
        """The predictions as `score` and the writers take them: a label or score per example."""
        return list(predictions)


@dataclass
class QuestionCasting:
    """SQuAD as T5's `squad` preprocessor casts it: `question: Q context: C` -> the answer text
    (training: the first gold answer); SQuAD 2.0's unanswerable questions -> NO_ANSWER.

    T5's preprocessor also puts spaces around punctuation; the unigram vocabulary splits
    punctuation by itself, so the texts are kept as they are."""

    spec: TaskSpec
    settings: InputSettings = field(default_factory=InputSettings)
    answers_in_input = True
    stand_in = "the empty answer"

    def source(self, example: SpanExample) -> str:
        """The input: `question: Q context: C`."""
        return f"{self._prefix(example)}{example.context}"

    def target(self, example: SpanExample) -> str:
        """The first gold answer's text, or NO_ANSWER."""
        return NO_ANSWER if example.is_impossible else example.answers[0]["text"]

    def answer_end(self, example: SpanExample, training: bool) -> int | None:
        """Where in the input the answer ends (a character offset of `source`): the target's answer
        when training; else the gold answer that ends first (one left whole is enough). None when
        unanswerable."""
        if example.is_impossible or not example.answers:
            return None
        answers = example.answers[:1] if training else example.answers
        return len(self._prefix(example)) + min(a["answer_start"] + len(a["text"]) for a in answers)

    def parse(self, text: str, example: SpanExample) -> tuple[str | None, bool]:
        """(the answer text, whether valid): NO_ANSWER is "" (SQuAD 2.0's no answer); an empty
        output is invalid (None: no prediction, scored 0)."""
        text = text.strip()
        if not text:
            return None, False
        if self.spec.unanswerable and text.lower() == NO_ANSWER:
            return "", True
        return text, True

    def reads_back(self, text: str, example: SpanExample) -> bool:
        """Whether `text` (a target as the vocabulary writes it back) is the target's answer, as
        SQuAD's scorer compares them (normalised)."""
        answer, valid = self.parse(text, example)
        gold = "" if example.is_impossible else self.target(example)
        return valid and normalize_answer(answer) == normalize_answer(gold)

    def answer_limits(self, tokenizer: Tokenizer, examples: list) -> list[int]:
        """Generation's limit: --max-answer-length tokens (or NO_ANSWER's), and the end."""
        no_answer = len(tokenizer.encode(NO_ANSWER, add_special_tokens=False, truncation=False))
        return [max(self.settings.max_answer_length, no_answer) + 1] * len(examples)

    def collect(self, examples: list, predictions: list) -> dict[str, str]:
        """{question id: answer} as `score` takes it; a question with no valid answer is left out."""
        return {example.qid: answer for example, answer in zip(examples, predictions) if answer is not None}

    @staticmethod
    def _prefix(example: SpanExample) -> str:
        """The input before the context."""
        return f"question: {example.question} context: "


def no_spaces(text: str) -> str:
    """`text` without its whitespace: how entity words are compared without a vocabulary."""
    return "".join(text.split())


def spelling(tokenizer: Tokenizer) -> Callable[[str], str]:
    """A text as the vocabulary writes it back (encoded, decoded: normalised, lower-cased when
    uncased, characters it lacks gone), whitespace removed; remembered per text."""

    @functools.lru_cache(maxsize=None)
    def spelled(text: str) -> str:
        return no_spaces(tokenizer.decode(tokenizer.encode(text, add_special_tokens=False, truncation=False)))

    return spelled


@dataclass
class EntityCasting:
    """CoNLL-2003 as text: `ner: <the words>` -> the entity span sequence `EU [ORG] ; German [MISC]`.

    Args:
        spec: the token task (its tags name the entity types, IOB2).
        tokenizer: the vocabulary the model writes with: words and entities are compared as it
            spells them, and it must write the markers ("[", "]", ";") back. None compares the
            strings themselves (spaces ignored).
    """

    spec: TaskSpec
    tokenizer: Tokenizer | None = None
    answers_in_input = True
    stand_in = "the tags of the entities that could be placed"

    def __post_init__(self) -> None:
        self.types = list(dict.fromkeys(tag[2:] for tag in self.spec.labels if tag != "O"))
        self.marker = re.compile(r"\[\s*(" + "|".join(map(re.escape, self.types)) + r")\s*\]", re.IGNORECASE)
        self.spelled = spelling(self.tokenizer) if self.tokenizer else no_spaces
        for mark in [f"[{kind}]" for kind in self.types] + [ENTITY_SEPARATOR.strip()]:
            if self.spelled(mark).lower() != mark.lower():
                raise UserError(f"the model's vocabulary writes {mark!r} back as {self.spelled(mark)!r}: CoNLL's "
                                "text-to-text targets need '[', ']', ';' and the entity types (train the vocabulary "
                                "on text that has them)")

    def source(self, example: TokenExample) -> str:
        """The input: `ner: ` and the words, spaces between."""
        return "ner: " + " ".join(example.words)

    def target(self, example: TokenExample) -> str:
        """The entities in reading order, `words [TYPE]` each, ENTITY_SEPARATOR between; "" when none."""
        return ENTITY_SEPARATOR.join(f"{' '.join(example.words[start:end])} [{kind}]"
                                     for start, end, kind in entity_spans(example.tags))

    def answer_end(self, example: TokenExample, training: bool) -> int | None:
        """Where in the input the last entity ends (a character offset of `source`); None without entities."""
        spans = entity_spans(example.tags) if example.tags else []
        if not spans:
            return None
        return len(self.source(TokenExample(example.guid, example.words[:spans[-1][1]], None, example.where)))

    def parse(self, text: str, example: TokenExample) -> tuple[list[str], bool]:
        """(one IOB2 tag per word, whether the whole output was read): each `words [TYPE]` goes on the
        first run of words it spells that no earlier entity took, after the previous entity first;
        an entity that is no such run is left out (the output is then invalid), and so is text after
        the last type."""
        tags = ["O"] * len(example.words)
        keys = [self.spelled(word) for word in example.words]
        pieces = self.marker.split(text)  # [words, TYPE, words, TYPE, ..., text after the last type]
        valid, after = not pieces[-1].strip(), 0
        for number in range(0, len(pieces) - 1, 2):
            words = pieces[number].strip()
            if number:  # the separator before every entity but the first
                words = words.removeprefix(ENTITY_SEPARATOR.strip()).strip()
            run = _find_run(keys, tags, self.spelled(words), after) if words else None
            if run is None:
                valid = False
                continue
            start, end = run
            kind = pieces[number + 1].upper()
            tags[start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
            after = end
        return tags, valid

    def reads_back(self, text: str, example: TokenExample) -> bool:
        """Whether `text` (a target as the vocabulary writes it back) decodes to the gold tags."""
        return self.parse(text, example) == (list(example.tags), True)

    def answer_limits(self, tokenizer: Tokenizer, examples: list) -> list[int]:
        """Generation's limit for each sentence: the tokens of its longest valid output (every word
        an entity of the type that takes most tokens), and the end."""
        widest = max(self.types, key=lambda kind: len(tokenizer.encode(f"[{kind}]", add_special_tokens=False,
                                                                       truncation=False)))
        longest = [ENTITY_SEPARATOR.join(f"{word} [{widest}]" for word in e.words) for e in examples]
        return [len(ids) + 1 for ids in content_ids(tokenizer, longest)]

    def collect(self, examples: list, predictions: list) -> list[list[str]]:
        """The tag sequences, as `score` and the CoNLL writer take them."""
        return list(predictions)


def entity_spans(tags: list[str]) -> list[tuple[int, int, str]]:
    """The entities of IOB2 tags as (first word, one past the last word, type), in order, as seqeval
    (the CoNLL metric's library) reads them: an I- tag after O opens an entity, as conlleval.

    >>> entity_spans(["B-ORG", "O", "B-MISC", "I-MISC"])
    [(0, 1, 'ORG'), (2, 4, 'MISC')]
    """
    from seqeval.metrics.sequence_labeling import get_entities  # imported when used: about a second to load

    return [(start, end + 1, kind) for kind, start, end in get_entities(list(tags))]


def _find_run(keys: list[str], tags: list[str], wanted: str, after: int) -> tuple[int, int] | None:
    """[start, end) of the first run of untagged words whose spellings (`keys`) join to `wanted`,
    at or after word `after` first, then anywhere; None if there is none."""
    for first in [*range(after, len(keys)), *range(after)]:
        if not keys[first]:
            continue
        joined = ""
        for end in range(first, len(keys)):
            if tags[end] != "O":
                break
            joined += keys[end]
            if not wanted.startswith(joined):
                break
            if joined == wanted:
                return first, end + 1
    return None


def casting_for(spec: TaskSpec, tokenizer: Tokenizer | None = None, settings: InputSettings | None = None):
    """The casting of a task: `Casting` (sequence tasks), `QuestionCasting` (SQuAD) or
    `EntityCasting` (CoNLL, comparing words as `tokenizer` writes them)."""
    if spec.kind == "sequence":
        return Casting(spec)
    if spec.kind == "span":
        return QuestionCasting(spec, settings or InputSettings())
    if spec.kind == "token":
        return EntityCasting(spec, tokenizer)
    raise UserError(f"{spec.name}: text-to-text fine-tuning casts sequence tasks, CoNLL's tags and SQuAD's answers; "
                    f"{spec.kind} tasks are not cast (use a BERT)")


def content_ids(tokenizer: Tokenizer, texts: list[str], offsets: bool = False) -> list:
    """Token ids of texts without special tokens (with each token's character span when `offsets`)."""
    if not texts:
        return []
    encoded = tokenizer(texts, padding=False, truncation=False, return_tensors=None, return_offsets_mapping=offsets)
    rows = []
    for i in range(len(texts)):
        keep = [t for t, sequence in enumerate(encoded.sequence_ids(i)) if sequence is not None]
        ids = [encoded["input_ids"][i][t] for t in keep]
        rows.append((ids, [encoded["offset_mapping"][i][t] for t in keep]) if offsets else ids)
    return rows


@dataclass
class Inputs:
    """Examples' input strings as token ids, cut to the encoder's length."""

    ids: list[list[int]]  # each input's tokens, cut to max_input - 1, then the end of text ([SEP]; T5's </s>)
    cut: list[bool]  # the input was longer and lost its end
    answer_cut: list[bool]  # ... and with it the answer (SQuAD's answer span, a CoNLL entity's words)


def encode_inputs(casting, tokenizer: Tokenizer, examples: list, max_input: int, training: bool = False) -> Inputs:
    """Token ids of the inputs, cut to max_input tokens with the end of text last (the tokenizer's
    `end_token_id`: bertology's [SEP], T5's </s>), and which lost their answer
    (for training, the target's answer; else every gold answer)."""
    ids, cut, answer_cut = [], [], []
    for example, (tokens, offsets) in zip(examples, content_ids(tokenizer, [casting.source(e) for e in examples],
                                                                  offsets=True)):
        keep = max_input - 1
        ids.append(tokens[:keep] + [tokenizer.end_token_id])
        cut.append(len(tokens) > keep)
        end = casting.answer_end(example, training)
        answer_cut.append(cut[-1] and end is not None and end > (offsets[keep - 1][1] if keep else 0))
    return Inputs(ids, cut, answer_cut)


@torch.no_grad()
def predict_text(model: nn.Module, tokenizer: Tokenizer, inputs: list[list[int]],
                 max_new_tokens: int | list[int], batch_size: int = 64) -> list[str]:
    """Greedy outputs, decoded up to the end of text, for encoded inputs; `max_new_tokens` is one
    limit, or one per input (a batch generates up to its largest)."""
    limits = [max_new_tokens] * len(inputs) if isinstance(max_new_tokens, int) else max_new_tokens
    texts = []
    for start in range(0, len(inputs), batch_size):
        rows = inputs[start:start + batch_size]
        settings = GenerationConfig(max_new_tokens=max(limits[start:start + batch_size]),
                                    eos_token_id=tokenizer.end_token_id, pad_token_id=tokenizer.pad_token_id)
        batch = pad_rows(rows, [[]] * len(rows), tokenizer.pad_token_id)
        for row in generate(model, batch["input_ids"], batch["attention_mask"], settings)[:, 1:].tolist():
            row = row[:row.index(tokenizer.end_token_id)] if tokenizer.end_token_id in row else row
            texts.append(tokenizer.decode(row))
    return texts


def generation_inputs(tokenizer: Tokenizer, casting, examples: list, max_input: int,
                      decoder_limit: int) -> tuple[Inputs, list[int]]:
    """The examples' encoded inputs (with what was cut) and each one's generation limit: the
    casting's, at most the decoder's (n_positions). Computed once per split: every evaluation of a
    fine-tuning run reuses them."""
    inputs = encode_inputs(casting, tokenizer, examples, max_input)
    return inputs, [min(limit, decoder_limit) for limit in casting.answer_limits(tokenizer, examples)]


def decode_examples(model: nn.Module, tokenizer: Tokenizer, casting, examples: list,
                    prepared: tuple[Inputs, list[int]], batch_size: int) -> list[tuple]:
    """Generate for every example from its `generation_inputs` and read each output back:
    [(prediction, valid)]."""
    inputs, limits = prepared
    texts = predict_text(model, tokenizer, inputs.ids, limits, batch_size)
    return [casting.parse(text, example) for text, example in zip(texts, examples)]


def split_metrics(spec: TaskSpec, casting, examples: list, prepared: tuple[Inputs, list[int]], parsed: list[tuple],
                  split: str) -> dict[str, float]:
    """The task's metrics on one split from its decoded outputs (`decode_examples`), the share of
    invalid ones, and for SQuAD and CoNLL the shares of inputs cut and of answers cut with them."""
    inputs = prepared[0]
    results = score(spec, examples, casting.collect(examples, [p for p, _ in parsed]), split)
    suffix = "" if split == "dev" else f"_{split.removeprefix('dev_')}"
    results[f"invalid{suffix}"] = sum(not valid for _, valid in parsed) / len(parsed)
    if casting.answers_in_input:
        results[f"inputs_cut{suffix}"] = sum(inputs.cut) / len(examples)
        results[f"answers_cut{suffix}"] = sum(inputs.answer_cut) / len(examples)
    return results
