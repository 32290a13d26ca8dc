"""Running a task model over encoded rows, and turning its outputs into predictions and scores.

The one path `evaluate`, `predict`, `serve` and the dev evaluation of every task recipe share:
encode (tasks/inputs.py) -> `run_rows` (length-bucketed batches, in row order) -> `decode`
(labels, scores, tags or answer spans) -> `score` (the task's official metrics).
"""

from __future__ import annotations

import torch
from torch import nn

from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..ops import autocast, resolve_precision
from ..tasks.inputs import (
    Encoded,
    InputSettings,
    collate,
    decode_sequences,
    decode_spans,
    decode_tokens,
    encode,
    in_row_order,
)
from ..tasks.metrics import compute_metrics
from ..tasks.readers import TaskSpec


def model_device(model: nn.Module) -> torch.device:
    """Where a model computes: its parameters' device, or the CPU for an ONNX Runtime model (it has none)."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def precision_for(model: nn.Module, precision: str, device: torch.device) -> str:
    """The resolved precision to run `model` in. Exported int8 and ONNX models compute in fp32
    only (their `inference_precision`; quantized linears take fp32 input), so for them "auto"
    is fp32 and bf16 is refused."""
    fixed = getattr(model, "inference_precision", None)
    if fixed is None:
        return resolve_precision(precision, device)
    if precision not in ("auto", fixed):
        raise UserError(f"this exported model computes in {fixed} only; use --precision auto or {fixed}")
    return fixed


@torch.no_grad()
def run_rows(model: nn.Module, encoded: Encoded, spec: TaskSpec, pad_id: int, batch_size: int,
             precision: str = "auto", progress: bool = False) -> list:
    """Model outputs for every row, in row order: logits, or (start, end) score pairs for spans."""
    from tqdm.auto import tqdm

    device = model_device(model)
    precision = precision_for(model, precision, device)
    model.eval()
    bar = tqdm(total=len(encoded.features), disable=not progress, unit="row", desc="predicting", leave=False)

    def outputs(rows: list[int]) -> list:
        batch = collate([encoded.features[i] for i in rows], "none", pad_id)
        with autocast(precision, device):
            out = model(**{k: v.to(device) for k, v in batch.items()})
        bar.update(len(rows))
        if spec.kind == "span":
            return list(zip(out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()))
        return list(out.logits.float().cpu().numpy())

    results = in_row_order([len(f.input_ids) for f in encoded.features], batch_size, outputs)
    bar.close()
    return results


def decode(spec: TaskSpec, encoded: Encoded, outputs: list, examples: list, settings: InputSettings):
    """Row outputs -> one prediction per example (label, score, tag list) or {qid: answer} for spans
    (a WiC pair's label, as a sentence pair's)."""
    if spec.kind in ("sequence", "wic"):
        return decode_sequences(spec, encoded, outputs)
    if spec.kind == "token":
        return decode_tokens(spec, encoded, outputs, examples)
    return decode_spans(encoded, [o[0] for o in outputs], [o[1] for o in outputs], examples, settings,
                        allow_no_answer=spec.unanswerable)


def predict(model: nn.Module, tokenizer: Tokenizer, spec: TaskSpec, examples: list,
            settings: InputSettings, batch_size: int = 128, precision: str = "auto", progress: bool = False):
    """Predictions for `examples` (see `decode`) of a task model's head (or a feature model's)."""
    encoded = encode(spec, examples, tokenizer, settings, training=False)
    outputs = run_rows(model, encoded, spec, tokenizer.pad_token_id, batch_size, precision, progress)
    return decode(spec, encoded, outputs, examples, settings)


def score(spec: TaskSpec, examples: list, predictions, split: str = "dev") -> dict[str, float]:
    """The task's metrics (fractions in [0, 1]) for predictions of `examples` (see `decode`);
    a split other than "dev" names them "<metric>_<split>" (MNLI's `accuracy_mismatched`)."""
    if spec.kind == "span":
        gold = examples
    elif spec.kind == "token":
        gold = [e.tags for e in examples]
    elif spec.regression:
        gold = [float(e.label) for e in examples]
    else:
        gold = [None if e.label is None else spec.labels.index(str(e.label)) for e in examples]
        predictions = [spec.labels.index(p) for p in predictions]
    if any(g is None for g in gold):
        raise UserError(f"{examples[0].where.split(':')[0]}: this split has no gold labels to score against")
    return compute_metrics(spec, gold, predictions, split)
