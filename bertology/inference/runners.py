"""Running a fine-tuned model directory: one runner per kind of model behind evaluate, predict and serve.

A family's spec says how its fine-tuned directories run (`FamilySpec.runner`):

| runner          | what it runs                                          | families              |
|-----------------|-------------------------------------------------------|-----------------------|
| `head`          | a task head on the model (or on its frozen features,  | BERT, GPT, XLNet,     |
|                 | or an int8 / ONNX export of one): logits, decoded     | AWD-LSTM, ELMo        |
| `text_to_text`  | answers written as text and read back                 | T5                    |
| `word_features` | a feature head over each word's vector                | static vectors, CoVe  |
| `tagger`        | a tagger of its own beside a frozen biLM              | TagLM                 |

Each gives the same three things: `predict(examples)`, what `bertology predict` writes;
`evaluate(examples, split)`, the task's metrics on them; and `answer(examples)`, what
`bertology serve` returns for each (with the probabilities where the model has them). Every
runner applies the one precision policy (ops.py's `run_precision`), which every command states
in its `--help` (`PRECISION_HELP`).
"""

from __future__ import annotations

import sys
from typing import ClassVar

import numpy as np
from torch import nn

from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..ops import resolve_device, run_precision
from ..tasks.inputs import InputSettings, decode_tokens, encode, example_logits, find_answers, softmax
from ..tasks.readers import TaskSpec
from .modeldir import CPU_FORMATS, ModelDir, open_model_dir
from .onnx import OnnxModel
from .predict import decode, model_device, run_rows, score
from .static_heads import head_logits, load_static_head, read_logits, word_features
from .tagging import Tagger
from .text_to_text import casting_for, decode_examples, generation_inputs, predict_text, split_metrics


class Runner:
    """A fine-tuned model directory ready for its task's examples (see the module docstring)."""

    fixed_precision: ClassVar[str | None] = None  # the one precision the model computes in, if it has one
    why_fixed: ClassVar[str] = ""

    def __init__(self, model_dir: ModelDir, spec: TaskSpec, settings: InputSettings | None, model: nn.Module,
                 tokenizer: Tokenizer | None, precision: str):
        self.model_dir, self.spec, self.settings = model_dir, spec, settings
        self.model, self.tokenizer = model, tokenizer
        self.precision = run_precision(precision, model_device(model), self.fixed_precision, self.why_fixed)

    def predict(self, examples: list, batch_size: int = 128, progress: bool = False):
        """Predictions as `bertology predict` writes them and `score` takes them: labels or scores,
        tag lists, or {question id: answer}."""
        raise NotImplementedError

    def evaluate(self, examples: list, split: str = "dev", batch_size: int = 128) -> dict[str, float]:
        """The task's metrics on `examples` (a split other than "dev" names them "<metric>_<split>")."""
        return score(self.spec, examples, self.predict(examples, batch_size, progress=True), split)

    def answer(self, examples: list, batch_size: int = 64) -> list[dict]:
        """One JSON-ready answer per example, as `bertology serve` returns them."""
        raise NotImplementedError

    def check(self, examples: list) -> None:
        """Raise the UserError `answer` would raise for these examples, without running the model."""

    def parameters(self) -> int | None:
        """The model's parameters (None: an ONNX graph has none to count)."""
        return sum(p.numel() for p in self.model.parameters()) or None


class HeadRunner(Runner):
    """A task head on the model, its frozen features, or an exported model (`predict.run_rows`)."""

    def __init__(self, model_dir: ModelDir, precision: str, device: str = "auto"):
        spec, settings = model_dir.task()
        exported = model_dir.export_format
        if exported in CPU_FORMATS and device not in ("auto", "cpu"):
            raise UserError(f"--device {device}: an {exported} export computes on the CPU only; "
                            "use --device cpu or auto")
        model = OnnxModel(model_dir.path) if exported == "onnx" else model_dir.load_model()
        if exported not in CPU_FORMATS:
            model = model.to(resolve_device(device))
        self.fixed_precision = getattr(model, "inference_precision", None)  # exports compute in fp32 only
        self.why_fixed = "an exported int8 or ONNX model"
        super().__init__(model_dir, spec, settings, model, model_dir.tokenizer(), precision)

    def predict(self, examples: list, batch_size: int = 128, progress: bool = False):
        """Encode, run the rows, decode (inference/predict.py)."""
        encoded = encode(self.spec, examples, self.tokenizer, self.settings, training=False)
        outputs = run_rows(self.model, encoded, self.spec, self.tokenizer.pad_token_id, batch_size, self.precision,
                           progress)
        return decode(self.spec, encoded, outputs, examples, self.settings)

    def answer(self, examples: list, batch_size: int = 64) -> list[dict]:
        """Labels with every label's probability (softmax of the mean window logits), scores, tags, or
        answer spans with their character offsets and probability."""
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
        return [{"label": self.spec.labels[int(p.argmax())], "scores": dict(zip(self.spec.labels, p.tolist()))}
                for p in softmax(logits)]

    def check(self, examples: list) -> None:
        """Encode them as `answer` does (a WiC target word with no token, two targets too long for one row)."""
        encode(self.spec, examples, self.tokenizer, self.settings, training=False)


class TextToTextRunner(Runner):
    """A model fine-tuned text to text (T5): answers generated greedily within the fine-tuning's
    limits and read back as labels, scores, tags or answers (inference/text_to_text.py). It has no
    probabilities, and computes in fp32: it picks each token by exact comparisons of logits."""

    fixed_precision = "fp32"
    why_fixed = "it writes its answers by exact comparisons of logits"

    def __init__(self, model_dir: ModelDir, precision: str, device: str = "auto"):
        spec, settings = model_dir.task()
        tokenizer = model_dir.tokenizer()
        model = model_dir.load_model().to(resolve_device(device))
        super().__init__(model_dir, spec, settings, model, tokenizer, precision)
        self.casting = casting_for(spec, tokenizer, settings)
        self.decoder_limit = model_dir.spec.context_length(model_dir.config)

    def _decoded(self, examples: list, batch_size: int) -> tuple[tuple, list[tuple]]:
        prepared = generation_inputs(self.tokenizer, self.casting, examples, self.settings.max_seq_len,
                                     self.decoder_limit)
        return prepared, decode_examples(self.model, self.tokenizer, self.casting, examples, prepared, batch_size)

    def predict(self, examples: list, batch_size: int = 128, progress: bool = False):
        """The answers read back; how many outputs were invalid, and what stands in for them, goes to stderr."""
        _, parsed = self._decoded(examples, batch_size)
        predictions = self.casting.collect(examples, [prediction for prediction, _ in parsed])
        if self.spec.kind == "span":
            predictions = {example.qid: predictions.get(example.qid, "") for example in examples}
        invalid = sum(not valid for _, valid in parsed)
        if invalid:
            print(f"{invalid:,} of {len(examples):,} outputs could not be read as answers; in their place: "
                  f"{self.casting.stand_in}", file=sys.stderr)
        return predictions

    def evaluate(self, examples: list, split: str = "dev", batch_size: int = 128) -> dict[str, float]:
        """The metrics from the decoded answers, with the share of invalid ones (and of inputs and
        answers cut, for SQuAD and CoNLL)."""
        prepared, parsed = self._decoded(examples, batch_size)
        return split_metrics(self.spec, self.casting, examples, prepared, parsed, split)

    def answer(self, examples: list, batch_size: int = 64) -> list[dict]:
        """What `predict` writes, with the decoded `output` in place of probabilities and `valid`:
        classification {"label", "output", "valid"}; regression {"score", ...}; tagging {"tokens",
        "tags", ...}; question answering {"answer", "start", "end", ...}, where start and end
        (exclusive) are the character offsets of the answer's first occurrence in the context, None
        when the context does not hold it as written (an uncased vocabulary writes it lower-cased) or
        there is no answer (""). `valid` False marks T5's "invalid" prediction, whose answer is then
        `bertology predict`'s stand-in (`Casting.stand_in`)."""
        inputs, limits = generation_inputs(self.tokenizer, self.casting, examples, self.settings.max_seq_len,
                                           self.decoder_limit)
        answers = []
        for example, output in zip(examples, predict_text(self.model, self.tokenizer, inputs.ids, limits, batch_size)):
            answer, valid = self.casting.parse(output, example)
            written = {"output": output, "valid": valid}
            if self.spec.kind == "token":
                answers.append({"tokens": example.words, "tags": answer, **written})
            elif self.spec.kind == "span":
                answer = answer or ""  # an unread output: no prediction, written as no answer
                start = example.context.find(answer) if answer else -1
                answers.append({"answer": answer, "start": start if start >= 0 else None,
                                "end": start + len(answer) if start >= 0 else None, **written})
            else:
                answers.append({"score" if self.spec.regression else "label": answer, **written})
        return answers


class WordFeatureRunner(Runner):
    """A feature head over word vectors or CoVe (inference/static_heads.py), as its training's dev
    evaluation runs it; in fp32, as it trained (it is small)."""

    fixed_precision = "fp32"
    why_fixed = "a feature head over word vectors, trained in fp32"

    def __init__(self, model_dir: ModelDir, precision: str, device: str = "auto"):
        head, vectors, spec = load_static_head(model_dir.path)
        # The word features are looked up (CoVe: encoded) on the CPU, as training computed them once.
        super().__init__(model_dir, spec, None, head.to(resolve_device(device)), None, precision)
        self.vectors = vectors

    def predict(self, examples: list, batch_size: int = 128, progress: bool = False):
        """The head's predictions over each example's word features."""
        return read_logits(self.spec, head_logits(self.model, self.spec, word_features(self.vectors, examples),
                                                  batch_size))

    def answer(self, examples: list, batch_size: int = 64) -> list[dict]:
        """Labels with every label's probability (softmax of the head's logits), scores, or tags."""
        logits = head_logits(self.model, self.spec, word_features(self.vectors, examples), batch_size)
        predictions = read_logits(self.spec, logits)
        if self.spec.kind == "token":
            return [{"tokens": e.words, "tags": tags} for e, tags in zip(examples, predictions)]
        if self.spec.regression:
            return [{"score": value} for value in predictions]
        probabilities = softmax(np.stack([row.numpy() for row in logits]))
        return [{"label": label, "scores": dict(zip(self.spec.labels, p.tolist()))}
                for label, p in zip(predictions, probabilities)]

    def parameters(self) -> int | None:
        """The head's and the word features' (a CoVe encoder's) parameters."""
        return sum(p.numel() for m in (self.model, self.vectors) for p in m.parameters()) or None


class TaggerRunner(Runner):
    """A TagLM tagger and its biLM (inference/tagging.py): sentences of words in, tags out."""

    def __init__(self, model_dir: ModelDir, precision: str, device: str = "auto"):
        spec, settings = model_dir.task()
        super().__init__(model_dir, spec, settings, Tagger.open(model_dir).to(resolve_device(device)), None, precision)

    def predict(self, examples: list, batch_size: int = 128, progress: bool = False):
        """Each sentence's tags (the CRF's best path)."""
        return self.model.tag([e.words for e in examples], batch_size)

    def answer(self, examples: list, batch_size: int = 64) -> list[dict]:
        """The words and their tags."""
        return [{"tokens": e.words, "tags": tags} for e, tags in zip(examples, self.predict(examples, batch_size))]


RUNNERS: dict[str, type[Runner]] = {"head": HeadRunner, "text_to_text": TextToTextRunner,
                                    "word_features": WordFeatureRunner, "tagger": TaggerRunner}


def open_runner(model_dir: ModelDir | str, precision: str = "auto", device: str = "auto") -> Runner:
    """The runner of a fine-tuned model directory (or an installed model's name), by its family's
    spec, with its model on `device` (the `--device` setting: ops.resolve_device)."""
    model_dir = model_dir if isinstance(model_dir, ModelDir) else open_model_dir(model_dir)
    return RUNNERS[model_dir.spec.runner](model_dir, precision, device)


def load_finetuned(model_dir: str, device: str = "auto") -> tuple[nn.Module, Tokenizer, TaskSpec, InputSettings]:
    """A fine-tuned directory whose family runs a task head (feature-based, or exported) -> model,
    tokenizer, task, input settings: what distillation's teacher and the Python API take. An `onnx`
    export comes back as an ONNX Runtime model and an `int8` export quantized; both are called like
    the PyTorch models and stay on the CPU. Another runner's directory is a one-line error."""
    opened = open_model_dir(model_dir)
    if opened.spec.runner != "head":
        raise UserError(f"{opened.path}: a {opened.describe()} ({opened.spec.runner.replace('_', ' ')}): "
                        "`bertology evaluate`, `predict` and `serve` run it; distill does not take one yet")
    runner = HeadRunner(opened, "auto", device)
    return runner.model, runner.tokenizer, runner.spec, runner.settings
