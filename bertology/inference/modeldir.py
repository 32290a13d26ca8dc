"""One opener for a model directory: its config.json read once, into an object that knows its family.

A directory is in the transformers layout (config.json, model.safetensors, the tokenizer)
and bertology adds a few config.json keys, read and written only here:

- `finetuning_task`, `bertology_task`, `bertology_inputs`: the task a model was fine-tuned
  for and its input settings (`describe_task` writes them, `ModelDir.task` reads them back);
- `bertology_export`: the format of an export (`int8`, `onnx`, or `hf`);
- `architectures`: the model class (transformers' key);
- a feature-based model adds `feature_head.json` and its weights.

The architecture switches transformers' BERT lacks (`causal`, `share_layers`, `head_bilstm`, ...)
are not such keys: they are fields of the model's own config (models/bert.py's `BertConfig`),
which writes and reads them with the rest of the architecture.

`open_model_dir(name or path)` gives a `ModelDir`: the directory's family (models/__init__.py
recognises it from `model_type`), its config, its task, its export format, its model (through
the family's spec; an int8 export quantized, a feature-based model with its head), its tokenizer
and its layers as a feature source. Every command that reads a model directory opens it here,
once; inference/runners.py runs a fine-tuned one for evaluate, predict and serve.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import checkpoint
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import loads_json
from ..models import Family, family_of, read_config, resolve_model_dir
from ..models.features import HEAD_CONFIG, FeatureEncoder, FeatureModel, load_feature_encoder
from ..models.quantized import load_quantized
from ..ops import resolve_device
from ..tasks.inputs import InputSettings
from ..tasks.readers import Columns, TaskSpec

# config.json keys bertology adds (transformers keeps unknown keys, so they survive its round trips).
FINETUNING_TASK_KEY = "finetuning_task"  # transformers' own key: the task's name
TASK_KEY = "bertology_task"  # the TaskSpec: labels, kind, metrics, ...
INPUTS_KEY = "bertology_inputs"  # the InputSettings: length limits, windows, SQuAD search
EXPORT_KEY = "bertology_export"  # the export format that wrote the directory
SENTENCE_TRANSFORMERS_CONFIG = "sentence_bert_config.json"
CPU_FORMATS = ("int8", "onnx")  # run on the CPU only (PyTorch's quantized kernels, ONNX Runtime's CPU provider)


@dataclass
class ModelDir:
    """A model directory with its config.json read once (`data`), and what that says of it."""

    path: Path
    data: dict[str, Any]  # config.json, as read
    family: Family

    @property
    def spec(self):
        """The family's spec (models/base.py's FamilySpec): what the model can do."""
        return self.family.spec

    @cached_property
    def config(self):
        """The family's config object, from `data` (no second read)."""
        return self.spec.config_class.load(self.path, self.data)

    @property
    def export_format(self) -> str | None:
        """The export format that wrote the directory ("hf", "int8", "onnx"), or None for a model as trained."""
        return self.data.get(EXPORT_KEY)

    @property
    def is_finetuned(self) -> bool:
        """Whether it holds a model fine-tuned by bertology (it knows its task)."""
        return bool(self.data.get(TASK_KEY))

    @property
    def is_feature_model(self) -> bool:
        """Whether it holds a feature-based model (a frozen encoder and a feature head)."""
        return (self.path / HEAD_CONFIG).is_file()

    def task(self) -> tuple[TaskSpec, InputSettings]:
        """The task and input settings it was fine-tuned with (see `describe_task`)."""
        if not self.is_finetuned:
            raise UserError(f"{self.path}: not a fine-tuned model (its config.json has no {TASK_KEY}; "
                            "make one with `bertology finetune`)")
        return task_from_dict(self.data[TASK_KEY]), InputSettings(**self.data.get(INPUTS_KEY, {}))

    def describe(self) -> str:
        """One line: what the family's spec says of this model ("encoder (6 layers, 384 wide, ...)")."""
        return self.spec.describe(self.config)

    def load_model(self) -> nn.Module:
        """The model as the class config.json names, through its family's spec; an int8 export comes
        back quantized as it was saved, a feature-based model with its head."""
        if self.export_format == "int8":
            return load_quantized(self.path, self.config)
        if self.export_format == "onnx":
            raise UserError(f"{self.path}: an ONNX export (model.onnx), not PyTorch weights; run it with "
                            "`bertology evaluate` / `bertology predict`, or load it with bertology.inference.onnx.OnnxModel")
        if self.is_feature_model:
            return FeatureModel.from_pretrained(self.path, self.data)
        return self.spec.load(self.path, self.config)

    def tokenizer(self) -> Tokenizer:
        """The directory's tokenizer, checked against the model it sits beside (`tokenizer_problems`)."""
        tokenizer = Tokenizer.from_pretrained(self.path)
        if self.spec.tokenized:
            problems = tokenizer_problems(self.path, tokenizer, self.config)
            if problems:
                raise UserError(problems[0])
        return tokenizer

    def commands(self) -> list[str]:
        """The commands that take this directory, as its family's spec says (`bertology info`), with
        the role where a command takes it in one of several: "distill (teacher, student)"."""
        spec, finetuned = self.spec, self.is_finetuned
        layers = spec.feature_encoder is not None
        distill = [role for role, takes in (("teacher", finetuned and spec.student_config is not None),
                                            ("student", bool(spec.heads) and spec.student_config is not None),
                                            ("cut to --student-layers", spec.keep_layers is not None)) if takes]
        formats = [fmt for fmt in spec.export_formats
                   if fmt != "hf" or self.config.transformers_incompatibility() is None]
        named = [("generate", spec.generation is not None and not finetuned),
                 ("finetune", bool(spec.heads or spec.finetune_modes)),
                 ("evaluate", finetuned), ("predict", finetuned),
                 ("serve", finetuned or layers or spec.generation is not None),
                 ("embed", layers), ("explain attention", spec.attention_maps), ("explain senses", layers),
                 ("wic", layers or spec.word_views is not None),
                 (f"distill ({', '.join(distill)})", bool(distill)),
                 (f"export ({', '.join(formats)})", bool(formats) and self.export_format is None)]
        return [name for name, takes in named if takes]

    def feature_encoder(self, device: str | torch.device | None = "auto") -> tuple[FeatureEncoder, Tokenizer]:
        """Its layers as a feature source (task heads and an LM's output left out) in eval mode on
        `device` (the `--device` setting, ops.resolve_device: "auto" is the GPU when there is one),
        and its tokenizer, whose length limit is cut to the model's context and, for a
        sentence-transformers folder, to its training length."""
        tokenizer = self.tokenizer()
        encoder = load_feature_encoder(self.path, self.data)
        for limit in (encoder.context_length, sentence_transformers_limit(self.path)):
            if limit is not None:
                tokenizer.model_max_length = min(tokenizer.model_max_length, limit)
        return encoder.to(resolve_device(device)).eval(), tokenizer


def tokenizer_problems(directory: Path, tokenizer: Tokenizer, config: Any) -> list[str]:
    """Everything that says a tokenizer is not its model's, one line each ([] when it fits): a
    vocab.txt whose lines are not the embedding rows, more tokens than rows (their ids would index
    past the table; fewer is how T5's table is padded), or a pad token the config gives another id
    (the tokenizer of another model or family)."""
    try:
        checkpoint.check_vocab(directory, config.vocab_size)
    except UserError as err:
        return [str(err)]
    problems = []
    if len(tokenizer) > config.vocab_size:
        problems.append(f"{directory}: the tokenizer has {len(tokenizer):,} tokens, but config.json's vocab_size is "
                        f"{config.vocab_size:,}: it is not this model's tokenizer")
    pad_id = getattr(config, "pad_token_id", None)
    if pad_id is not None and "pad" in tokenizer.special_tokens and tokenizer.pad_token_id != pad_id:
        problems.append(f"{directory}: the tokenizer's pad token {tokenizer.special_tokens['pad']!r} is id "
                        f"{tokenizer.pad_token_id}, but config.json's pad_token_id is {pad_id}: it is not this "
                        "model's tokenizer")
    return problems


def sentence_transformers_limit(directory: Path) -> int | None:
    """The `max_seq_length` of a sentence-transformers folder's sentence_bert_config.json (the length
    it was trained with), or None without one."""
    path = directory / SENTENCE_TRANSFORMERS_CONFIG
    if not path.is_file():
        return None
    try:
        limit = loads_json(path.read_text(encoding="utf-8")).get("max_seq_length")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        raise UserError(f"{path}: not a JSON object") from None
    if limit is not None and (type(limit) is not int or limit < 2):
        raise UserError(f"{path}: max_seq_length must be an integer of at least 2, got {limit!r}")
    return limit


def open_model_dir(name_or_path: str | os.PathLike) -> ModelDir:
    """A model directory (or an installed model's name, see models.resolve_model_dir), config.json
    read once; a missing file or a family bertology does not know is a one-line error."""
    path = resolve_model_dir(name_or_path)
    data = read_config(path)
    return ModelDir(path, data, family_of(path, data))


def load_model(directory: str | os.PathLike) -> nn.Module:
    """Open a model directory as the class its config.json names (see `ModelDir.load_model`)."""
    return open_model_dir(directory).load_model()


def open_static_vectors(directory: str | os.PathLike, flag: str) -> nn.Module:
    """Static word vectors (a family whose spec has `word_vectors`: `bertology static train` writes
    them) for the setting `flag` (--vectors); any other directory is a
    one-line error naming the flag."""
    opened = open_model_dir(directory)
    if not opened.spec.word_vectors:
        raise UserError(f"{flag} {directory}: takes a static-vectors directory (`bertology static train`), not a "
                        f"{opened.family.name} model")
    return opened.load_model()


def save_random_weights(like: str | os.PathLike, out: str | os.PathLike, seed: int) -> Path:
    """A model directory `out` of `like`'s architecture and vocabulary with random weights drawn
    with `seed`: the from-scratch twin a pre-trained model is compared with (the family's default
    class). Written into `<out>.partial` and renamed, so a folder at `out` is always whole."""
    model_dir, out = open_model_dir(like), Path(out)
    if not model_dir.spec.random_twin:
        raise UserError(f"{like}: random weights of a {model_dir.family.name} model are not built here")
    torch.manual_seed(seed)
    partial = out.with_name(out.name + ".partial")
    model_dir.spec.default_class(model_dir.config).save_pretrained(partial)
    model_dir.tokenizer().save_pretrained(partial)
    os.replace(partial, out)
    return out


def describe_task(config: Any, spec: TaskSpec, settings: InputSettings) -> None:
    """Record the task and input settings in the model's config.json, for evaluate and predict."""
    config.extra[FINETUNING_TASK_KEY] = spec.name
    config.extra[TASK_KEY] = dataclasses.asdict(spec)
    config.extra[INPUTS_KEY] = dataclasses.asdict(settings)


def has_head_for(config: Any, spec: TaskSpec) -> bool:
    """Whether a saved model's head was trained for this very task and label set (so it is kept)."""
    id2label = dict(enumerate(spec.labels)) if spec.labels else None
    return config.extra.get(FINETUNING_TASK_KEY) == spec.name and config.id2label == id2label


def task_from_dict(saved: dict) -> TaskSpec:
    """A TaskSpec back from its `dataclasses.asdict` as read from JSON (lists become tuples again)."""
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()}
    if values.get("columns"):
        values["columns"] = Columns(**{k: tuple(v) if isinstance(v, list) else v for k, v in values["columns"].items()})
    values["files"] = {split: tuple(names) for split, names in (values.get("files") or {}).items()}
    return TaskSpec(**values)


def exported_config(model: nn.Module, fmt: str):
    """The config an export writes: the model's, naming its class (transformers' `architectures`) and the format.

    Raises:
        UserError: a head that takes more than token inputs (WiC's target words' positions) exported
            as "hf" or "onnx": neither transformers nor the ONNX graph's inputs have them; a BiLSTM
            head (`head_bilstm`) in any format: transformers has no such head, and the int8 and ONNX
            exports hold linear heads only.
    """
    extra_inputs = getattr(model, "extra_inputs", ())
    if extra_inputs and fmt in ("hf", "onnx"):
        raise UserError(f"a {type(model).__name__} has no {fmt} export: it also takes {', '.join(extra_inputs)}, "
                        "which transformers' classes and the exported graph do not; evaluate and predict run the "
                        "model directory itself, or export it as int8")
    if getattr(model.config, "head_bilstm", False):
        why = "transformers has no such head" if fmt == "hf" else "the int8 and onnx exports hold linear heads only"
        raise UserError(f"a model fine-tuned with --head-bilstm (a BiLSTM between the encoder and the head) has no "
                        f"{fmt} export: {why}; evaluate, predict and serve run the model directory itself")
    extra = {**model.config.extra, "architectures": [type(model).__name__], EXPORT_KEY: fmt}
    return dataclasses.replace(model.config, extra=extra)


def check_model_dir(directory: str | os.PathLike) -> list[str]:
    """Everything wrong with a model directory, one line per problem (`bertology info --check`):
    its config.json, the vocabulary against the embedding table, every tensor against the
    config (shape, dtype, finite), and the tokenizer. Empty when the directory is healthy."""
    directory = Path(directory)
    try:
        model_dir = open_model_dir(directory)
        config = model_dir.config
    except UserError as err:
        return [str(err)]
    problems = model_dir.spec.model_class(config).checkpoint_problems(directory, config)
    if model_dir.spec.tokenized:
        try:
            problems += tokenizer_problems(directory, Tokenizer.from_pretrained(directory), config)
        except UserError as err:
            problems.append(str(err))
    return problems
