"""One home for what a model directory says about itself, and one function that opens any of them.

A directory is in the transformers layout (config.json, model.safetensors, the tokenizer)
and bertology adds a few config.json keys, read and written only here:

- `finetuning_task`, `bertology_task`, `bertology_inputs`: the task a model was fine-tuned
  for and its input settings (`describe_task` writes them, `task_of` reads them back);
- `bertology_export`: the format of an export (`int8`, `onnx`, or `hf`);
- `architectures`: the model class (transformers' key);
- a feature-based model adds `feature_head.json` and its weights.

`load_model` opens a PyTorch, int8 or feature-based directory as the class it names;
`load_finetuned` adds the ONNX Runtime path and the task for evaluate, predict and serve.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch
from torch import nn

from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..models.bert import BertConfig, BertPreTrainedModel, model_class
from ..models.features import HEAD_CONFIG, FeatureModel
from ..models.quantized import load_quantized
from ..tasks.inputs import InputSettings
from ..tasks.readers import Columns, TaskSpec
from .onnx import OnnxModel

EXPORT_KEY = "bertology_export"  # config.json: the format that wrote the directory


CPU_FORMATS = ("int8", "onnx")  # run on the CPU only (PyTorch's quantized kernels, ONNX Runtime's CPU provider)


def describe_task(config: BertConfig, spec: TaskSpec, settings: InputSettings) -> None:
    """Record the task and input settings in the model's config.json, for evaluate and predict."""
    config.extra["finetuning_task"] = spec.name
    config.extra["bertology_task"] = dataclasses.asdict(spec)
    config.extra["bertology_inputs"] = dataclasses.asdict(settings)


def task_of(config: BertConfig, directory: str) -> tuple[TaskSpec, InputSettings]:
    """The task and input settings a fine-tuned model directory was trained with (see `describe_task`)."""
    saved = config.extra.get("bertology_task")
    if not saved:
        raise UserError(f"{directory}: not a fine-tuned model (its config.json has no bertology_task; "
                        "make one with `bertology finetune`)")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()}
    if values.get("columns"):
        values["columns"] = Columns(**{k: tuple(v) if isinstance(v, list) else v
                                                  for k, v in values["columns"].items()})
    values["files"] = {split: tuple(names) for split, names in (values.get("files") or {}).items()}
    return TaskSpec(**values), InputSettings(**config.extra.get("bertology_inputs", {}))


def is_feature_model(directory: str | Path) -> bool:
    """Whether a model directory holds a feature-based model."""
    return (Path(directory) / HEAD_CONFIG).is_file()


def load_model(directory: str | os.PathLike) -> BertPreTrainedModel:
    """Load a model directory as the class its config.json names in `architectures`; an int8
    export (export.py) comes back quantized, as it was saved."""
    config = BertConfig.load(directory)
    exported = config.extra.get("bertology_export")  # export.EXPORT_KEY; export.py imports this module
    if exported == "int8":

        return load_quantized(directory)
    if exported == "onnx":
        raise UserError(f"{directory}: an ONNX export (model.onnx), not PyTorch weights; run it with "
                        "`bertology evaluate` / `bertology predict`, or load it with bertology.inference.onnx.OnnxModel")
    return model_class(config).from_pretrained(directory)


def load_finetuned(model_dir: str) -> tuple[nn.Module, Tokenizer, TaskSpec, InputSettings]:
    """A fine-tuned (feature-based, or exported) model directory -> model, tokenizer, task, input settings.

    An `onnx` export comes back as an ONNX Runtime model and an `int8` export quantized
    (export.py); both are called like the PyTorch models and stay on the CPU.
    """

    config = BertConfig.load(model_dir)
    spec, settings = task_of(config, model_dir)
    exported = config.extra.get(EXPORT_KEY)
    if is_feature_model(model_dir):
        model = FeatureModel.from_pretrained(model_dir)
    elif exported == "onnx":
        model = OnnxModel(model_dir)
    else:
        model = load_model(model_dir)
    if torch.cuda.is_available() and exported not in CPU_FORMATS:
        model = model.cuda()
    return model, Tokenizer.from_pretrained(model_dir), spec, settings
