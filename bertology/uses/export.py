"""Export a model directory for deployment: a clean transformers copy, PyTorch int8, or ONNX.

    bertology export --model runs/sst2 --format hf|int8|onnx --out runs/sst2-int8

- `hf`: config.json, model.safetensors and the tokenizer files, which
  `transformers.AutoModelFor*.from_pretrained` loads with no missing or unexpected
  weights. bertology's own layout already uses transformers' key names (checkpoint.py),
  so this checks that the architecture is one transformers' BERT can represent and
  writes a fresh copy with the `architectures` field and label maps set.
- `int8`: PyTorch dynamic quantization (models/quantized.py): every linear
  layer's weight is stored as int8 with one scale per output channel, and each input
  is quantized on the fly, so the big matrix products run in int8. Embeddings and
  LayerNorms stay fp32. Saved without pickle: the int8 weights, scales, zero points and
  fp32 biases go into model.safetensors (`<linear>.qweight`, `.weight_scale`,
  `.weight_zero_point`, `.bias`), and `load_quantized` rebuilds the exact same model.
- `onnx`: model.onnx (encoder and head; dynamic batch and sequence axes) for ONNX
  Runtime, which `OnnxModel` runs with the same call as the PyTorch models.

Every export also holds config.json (with `"bertology_export": FORMAT` and the task the
model was fine-tuned for) and the tokenizer, so `bertology evaluate` and `bertology
predict` run on it directly. Outputs are built in a temporary folder beside `--out` and
renamed into place, so an interrupted export leaves nothing half-written."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import checkpoint
from ..config import Device, setting
from ..errors import UserError
from ..inference.modeldir import CPU_FORMATS, ModelDir, exported_config, open_model_dir
from ..inference.onnx import ONNX_NAME, OnnxModel, require
from ..models.quantized import quantize, quantized_state
from ..ops import resolve_device

FORMATS = ("hf", "int8", "onnx")


@dataclass
class ExportConfig(Device):
    """The model, the format and where the export goes.

    The settings of `bertology export`.
    """

    model: str = setting(required=True, metavar="MODEL", model_dir=True,
                         help="a fine-tuned model or encoder directory, or an installed model's name")
    format: str = setting(required=True, choices=FORMATS,
                          help="hf: a copy transformers loads as it is; int8: dynamic int8 quantization of every "
                               "linear layer (smaller, faster on the CPU); onnx: model.onnx for ONNX Runtime")
    out: str = setting(required=True, metavar="DIR", output="dir", help="output directory (new or empty)")
    force: bool = setting(False, help="replace a non-empty output directory")


ONNX_OPSET = 20  # the dynamo exporter's default; LayerNormalization and Gelu are native ops there


class _OnnxGraph(nn.Module):
    """The model as the ONNX graph sees it: id tensors in, a tuple of output tensors out."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.outputs = outputs

    def forward(self, input_ids, attention_mask, token_type_ids=None):  # noqa: D102
        out = self.model(input_ids, attention_mask, token_type_ids)
        return tuple(out[name] for name in self.outputs)


def _example_batch(config: Any, batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    """Random ids with the last row padded: exports and checks must see the attention mask at work."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, length // 2:] = 0
    return {"input_ids": torch.randint(0, config.vocab_size, (batch, length), generator=g) * mask,
            "attention_mask": mask,
            "token_type_ids": (torch.arange(length) >= length // 3).long().expand(batch, length) * mask}


@contextlib.contextmanager
def _quiet_exporter():
    """Silence the ONNX exporter's own notices (pytree deprecations, axis renaming, the
    torchvision ops it skips): they concern its internals, not the model."""
    log = logging.getLogger("torch.onnx")
    level = log.level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (FutureWarning, UserWarning, DeprecationWarning))
        log.setLevel(logging.ERROR)
        try:
            yield
        finally:
            log.setLevel(level)


def write_onnx(model: nn.Module, path: Path, context: int, device: str = "auto") -> None:
    """Export `model` to ONNX at `path` with dynamic batch and sequence axes (sequences of at most
    `context` tokens), then check that ONNX Runtime reproduces it on a padded batch of another shape,
    the PyTorch side computed on `device` (the `--device` setting; the graph is traced on the CPU).
    The model says what its graph takes and returns (`onnx_inputs()`, `onnx_outputs()`)."""
    config = model.config
    names = model.onnx_outputs()
    graph = _OnnxGraph(model, names).eval()
    inputs = model.onnx_inputs()
    example = _example_batch(config, batch=2, length=8, seed=0)
    batch = torch.export.Dim("batch")
    sequence = torch.export.Dim("sequence", max=context)
    with _quiet_exporter():
        # dynamo=True traces with torch.export; there `torch.compiler.is_compiling()` holds, so
        # BertModel keeps the attention mask in the graph instead of branching on its values.
        torch.onnx.export(graph, tuple(example[k] for k in inputs), str(path), dynamo=True, opset_version=ONNX_OPSET,
                          input_names=list(inputs), output_names=list(names), external_data=False, verbose=False,
                          dynamic_shapes={k: {0: batch, 1: sequence} for k in inputs})
    check = _example_batch(config, batch=3, length=11, seed=1)
    device = resolve_device(device)
    with torch.no_grad():
        expected = graph.to(device)(*(check[k].to(device) for k in inputs))
    actual = OnnxModel.session_for(path).run(list(names), {k: check[k].numpy() for k in inputs})
    real = check["attention_mask"].bool().numpy()
    for name, want, got in zip(names, expected, actual):
        want = want.cpu().numpy()
        if want.shape[:2] == real.shape:  # per-token outputs: padding positions carry no meaning (ops.Unpadding)
            want, got = want[real], got[real]
        error = float(np.abs(want - got).max())
        if error > 1e-4 * max(1.0, float(np.abs(want).max())):
            raise RuntimeError(f"ONNX export of {type(model).__name__}: {name} differs from PyTorch by {error:.2e}")


def _source_model(model_dir: ModelDir, fmt: str) -> nn.Module:
    """The fp32 PyTorch model to export; exports of exports, feature-based models and formats the
    family's spec does not list (`export_formats`) are refused."""
    done = model_dir.export_format
    if done in CPU_FORMATS:
        raise UserError(f"{model_dir.path} is already an {done} export; export from the original model directory")
    if model_dir.is_feature_model:
        raise UserError(f"{model_dir.path} is a feature-based model (frozen encoder + feature head); "
                        "only fine-tuned task models and encoders can be exported")
    formats = model_dir.spec.export_formats
    if fmt not in formats:
        can = f"exports as {' or '.join(formats)}" if formats else "has no exports here"
        raise UserError(f"{model_dir.path}: a {model_dir.family.name} model {can}, not {fmt} (its directory is in "
                        "transformers' layout already)")
    return model_dir.load_model()


def _check_output(out: Path, source: Path, force: bool) -> None:
    """Refuse an output that would overwrite the source or, without `force`, a non-empty folder."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory")
    if out.resolve() == source.resolve() or source.resolve().is_relative_to(out.resolve()):
        raise UserError(f"{out}: the output would replace the model being exported; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{out}: directory exists and is not empty (use --force to replace it)")


@contextlib.contextmanager
def _staging(out: Path):
    """A temporary folder beside `out`, renamed to `out` when the body succeeds and removed otherwise."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700 folders; give the usual permissions
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _exported_config(model: nn.Module, fmt: str):
    """The model's config naming its class and the export format, with the fields its class sets for
    transformers (`transformers_config_fields`: a span head's num_labels 2, its start and end)."""
    return dataclasses.replace(exported_config(model, fmt), **getattr(model, "transformers_config_fields", {}))


def export_model(model_dir: str | os.PathLike, fmt: str, out_dir: str | os.PathLike, force: bool = False,
                 device: str = "auto") -> Path:
    """Export a model directory (fine-tuned task model or bare encoder) in format `fmt`.

    Args:
        model_dir: a bertology (or transformers BERT) model directory.
        fmt: "hf" (transformers-loadable copy), "int8" (dynamic int8 PyTorch) or "onnx".
        out_dir: the output directory; must not exist or be empty, unless `force`.
        force: replace a non-empty `out_dir`.
        device: where the onnx export's check runs the PyTorch model (the `--device` setting); int8
            quantization runs on the CPU only, and an hf copy computes nothing.
    Returns:
        The output directory, holding config.json, the weights (model.safetensors or
        model.onnx) and the tokenizer files of `model_dir`.
    """
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "int8" and device not in ("auto", "cpu"):
        raise UserError(f"--device {device}: int8 quantization runs on the CPU only; use --device cpu or auto")
    source, out = Path(model_dir), Path(out_dir)
    if not source.is_dir():
        raise UserError(f"{source}: no such model directory")
    _check_output(out, source, force)
    if fmt == "onnx":
        for module in ("onnx", "onnxscript", "onnxruntime"):  # the exporter needs all three
            require(module)
    model_dir = open_model_dir(source)
    model = _source_model(model_dir, fmt)
    config = _exported_config(model, fmt)  # first: a head no export holds (WiC's, a BiLSTM) is the reason to give
    why_not = model.config.transformers_incompatibility()
    if fmt == "hf" and why_not:
        raise UserError(f"{source}: transformers cannot represent this variant ({why_not}); export int8 or onnx instead")
    with _staging(out) as tmp:
        if fmt == "hf":
            checkpoint.write_weights(model.to_checkpoint(model.state_dict()), tmp)
        elif fmt == "int8":
            checkpoint.write_weights(model.to_checkpoint(quantized_state(quantize(model))), tmp)
        else:
            write_onnx(model, tmp / ONNX_NAME, model_dir.spec.context_length(model_dir.config), device)
        config.save(tmp)
        if model_dir.spec.tokenized:
            model_dir.tokenizer().save_pretrained(tmp)
    return out
