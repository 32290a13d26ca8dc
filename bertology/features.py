"""Contextual features from an encoder's layers: which layers, how to combine them, how to pool.

The BERT paper's feature-based experiment (CoNLL-2003 NER with a frozen encoder) compares
the embeddings output, the last layer, the second-to-last, the sum or concatenation of the
last four, and the sum of all layers. ELMo instead learns a softmax-weighted mix of all
layers times a scale (`ScalarMix`). Fine-tuning's feature-based mode and `bertology embed`
both take their layers from here.
"""

from __future__ import annotations

import torch
from torch import nn

from .errors import UserError

# name -> (layers relative to the stack, how to combine them). Layer 0 is the embeddings output.
LAYER_CHOICES = {
    "embeddings": "the embeddings output (layer 0)",
    "last": "the last layer",
    "second_to_last": "the second-to-last layer",
    "sum_last_four": "the sum of the last four layers",
    "concat_last_four": "the last four layers side by side (4x wide)",
    "sum_all": "the sum of all layers, embeddings included",
    "mix": "ELMo's learned scalar mix of all layers (trained with the head)",
}


def parse_layers(spec: str, num_layers: int) -> tuple[list[int], str]:
    """A layer choice -> (indices into hidden_states, combination "sum" | "concat" | "mix").

    `spec` is a name of LAYER_CHOICES or a comma-separated list of layer numbers (0 =
    embeddings, -1 = last), whose vectors are summed; `num_layers` counts transformer layers.
    """
    total = num_layers + 1  # hidden_states holds the embeddings output plus every layer
    named = {
        "embeddings": ([0], "sum"),
        "last": ([total - 1], "sum"),
        "second_to_last": ([total - 2], "sum"),
        "sum_last_four": (list(range(max(total - 4, 0), total)), "sum"),
        "concat_last_four": (list(range(max(total - 4, 0), total)), "concat"),
        "sum_all": (list(range(total)), "sum"),
        "mix": (list(range(total)), "mix"),
    }
    if spec in named:
        return named[spec]
    try:
        indices = [int(part) for part in spec.split(",")]
    except ValueError:
        raise UserError(f"layers: expected one of {', '.join(LAYER_CHOICES)} or numbers like 4,5,6; got {spec!r}") from None
    resolved = [i + total if i < 0 else i for i in indices]
    if any(not 0 <= i < total for i in resolved):
        raise UserError(f"layers: {spec!r} is out of range for a model with {num_layers} layers (0..{num_layers}, or -1 for the last)")
    return resolved, "sum"


def feature_width(hidden_size: int, indices: list[int], combine: str) -> int:
    """Width of the combined feature vector."""
    return hidden_size * len(indices) if combine == "concat" else hidden_size


def combine_layers(hidden_states: tuple[torch.Tensor, ...] | torch.Tensor, indices: list[int], combine: str) -> torch.Tensor:
    """Combine the chosen layers' (B, T, H) states by sum or concatenation.

    For "mix" the chosen layers are returned stacked as (B, T, L, H) for a `ScalarMix` to weigh.
    """
    chosen = [hidden_states[i] for i in indices]
    if combine == "concat":
        return torch.cat(chosen, dim=-1)
    if combine == "mix":
        return torch.stack(chosen, dim=-2)
    return torch.stack(chosen).sum(0) if len(chosen) > 1 else chosen[0]


class ScalarMix(nn.Module):
    """ELMo's layer mix: gamma * sum_j softmax(w)_j * h_j, with w and gamma learned.

    Input (..., L, H) stacked layer states; output (..., H). The weights start equal, so
    an untrained mix is the mean of the layers.
    """

    def __init__(self, num_layers: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        """Mix the L layer vectors of each position into one."""
        weights = self.weights.softmax(-1).to(layers.dtype)
        return self.gamma.to(layers.dtype) * torch.einsum("...lh,l->...h", layers, weights)


def pool(states: torch.Tensor, attention_mask: torch.Tensor, how: str) -> torch.Tensor:
    """Sentence vectors from (B, T, H) token states: "cls", "mean" or "max" over real tokens."""
    if how == "cls":
        return states[:, 0]
    mask = attention_mask.to(states.dtype).unsqueeze(-1)  # (B, T, 1)
    if how == "mean":
        return (states * mask).sum(1) / mask.sum(1).clamp(min=1)
    if how == "max":
        return states.masked_fill(mask == 0, torch.finfo(states.dtype).min).max(1).values
    raise UserError(f"pooling must be cls, mean or max, got {how!r}")
