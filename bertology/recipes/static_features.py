"""Static word vectors as features: the feature-based mode's heads over one vector per word.

`bertology finetune --mode features --model VECTORS_DIR` comes here when the model directory
is a static-vectors one (models/static.py: word2vec, fastText, GloVe, imported), so that one
head compares static, ELMo and BERT features on the same labels. The vectors stay frozen;
the head is feature_mode.py's (`FeatureHead`: optionally a 2-layer BiLSTM, then a linear
layer), trained by the same epoch loop:

- sentence and pair tasks: each text split into words by the static vectors' own tokenizer
  (`tokenize_words`, the one they were trained and evaluated with), a pair's two texts one
  after the other, and the word vectors pooled (`--feature-pooling mean` or `max`; `cls`
  has no meaning here and is refused);
- tagging: the task's own words, one vector each (a word without a vector, such as
  punctuation, which the static tokenizer drops, gets zeros), a tag per word.

Every word's vector is looked up once (fastText: unseen words through their n-grams) and
kept for all epochs and seeds. The best head by the task's main dev metric is saved beside a
copy of the vectors: `feature_head.json` and `feature_head.safetensors` in a vectors
directory.

CoVe (models/cove.py, McCann et al. 2017) comes here too: a CoVe directory's words get the
paper's [GloVe; CoVe] features, its MT-LSTM run once over each text (each text of a pair on
its own, as the paper encodes each sentence; a tagging sentence over its own words) and the
results kept, in float16 (900 numbers a word in the base preset), for all epochs and seeds.
The saved head sits beside the encoder (`CoVeModel`, the decoder left out).

`bertology evaluate`, `predict` and `serve` run such a directory through
inference/static_heads.py, which computes the words' features and predicts as the training's
dev evaluation does (`word_features`, then `predict_static`), so the same split scores the same.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint import write_tensors
from ..errors import UserError
from ..files import write_json_atomic
from ..inference.predict import score
from ..inference.static_heads import (
    HEAD_CONFIG_NAME,
    HEAD_WEIGHTS_NAME,
    pad_batch,
    predict_static,
    word_features,
)
from ..models.cove import CoVeModel
from ..models.features import FeatureHead, HeadConfig
from ..models.static import StaticVectors
from ..tasks.readers import SequenceExample, TaskSpec
from ..training.loop import Trainer
from .feature_mode import HeadModule
from .task_training import BestModel, EpochBatches, EpochLoop, epoch_train_config, fit_and_finish


@dataclass
class StaticRunData:
    """A task's examples and their word vectors, shared by the runs of several seeds."""

    spec: TaskSpec
    vectors: StaticVectors | CoVeModel
    train: list
    dev: dict[str, list]  # split name -> examples
    train_features: list[torch.Tensor]  # per example (words, D) float32
    dev_features: dict[str, list[torch.Tensor]]


def check_task(spec: TaskSpec) -> None:
    """Static features serve sentence, pair and token tasks (a span answer needs positions in context)."""
    if spec.kind == "span":
        raise UserError(f"{spec.name}: static vectors give features for sentence, pair and token tasks, not span "
                        "(SQuAD) tasks")


def prepare_static_data(spec: TaskSpec, train: list, dev: dict[str, list],
                        vectors: StaticVectors | CoVeModel) -> StaticRunData:
    """Look every example's words up (CoVe: encode every text) once."""
    return StaticRunData(spec, vectors, train, dev, word_features(vectors, train),
                         {split: word_features(vectors, examples) for split, examples in dev.items()})


def gold(example) -> object:
    """An example's label (sentence tasks) or tags (tagging)."""
    return example.label if isinstance(example, SequenceExample) else example.tags


def save_head(head: FeatureHead, vectors: StaticVectors | CoVeModel, spec: TaskSpec, out: Path) -> None:
    """The vectors (or CoVe encoder) directory plus the head and the task it was trained for."""
    vectors.save_pretrained(out)
    write_tensors(head.state_dict(), out / HEAD_WEIGHTS_NAME)
    write_json_atomic(out / HEAD_CONFIG_NAME, {"head": dataclasses.asdict(head.config), "task": dataclasses.asdict(spec)})


def train_static_head(cfg: EpochLoop, data: StaticRunData, seed: int, out: Path) -> dict:
    """Train one seed's head into `out`; returns the best dev results (with their step).

    `cfg` is a FinetuneConfig: its loop settings, `feature_head` and `feature_pooling` are used.
    """
    if cfg.feature_pooling == "cls":
        raise UserError("--feature-pooling cls needs a [CLS] token; static vectors and CoVe pool with mean or max")
    spec = data.spec
    torch.manual_seed(seed)
    head = FeatureHead(HeadConfig(spec.kind, [0], "sum", data.vectors.hidden_size,
                                  1 if spec.regression else len(spec.labels), cfg.feature_head, cfg.feature_pooling))
    train_gold = [gold(example) for example in data.train]

    def make_batch(rows: list[int]) -> dict:
        return pad_batch([data.train_features[i] for i in rows], [train_gold[i] for i in rows], spec)

    batches = EpochBatches([len(f) for f in data.train_features], cfg.batch_size, seed, make_batch)
    best = BestHead(out, data, cfg.resume, mode="features")

    def evaluate(module: HeadModule) -> dict:
        results = {}
        for split, examples in data.dev.items():
            predictions = predict_static(module.head, spec, data.dev_features[split], cfg.eval_batch_size)
            results.update(score(spec, examples, predictions, split))
        module.head.train()
        return best.update(results, module.head, trainer.step)

    # The head is small and its features fixed: fp32 costs nothing.
    trainer = Trainer(HeadModule(head, spec.regression), epoch_train_config(cfg, batches.steps_per_epoch, seed, "fp32"),
                      out, batches, evaluate)
    fit_and_finish(trainer, cfg, spec, out)
    return best.results


class BestHead(BestModel):
    """The best head so far, saved with a copy of the vectors (there is no tokenizer to save)."""

    def save(self, model: FeatureHead) -> None:
        """Write the vectors, the head and its task into the output folder."""
        save_head(model, self.data.vectors, self.data.spec, self.out)
