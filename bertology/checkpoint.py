"""Checkpoint files and the one key table between our module names and transformers'.

A model directory is in the Hugging Face layout: `config.json`, `model.safetensors`,
and the tokenizer's `vocab.txt` / `tokenizer.json`. Tensors are stored under
transformers' BERT names, so a directory written here loads in
`transformers.BertModel.from_pretrained` and vice versa; inside bertology the
modules keep short names. `_KEY_TABLE` is the whole mapping.

Safety: weights are read from safetensors, or from a legacy `pytorch_model.bin`
only through `torch.load(weights_only=True)`, which refuses pickled code.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .errors import UserError
from .files import atomic_path

WEIGHTS_NAME = "model.safetensors"
LEGACY_WEIGHTS_NAME = "pytorch_model.bin"
VOCAB_NAME = "vocab.txt"

# (our module, transformers' module or modules). Several transformers modules are
# concatenated along dim 0 into ours (the fused Q/K/V projection). "{i}" is a layer index.
# Encoder names are relative to the encoder: both sides prefix them with "bert." inside task models.
_KEY_TABLE: list[tuple[str, tuple[str, ...]]] = [
    ("embeddings.word_embeddings", ("embeddings.word_embeddings",)),
    ("embeddings.position_embeddings", ("embeddings.position_embeddings",)),
    ("embeddings.token_type_embeddings", ("embeddings.token_type_embeddings",)),
    ("embeddings.norm", ("embeddings.LayerNorm",)),
    ("embeddings.projection", ("encoder.embedding_hidden_mapping_in",)),  # ALBERT's name
    ("layers.{i}.attention.qkv", tuple(f"encoder.layer.{{i}}.attention.self.{n}" for n in ("query", "key", "value"))),
    ("layers.{i}.attention.out", ("encoder.layer.{i}.attention.output.dense",)),
    ("layers.{i}.attention_norm", ("encoder.layer.{i}.attention.output.LayerNorm",)),
    ("layers.{i}.ffn_in", ("encoder.layer.{i}.intermediate.dense",)),
    ("layers.{i}.ffn_out", ("encoder.layer.{i}.output.dense",)),
    ("layers.{i}.ffn_norm", ("encoder.layer.{i}.output.LayerNorm",)),
    ("final_norm", ("encoder.final_layer_norm",)),  # pre-LN stacks only
    ("pooler", ("pooler.dense",)),
    # Heads (top level, never under "bert.").
    ("mlm.dense", ("cls.predictions.transform.dense",)),
    ("mlm.norm", ("cls.predictions.transform.LayerNorm",)),
    ("mlm.bias", ("cls.predictions.bias",)),
    ("nsp.dense", ("cls.seq_relationship",)),
    ("classifier.dense", ("classifier",)),
    ("qa_outputs", ("qa_outputs",)),
]
_HEAD_PREFIXES = ("mlm.", "nsp.", "classifier.", "qa_outputs.")
TASK_HEAD_PREFIXES = ("classifier.", "qa_outputs.")  # fine-tuning heads, replaced for a new task
# Keys transformers stores that carry no information of their own.
_REDUNDANT = ("embeddings.position_ids", "cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
_ENCODER_PREFIX = "bert."


def _compile(pattern: str) -> re.Pattern:
    """A module pattern -> regex matching '<module>' or '<module>.<param>' (layer index captured)."""
    return re.compile(re.escape(pattern).replace(r"\{i\}", r"(?P<i>\d+)") + r"(?P<param>(\.[A-Za-z_]+)?)$")


_OURS = [(_compile(ours), ours, theirs) for ours, theirs in _KEY_TABLE]
_THEIRS = [(_compile(name), ours, theirs, k) for ours, theirs in _KEY_TABLE for k, name in enumerate(theirs)]


def _split_prefix(key: str) -> tuple[str, str]:
    return (_ENCODER_PREFIX, key[len(_ENCODER_PREFIX):]) if key.startswith(_ENCODER_PREFIX) else ("", key)


def to_transformers(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict -> transformers' BERT key names (the fused Q/K/V split in three)."""
    out = {}
    for key, tensor in state.items():
        prefix, name = _split_prefix(key)
        for regex, _, theirs in _OURS:
            match = regex.match(name)
            if match:
                break
        else:
            raise KeyError(f"no transformers name for parameter {key!r}")
        layer, param = match.group("i") if "i" in regex.groupindex else None, match.group("param")
        chunks = tensor.chunk(len(theirs), dim=0) if len(theirs) > 1 else (tensor,)
        for their_module, chunk in zip(theirs, chunks):
            out[prefix + their_module.format(i=layer) + param] = chunk.contiguous()
    return out


def from_transformers(state: dict[str, torch.Tensor], source: Path) -> tuple[dict[str, torch.Tensor], list[str]]:
    """transformers' BERT state dict (with or without the "bert." prefix, with or without
    heads) -> our canonical names (encoder keys without prefix, heads at top level).

    Returns the converted state and the keys that were not recognised.
    """
    parts: dict[str, dict[int, torch.Tensor]] = {}
    counts: dict[str, int] = {}
    unknown = []
    for key, tensor in state.items():
        _, name = _split_prefix(key)
        if name in _REDUNDANT:
            continue
        for regex, ours, theirs, k in _THEIRS:
            match = regex.match(name)
            if match:
                layer = match.group("i") if "i" in regex.groupindex else None
                our_key = ours.format(i=layer) + match.group("param")
                parts.setdefault(our_key, {})[k] = tensor
                counts[our_key] = len(theirs)
                break
        else:
            unknown.append(key)
    out = {}
    for our_key, chunks in parts.items():
        if len(chunks) != counts[our_key]:
            raise UserError(f"{source}: incomplete checkpoint, only {len(chunks)} of {counts[our_key]} parts of {our_key!r}")
        out[our_key] = torch.cat([chunks[k] for k in range(counts[our_key])], dim=0) if counts[our_key] > 1 else chunks[0]
    return out, unknown


def read_weights(directory: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """Read the raw tensors of a model directory (safetensors first, legacy .bin second)."""
    path = directory / WEIGHTS_NAME
    if path.is_file():
        try:
            return load_file(path), path
        except (SafetensorError, OSError, ValueError) as err:
            raise UserError(f"{path}: cannot read safetensors file, it may be truncated or corrupt ({err})") from None
    path = directory / LEGACY_WEIGHTS_NAME
    if path.is_file():
        try:
            # weights_only=True: plain tensors only; a pickle that would run code is refused.
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as err:
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"{path}: refused to load, not a plain tensor checkpoint ({first_line})") from None
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise UserError(f"{path}: not a state dict of tensors")
        return state, path
    raise UserError(f"{directory}: no {WEIGHTS_NAME} (or legacy {LEGACY_WEIGHTS_NAME}) found")


def check_vocab(directory: Path, vocab_size: int) -> None:
    """A vocab.txt with more entries than the embedding table would index out of range."""
    vocab = directory / VOCAB_NAME
    if vocab.is_file():
        with vocab.open("rb") as f:
            entries = sum(1 for _ in f)
        if entries > vocab_size:
            raise UserError(
                f"{vocab}: {entries} tokens, but {directory / 'config.json'} has vocab_size "
                f"{vocab_size}: the vocabulary does not match the model's embeddings"
            )


def load_state_dict(directory: str | Path, vocab_size: int) -> dict[str, torch.Tensor]:
    """Read a checkpoint directory and return its tensors under our canonical names."""
    directory = Path(directory)
    check_vocab(directory, vocab_size)
    raw, path = read_weights(directory)
    state, _ = from_transformers(raw, path)
    return state


def assign_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor], source: Path) -> list[str]:
    """Copy canonical-name tensors into `model`, checking shapes.

    Encoder weights must all be present; head and pooler weights the checkpoint lacks
    keep their fresh initialisation. Returns the names of those newly initialised keys.
    """
    own = model.state_dict()
    loaded, fresh = {}, []
    for key, param in own.items():
        _, name = _split_prefix(key)
        tensor = state.get(name)
        if tensor is None:
            if not name.startswith(_HEAD_PREFIXES + ("pooler.",)):
                raise UserError(f"{source}: checkpoint has no weights for {name!r}; is it a BERT model of this config?")
            fresh.append(key)
            continue
        if tensor.shape != param.shape:
            what = name
            if name == "embeddings.word_embeddings.weight":
                what = f"{name} (vocab_size {tensor.shape[0]} in the weights)"
            raise UserError(
                f"{source}: shape mismatch for {what}: checkpoint {tuple(tensor.shape)}, "
                f"config.json expects {tuple(param.shape)}"
            )
        loaded[key] = tensor
    model.load_state_dict(loaded, strict=False)
    return fresh


def save_state_dict(state: dict[str, torch.Tensor], directory: str | Path) -> Path:
    """Write our state dict as `model.safetensors` under transformers' names, atomically."""
    path = Path(directory) / WEIGHTS_NAME
    tensors = {k: v.detach().cpu().contiguous() for k, v in to_transformers(state).items()}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    return path
