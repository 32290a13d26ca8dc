"""`bertology wic`: do a model's vectors tell a word's senses apart? The Word-in-Context probe.

WiC (Pilehvar and Camacho-Collados 2019) pairs two sentences that use the same word, in the
same sense or not. The probe: the target word's vector in each sentence (the mean of its
tokens' states at one layer; a static model's one vector of the word's form), a logistic
regression on [v1; v2; v1 * v2; |v1 - v2|] trained on WiC's train split, accuracy on its dev
split, for every layer of the model. A static vector is the same in every context, so beyond
what a word's form (carry / carries) and the lemma's prior give away it cannot beat chance;
the paper's dev anchors are 50.0 for chance, 57.7 for ELMo and 65.5 for BERT-large.

Layers, for every family the package builds (a task model's head is not read):
- BERT (and its variants): the embeddings output ("embeddings") and each Transformer layer
  ("layer 1", ...);
- GPT (GPT-1 or GPT-2 layout): the embeddings output and each block's output (GPT-2's last
  after its final LayerNorm). Causal: a word's state has read its left context only, never the
  words after it; that is the model, not the probe;
- XLNet: the content stream, word embeddings output and each layer, with no permutation (every
  token sees every other, as transformers' XLNetModel without perm_mask);
- T5: the encoder's embeddings output ("encoder embeddings") and each encoder layer ("encoder
  layer 1", ...; the last after the final norm); the decoder is not a word's representation;
- ELMo: the token layer and each LSTM layer (both directions side by side);
- AWD-LSTM (ULMFiT's language model, or its fine-tuned classifier): the embedding layer and each
  LSTM's output ("LSTM 1", ...); one direction, left to right, so like a GPT's it has read the
  words before the target only;
- CoVe: the paper's [GloVe; CoVe] and each half alone; static vectors: the one vector.
`mean` is the average of all layers (an untrained ELMo scalar mix), where they share a width
(an AWD-LSTM's do not: ULMFiT's inner LSTMs are 1,152 wide, its embedding and last LSTM 400).

A sentence is tokenized as the family was trained to read it: [CLS] text [SEP] (bertology's
tokenizer; the [SEP] after the words changes nothing for a left-to-right model), and for T5 the
text + [SEP] that span corruption gave its encoder. The target's tokens are found by their
character offsets, whatever the special tokens and their places; batches are padded on the
right, which the attention masks (and, for the LSTMs and a GPT, reading left to right) keep
from changing a real token's states. The features are standardised on the training pairs
before the regression (lbfgs, C = 1; deterministic).
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
from torch import nn

from ..config import Device, setting
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import write_json_atomic
from ..inference.modeldir import ModelDir, open_model_dir
from ..ops import PRECISION_HELP, PRECISIONS, autocast, resolve_precision
from ..tasks.readers import read_wic
from ..tasks.splits import subset

SPLITS = ("train", "dev")
@dataclass
class WicConfig(Device):
    """The settings of `bertology wic`."""

    data: str = setting(required=True, metavar="DIR", help="WiC's folder: train.data.txt, train.gold.txt, "
                                                           "dev.data.txt, dev.gold.txt")
    model: str = setting(required=True, metavar="MODEL", model_dir=True,
                         help="a BERT, GPT, XLNet, T5 (its encoder), ELMo, AWD-LSTM or CoVe model directory, static "
                              "vectors (bertology static train), or an installed model's name")
    max_train_examples: int | None = setting(None, positive=True, formerly=("max_train_pairs",),
                                             help="fit the regression on a reproducible random subset of this many "
                                                  "training pairs (default: all)")
    batch_size: int = setting(64, positive=True, help="sentences per forward pass")
    precision: str = setting("fp32", choices=PRECISIONS, help=f"the forward passes' precision; {PRECISION_HELP}")
    out: str | None = setting(None, metavar="FILE", output="file", help="also write the results as JSON here "
                                                                                "(default: print only)")


def word_spans(words: list[str], position: int) -> tuple[str, int, int]:
    """The sentence as text (words joined by spaces) and the character span of word `position`."""
    start = sum(len(word) + 1 for word in words[:position])
    return " ".join(words), start, start + len(words[position])


@torch.inference_mode()
def contextual_vectors(model: nn.Module, tokenizer: Tokenizer, sentences: list[tuple[list[str], int]],
                       batch_size: int, precision: str, leading_cls: bool = True) -> list[np.ndarray]:
    """The mean of the target word's tokens' states at every layer, for each (sentence words,
    target position).

    Args:
        model, tokenizer: a model directory's layers and tokenizer (`ModelDir.feature_encoder`).
        sentences: each sentence's words and the index of its target word.
        batch_size: sentences per forward pass.
        precision: "fp32", "bf16" or "auto" (see ops.resolve_precision).
        leading_cls: read "[CLS] text [SEP]"; False: "text [SEP]" (T5's encoder, as span corruption
            trained it).
    Returns:
        One (N, H) float32 array per layer, the embeddings output first (an AWD-LSTM's layers differ
        in width).
    """
    device = next(model.parameters()).device
    precision = resolve_precision(precision, device)
    first_token = 0 if leading_cls else 1
    out, widths = [], []
    for first in range(0, len(sentences), batch_size):
        chunk = [word_spans(words, position) for words, position in sentences[first:first + batch_size]]
        batch = tokenizer([text for text, _, _ in chunk], return_offsets_mapping=True)
        input_ids, attention_mask = batch["input_ids"][:, first_token:], batch["attention_mask"][:, first_token:]
        with autocast(precision, device):
            states = model(input_ids.to(device), attention_mask.to(device)).hidden_states
        widths = [state.shape[-1] for state in states]
        side_by_side = torch.cat(states, dim=-1).float().cpu()  # (B, T, sum of the layers' widths)
        for row, (_, start, end) in enumerate(chunk):
            offsets, mask = batch["offset_mapping"][row, first_token:], attention_mask[row].bool()
            special = offsets[:, 1] == 0  # [CLS], [SEP] and padding have (0, 0)
            # The space before the word counts as the word's: a unigram vocabulary's word-start marker
            # stands for it, and split off ("▁" + "bank") it is the word's first piece, its offsets those
            # of the space. No WordPiece token covers a space, so for those this changes nothing.
            inside = (offsets[:, 0] < end) & (offsets[:, 1] > start - 1) & mask & ~special
            if not inside.any():
                raise UserError(f"the target word {chunk[row][0][start:end]!r} has no token in {chunk[row][0][:60]!r}: "
                                f"it falls outside the model's {tokenizer.model_max_length}-token limit, or the "
                                "tokenizer drops it")
            out.append(side_by_side[row, inside].mean(0).numpy())
    return np.split(np.stack(out), np.cumsum(widths)[:-1], axis=1)


def pair_features(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """[v1; v2; v1 * v2; |v1 - v2|] for (N, H) vectors: (N, 4H)."""
    return np.concatenate([first, second, first * second, np.abs(first - second)], axis=-1)


def probe_accuracy(train: tuple[np.ndarray, np.ndarray], dev: tuple[np.ndarray, np.ndarray]) -> float:
    """Fit the regression on train's (features, labels) and return its accuracy on dev's."""
    classifier = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=3000))
    classifier.fit(*train)
    return float(classifier.score(*dev))


def layer_names(names: tuple[str, str], count: int) -> list[str]:
    """What each of a model's `count` layers is called in the results (its spec's `layer_names`:
    the first layer's name and the others' kind)."""
    first, kind = names
    return [first] + [f"{kind} {i}" for i in range(1, count)]


def target_views(model_dir: ModelDir, targets: list[tuple[list[str], int]], cfg: WicConfig,
                 split: str) -> tuple[dict[str, np.ndarray], int]:
    """Each named view of the target word's vector ((N, H) per view) in each (sentence, position),
    and how many targets had no vector.

    A family with layers (its spec's `feature_encoder`: a BERT, GPT, XLNet, T5's encoder, ELMo or
    AWD-LSTM) gives one view per layer and, where the layers share a width, their mean; a family
    that reads words (its spec's `word_views`) its own: static vectors one, CoVe the paper's
    [GloVe; CoVe] and each half alone beside it (the GloVe half is its context-free control).
    """
    spec = model_dir.spec
    if spec.word_views is not None:
        source = spec.word_features(model_dir.path, model_dir.config).eval()
        with torch.inference_mode():
            return spec.word_views(source, targets, cfg.batch_size)
    print(f"{split}: the target word's vectors in {len(targets):,} sentences ...", file=sys.stderr)
    model, tokenizer = model_dir.feature_encoder(cfg.device)
    layers = contextual_vectors(model, tokenizer, targets, cfg.batch_size, cfg.precision,
                                leading_cls=spec.leading_summary_token)  # (N, H) each
    views = dict(zip(layer_names(spec.layer_names, len(layers)), layers))
    if len({layer.shape[1] for layer in layers}) == 1:  # an AWD-LSTM's LSTMs are wider than its embedding
        views["mean of all layers"] = np.mean(layers, axis=0)
    return views, 0


def run_wic(cfg: WicConfig) -> dict:
    """Probe every layer (view) of the model on WiC; return the results (and write them to cfg.out)."""
    data = Path(cfg.data)
    splits = {split: read_wic(data / f"{split}.data.txt", data / f"{split}.gold.txt") for split in SPLITS}
    splits["train"] = subset(splits["train"], cfg.max_train_examples, seed=0)
    model_dir = open_model_dir(cfg.model)
    family = model_dir.family.name
    if model_dir.spec.feature_encoder is None and model_dir.spec.word_views is None:
        raise UserError(f"{model_dir.path}: a {family} model has no layers or word vectors for the WiC probe to read")
    views, missing = {}, 0
    for split, examples in splits.items():
        targets = [(example.sentences[side], example.positions[side]) for example in examples for side in (0, 1)]
        views[split], missed = target_views(model_dir, targets, cfg, split)
        missing += missed
    labels = {split: np.array([example.same_sense for example in examples]) for split, examples in splits.items()}
    results = []
    for name in views["train"]:
        def features(split: str) -> np.ndarray:
            per_word = views[split][name]  # (2N, H): the two sentences of pair i are rows 2i and 2i + 1
            return pair_features(per_word[0::2], per_word[1::2])
        accuracy = probe_accuracy((features("train"), labels["train"]), (features("dev"), labels["dev"]))
        results.append({"layer": name, "dev_accuracy": accuracy})
    summary = {"model": str(model_dir.path), "family": family, "train_pairs": len(splits["train"]),
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

