"""A feature head over static word vectors or CoVe, run: what `bertology evaluate`, `predict`
and `serve` do with a directory that recipes/static_features.py trained.

`load_static_head` opens the head, its task and the copy of the vectors (or CoVe encoder) saved
beside it; `word_features` gives each example one vector per word (a sentence or pair task's
texts split by the static vectors' own tokenizer, a tagging sentence's own words; CoVe's
[GloVe; CoVe] features from its MT-LSTM); `predict_static` runs the head over them as the
training's dev evaluation does, so the same split scores the same.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from ..errors import UserError
from ..files import loads_json
from ..models.features import FeatureHead, HeadConfig
from ..models.static import tokenize_words
from ..ops import IGNORE_INDEX
from ..tasks.inputs import in_row_order
from ..tasks.readers import SequenceExample, TaskSpec
from .modeldir import open_model_dir, task_from_dict
from .predict import model_device

HEAD_CONFIG_NAME = "feature_head.json"
HEAD_WEIGHTS_NAME = "feature_head.safetensors"


def example_texts(example) -> list[list[str]]:
    """The word sequences a static model (or CoVe) sees of an example: a tagging sentence's own
    words, or the text and its pair, each split by the static tokenizer."""
    if isinstance(example, SequenceExample):  # the vectors lower-case as they were trained
        return [tokenize_words(text, lowercase=False) for text in (example.text_a, example.text_b) if text]
    return [list(example.words)]


def open_word_features(directory: str | Path) -> nn.Module:
    """A word-reading family's feature source from its directory (its spec's `word_features`:
    static vectors, or a CoVe translation model's encoder, the decoder left out)."""
    model_dir = open_model_dir(directory)
    if model_dir.spec.word_features is None:
        raise UserError(f"{directory}: a {model_dir.family.name} model reads tokens, not words: it is no word "
                        "feature source (static vectors or CoVe)")
    return model_dir.spec.word_features(model_dir.path, model_dir.config).eval()


def word_features(vectors: nn.Module, examples: list) -> list[torch.Tensor]:
    """Each example's (words, D) features from a word feature source's `text_features` (static
    vectors' float32, CoVe's float16), a pair's two texts one after the other; an example with no
    word gets one zero row, so that pooling has something to pool (its prediction is then the
    head's bias)."""
    texts_of = [example_texts(example) for example in examples]
    encoded = vectors.text_features([text for texts in texts_of for text in texts])
    rows, position = [], 0
    for texts in texts_of:
        parts = [t for t in encoded[position: position + len(texts)] if len(t)]
        position += len(texts)
        rows.append(torch.cat(parts) if parts else torch.zeros(1, vectors.hidden_size, dtype=encoded[0].dtype
                                                               if encoded else torch.float32))
    return rows


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


@torch.no_grad()
def head_logits(head: FeatureHead, spec: TaskSpec, features: list[torch.Tensor], batch_size: int) -> list[torch.Tensor]:
    """The head's float32 logits for each example's (words, D) features, in example order:
    (labels,) for a sentence (regression: (1,)), (words, labels) for a tagged sentence."""
    head.eval()
    device = model_device(head)

    def outputs(rows: list[int]) -> list:
        batch = pad_batch([features[i] for i in rows], None, spec)
        logits = head(batch["features"].to(device), batch["attention_mask"].to(device)).float().cpu()
        return [logits[j, : len(features[i])] if spec.kind == "token" else logits[j] for j, i in enumerate(rows)]

    return in_row_order([len(f) for f in features], batch_size, outputs)


def read_logits(spec: TaskSpec, logits: list[torch.Tensor]) -> list:
    """`head_logits` -> predictions in the form `score` takes: class names (the argmax), scores,
    or one tag list per sentence."""
    if spec.kind == "token":
        return [[spec.labels[k] for k in row.argmax(-1).tolist()] for row in logits]
    if spec.regression:
        return [float(row[0]) for row in logits]
    return [spec.labels[int(row.argmax())] for row in logits]


def predict_static(head: FeatureHead, spec: TaskSpec, features: list[torch.Tensor], batch_size: int) -> list:
    """Predictions in the form `score` takes (`read_logits` of `head_logits`)."""
    return read_logits(spec, head_logits(head, spec, features, batch_size))


def predict_examples(head: FeatureHead, vectors: nn.Module, spec: TaskSpec, examples: list,
                     batch_size: int = 128) -> list:
    """`evaluate` and `predict`: the examples' features (`word_features`) through the head
    (`predict_static`), the path of the training's dev evaluation. Returns predictions as `score` takes them."""
    return predict_static(head, spec, word_features(vectors, examples), batch_size)


def load_static_head(directory: str | Path) -> tuple[FeatureHead, nn.Module, TaskSpec]:
    """A directory written by recipes/static_features.py's `save_head` -> its head (eval mode),
    vectors (or CoVe encoder) and task.

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
