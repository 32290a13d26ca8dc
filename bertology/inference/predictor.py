"""Predictions and embeddings for raw texts, from any model directory: what `bertology serve` answers.

A fine-tuned directory (from `bertology finetune`, feature-based or exported) predicts what
its task does: a label with the probability of every label, a regression score, one tag per
whitespace-separated word, or an answer span of a context. A WiC model labels a pair of
sentences, given the index of the target word among each sentence's whitespace-separated words
(WiC's "i1-i2"), T (same sense) or F. Texts become the task's examples and go through the
directory's runner (inference/runners.py), the one `bertology predict` uses, with the length
limits and long-input handling the model was trained with, so the two agree: a T5 fine-tuned
text to text writes its answer and carries the decoded `output` and whether it read as an answer
(`valid`) in place of probabilities; a feature head over static word vectors or CoVe reads the
words' vectors, as it did in training.

Every directory whose family has a layer stack, a bare encoder included, embeds texts through
inference/embedding.py: token vectors pooled into one vector each.

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
from ..models.features import FeatureEncoder, FeatureModel
from ..ops import run_precision
from ..tasks.inputs import InputSettings
from ..tasks.readers import SequenceExample, SpanExample, TaskSpec, TokenExample, WicExample
from .embedding import embed_texts, length_limit
from .modeldir import ModelDir, open_model_dir
from .predict import model_device
from .runners import Runner, open_runner


def task_model_encoder(model_dir: ModelDir, model: nn.Module) -> FeatureEncoder | None:
    """The layer stack under a task model's head as a feature source (for /embed), or None (an
    exported graph, a family without layers)."""
    if isinstance(model, FeatureModel):
        return model.encoder
    stack = getattr(model, getattr(type(model), "backbone", ""), None)
    if stack is None or model_dir.spec.feature_encoder is None:
        return None
    return FeatureEncoder(stack, model_dir.spec, model_dir.config).eval()


@dataclass
class Predictor:
    """A loaded model directory, ready for raw texts. Not thread-safe: call it from one thread."""

    model_dir: str
    family: str  # the model family's name (models/__init__.py)
    runner: Runner | None  # the fine-tuned model's; None for a bare encoder (which can only embed)
    encoder: FeatureEncoder | None  # the layers that embed (None for an exported graph, or words in)
    tokenizer: Tokenizer | None  # None for a TagLM tagger and a feature head over word vectors (they read words)
    precision: str = "fp32"  # resolved: fp32 or bf16

    @classmethod
    def load(cls, model_dir: str, precision: str = "fp32", device: str = "auto") -> Predictor:
        """Load a fine-tuned model directory, or a bare encoder (which can only embed); `model_dir`
        may also name an installed model (see models.resolve_model_dir). `precision` follows the
        one policy of inference/runners.py (`run_precision`); `device` is the `--device` setting."""
        return cls.open(open_model_dir(model_dir), precision, device)

    @classmethod
    def open(cls, opened: ModelDir, precision: str = "fp32", device: str = "auto") -> Predictor:
        """`load` of a directory already opened (its config.json read)."""
        if not opened.is_finetuned and not (opened.path / "feature_head.json").is_file():
            encoder, tokenizer = opened.feature_encoder(device)
            return cls(str(opened.path), opened.family.name, None, encoder, tokenizer,
                       run_precision(precision, model_device(encoder)))
        runner = open_runner(opened, precision, device)
        return cls(str(opened.path), opened.family.name, runner, task_model_encoder(opened, runner.model), runner.tokenizer,
                   runner.precision)

    @property
    def model(self) -> nn.Module | None:
        """The task model (None for a bare encoder)."""
        return self.runner.model if self.runner is not None else None

    @property
    def spec(self) -> TaskSpec | None:
        """The task (None for a bare encoder)."""
        return self.runner.spec if self.runner is not None else None

    @property
    def settings(self) -> InputSettings | None:
        """The fine-tuned model's length limits and long-input handling."""
        return self.runner.settings if self.runner is not None else None

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
        return self.runner.answer(self._examples(texts, text_pairs, target_indices), batch_size)

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
        self.runner.check(word_pairs(texts, text_pairs, target_indices))

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
            raise UserError(f"{self.model_dir} has no layers to embed with (an ONNX export: embed with the directory "
                            "it was exported from; a TagLM tagger: embed with its lm/ folder; a T5 fine-tuned text "
                            "to text, or a feature head over static vectors or CoVe: embed with the model it started "
                            "from)")
        return embed_texts(self.encoder, self.tokenizer, texts, pooling=pooling, normalize=normalize,
                           batch_size=batch_size, precision=self.precision)

    def describe(self) -> dict:
        """What /info reports about the model."""
        parameters = self.runner.parameters() if self.runner is not None else \
            sum(p.numel() for p in self.encoder.parameters())
        return {
            "model_dir": self.model_dir,
            "task": self.spec.name if self.spec else None,
            "kind": self.kind,
            "labels": list(self.spec.labels) if self.spec and self.spec.labels else None,
            "takes_pairs": self.takes_pairs,
            "takes_targets": self.takes_targets,
            "parameters": parameters,  # None: an ONNX graph
            "max_seq_len": self.settings.max_seq_len if self.settings else None,  # predict's rows
            "long_inputs": self.settings.long_inputs if self.settings else None,
            "embedding_size": self.encoder.hidden_size if self.encoder is not None else None,
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
