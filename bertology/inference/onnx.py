"""ONNX Runtime: an `onnx` export (uses/export.py writes it) run with the same call as the PyTorch models.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import torch
from torch import nn

from ..errors import UserError
from ..models.base import ModelOutput
from ..models.bert import BertConfig

ONNX_NAME = "model.onnx"


def require(module: str):
    """Import an optional dependency of `--format onnx`, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f'{module} is not installed: pip install "bertology[export]"') from None


class OnnxModel(nn.Module):
    """An `onnx` export run by ONNX Runtime on the CPU, called like the PyTorch models.

    Example:
        >>> model = OnnxModel("runs/sst2-onnx")
        >>> model(input_ids, attention_mask, token_type_ids).logits  # torch.Tensor (B, num_labels)

    It computes in fp32 (`inference_precision`) and has no PyTorch parameters.
    """

    inference_precision = "fp32"

    def __init__(self, directory: str | os.PathLike):
        super().__init__()
        directory = Path(directory)
        if not (directory / ONNX_NAME).is_file():
            raise UserError(f"{directory}: no {ONNX_NAME} (make one with `bertology export --format onnx`)")
        self.config = BertConfig.load(directory)
        self.session = self.session_for(directory / ONNX_NAME)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    @staticmethod
    def session_for(path: Path):
        """An ONNX Runtime CPU session using as many threads as PyTorch does."""
        ort = require("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1  # one graph at a time: parallelism inside the matrix products
        try:
            return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own exception types for unreadable graphs
            raise UserError(f"{path}: ONNX Runtime cannot load it ({str(err).splitlines()[0]})") from None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> ModelOutput:
        """(B, T) ids (mask: 1 = real token; None = no padding; segments: None = all A) -> the
        graph's outputs (logits, start_logits/end_logits, last_hidden_state, ...) as CPU tensors."""
        given = {"input_ids": input_ids,
                 "attention_mask": torch.ones_like(input_ids) if attention_mask is None else attention_mask,
                 "token_type_ids": torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids}
        feeds = {name: given[name].to("cpu", torch.int64).numpy() for name in self.input_names}
        outputs = self.session.run(self.output_names, feeds)
        return ModelOutput(**{name: torch.from_numpy(value) for name, value in zip(self.output_names, outputs)})
