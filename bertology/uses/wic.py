"""`bertology wic`: do a model's vectors tell a word's senses apart? The Word-in-Context probe.

WiC (Pilehvar and Camacho-Collados 2019) pairs two sentences that use the same word, in the
same sense or not. The probe: the target word's vector in each sentence (the mean of its
tokens' states at one layer; a static model's one vector of the word's form), a logistic
regression on [v1; v2; v1 * v2; |v1 - v2|] trained on WiC's train split, accuracy on its dev
split, for every layer of the model. A static vector is the same in every context, so beyond
what a word's form (carry / carries) and the lemma's prior give away it cannot beat chance;
the paper's dev anchors are 50.0 for chance, 57.7 for ELMo and 65.5 for BERT-large.

Layers: a BERT's embeddings output (0) and each Transformer layer, ELMo's token layer (0) and
each LSTM layer (both directions side by side); `mean` is the average of all of them (an
untrained ELMo scalar mix). CoVe gives the paper's [GloVe; CoVe] and each half alone. The features are standardised on the training pairs before the
regression (lbfgs, C = 1; deterministic).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ..config import setting
from ..errors import UserError
from ..files import write_json_atomic
from ..inference.embedding import load_encoder
from ..inference.modeldir import load_model
from ..models import family_of, resolve_model_dir
from ..models.cove import CoVeModel
from ..ops import PRECISIONS, autocast, resolve_precision
from ..tasks.readers import read_wic
from ..training.tasks import subset

SPLITS = ("train", "dev")


@dataclass
class WicConfig:
    """The settings of `bertology wic`."""

    data: str = setting(required=True, metavar="DIR", help="WiC's folder: train.data.txt, train.gold.txt, "
                                                           "dev.data.txt, dev.gold.txt")
    model: str = setting(required=True, metavar="MODEL", model_dir=True,
                         help="a BERT, ELMo or CoVe model directory, static vectors (bertology static train), or an "
                              "installed model's name")
    max_train_pairs: int | None = setting(None, positive=True, help="fit the regression on a reproducible random "
                                                                    "subset of this many training pairs (default: all)")
    batch_size: int = setting(64, positive=True, help="sentences per forward pass")
    precision: str = setting("fp32", choices=PRECISIONS, help="the forward passes' precision")
    out: str | None = setting(None, metavar="FILE", output="file", help="also write the results as JSON here "
                                                                                "(default: print only)")


def word_spans(words: list[str], position: int) -> tuple[str, int, int]:
    """The sentence as text (words joined by spaces) and the character span of word `position`."""
    start = sum(len(word) + 1 for word in words[:position])
    return " ".join(words), start, start + len(words[position])


@torch.inference_mode()
def contextual_vectors(model, tokenizer, sentences: list[tuple[list[str], int]], batch_size: int,
                       precision: str) -> np.ndarray:
    """(N, layers, H) float32: the mean of the target word's tokens' states at every layer, for
    each (sentence words, target position)."""
    device = next(model.parameters()).device
    precision = resolve_precision(precision, device)
    out = []
    for first in range(0, len(sentences), batch_size):
        chunk = [word_spans(words, position) for words, position in sentences[first:first + batch_size]]
        batch = tokenizer([text for text, _, _ in chunk], return_offsets_mapping=True)
        with autocast(precision, device):
            states = model(batch["input_ids"].to(device), batch["attention_mask"].to(device),
                           output_hidden_states=True).hidden_states
        stacked = torch.stack(states, dim=2).float().cpu()  # (B, T, layers, H)
        for row, (_, start, end) in enumerate(chunk):
            offsets, mask = batch["offset_mapping"][row], batch["attention_mask"][row].bool()
            special = offsets[:, 1] == 0  # [CLS], [SEP] and padding have (0, 0)
            inside = (offsets[:, 0] < end) & (offsets[:, 1] > start) & mask & ~special
            if not inside.any():  # cut off by the length limit
                raise UserError(f"the target word {chunk[row][0][start:end]!r} falls outside the model's "
                                f"{batch['input_ids'].shape[1]}-token limit in {chunk[row][0][:60]!r}")
            out.append(stacked[row, inside].mean(0).numpy())
    return np.stack(out)


def pair_features(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """[v1; v2; v1 * v2; |v1 - v2|] for (N, H) vectors: (N, 4H)."""
    return np.concatenate([first, second, first * second, np.abs(first - second)], axis=-1)


def probe_accuracy(train: tuple[np.ndarray, np.ndarray], dev: tuple[np.ndarray, np.ndarray]) -> float:
    """Fit the regression on train's (features, labels) and return its accuracy on dev's."""
    classifier = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=3000))
    classifier.fit(*train)
    return float(classifier.score(*dev))


def layer_names(family: str, count: int) -> list[str]:
    """What each of a model's `count` layers is called in the results."""
    if family == "static":
        return ["static"]
    first = "token layer" if family == "elmo" else "embeddings"
    kind = "LSTM" if family == "elmo" else "layer"
    return [first] + [f"{kind} {i}" for i in range(1, count)]


def target_views(model_dir: Path, family: str, targets: list[tuple[list[str], int]], cfg: WicConfig,
                 split: str) -> tuple[dict[str, np.ndarray], int]:
    """Each named view of the target word's vector ((N, H) per view) in each (sentence, position),
    and how many targets had no vector (static vectors: zeros).

    A BERT or ELMo gives one view per layer and their mean; static vectors one; CoVe the paper's
    [GloVe; CoVe], each half alone beside it (the GloVe half is its context-free control).
    """
    if family == "static":
        static = load_model(model_dir)
        found = [static.vector(words[position]) for words, position in targets]
        width = static.vectors.shape[1]
        rows = [vector.numpy() if vector is not None else np.zeros(width, np.float32) for vector in found]
        return {"static": np.stack(rows)}, sum(vector is None for vector in found)
    print(f"{split}: the target word's vectors in {len(targets):,} sentences ...", file=sys.stderr)
    if family == "cove":
        cove = CoVeModel.from_pretrained(model_dir)
        rows = []
        for first in range(0, len(targets), cfg.batch_size):
            chunk = targets[first:first + cfg.batch_size]
            features, _ = cove([words for words, _ in chunk])  # (B, T, D + 2H)
            rows.append(features[torch.arange(len(chunk)), [position for _, position in chunk]].numpy())
        both = np.concatenate(rows)
        glove_width = cove.config.input_size
        return {"GloVe (context-free)": both[:, :glove_width], "CoVe": both[:, glove_width:],
                "[GloVe; CoVe]": both}, 0
    model, tokenizer = load_encoder(model_dir)
    layers = contextual_vectors(model, tokenizer, targets, cfg.batch_size, cfg.precision)  # (N, layers, H)
    views = {name: layers[:, index] for index, name in enumerate(layer_names(family, layers.shape[1]))}
    views["mean of all layers"] = layers.mean(1)
    return views, 0


def run_wic(cfg: WicConfig) -> dict:
    """Probe every layer (view) of the model on WiC; return the results (and write them to cfg.out)."""
    data = Path(cfg.data)
    splits = {split: read_wic(data / f"{split}.data.txt", data / f"{split}.gold.txt") for split in SPLITS}
    splits["train"] = subset(splits["train"], cfg.max_train_pairs, seed=0)
    model_dir = resolve_model_dir(cfg.model)
    family = family_of(model_dir).name
    if family not in ("static", "bert", "elmo", "cove"):
        raise UserError(f"{model_dir}: a {family} model; the WiC probe reads BERT, ELMo or CoVe layers, or static "
                        "vectors")
    views, missing = {}, 0
    for split, examples in splits.items():
        targets = [(example.sentences[side], example.positions[side]) for example in examples for side in (0, 1)]
        views[split], missed = target_views(model_dir, family, targets, cfg, split)
        missing += missed
    labels = {split: np.array([example.same_sense for example in examples]) for split, examples in splits.items()}
    results = []
    for name in views["train"]:
        def features(split: str) -> np.ndarray:
            per_word = views[split][name]  # (2N, H): the two sentences of pair i are rows 2i and 2i + 1
            return pair_features(per_word[0::2], per_word[1::2])
        accuracy = probe_accuracy((features("train"), labels["train"]), (features("dev"), labels["dev"]))
        results.append({"layer": name, "dev_accuracy": accuracy})
    summary = {"model": str(model_dir), "family": family, "train_pairs": len(splits["train"]),
               "dev_pairs": len(splits["dev"]), "majority": float(max(labels["dev"].mean(), 1 - labels["dev"].mean())),
               "missing_static_vectors": missing, "layers": results}
    if cfg.out:
        write_json_atomic(Path(cfg.out), summary)
    return summary


def format_results(summary: dict) -> str:
    """The results as the table `bertology wic` prints."""
    lines = [f"WiC dev accuracy of a logistic regression on the target word's vectors ({summary['model']}; "
             f"{summary['train_pairs']:,} training pairs, {summary['dev_pairs']:,} dev pairs, majority "
             f"{summary['majority']:.3f}; the paper: chance 0.500, ELMo 0.577, BERT-large 0.655)"]
    lines += [f"  {row['layer']:<20} {row['dev_accuracy']:.3f}" for row in summary["layers"]]
    if summary["missing_static_vectors"]:
        lines.append(f"  ({summary['missing_static_vectors']:,} target words have no static vector: zeros)")
    return "\n".join(lines)

