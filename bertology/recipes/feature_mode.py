"""The BERT paper's feature-based approach: a frozen encoder, a small trained head.

The encoder runs once over the training and dev rows; the chosen layers' token vectors
(features.py: last, sum of the last four, ELMo's learned mix, ...) are cached on disk,
and only the head trains, over many epochs, at the cost of the head alone. The head is a
linear layer or, as in the paper's feature-based NER experiment (and TagLM before it), a
two-layer BiLSTM before the classifier. Sentence tasks pool the token vectors (mean by
default). With `--vectors DIR` each token's static word vector goes in front of its
features, as ELMo's paper feeds its task models [x_k; ELMo_k] (models/features.py
`PieceWordVectors`). The saved `FeatureModel` chains encoder, word vectors and head, so
`evaluate` and `predict` run it like any fine-tuned model."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import atomic_path, cache_root
from ..inference.modeldir import describe_task, open_static_vectors
from ..inference.predict import decode, score
from ..models.features import (
    FeatureHead,
    FeatureModel,
    HeadConfig,
    PieceWordVectors,
    feature_width,
    head_loss,
    load_feature_encoder,
    parse_layers,
)
from ..ops import autocast, resolve_device, resolve_precision
from ..tasks.inputs import Encoded, cache_key, collate, encode, in_row_order
from ..tasks.readers import TaskSpec
from ..training.loop import StepOutput, Trainer
from .task_training import BestModel, EpochBatches, epoch_train_config, fit_and_finish


@torch.no_grad()
def compute_features(model: FeatureModel, encoded: Encoded, pad_id: int, batch_size: int, precision: str,
                     cache: Path | None, key_source: str) -> list[torch.Tensor]:
    """Each row's (T, [L,] H) features in fp16, from the cache file when an earlier run made it."""
    path = None
    if cache is not None:
        path = cache / f"{cache_key(key_source, encoded, model.head.config.layers, model.head.config.combine)}.safetensors"
        if path.is_file():
            stored = load_file(str(path))
            return list(torch.split(stored["features"], stored["lengths"].tolist()))
    device = next(model.parameters()).device
    precision = resolve_precision(precision, device)

    def row_features(rows: list[int]) -> list[torch.Tensor]:
        batch = collate([encoded.features[i] for i in rows], "none", pad_id)
        with autocast(precision, device):
            states = model.features(**{k: v.to(device) for k, v in batch.items()})
        return [states[j, : len(encoded.features[i].input_ids)].to(torch.float16).cpu() for j, i in enumerate(rows)]

    rows = in_row_order([len(f.input_ids) for f in encoded.features], batch_size, row_features)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            save_file({"features": torch.cat(rows), "lengths": torch.tensor([len(r) for r in rows])}, str(tmp))
    return rows


def _pad(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """(B, width, ...) the rows' (T_b, ...) tensors, zero-padded."""
    padded = torch.zeros((len(rows), width, *rows[0].shape[1:]), dtype=rows[0].dtype)
    for j, row in enumerate(rows):
        padded[j, : len(row)] = row
    return padded


def feature_batch(rows: list[torch.Tensor], features: list, kind: str, pad_id: int, regression: bool,
                  word_rows: list[torch.Tensor] | None = None) -> dict:
    """Pad cached features (and the rows' word vectors, and labels) of a batch of rows."""
    batch = collate(features, kind, pad_id, regression)
    width = batch["input_ids"].shape[1]
    words = {} if word_rows is None else {"word_vectors": _pad(word_rows, width)}
    return {"features": _pad(rows, width), "attention_mask": batch["attention_mask"], **words,
            **{k: batch[k] for k in ("labels",) if k in batch}}


def open_word_vectors(directory: str, tokenizer: Tokenizer) -> PieceWordVectors:
    """`--vectors DIR`: static vectors looked up by the word each of `tokenizer`'s pieces belongs to."""
    pieces = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    return PieceWordVectors(open_static_vectors(directory, "--vectors"), pieces, tokenizer.model,
                            sorted(tokenizer.special_token_ids))


def word_vector_rows(word_vectors: PieceWordVectors | None, encoded: Encoded) -> list[torch.Tensor] | None:
    """Each row's (T, S) fp16 word vectors, or None without word vectors."""
    if word_vectors is None:
        return None
    return [word_vectors(torch.tensor([f.input_ids]))[0].half() for f in encoded.features]


class HeadModule(nn.Module):
    """The head as the loop trains it: forward(batch of cached features) -> StepOutput."""

    def __init__(self, head: FeatureHead, regression: bool):
        super().__init__()
        self.head = head
        self.regression = regression

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """Loss of the head on a batch of cached features."""
        logits = self.head(batch["features"], batch["attention_mask"], batch.get("word_vectors"))
        return StepOutput(head_loss(logits.float(), batch["labels"], self.head.config.kind, self.regression), {})


def train_feature_head(cfg, data, seed: int, out: Path) -> dict:
    """Train one seed of a feature-based head into `out`; returns the best dev results."""

    spec: TaskSpec = data.spec
    if spec.kind == "span":
        raise UserError("the feature-based mode covers sentence, pair and token tasks; fine-tune for span tasks")
    torch.manual_seed(seed)
    encoder = load_feature_encoder(cfg.model).to(resolve_device(cfg.device))  # computes the features once
    for param in encoder.parameters():
        param.requires_grad_(False)
    describe_task(encoder.config, spec, data.settings)
    layers, combine = parse_layers(cfg.feature_layers, encoder.num_hidden_layers)
    regression = spec.regression
    word_vectors = open_word_vectors(cfg.vectors, data.tokenizer) if cfg.vectors else None
    head = FeatureHead(HeadConfig(spec.kind, layers, combine, feature_width(encoder.hidden_size, layers, combine),
                                  1 if regression else len(spec.labels), cfg.feature_head, cfg.feature_pooling,
                                  word_vector_size=0 if word_vectors is None else word_vectors.hidden_size))
    model = FeatureModel(encoder, head, word_vectors)
    pad_id = data.tokenizer.pad_token_id
    cache = Path(cfg.cache_dir) / "features" if cfg.cache_dir else cache_root() / "features"
    train_rows = compute_features(model, data.train_encoded, pad_id, cfg.eval_batch_size, cfg.precision, cache, cfg.model)
    dev = {split: encode(spec, examples, data.tokenizer, data.settings, training=False) for split, examples in data.dev.items()}
    dev_rows = {split: compute_features(model, enc, pad_id, cfg.eval_batch_size, cfg.precision, cache, cfg.model)
                for split, enc in dev.items()}
    train_words = word_vector_rows(word_vectors, data.train_encoded)
    dev_words = {split: word_vector_rows(word_vectors, enc) for split, enc in dev.items()}

    def pick(rows: list[torch.Tensor] | None, indices: list[int]) -> list[torch.Tensor] | None:
        return None if rows is None else [rows[i] for i in indices]

    features = data.train_encoded.features

    def make_batch(rows: list[int]) -> dict:
        return feature_batch([train_rows[i] for i in rows], [features[i] for i in rows], spec.kind, pad_id, regression,
                             pick(train_words, rows))

    batches = EpochBatches([len(f.input_ids) for f in features], cfg.batch_size, seed, make_batch)
    best = BestModel(out, data, cfg.resume, mode="features")

    def evaluate(module: HeadModule) -> dict:
        results = {}
        for split, enc in dev.items():
            def head_logits(rows: list[int]) -> list:
                batch = feature_batch([dev_rows[split][i] for i in rows], [enc.features[i] for i in rows], "none", pad_id,
                                      False, pick(dev_words[split], rows))
                batch = {k: v.to(trainer.device) for k, v in batch.items()}
                logits = module.head(batch["features"], batch["attention_mask"], batch.get("word_vectors"))
                return list(logits.float().cpu().numpy())

            outputs = in_row_order([len(f.input_ids) for f in enc.features], cfg.eval_batch_size, head_logits)
            results.update(score(spec, data.dev[split], decode(spec, enc, outputs, data.dev[split], data.settings), split))
        return best.update(results, model, trainer.step)

    # The head is small and its features fixed: fp32 costs nothing and avoids casting the cache.
    trainer = Trainer(HeadModule(head, regression), epoch_train_config(cfg, batches.steps_per_epoch, seed, "fp32"),
                      out, batches, evaluate)
    fit_and_finish(trainer, cfg, spec, out)
    return best.results
