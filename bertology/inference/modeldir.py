"""One home for what a model directory says about itself, and one function that opens any of them.

A directory is in the transformers layout (config.json, model.safetensors, the tokenizer)
and bertology adds a few config.json keys, read and written only here:

- `finetuning_task`, `bertology_task`, `bertology_inputs`: the task a model was fine-tuned
  for and its input settings (`describe_task` writes them, `task_of` reads them back);
- `bertology_export`: the format of an export (`int8`, `onnx`, or `hf`);
- `architectures`: the model class (transformers' key);
- a feature-based model adds `feature_head.json` and its weights.

The architecture switches transformers' BERT lacks (`causal`, `share_layers`, `head_bilstm`, ...)
are not such keys: they are fields of the model's own config (models/bert.py's `BertConfig`),
which writes and reads them with the rest of the architecture.

`load_model` opens any PyTorch directory through its model family (models/__init__.py
recognises the family from `model_type`), an int8 export quantized and a feature-based
model with its head; `load_finetuned` adds the ONNX Runtime path and the task, for
evaluate, predict and serve.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch
from torch import nn

from .. import checkpoint
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..models import family_of, read_config, resolve_model_dir
from ..models.awd_lstm import AWDLSTMConfig, AWDLSTMLanguageModel
from ..models.bert import BertConfig, BertForWordInContext, BertModel, BertPreTrainedModel, model_class, tensor_shapes
from ..models.elmo import ELMoConfig
from ..models.gpt import GPTConfig
from ..models.features import HEAD_CONFIG, FeatureModel
from ..models.quantized import load_quantized
from ..models.t5 import T5Config, T5ForConditionalGeneration
from ..models.taglm import TagLMConfig
from ..models.xlnet import XLNetConfig
from ..tasks.inputs import InputSettings
from ..tasks.readers import Columns, TaskSpec
from .onnx import OnnxModel
from .tagging import Tagger

# config.json keys bertology adds (transformers keeps unknown keys, so they survive its round trips).
FINETUNING_TASK_KEY = "finetuning_task"  # transformers' own key: the task's name
TASK_KEY = "bertology_task"  # the TaskSpec: labels, kind, metrics, ...
INPUTS_KEY = "bertology_inputs"  # the InputSettings: length limits, windows, SQuAD search
EXPORT_KEY = "bertology_export"  # the export format that wrote the directory
CPU_FORMATS = ("int8", "onnx")  # run on the CPU only (PyTorch's quantized kernels, ONNX Runtime's CPU provider)


def load_config(directory: str | os.PathLike) -> BertConfig | GPTConfig | AWDLSTMConfig | XLNetConfig:
    """The config of a model directory that tasks can fine-tune: a BERT encoder's, a GPT's
    (sequence tasks the GPT paper's way, token and span tasks on every token), an XLNet's (sequence
    tasks on its last token, token and span tasks on every token) or an AWD-LSTM's (ULMFiT's classifier)."""
    family = family_of(directory).name
    if family == "t5":
        raise UserError(f"{directory}: a T5 (text to text), with no task head: `bertology evaluate`, `predict` and "
                        "`serve` take a fine-tuned T5, and `bertology generate` runs it")
    return {"gpt": GPTConfig, "awd-lstm": AWDLSTMConfig, "elmo": ELMoConfig, "taglm": TagLMConfig,
            "xlnet": XLNetConfig}.get(family, BertConfig).load(directory)


def save_random_weights(like: str | os.PathLike, out: str | os.PathLike, seed: int) -> Path:
    """A model directory `out` of `like`'s architecture and vocabulary with random weights drawn
    with `seed`: the from-scratch twin a pre-trained model is compared with. Written into
    `<out>.partial` and renamed, so a folder at `out` is always whole. BERT, T5 and AWD-LSTM."""
    like, out = Path(like), Path(out)
    family = family_of(str(like)).name
    builders = {"bert": (BertConfig, BertModel), "t5": (T5Config, T5ForConditionalGeneration),
                "awd-lstm": (AWDLSTMConfig, AWDLSTMLanguageModel)}
    if family not in builders:
        raise UserError(f"{like}: random weights of a {family} model are not built (BERT, T5 and AWD-LSTM are)")
    config_class, model_class_ = builders[family]
    torch.manual_seed(seed)
    partial = out.with_name(out.name + ".partial")
    model_class_(config_class.load(like)).save_pretrained(partial)
    Tokenizer.from_pretrained(like).save_pretrained(partial)
    os.replace(partial, out)
    return out


def describe_task(config: BertConfig | GPTConfig, spec: TaskSpec, settings: InputSettings) -> None:
    """Record the task and input settings in the model's config.json, for evaluate and predict."""
    config.extra[FINETUNING_TASK_KEY] = spec.name
    config.extra[TASK_KEY] = dataclasses.asdict(spec)
    config.extra[INPUTS_KEY] = dataclasses.asdict(settings)


def is_finetuned(config: BertConfig) -> bool:
    """Whether the directory of `config` holds a model fine-tuned by bertology (it knows its task)."""
    return bool(config.extra.get(TASK_KEY))


def has_head_for(config: BertConfig, spec: TaskSpec) -> bool:
    """Whether a saved model's head was trained for this very task and label set (so it is kept)."""
    id2label = dict(enumerate(spec.labels)) if spec.labels else None
    return config.extra.get(FINETUNING_TASK_KEY) == spec.name and config.id2label == id2label


def task_of(config: BertConfig, directory: str) -> tuple[TaskSpec, InputSettings]:
    """The task and input settings a fine-tuned model directory was trained with (see `describe_task`)."""
    if not is_finetuned(config):
        raise UserError(f"{directory}: not a fine-tuned model (its config.json has no {TASK_KEY}; "
                        "make one with `bertology finetune`)")
    return task_from_dict(config.extra[TASK_KEY]), InputSettings(**config.extra.get(INPUTS_KEY, {}))


def task_from_dict(saved: dict) -> TaskSpec:
    """A TaskSpec back from its `dataclasses.asdict` as read from JSON (lists become tuples again)."""
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()}
    if values.get("columns"):
        values["columns"] = Columns(**{k: tuple(v) if isinstance(v, list) else v for k, v in values["columns"].items()})
    values["files"] = {split: tuple(names) for split, names in (values.get("files") or {}).items()}
    return TaskSpec(**values)


def export_format(config: BertConfig) -> str | None:
    """The export format that wrote a directory ("hf", "int8", "onnx"), or None for a model as trained."""
    return config.extra.get(EXPORT_KEY)


def exported_config(model: BertPreTrainedModel, fmt: str) -> BertConfig:
    """The config an export writes: the model's, naming its class (transformers' `architectures`) and the format.

    Raises:
        UserError: WiC's head exported as "hf" or "onnx": neither transformers nor the ONNX graph's
            inputs have its target word positions; a BiLSTM head (`head_bilstm`) in any format:
            transformers has no such head, and the int8 and ONNX exports hold linear heads only.
    """
    if isinstance(model, BertForWordInContext) and fmt in ("hf", "onnx"):
        raise UserError(f"a {type(model).__name__} (WiC's head) has no {fmt} export: it also takes the target "
                        "words' positions, which transformers' classes and the exported graph do not; evaluate and "
                        "predict run the model directory itself, or export it as int8")
    if model.config.head_bilstm:
        why = "transformers has no such head" if fmt == "hf" else "the int8 and onnx exports hold linear heads only"
        raise UserError(f"a model fine-tuned with --head-bilstm (a BiLSTM between the encoder and the head) has no "
                        f"{fmt} export: {why}; evaluate, predict and serve run the model directory itself")
    extra = {**model.config.extra, "architectures": [type(model).__name__], EXPORT_KEY: fmt}
    return dataclasses.replace(model.config, extra=extra)


def is_feature_model(directory: str | Path) -> bool:
    """Whether a model directory holds a feature-based model (a frozen encoder and a feature head)."""
    return (Path(directory) / HEAD_CONFIG).is_file()


def load_model(directory: str | os.PathLike) -> nn.Module:
    """Open a model directory as the class its config.json names, through its model family;
    an int8 export comes back quantized, as it was saved. `directory` may also name an installed
    model (`all-MiniLM-L6-v2`: see models.resolve_model_dir)."""
    directory = resolve_model_dir(directory)
    family = family_of(directory)
    exported = read_config(directory).get(EXPORT_KEY)
    if exported == "int8":
        return load_quantized(directory)
    if exported == "onnx":
        raise UserError(f"{directory}: an ONNX export (model.onnx), not PyTorch weights; run it with "
                        "`bertology evaluate` / `bertology predict`, or load it with bertology.inference.onnx.OnnxModel")
    return family.load().load_pretrained(directory)


def load_finetuned(model_dir: str) -> tuple[nn.Module, Tokenizer | None, TaskSpec, InputSettings]:
    """A fine-tuned (feature-based, or exported) model directory -> model, tokenizer, task, input settings.

    A TagLM directory comes back as its `Tagger` (tagger and biLM; sentences of words in) and no tokenizer.

    An `onnx` export comes back as an ONNX Runtime model and an `int8` export quantized
    (models/quantized.py); both are called like the PyTorch models and stay on the CPU.
    """
    model_dir = resolve_model_dir(model_dir)
    if family_of(model_dir).name in ("static", "cove"):  # static_heads.py runs these heads
        source = "static word vectors" if family_of(model_dir).name == "static" else "CoVe"
        raise UserError(f"{model_dir}: a feature head over {source}: `bertology evaluate`, `predict` and `serve` "
                        "run it; distill does not take one yet")
    config = load_config(model_dir)
    spec, settings = task_of(config, model_dir)
    if family_of(model_dir).name == "taglm":  # words in, tags out: the tagger brings its biLM's tokenizer
        return Tagger.from_pretrained(model_dir), None, spec, settings
    exported = export_format(config)
    if is_feature_model(model_dir):
        model = FeatureModel.from_pretrained(model_dir)
    elif exported == "onnx":
        model = OnnxModel(model_dir)
    else:
        model = load_model(model_dir)
    if torch.cuda.is_available() and exported not in CPU_FORMATS:
        model = model.cuda()
    return model, Tokenizer.from_pretrained(model_dir), spec, settings


def _family_problems(directory: Path) -> list[str]:
    """`check_model_dir` for the families other than BERT (GPT, T5, static vectors): their own
    loader checks the config and every weight's presence and shape; then the vocabulary against
    the embedding rows, every tensor finite, and the tokenizer."""
    try:
        model = load_model(directory)
    except UserError as err:
        return [str(err)]
    problems = []
    vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab_size is not None:
        try:
            checkpoint.check_vocab(directory, vocab_size)
        except UserError as err:
            problems.append(str(err))
        try:
            Tokenizer.from_pretrained(directory)
        except UserError as err:
            problems.append(str(err))
    problems += [f"{directory}: tensor {name} holds NaN or infinite values" for name, tensor in model.state_dict().items()
                 if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]
    return problems


def check_model_dir(directory: str | os.PathLike) -> list[str]:
    """Everything wrong with a model directory, one line per problem (`bertology info --check`):
    its config.json, the vocabulary against the embedding table, every tensor against the
    config (shape, dtype, finite), and the tokenizer. Empty when the directory is healthy."""
    directory = Path(directory)
    try:
        if family_of(directory).name != "bert":
            return _family_problems(directory)
        config = BertConfig.load(directory)
    except UserError as err:
        return [str(err)]
    problems = []
    try:
        checkpoint.check_vocab(directory, config.vocab_size)
    except UserError as err:
        problems.append(str(err))
    try:
        raw, path = checkpoint.read_weights(directory)
    except UserError as err:
        return [*problems, str(err)]
    state, _ = checkpoint.from_transformers(raw, path)
    shapes = tensor_shapes(model_class(config), config)
    problems += [f"{path}: {problem}" for problem in checkpoint.weight_problems(state, shapes)]
    try:
        Tokenizer.from_pretrained(directory)
    except UserError as err:
        problems.append(str(err))
    return problems
