"""Predictions and embeddings for raw texts, from any model directory: what `bertology serve` answers.

A fine-tuned directory (from `bertology finetune`, feature-based or exported) predicts what
its task does: a label with the probability of every label, a regression score, one tag per
whitespace-separated word, or an answer span of a context. A WiC model labels a pair of
sentences, given the index of the target word among each sentence's whitespace-separated words
(WiC's "i1-i2"), T (same sense) or F. Texts go through the same
encode -> run_rows path as `bertology predict` (inference/predict.py), with the length limits and
long-input handling the model was trained with, so the two agree. Two kinds of directory take
`bertology predict`'s own paths instead, and agree with it the same way:

- a T5 fine-tuned text to text (inference/text_to_text.py) writes its answer greedily, within
  the fine-tuning's generation limits, and the answer is read back as a label, a score, tags or
  an answer text. It has no probabilities: each prediction carries the decoded `output` and
  whether it read as an answer (`valid`; false is T5's "invalid" prediction, in whose place
  stands what `bertology predict` writes for it);
- a feature head over static word vectors or CoVe (inference/static_heads.py) reads the
  words' vectors, as it did in training.

Every BERT-family directory, a bare encoder included, embeds texts through inference/embedding.py:
token vectors pooled into one vector each.

Example:
    >>> predictor = Predictor.load("runs/sst2")
    >>> predictor.predict(["a gorgeous, witty movie"])  # one dict per text
    [{'label': '1', 'scores': {'0': ..., '1': ...}}]"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from torch import nn

from .. import __version__
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..models import family_of, resolve_model_dir
from ..models.bert import BertModel
from ..models.cove import CoVeModel
from ..models.static import StaticVectors
from ..models.t5 import T5Config
from ..ops import resolve_precision
from ..tasks.inputs import (
    InputSettings,
    decode_tokens,
    encode,
    example_logits,
    find_answers,
    softmax,
)
from ..tasks.readers import SequenceExample, SpanExample, TaskSpec, TokenExample, WicExample
from .embedding import embed_texts, length_limit, load_encoder
from .modeldir import is_finetuned, load_config, load_finetuned, task_of
from .predict import model_device, precision_for, run_rows
from .static_heads import head_logits, load_static_head, read_logits, word_features
from .tagging import Tagger
from .text_to_text import Casting, EntityCasting, QuestionCasting, generation_inputs, open_directory, predict_text


@dataclass
class Predictor:
    """A loaded model directory, ready for raw texts. Not thread-safe: call it from one thread."""

    model_dir: str
    tokenizer: Tokenizer | None  # None for a TagLM tagger and a feature head over word vectors (they read words)
    encoder: BertModel | None  # the encoder under the task head (None for an exported graph without one)
    model: nn.Module | None = None  # the task model (a fine-tuned T5, a FeatureHead, ...); None for a bare encoder
    spec: TaskSpec | None = None
    settings: InputSettings | None = None  # the fine-tuned model's length limits and long-input handling
    precision: str = "fp32"  # resolved: fp32 or bf16
    casting: Casting | QuestionCasting | EntityCasting | None = None  # a T5's: texts to inputs, outputs to answers
    word_vectors: StaticVectors | CoVeModel | None = None  # a feature head's: where its words' features come from

    @classmethod
    def load(cls, model_dir: str, precision: str = "auto") -> Predictor:
        """Load a fine-tuned model directory, or a bare encoder (which can only embed).

        `precision` "auto" becomes bf16 where the device runs it fast, else fp32 (always
        fp32 for exported int8 and ONNX models, which refuse bf16 here, at load time).
        `model_dir` may also name an installed model (see models.resolve_model_dir). A T5 fine-tuned
        text to text and a feature head over static vectors or CoVe run in fp32 only ("auto" is
        fp32 for them, bf16 is refused): a T5 picks each token by exact comparisons of logits,
        and a feature head is small and was trained in fp32.
        """
        model_dir = str(resolve_model_dir(model_dir))
        family = family_of(model_dir).name
        if family in ("t5", "static", "cove"):
            if precision == "bf16":
                raise UserError(f"--precision bf16: {model_dir} ({family}) runs in fp32 only (a T5 picks tokens by "
                                "exact comparisons of logits; a feature head over word vectors trained in fp32)")
            if family == "t5":
                spec, settings = task_of(T5Config.load(model_dir), model_dir)
                model, tokenizer, casting = open_directory(model_dir, spec, settings)
                return cls(model_dir, tokenizer, None, model, spec, settings, casting=casting)
            head, vectors, spec = load_static_head(model_dir)
            return cls(model_dir, None, None, head, spec, word_vectors=vectors)
        if not is_finetuned(load_config(model_dir)):
            encoder, tokenizer = load_encoder(model_dir)
            return cls(model_dir, tokenizer, encoder, precision=resolve_precision(precision, model_device(encoder)))
        model, tokenizer, spec, settings = load_finetuned(model_dir)
        encoder = getattr(model, "bert", None)  # an ONNX Runtime model has none
        return cls(model_dir, tokenizer, encoder if isinstance(encoder, BertModel) else None, model, spec, settings,
                   precision_for(model, precision, model_device(model)))

    @property
    def kind(self) -> str:
        """What predict returns: classification, regression, tagging, question-answering; or encoder (none)."""
        if self.spec is None:
            return "encoder"
        if self.spec.kind == "token":
            return "tagging"
        if self.spec.kind == "span":
            return "question-answering"
        return "regression" if self.spec.regression else "classification"

    @property
    def takes_pairs(self) -> bool:
        """Whether predict needs a second text per text (pair tasks' text B, question answering's
        context, WiC's second sentence)."""
        return self.spec is not None and (self.spec.pair or self.spec.kind in ("span", "wic"))

    @property
    def takes_targets(self) -> bool:
        """Whether predict needs the index of a target word in each text and text pair (WiC)."""
        return self.spec is not None and self.spec.kind == "wic"

    def predict(self, texts: list[str], text_pairs: list[str] | None = None, batch_size: int = 64,
                target_indices: Sequence[Sequence[int]] | None = None) -> list[dict]:
        """One prediction per text, as JSON-ready dicts.

        Args:
            texts: the texts; for question answering, the questions; for WiC, each pair's first sentence.
            text_pairs: the second text of each pair, or the contexts for question answering;
                required exactly when `takes_pairs`.
            batch_size: rows per forward pass.
            target_indices: WiC (required exactly when `takes_targets`): per text, [i1, i2], the
                target word's index among the whitespace-separated words of the text and of its
                text pair (see `word_pairs`).
        Returns:
            classification (WiC too, labels "F" and "T"): {"label": name, "scores": {name:
            probability}} (softmax of the mean window logits; WiC: of its one row's logits);
            regression: {"score": float}; tagging: {"tokens": words,
            "tags": tags}; question answering: {"answer": text, "start": char offset,
            "end": char offset (exclusive), "score": probability}, with start, end and score
            None when the model says there is no answer.
            A T5 fine-tuned text to text has no probabilities: see `_generated`.
        """
        if self.spec is None:
            raise UserError(f"{self.model_dir} is a bare encoder with no task head: it can only embed texts")
        if self.takes_pairs != (text_pairs is not None):
            raise UserError("text_pairs: " + ("required by" if self.takes_pairs else "not taken by")
                            + f" this model's task ({self.spec.name})")
        if text_pairs is not None and len(text_pairs) != len(texts):
            raise UserError(f"text_pairs: {len(texts)} texts but {len(text_pairs)} text_pairs; give one per text")
        if self.takes_targets != (target_indices is not None):
            raise UserError("target_indices: " + ("required by" if self.takes_targets else "not taken by")
                            + f" this model's task ({self.spec.name})")
        examples = self._examples(texts, text_pairs, target_indices)
        if isinstance(self.model, Tagger):
            return [{"tokens": e.words, "tags": tags}
                    for e, tags in zip(examples, self.model.tag([e.words for e in examples], batch_size))]
        if self.casting is not None:
            return self._generated(examples, batch_size)
        if self.word_vectors is not None:
            return self._from_word_vectors(examples, batch_size)
        encoded = encode(self.spec, examples, self.tokenizer, self.settings, training=False)
        outputs = run_rows(self.model, encoded, self.spec, self.tokenizer.pad_token_id, batch_size, self.precision)
        if self.spec.kind == "token":
            return [{"tokens": e.words, "tags": tags}
                    for e, tags in zip(examples, decode_tokens(self.spec, encoded, outputs, examples))]
        if self.spec.kind == "span":
            return find_answers(encoded, [o[0] for o in outputs], [o[1] for o in outputs], examples,
                                self.settings, self.spec.unanswerable)
        logits = example_logits(encoded, outputs)
        if self.spec.regression:
            return [{"score": float(row[0])} for row in logits]
        probabilities = softmax(logits)
        return [{"label": self.spec.labels[int(p.argmax())], "scores": dict(zip(self.spec.labels, p.tolist()))}
                for p in probabilities]

    def _generated(self, examples: list, batch_size: int) -> list[dict]:
        """A T5's answers, generated and read back as `bertology predict` does
        (text_to_text.predict_directory), with what it wrote in place of probabilities:

        classification {"label", "output", "valid"}; regression {"score", "output", "valid"};
        tagging {"tokens", "tags", "output", "valid"}; question answering {"answer", "start",
        "end", "output", "valid"}, where start and end (exclusive) are the character offsets of
        the answer's first occurrence in the context, None when the context does not hold it as
        written (an uncased vocabulary writes it lower-cased) or there is no answer ("").
        `output` is the decoded text; `valid` False marks T5's "invalid" prediction, whose
        label, score, tags or answer is then `bertology predict`'s stand-in (`Casting.stand_in`).
        """
        inputs, limits = generation_inputs(self.tokenizer, self.casting, examples, self.settings.max_seq_len,
                                           self.model.config.n_positions)
        predictions = []
        for example, output in zip(examples, predict_text(self.model, self.tokenizer, inputs.ids, limits, batch_size)):
            answer, valid = self.casting.parse(output, example)
            written = {"output": output, "valid": valid}
            if self.spec.kind == "token":
                predictions.append({"tokens": example.words, "tags": answer, **written})
            elif self.spec.kind == "span":
                answer = answer or ""  # an unread output: no prediction, written as no answer
                start = example.context.find(answer) if answer else -1
                predictions.append({"answer": answer, "start": start if start >= 0 else None,
                                    "end": start + len(answer) if start >= 0 else None, **written})
            else:
                predictions.append({"score" if self.spec.regression else "label": answer, **written})
        return predictions

    def _from_word_vectors(self, examples: list, batch_size: int) -> list[dict]:
        """A feature head's predictions over its words' vectors, as `bertology predict` makes them
        (static_heads.predict_examples); classification adds every label's probability (softmax
        of the head's logits)."""
        logits = head_logits(self.model, self.spec, word_features(self.word_vectors, examples), batch_size)
        predictions = read_logits(self.spec, logits)
        if self.spec.kind == "token":
            return [{"tokens": e.words, "tags": tags} for e, tags in zip(examples, predictions)]
        if self.spec.regression:
            return [{"score": value} for value in predictions]
        probabilities = softmax(np.stack([row.numpy() for row in logits]))
        return [{"label": label, "scores": dict(zip(self.spec.labels, p.tolist()))}
                for label, p in zip(predictions, probabilities)]

    def check_word_pairs(self, texts: list[str], text_pairs: list[str],
                         target_indices: Sequence[Sequence[int]]) -> None:
        """Raise the UserError `predict` would raise for these WiC pairs, without running the model.

        The pairs are encoded as `predict` encodes them, which also finds a target word that
        gives no token (only characters the tokenizer drops) and two targets that alone overflow
        `max_seq_len`. `bertology serve` checks each request so before its pairs share a forward
        pass with other requests' pairs, which its error would fail too. Uses the tokenizer:
        call it from the thread that calls `predict`.

        Raises:
            UserError: naming the field ("target_indices[2][1]: ...").
        """
        encode(self.spec, word_pairs(texts, text_pairs, target_indices), self.tokenizer, self.settings,
               training=False)

    def _examples(self, texts: list[str], pairs: list[str] | None,
                  target_indices: Sequence[Sequence[int]] | None = None) -> list:
        """The task's example objects for raw texts (`where` names the request field, for messages)."""
        if self.spec.kind == "wic":
            return word_pairs(texts, pairs, target_indices)
        if self.spec.kind == "token":
            return [TokenExample(str(i), text.split(), None, f"texts[{i}]") for i, text in enumerate(texts)]
        if self.spec.kind == "span":
            return [SpanExample(str(i), q, c, [], False, f"texts[{i}]") for i, (q, c) in enumerate(zip(texts, pairs))]
        return [SequenceExample(str(i), text, pairs[i] if pairs else None, None, f"texts[{i}]")
                for i, text in enumerate(texts)]

    def embed(self, texts: list[str], pooling: str = "mean", normalize: bool = True, batch_size: int = 64) -> np.ndarray:
        """(len(texts), hidden_size) float32 sentence vectors: the last layer's token vectors pooled
        ("mean" over real tokens, "cls" or "max"; see embed.embed_texts), scaled to unit length
        when `normalize` (a dot product is then the cosine similarity). Long texts are cut to
        the encoder's limit, as `bertology embed` does."""
        if self.encoder is None:
            raise UserError(f"{self.model_dir} has no BERT encoder to embed with (an ONNX export: embed with the "
                            "directory it was exported from; a TagLM tagger: embed with its lm/ folder; a T5, "
                            "a GPT, or a feature head over static vectors or CoVe: embed with a BERT-family model)")
        return embed_texts(self.encoder, self.tokenizer, texts, pooling=pooling, normalize=normalize,
                           batch_size=batch_size, precision=self.precision)

    def describe(self) -> dict:
        """What /info reports about the model."""
        counted = [m for m in (self.model if self.model is not None else self.encoder, self.word_vectors)
                   if m is not None]
        return {
            "model_dir": self.model_dir,
            "task": self.spec.name if self.spec else None,
            "kind": self.kind,
            "labels": list(self.spec.labels) if self.spec and self.spec.labels else None,
            "takes_pairs": self.takes_pairs,
            "takes_targets": self.takes_targets,
            "parameters": sum(p.numel() for m in counted for p in m.parameters()) or None,  # None: an ONNX graph
            "max_seq_len": self.settings.max_seq_len if self.settings else None,  # predict's rows
            "long_inputs": self.settings.long_inputs if self.settings else None,
            "embedding_size": self.encoder.config.hidden_size if self.encoder is not None else None,
            "embedding_max_seq_len": length_limit(self.encoder, self.tokenizer, None) if self.encoder else None,
            "precision": self.precision,
            "version": __version__,
        }


def word_pairs(texts: list[str], text_pairs: list[str], target_indices: Sequence[Sequence[int]]) -> list[WicExample]:
    """WiC pairs from raw sentences, as `read_wic` reads them from WiC's files: each sentence's
    words are its whitespace-separated tokens, and `target_indices[i]` = [i1, i2] the index of
    the target word among the words of texts[i] and of text_pairs[i] (a data file's "i1-i2").

    Example: "He sat by the bank ." and "The bank raised rates ." with [4, 1]: "bank" in both.

    Raises:
        UserError: not one [i1, i2] per text, or an index that is no word of its sentence, naming
            the field ("target_indices[2][1]: 7 is not a word index of text_pairs[2] ...").
    """
    if len(target_indices) != len(texts):
        raise UserError(f"target_indices: {len(texts)} texts but {len(target_indices)} target_indices; give one "
                        "[i1, i2] per text")
    examples = []
    for i, (first, second, indices) in enumerate(zip(texts, text_pairs, target_indices)):
        if len(indices) != 2:
            raise UserError(f"target_indices[{i}]: {len(indices)} indexes; give two, [i1, i2]: the target word's "
                            f"index in texts[{i}] and in text_pairs[{i}]")
        sentences = (first.split(), second.split())
        for side, (field, words, index) in enumerate(zip(("texts", "text_pairs"), sentences, indices)):
            if not 0 <= index < len(words):
                raise UserError(f"target_indices[{i}][{side}]: {index} is not a word index of {field}[{i}], whose "
                                f"{len(words)} whitespace-separated words are numbered from 0")
        # A request names no lemma or part of speech; the encoding reads neither, so the word as written stands in.
        examples.append(WicExample(sentences[0][indices[0]], "", sentences, (indices[0], indices[1]), None,
                                   f"target_indices[{i}]"))
    return examples
