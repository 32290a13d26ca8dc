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

`bertology evaluate` and `predict` run such a directory (recipes/finetune.py): `load_static_head`
opens the head, its task and the copy of the vectors (or encoder) saved beside it, and
`predict_examples` computes the words' features and predicts as the training's dev evaluation
did (`word_features`, then `predict_static`), so the same split scores the same.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..errors import UserError
from ..files import atomic_path, loads_json, write_json_atomic
from ..inference.modeldir import load_model, task_from_dict
from ..inference.predict import score
from ..models import family_of
from ..models.cove import CoVeModel
from ..models.features import FeatureHead, HeadConfig
from ..models.static import StaticVectors, tokenize_words
from ..ops import IGNORE_INDEX
from ..tasks.inputs import in_row_order
from ..tasks.readers import SequenceExample, TaskSpec
from ..training.loop import Trainer
from ..training.tasks import BestModel, EpochBatches, EpochLoop, epoch_train_config, fit_and_finish
from .feature_mode import HeadModule

HEAD_CONFIG_NAME = "feature_head.json"
HEAD_WEIGHTS_NAME = "feature_head.safetensors"


@dataclass
class StaticRunData:
    """A task's examples and their word vectors, shared by the runs of several seeds."""

    spec: TaskSpec
    vectors: StaticVectors | CoVeModel
    train: list
    dev: dict[str, list]  # split name -> examples
    train_features: list[torch.Tensor]  # per example (words, D) float32
    dev_features: dict[str, list[torch.Tensor]]


def example_texts(example) -> list[list[str]]:
    """The word sequences a static model (or CoVe) sees of an example: a tagging sentence's own
    words, or the text and its pair, each split by the static tokenizer."""
    if isinstance(example, SequenceExample):  # the vectors lower-case as they were trained
        return [tokenize_words(text, lowercase=False) for text in (example.text_a, example.text_b) if text]
    return [list(example.words)]


def example_words(example) -> list[str]:
    """An example's words, its texts one after the other."""
    return [word for text in example_texts(example) for word in text]


def open_word_features(directory: str) -> StaticVectors | CoVeModel:
    """A static-vectors directory's vectors, or a CoVe directory's encoder (a translation model's
    decoder left out)."""
    if family_of(directory).name == "cove":
        return CoVeModel.from_pretrained(directory)
    return load_model(directory)


def cove_features(model: CoVeModel, examples: list, batch_size: int = 64) -> list[torch.Tensor]:
    """Each example's (words, D + 2H) float16 [GloVe; CoVe] features: the MT-LSTM run once over
    every text (texts sorted by length, batch_size at a time), a pair's two texts one after the
    other; a text with no word gets one zero row, as `word_features` gives."""
    texts = [text for example in examples for text in example_texts(example)]
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    encoded: list[torch.Tensor | None] = [None] * len(texts)
    for start in range(0, len(order), batch_size):
        rows = order[start: start + batch_size]
        features, _ = model([texts[i] for i in rows])  # (B, T, D + 2H)
        for j, i in enumerate(rows):
            encoded[i] = features[j, : len(texts[i])].half()
    rows, position = [], 0
    for example in examples:
        count = len(example_texts(example))
        parts = [t for t in encoded[position: position + count] if len(t)]
        position += count
        rows.append(torch.cat(parts) if parts else torch.zeros(1, model.hidden_size, dtype=torch.float16))
    return rows


def word_features(vectors: StaticVectors | CoVeModel, examples: list) -> list[torch.Tensor]:
    """Each example's (words, D) vectors (float32; CoVe's float16); a text with no word gets one
    zero row, so that pooling has something to pool (its prediction is then the head's bias)."""
    if isinstance(vectors, CoVeModel):
        return cove_features(vectors, examples)
    cache: dict[str, torch.Tensor | None] = {}
    zeros = torch.zeros(vectors.hidden_size)
    rows = []
    for example in examples:
        words = example_words(example) or [""]
        for word in words:
            if word not in cache:
                cache[word] = vectors.vector(word) if word else None
        rows.append(torch.stack([cache[w] if cache[w] is not None else zeros for w in words]))
    return rows


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


def pad_batch(rows: list[torch.Tensor], labels: list | None, spec: TaskSpec) -> dict[str, torch.Tensor]:
    """Padded features (B, T, D), attention_mask (B, T) and, given gold labels, labels: (B,)
    class ids or scores, or (B, T) tag ids with IGNORE_INDEX on padding."""
    width = max(len(row) for row in rows)
    features = torch.zeros(len(rows), width, rows[0].shape[1])
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, row in enumerate(rows):
        features[b, : len(row)] = row
        mask[b, : len(row)] = 1
    batch = {"features": features, "attention_mask": mask}
    if labels is not None:
        if spec.kind == "token":
            tags = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
            for b, sentence in enumerate(labels):
                tags[b, : len(sentence)] = torch.tensor([spec.labels.index(t) for t in sentence])
            batch["labels"] = tags
        elif spec.regression:
            batch["labels"] = torch.tensor([float(label) for label in labels])
        else:
            batch["labels"] = torch.tensor([spec.labels.index(str(label)) for label in labels])
    return batch


def gold(example) -> object:
    """An example's label (sentence tasks) or tags (tagging)."""
    return example.label if isinstance(example, SequenceExample) else example.tags


@torch.no_grad()
def predict_static(head: FeatureHead, spec: TaskSpec, features: list[torch.Tensor], batch_size: int) -> list:
    """Predictions in the form `score` takes: class names, scores, or one tag list per sentence."""
    head.eval()

    def outputs(rows: list[int]) -> list:
        batch = pad_batch([features[i] for i in rows], None, spec)
        logits = head(batch["features"], batch["attention_mask"]).float()
        return [logits[j, : len(features[i])] if spec.kind == "token" else logits[j] for j, i in enumerate(rows)]

    logits = in_row_order([len(f) for f in features], batch_size, outputs)
    if spec.kind == "token":
        return [[spec.labels[k] for k in row.argmax(-1).tolist()] for row in logits]
    if spec.regression:
        return [float(row[0]) for row in logits]
    return [spec.labels[int(row.argmax())] for row in logits]


def predict_examples(head: FeatureHead, vectors: StaticVectors | CoVeModel, spec: TaskSpec, examples: list,
                     batch_size: int = 128) -> list:
    """`evaluate` and `predict`: the examples' features (`word_features`) through the head
    (`predict_static`), the path of the training's dev evaluation. Returns predictions as `score` takes them."""
    return predict_static(head, spec, word_features(vectors, examples), batch_size)


def load_static_head(directory: str | Path) -> tuple[FeatureHead, StaticVectors | CoVeModel, TaskSpec]:
    """A directory written by `save_head` -> its head (eval mode), vectors (or CoVe encoder) and task.

    The vectors are read from the directory itself (the copy saved with the head), not from the
    directory the head was trained from, which may since have moved.

    Raises:
        UserError: one line naming the directory or file: no head (a plain vectors directory),
            a head file unreadable or not matching its weights, missing or broken vectors.
    """
    directory = Path(directory)
    config_path = directory / HEAD_CONFIG_NAME
    if not config_path.is_file():
        raise UserError(f"{directory}: word vectors without a feature head ({HEAD_CONFIG_NAME}); train one with "
                        f"`bertology finetune --mode features --model {directory}`")
    try:
        saved = loads_json(config_path.read_text(encoding="utf-8"))
        spec = task_from_dict(saved["task"])
        head = FeatureHead(HeadConfig(**saved["head"]))
        head.load_state_dict(load_file(str(directory / HEAD_WEIGHTS_NAME)))
    except (OSError, ValueError, TypeError, KeyError, RuntimeError) as err:
        reason = " ".join(str(err).split())  # load_state_dict's message spans lines
        raise UserError(f"{directory}: cannot load the feature head ({type(err).__name__}: {reason})") from None
    vectors = open_word_features(str(directory))
    if vectors.hidden_size != head.config.width:
        raise UserError(f"{config_path}: the head reads {head.config.width}-wide features, but the vectors beside it "
                        f"are {vectors.hidden_size} wide")
    return head.eval(), vectors, spec


def save_head(head: FeatureHead, vectors: StaticVectors | CoVeModel, spec: TaskSpec, out: Path) -> None:
    """The vectors (or CoVe encoder) directory plus the head and the task it was trained for."""
    vectors.save_pretrained(out)
    with atomic_path(out / HEAD_WEIGHTS_NAME) as tmp:
        save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(tmp))
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
