"""Dynamic int8 quantization of a BERT model (or one of the families built on models/bert.py: RoBERTa,
ALBERT, ELECTRA, DistilBERT), and rebuilding one from its saved int8 weights.

PyTorch dynamic quantization (Jacob et al. 2018's affine int8): every linear layer's weight
is stored as int8 with one scale per output channel, and each input is quantized on the
fly, so the big matrix products run in int8. Embeddings and LayerNorms stay fp32. Saved
without pickle: the int8 weights, scales, zero points and fp32 biases go into
model.safetensors (`<linear>.qweight`, `.weight_scale`, `.weight_zero_point`, `.bias`),
and `load_quantized` rebuilds the exact same model.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path

import torch
from torch import nn

from .. import checkpoint
from ..errors import UserError
from ..ops import Linear
from . import spec_for
from .base import tensor_shapes
from .bert import BertConfig, BertPreTrainedModel


@contextlib.contextmanager
def _quiet_quantization():
    """torch.ao.quantization is deprecated in torch 2.13 and warns on every call (and on every
    quantized tensor it creates), though it is still the only eager-mode int8 path for CPU
    inference; those notices say nothing about our model, so they are silenced here only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel")
        yield


def quantize(model: BertPreTrainedModel) -> BertPreTrainedModel:
    """Dynamic int8 quantization of every linear layer, in place (qint8 weights, per-channel scales).

    The model then computes in fp32 between its int8 products (`inference_precision`): the
    quantized linears take fp32 input, so it must not run under bf16 autocast.
    """
    for module in model.modules():
        if type(module) is Linear:  # quantize_dynamic swaps only modules whose type is exactly nn.Linear
            module.__class__ = nn.Linear
    with _quiet_quantization():
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        quantize_dynamic(model.eval(), {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)
    model.inference_precision = "fp32"
    return model


def _quantized_linears(model: nn.Module) -> dict[str, nn.Module]:
    """name -> dynamically quantized linear layer."""
    from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear

    return {name: m for name, m in model.named_modules() if isinstance(m, QuantizedLinear)}


def quantized_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """A quantized model's tensors under our module names: the fp32 parameters, and for each
    quantized linear its int8 weight (out, in), per-channel scales and zero points (out,) and bias."""
    state = {name: p.detach() for name, p in model.named_parameters()}
    for name, module in _quantized_linears(model).items():
        weight, bias = module._packed_params._weight_bias()
        state[f"{name}.qweight"] = weight.int_repr()
        state[f"{name}.weight_scale"] = weight.q_per_channel_scales()
        state[f"{name}.weight_zero_point"] = weight.q_per_channel_zero_points()
        state[f"{name}.bias"] = bias.detach()
    return state


def load_quantized(directory: str | os.PathLike, config: BertConfig | None = None) -> BertPreTrainedModel:
    """Rebuild an `int8` export: the same quantized model that was saved, bit for bit (`config`:
    its config.json, read already, of BERT or a family built on it)."""
    directory = Path(directory)
    config = config if config is not None else BertConfig.load(directory)
    cls = spec_for(config).model_class(config)
    raw, path = checkpoint.read_weights(directory)
    state, _ = cls.keys.from_transformers(raw, path, config.tie_word_embeddings)
    packed = {}
    for key in [k for k in state if k.endswith(".qweight")]:
        name = key.removesuffix(".qweight")
        try:
            ints = state.pop(key)
            scales, zeros = state.pop(f"{name}.weight_scale"), state.pop(f"{name}.weight_zero_point")
        except KeyError as err:
            raise UserError(f"{path}: int8 weights of {name!r} have no {err.args[0].rsplit('.', 1)[1]}") from None
        # Dequantized float weights: they fill the float model, and quantize back to exactly `ints`.
        state[f"{name}.weight"] = ((ints.double() - zeros[:, None]) * scales[:, None]).float()
        packed[name] = (scales, zeros)
    checkpoint.check_weights(state, tensor_shapes(cls, config), path)
    model = cls(config)
    checkpoint.assign_state_dict(model, state)
    quantize(model)
    with _quiet_quantization():
        for name, module in _quantized_linears(model).items():
            canonical = name.removeprefix("bert.")  # checkpoint names: encoder keys without the prefix
            if canonical not in packed:
                raise UserError(f"{path}: no int8 weights for {canonical!r}; is it an int8 export of this config?")
            scales, zeros = packed[canonical]
            weight = torch.quantize_per_channel(state[f"{canonical}.weight"], scales, zeros, 0, torch.qint8)
            module.set_weight_bias(weight, state[f"{canonical}.bias"])
    return model.eval()
