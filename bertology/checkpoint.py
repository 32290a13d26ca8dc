"""Checkpoint files and the one key table between our module names and transformers'.

A model directory is in the Hugging Face layout: `config.json`, `model.safetensors`,
and the tokenizer's `vocab.txt` / `tokenizer.json`. Tensors are stored under
transformers' names, so a directory written here loads in
`transformers.BertModel.from_pretrained` and vice versa; inside bertology the
modules keep short names. A `KeyTable` is the whole mapping of one family: BERT's
(`BERT_KEYS`) is here, the other BERT-like families' (RoBERTa, ALBERT, ELECTRA,
DistilBERT) are built from its rows in their own files under models/.

Safety: weights are read from safetensors, or from a legacy `pytorch_model.bin`
only through `torch.load(weights_only=True)`, which refuses pickled code.
"""

from __future__ import annotations

import pickle
import re
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from .errors import UserError
from .files import atomic_path

WEIGHTS_NAME = "model.safetensors"
LEGACY_WEIGHTS_NAME = "pytorch_model.bin"
VOCAB_NAME = "vocab.txt"

# (our module, transformers' module or modules). Several transformers modules are
# concatenated along dim 0 into ours (the fused Q/K/V projection). "{i}" is a layer index.
# Encoder names are relative to the encoder: both sides prefix them inside task models ("bert." here).
BERT_ENCODER_ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("embeddings.word_embeddings", ("embeddings.word_embeddings",)),
    ("embeddings.position_embeddings", ("embeddings.position_embeddings",)),
    ("embeddings.token_type_embeddings", ("embeddings.token_type_embeddings",)),
    ("embeddings.norm", ("embeddings.LayerNorm",)),
    ("embeddings.projection", ("encoder.embedding_hidden_mapping_in",)),  # factorized embeddings (ALBERT's name)
    ("layers.{i}.attention.qkv", tuple(f"encoder.layer.{{i}}.attention.self.{n}" for n in ("query", "key", "value"))),
    ("layers.{i}.attention.out", ("encoder.layer.{i}.attention.output.dense",)),
    ("layers.{i}.attention_norm", ("encoder.layer.{i}.attention.output.LayerNorm",)),
    ("layers.{i}.ffn_in", ("encoder.layer.{i}.intermediate.dense",)),
    ("layers.{i}.ffn_out", ("encoder.layer.{i}.output.dense",)),
    ("layers.{i}.ffn_norm", ("encoder.layer.{i}.output.LayerNorm",)),
    ("final_norm", ("encoder.final_layer_norm",)),  # pre-LN stacks only
    ("relative_attention_bias", ("encoder.relative_attention_bias",)),  # position_embedding_type "relative" only
    ("pooler", ("pooler.dense",)),
)
# Heads (top level, never under the encoder's prefix).
BERT_HEAD_ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mlm.dense", ("cls.predictions.transform.dense",)),
    ("mlm.norm", ("cls.predictions.transform.LayerNorm",)),
    ("mlm.bias", ("cls.predictions.bias",)),
    ("mlm.decoder", ("cls.predictions.decoder",)),  # untied output matrices only (tie_word_embeddings false)
    ("nsp.dense", ("cls.seq_relationship",)),
    ("classifier.dense", ("classifier",)),
    ("qa_outputs", ("qa_outputs",)),
    # bertology's own (`head_bilstm`, the BERT paper's "+ BiLSTM"): transformers has no such module and
    # its classes skip these keys; stored under the same name, nn.LSTM's parameters (weight_ih_l0, ...)
    ("bilstm.lstm", ("bilstm.lstm",)),
)
# Our canonical names of the heads and the pooler: a checkpoint may lack them (they start fresh).
_HEAD_PREFIXES = ("mlm.", "nsp.", "classifier.", "qa_outputs.", "bilstm.", "summary.", "discriminator.")
TASK_HEAD_PREFIXES = ("classifier.", "qa_outputs.", "bilstm.", "summary.")  # fine-tuning heads, replaced for a new task
_ENCODER_PREFIX = "bert."  # our task models' attribute holding the encoder


def _compile(pattern: str) -> re.Pattern:
    """A module pattern -> regex matching '<module>' or '<module>.<param>' (layer index captured)."""
    return re.compile(re.escape(pattern).replace(r"\{i\}", r"(?P<i>\d+)") + r"(?P<param>(\.[A-Za-z_][A-Za-z0-9_]*)?)$")


@dataclass(frozen=True)
class KeyTable:
    """A family's names in transformers' checkpoints: the one mapping between our module names and theirs.

    Rows are (our module, transformers' module or modules), the first that matches wins; "{i}"
    is a layer index. Our encoder's keys are canonical without a prefix (inside a task model ours
    carry `bert.`, theirs `prefix`); heads are at the top level on both sides.
    """

    rows: tuple[tuple[str, tuple[str, ...]], ...]
    prefix: str  # transformers' attribute of the encoder inside its task models: "bert.", "roberta.", ...
    # Keys transformers stores that carry no information of their own (buffers, a tied bias's second name).
    redundant: tuple[str, ...] = ()
    # transformers' second name of the masked-LM bias, its decoder's: tied to the first, except beside an
    # untied output matrix (tie_word_embeddings false), where transformers' forward adds this one.
    decoder_bias: str | None = None

    def with_rows(self, *rows: tuple[str, tuple[str, ...]]) -> KeyTable:
        """This table with `rows` matched first (a head that one class names otherwise)."""
        return replace(self, rows=(*rows, *self.rows))

    @cached_property
    def _ours(self) -> list[tuple[re.Pattern, str, tuple[str, ...]]]:
        return [(_compile(ours), ours, theirs) for ours, theirs in self.rows]

    @cached_property
    def _theirs(self) -> list[tuple[re.Pattern, str, tuple[str, ...], int]]:
        return [(_compile(name), ours, theirs, k) for ours, theirs in self.rows for k, name in enumerate(theirs)]

    def to_transformers(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Our state dict -> transformers' key names (a fused Q/K/V split in three)."""
        out = {}
        for key, tensor in state.items():
            prefix, name = _split_prefix(key)
            for regex, _, theirs in self._ours:
                match = regex.match(name)
                if match:
                    break
            else:
                raise KeyError(f"no transformers name for parameter {key!r}")
            layer, param = match.group("i") if "i" in regex.groupindex else None, match.group("param")
            chunks = tensor.chunk(len(theirs), dim=0) if len(theirs) > 1 else (tensor,)
            for their_module, chunk in zip(theirs, chunks):
                out[(self.prefix if prefix else "") + their_module.format(i=layer) + param] = chunk.contiguous()
        if self.decoder_bias and "mlm.decoder.weight" in state:  # untied: both names, as transformers stores them
            out[self.decoder_bias] = state["mlm.bias"].clone()
        return out

    def from_transformers(self, state: dict[str, torch.Tensor], source: Path, tied: bool = True
                          ) -> tuple[dict[str, torch.Tensor], list[str]]:
        """transformers' state dict (with or without the encoder's prefix, with or without heads) ->
        our canonical names (encoder keys without prefix, heads at top level). `tied`: the config's
        tie_word_embeddings (untied, the masked-LM bias is read under the decoder's name).

        Returns the converted state and the keys that were not recognised.
        """
        if not tied and self.decoder_bias in state:
            bias = next(theirs[0] for ours, theirs in self.rows if ours == "mlm.bias")
            state = {**state, bias: state[self.decoder_bias]}
        parts: dict[str, dict[int, torch.Tensor]] = {}
        counts: dict[str, int] = {}
        unknown = []
        for key, tensor in state.items():
            name = key.removeprefix(self.prefix)
            if name in self.redundant:
                continue
            for regex, ours, theirs, k in self._theirs:
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
                raise UserError(f"{source}: incomplete checkpoint, only {len(chunks)} of {counts[our_key]} parts of "
                                f"{our_key!r}")
            pieces = [chunks[k] for k in range(counts[our_key])]
            if len({piece.shape[1:] for piece in pieces}) > 1 or any(piece.ndim == 0 for piece in pieces):
                shapes = ", ".join(str(tuple(piece.shape)) for piece in pieces)
                raise UserError(f"{source}: the parts of {our_key!r} (query, key, value) have shapes that do not fit "
                                f"together: {shapes}")
            out[our_key] = torch.cat(pieces, dim=0) if len(pieces) > 1 else pieces[0]
        return out, unknown


BERT_KEYS = KeyTable(BERT_ENCODER_ROWS + BERT_HEAD_ROWS, prefix="bert.",
                     redundant=("embeddings.position_ids", "cls.predictions.decoder.bias"),
                     decoder_bias="cls.predictions.decoder.bias")


def _split_prefix(key: str) -> tuple[str, str]:
    return (_ENCODER_PREFIX, key[len(_ENCODER_PREFIX):]) if key.startswith(_ENCODER_PREFIX) else ("", key)


def to_transformers(state: dict[str, torch.Tensor], table: KeyTable = BERT_KEYS) -> dict[str, torch.Tensor]:
    """Our state dict -> transformers' key names of `table`'s family (BERT's by default)."""
    return table.to_transformers(state)


def from_transformers(state: dict[str, torch.Tensor], source: Path, table: KeyTable = BERT_KEYS
                      ) -> tuple[dict[str, torch.Tensor], list[str]]:
    """transformers' state dict of `table`'s family (BERT's by default) -> our canonical names, and
    the keys that were not recognised (see `KeyTable.from_transformers`)."""
    return table.from_transformers(state, source)


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
    """vocab.txt and the embedding table must have the same number of rows: more tokens would
    index out of range, fewer means a line is missing and every later token id points at the
    wrong vector (a model directory is read as a pair)."""
    vocab = directory / VOCAB_NAME
    if vocab.is_file():
        with vocab.open("rb") as f:
            entries = sum(1 for _ in f)
        if entries != vocab_size:
            raise UserError(
                f"{vocab}: {entries} tokens, but {directory / 'config.json'} has vocab_size "
                f"{vocab_size}: the vocabulary does not match the model's embeddings"
            )


def load_state_dict(directory: str | Path, vocab_size: int, table: KeyTable = BERT_KEYS, tied: bool = True
                    ) -> tuple[dict[str, torch.Tensor], Path]:
    """Read a checkpoint directory: its tensors under our canonical names (read with `table`, the
    family's key table; `tied` as in `KeyTable.from_transformers`), and the weights file read."""
    directory = Path(directory)
    check_vocab(directory, vocab_size)
    raw, path = read_weights(directory)
    state, _ = table.from_transformers(raw, path, tied)
    return state, path


_LAYER = re.compile(r"^layers\.(\d+)\.")


def weight_problems(state: dict[str, torch.Tensor], expected: dict[str, torch.Size]) -> list[str]:
    """Everything wrong with stored tensors (canonical names) for a model whose state-dict shapes
    are `expected`: an encoder tensor missing (head and pooler weights may be: they start fresh),
    stored with another shape, in a non-floating dtype, or holding NaN or infinity, and layers
    beyond the config's. One line per problem, naming the tensor; empty when all is well."""
    wanted = {_split_prefix(name)[1]: shape for name, shape in expected.items()}
    problems = []
    layers = {int(m.group(1)) for name in state if (m := _LAYER.match(name))}
    expected_layers = {int(m.group(1)) for name in wanted if (m := _LAYER.match(name))}
    if layers and max(layers) > max(expected_layers, default=-1):
        problems.append(f"the weights hold {max(layers) + 1} layers, but config.json has "
                        f"{max(expected_layers) + 1} (num_hidden_layers, or share_layers)")
    for name, shape in wanted.items():
        tensor = state.get(name)
        if tensor is None:
            if not name.startswith(_HEAD_PREFIXES + ("pooler.",)):
                problems.append(f"checkpoint has no weights for {name!r}; is it a model of this family and config?")
        elif tensor.shape != shape:
            what = f"{name} (vocab_size {tensor.shape[0]} in the weights)" if name == "embeddings.word_embeddings.weight" \
                else name
            problems.append(f"shape mismatch for {what}: checkpoint {tuple(tensor.shape)}, "
                            f"config.json expects {tuple(shape)}")
        elif not tensor.is_floating_point():
            problems.append(f"{name} is stored as {str(tensor.dtype).removeprefix('torch.')}, "
                            "not as floating-point weights")
        # A sum is finite only if every element is (or, rarely, it overflowed: then look at each element);
        # one pass, about 15x faster than isfinite(tensor).all() on the embedding table.
        elif not bool(torch.isfinite(tensor.sum())) and not bool(torch.isfinite(tensor).all()):
            problems.append(f"{name} holds NaN or infinite values")
    return problems


def check_weights(state: dict[str, torch.Tensor], expected: dict[str, torch.Size], source: Path) -> None:
    """Refuse weights that do not fit the model they are for (see `weight_problems`), before that
    model is allocated: a one-line error naming the file and the first problem."""
    problems = weight_problems(state, expected)
    if problems:
        raise UserError(f"{source}: {problems[0]}")


def assign_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> list[str]:
    """Copy canonical-name tensors (checked by `check_weights`) into `model`.

    Returns the keys the checkpoint lacks (head and pooler weights), which keep their fresh
    initialisation.
    """
    loaded, fresh = {}, []
    for key in model.state_dict():
        tensor = state.get(_split_prefix(key)[1])
        if tensor is None:
            fresh.append(key)
        else:
            loaded[key] = tensor
    model.load_state_dict(loaded, strict=False)
    return fresh


def standalone(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors on the CPU, each in storage of its own that holds exactly it: what safetensors
    writes.

    A device may keep weights as views into one larger buffer: on CUDA, nn.LSTM's weights are views
    into cuDNN's one flat buffer, which safetensors refuses ("None is covering the entire storage").
    A tensor whose storage is larger than it, or that shares its storage with another, is copied;
    every other is written as it is, without a copy.
    """
    out, seen = {}, set()
    for name, tensor in tensors.items():
        tensor = tensor.detach().cpu()
        storage = tensor.untyped_storage()
        if (storage.data_ptr() in seen or tensor.storage_offset() or not tensor.is_contiguous()
                or storage.nbytes() != tensor.numel() * tensor.element_size()):
            tensor = tensor.clone(memory_format=torch.contiguous_format)
        seen.add(tensor.untyped_storage().data_ptr())
        out[name] = tensor
    return out


def write_tensors(tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """Write tensors, under the names they have, as one safetensors file at `path`, atomically
    (each in storage of its own: see `standalone`)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        save_file(standalone(tensors), str(tmp), metadata={"format": "pt", **(metadata or {})})
    return path


def write_weights(state: dict[str, torch.Tensor], directory: str | Path) -> Path:
    """Write a state dict, under the names it has, as `model.safetensors` in `directory`, atomically."""
    return write_tensors(state, Path(directory) / WEIGHTS_NAME)


def save_module_state(module: torch.nn.Module, path: str | Path) -> Path:
    """A module's whole state dict as a safetensors file, atomically, whatever the device's layout
    of its weights (see `standalone`): a tensor held under several names (tied weights) is written
    once, under its first name, and the metadata maps each other name to it, as safetensors'
    `save_model` does (`load_module_state` ties them again)."""
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    first: dict[tuple, str] = {}
    for name, tensor in module.state_dict().items():
        where = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
                 tensor.stride(), tensor.dtype)
        if where in first:
            aliases[name] = first[where]
        else:
            first[where] = name
            tensors[name] = tensor
    return write_tensors(tensors, path, aliases)


def load_module_state(module: torch.nn.Module, path: str | Path, device: str | torch.device = "cpu") -> None:
    """Load a file of `save_module_state` (or of safetensors' `save_model`) into `module`: every
    tensor it needs, each alias from the tensor it was stored as.

    Raises:
        ValueError: a tensor the module has is missing (and is no alias), or one it lacks is there.
    """
    state = load_file(str(path), device=str(device))
    with safe_open(str(path), framework="pt") as f:
        aliases = f.metadata() or {}  # alias -> the name it is stored under (and "format": "pt")
    state.update({alias: state[name] for alias, name in aliases.items() if name in state and alias not in state})
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{path}: tensors missing: {', '.join(missing) or 'none'}; not the module's: "
                         f"{', '.join(unexpected) or 'none'}")


def load_checked(model: torch.nn.Module, state: dict[str, torch.Tensor], source: Path | str, what: str,
                 skip: tuple[str, ...] = ()) -> None:
    """Copy `state` into `model` after checking every tensor the model needs (those named in
    `skip`, tied aliases, excepted): present, of the model's shape, finite. A problem is a one-line
    error naming `source`, the tensor and, for a missing one, `what` the model is ("a T5 of this config")."""
    expected = model.state_dict()
    for name, tensor in expected.items():
        if name in skip:
            continue
        if name not in state:
            raise UserError(f"{source}: checkpoint has no weights for {name!r}; is it {what}?")
        if state[name].shape != tensor.shape:
            raise UserError(f"{source}: shape mismatch for {name}: checkpoint {tuple(state[name].shape)}, "
                            f"config.json expects {tuple(tensor.shape)}")
        if state[name].is_floating_point() and not bool(torch.isfinite(state[name]).all()):
            raise UserError(f"{source}: tensor {name} holds NaN or infinite values")
    model.load_state_dict({k: v for k, v in state.items() if k in expected and k not in skip}, strict=False)
