"""DistilBERT as transformers lays it out: BERT's encoder (models/bert.py) without segments, under DistilBERT's names.

Sanh et al. 2019, "DistilBERT, a distilled version of BERT": a 6-layer student of BERT-base,
initialised from every other teacher layer (bert.py's `keep_layers`; `bertology distill
--student-layers`) and trained on the teacher's soft targets. Its layers are BERT's; what differs
is the layout, each a switch of bert.py:

- no segment embeddings (`type_vocab_size` 0) and no pooler;
- the sentence head is `pre_classifier` (dense), ReLU, dropout and `classifier` on the first token,
  with no dropout before the dense layer;
- config.json's own field names (`dim`, `n_layers`, `n_heads`, `hidden_dim`, `dropout`,
  `attention_dropout`, `activation`, `seq_classif_dropout`), which `DistilBertConfig` reads and
  writes for bert.py's; the LayerNorms' eps is always 1e-12;
- transformers' prefix `distilbert.` and module names, in the key table `KEYS`.

Dropout differs in training only: transformers' question-answering head has its own dropout
(`qa_dropout`, kept in config.json, not applied here) and its token head uses `dropout`, where
bert.py's uses the classifier's (`seq_classif_dropout`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import checkpoint
from ..errors import UserError
from .bert import (
    BERTOLOGY_SWITCHES,
    BertConfig,
    BertForMaskedLM,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertForWordInContext,
    BertLayout,
    BertModel,
    encoder_variant,
)

# bert.py's field -> DistilBERT's config.json key.
STORED_NAMES = {"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
                "intermediate_size": "hidden_dim", "hidden_dropout_prob": "dropout",
                "attention_probs_dropout_prob": "attention_dropout", "hidden_act": "activation",
                "classifier_dropout": "seq_classif_dropout"}
LAYER_NORM_EPS = 1e-12  # fixed in DistilBERT's modules, not a config key


@dataclass
class DistilBertConfig(BertConfig):
    """transformers' DistilBertConfig, held in BertConfig's fields (so that bert.py's modules read it)
    and stored under DistilBERT's names (`STORED_NAMES`); defaults are distilbert-base's."""

    MODEL_TYPE: ClassVar[str] = "distilbert"
    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("distilbert",)
    WHAT: ClassVar[str] = "a DistilBERT encoder"
    NOT_STORED: ClassVar[tuple[str, ...]] = (*BERTOLOGY_SWITCHES, "embedding_size", "type_vocab_size",
                                             "layer_norm_eps")
    LAYOUT: ClassVar[BertLayout] = BertLayout(pooler=False, summary_activation="relu", summary_input_dropout=False,
                                              strict=True, variants=("no segment embeddings",))

    num_hidden_layers: int = 6
    type_vocab_size: int = 0
    classifier_dropout: float | None = 0.2

    def validate(self) -> None:
        """BertConfig's checks, and DistilBERT's fixed layout: no segments, LayerNorm eps 1e-12."""
        super().validate()
        if self.type_vocab_size != 0 or self.layer_norm_eps != LAYER_NORM_EPS:
            raise UserError(f"a DistilBERT has no segment embeddings and LayerNorm eps {LAYER_NORM_EPS}; got "
                            f"type_vocab_size {self.type_vocab_size!r}, layer_norm_eps {self.layer_norm_eps!r}")

    def to_dict(self) -> dict[str, Any]:
        """config.json's content under DistilBERT's names."""
        return {STORED_NAMES.get(key, key): value for key, value in super().to_dict().items()}

    @classmethod
    def from_stored(cls, data: dict[str, Any], model_type: str, source: str) -> dict[str, Any]:
        """DistilBERT's names -> bert.py's fields (a key under both names is refused)."""
        fields = {stored: ours for ours, stored in STORED_NAMES.items()}
        both = [key for key in data if key in STORED_NAMES and STORED_NAMES[key] in data]
        if both:
            raise UserError(f"{source}: both {both[0]!r} and {STORED_NAMES[both[0]]!r}: give DistilBERT's name only")
        return {fields.get(key, key): value for key, value in data.items()}


DISTILBERT_LAYER = "transformer.layer.{i}."
# DistilBERT's names, under `distilbert.`.
KEYS = checkpoint.KeyTable(
    (
        ("embeddings.word_embeddings", ("embeddings.word_embeddings",)),
        ("embeddings.position_embeddings", ("embeddings.position_embeddings",)),
        ("embeddings.norm", ("embeddings.LayerNorm",)),
        ("layers.{i}.attention.qkv", tuple(f"{DISTILBERT_LAYER}attention.{n}" for n in ("q_lin", "k_lin", "v_lin"))),
        ("layers.{i}.attention.out", (f"{DISTILBERT_LAYER}attention.out_lin",)),
        ("layers.{i}.attention_norm", (f"{DISTILBERT_LAYER}sa_layer_norm",)),
        ("layers.{i}.ffn_in", (f"{DISTILBERT_LAYER}ffn.lin1",)),
        ("layers.{i}.ffn_out", (f"{DISTILBERT_LAYER}ffn.lin2",)),
        ("layers.{i}.ffn_norm", (f"{DISTILBERT_LAYER}output_layer_norm",)),
        ("mlm.dense", ("vocab_transform",)),
        ("mlm.norm", ("vocab_layer_norm",)),
        ("mlm.bias", ("vocab_projector.bias",)),
        ("mlm.decoder", ("vocab_projector",)),  # untied output matrices only
        ("summary.dense", ("pre_classifier",)),
        ("classifier.dense", ("classifier",)),
        ("qa_outputs", ("qa_outputs",)),
    ),
    prefix="distilbert.", redundant=("embeddings.position_ids",))


class _DistilBert:
    """What makes a bert.py class DistilBERT's: its config and its names."""

    config_class = DistilBertConfig
    keys = KEYS


class DistilBertModel(_DistilBert, BertModel):
    """The bare encoder: no segments, no pooler."""


class DistilBertForMaskedLM(_DistilBert, BertForMaskedLM):
    """The encoder and the masked-LM head (`vocab_transform`, `vocab_layer_norm`, `vocab_projector`)."""


class DistilBertForSequenceClassification(_DistilBert, BertForSequenceClassification):
    """The encoder and `pre_classifier` + ReLU on the first token, then `classifier`."""


class DistilBertForTokenClassification(_DistilBert, BertForTokenClassification):
    """The encoder and a linear layer on every token."""


class DistilBertForQuestionAnswering(_DistilBert, BertForQuestionAnswering):
    """The encoder and a start and an end score for every token."""


class DistilBertForWordInContext(_DistilBert, BertForWordInContext):
    """bertology's WiC head (models/bert.py), on a dense + ReLU summary of the first token where BERT
    reads its pooler; transformers has no such class."""


SPEC = encoder_variant(
    DistilBertConfig,
    (DistilBertModel, DistilBertForMaskedLM, DistilBertForSequenceClassification, DistilBertForTokenClassification,
     DistilBertForQuestionAnswering, DistilBertForWordInContext),
    heads={"sequence": DistilBertForSequenceClassification, "token": DistilBertForTokenClassification,
           "span": DistilBertForQuestionAnswering, "wic": DistilBertForWordInContext},
    describe=lambda c: (f"DistilBERT encoder ({c.num_hidden_layers} layers, {c.hidden_size} wide, "
                        f"{c.vocab_size:,}-token vocabulary)"),
    tokenizer_classes={"distilbert": "DistilBertTokenizer"},
)
