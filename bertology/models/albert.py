"""ALBERT as transformers lays it out: BERT's encoder (models/bert.py) with its two switches, under ALBERT's names.

Lan et al. 2020, "ALBERT: A Lite BERT for Self-supervised Learning of Language Representations":
factorized embeddings (an E-wide table projected up to H: bert.py's `embedding_size`) and one
layer's weights shared by every layer (`share_layers`), with sentence-order prediction for BERT's
next-sentence task (the `nsp` head, transformers' `sop_classifier`). transformers' layout always
has the projection (`embedding_hidden_mapping_in`, `BertLayout.always_project`) and groups its
layers: one group (shared) or one per layer (not shared) are the two bert.py holds; others are a
one-line error. ALBERT's feed-forward has no dropout after its output (BERT's has): the same
model in evaluation, a different one in training only when hidden_dropout_prob is not 0 (ALBERT
v2's is 0). Its SentencePiece tokenizer frames "[CLS] A [SEP] B [SEP]" as BERT's does.
(`bertology pretrain --arch bert --objective albert` trains ALBERT's recipe on BERT's layout; this
family reads and writes ALBERT's.)
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
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertForWordInContext,
    BertLayout,
    BertModel,
    encoder_variant,
)


@dataclass
class AlbertConfig(BertConfig):
    """transformers' AlbertConfig: BertConfig's fields with ALBERT's defaults (albert-base-v2's sizes).
    config.json holds the layer sharing as `num_hidden_groups` (1: shared) and `inner_group_num` (1),
    and the classifier's dropout as `classifier_dropout_prob`."""

    MODEL_TYPE: ClassVar[str] = "albert"
    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("albert",)
    WHAT: ClassVar[str] = "an ALBERT encoder"
    NOT_STORED: ClassVar[tuple[str, ...]] = (*BERTOLOGY_SWITCHES, "classifier_dropout")
    LAYOUT: ClassVar[BertLayout] = BertLayout(always_project=True, strict=True,
                                              variants=("factorized embeddings", "shared layers"))

    vocab_size: int = 30000
    embedding_size: int | None = 128
    hidden_act: str = "gelu_new"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    share_layers: bool = True
    classifier_dropout: float | None = 0.1

    def stored_extras(self) -> dict[str, Any]:
        """ALBERT's names for the sharing and the classifier's dropout."""
        dropout = self.hidden_dropout_prob if self.classifier_dropout is None else self.classifier_dropout
        return {"num_hidden_groups": 1 if self.share_layers else self.num_hidden_layers, "inner_group_num": 1,
                "classifier_dropout_prob": dropout, "embedding_size": self.embedding_width}

    @classmethod
    def from_stored(cls, data: dict[str, Any], model_type: str, source: str) -> dict[str, Any]:
        """Groups of layers -> `share_layers` (one group, or one per layer; others are refused)."""
        data = dict(data)
        groups, inner = data.pop("num_hidden_groups", 1), data.pop("inner_group_num", 1)
        layers = data.get("num_hidden_layers", cls.num_hidden_layers)
        if inner != 1 or groups not in (1, layers):
            raise UserError(f"{source}: num_hidden_groups {groups!r} and inner_group_num {inner!r}: bertology reads "
                            f"ALBERT with one group of one layer (shared) or {layers} groups (one per layer)")
        if "classifier_dropout_prob" in data:
            data["classifier_dropout"] = data.pop("classifier_dropout_prob")
        return {**data, "share_layers": groups == 1}


ALBERT_LAYER = "encoder.albert_layer_groups.{i}.albert_layers.0."  # layer i's group (one layer per group)
# ALBERT's names: the embeddings as BERT's, each layer (group) its own, under `albert.`.
KEYS = checkpoint.KeyTable(
    (
        *(row for row in checkpoint.BERT_ENCODER_ROWS if row[0].startswith("embeddings.")),
        ("layers.{i}.attention.qkv", tuple(f"{ALBERT_LAYER}attention.{n}" for n in ("query", "key", "value"))),
        ("layers.{i}.attention.out", (f"{ALBERT_LAYER}attention.dense",)),
        ("layers.{i}.attention_norm", (f"{ALBERT_LAYER}attention.LayerNorm",)),
        ("layers.{i}.ffn_in", (f"{ALBERT_LAYER}ffn",)),
        ("layers.{i}.ffn_out", (f"{ALBERT_LAYER}ffn_output",)),
        ("layers.{i}.ffn_norm", (f"{ALBERT_LAYER}full_layer_layer_norm",)),
        ("pooler", ("pooler",)),
        ("mlm.dense", ("predictions.dense",)),
        ("mlm.norm", ("predictions.LayerNorm",)),
        ("mlm.bias", ("predictions.bias",)),
        ("mlm.decoder", ("predictions.decoder",)),  # untied output matrices only
        ("nsp.dense", ("sop_classifier.classifier",)),  # sentence-order prediction
        ("classifier.dense", ("classifier",)),
        ("qa_outputs", ("qa_outputs",)),
    ),
    prefix="albert.", redundant=("embeddings.position_ids", "predictions.decoder.bias"),
    decoder_bias="predictions.decoder.bias")


class _Albert:
    """What makes a bert.py class ALBERT's: its config and its names."""

    config_class = AlbertConfig
    keys = KEYS


class AlbertModel(_Albert, BertModel):
    """The bare encoder and its [CLS] pooler (transformers' AlbertModel)."""


class AlbertForPreTraining(_Albert, BertForPreTraining):
    """The encoder, the masked-LM head and sentence-order prediction (`sop_classifier`)."""


class AlbertForMaskedLM(_Albert, BertForMaskedLM):
    """The encoder and the masked-LM head (`predictions`), E wide before the output matrix."""


class AlbertForSequenceClassification(_Albert, BertForSequenceClassification):
    """The encoder and a linear layer on the pooled [CLS] vector."""


class AlbertForTokenClassification(_Albert, BertForTokenClassification):
    """The encoder and a linear layer on every token."""


class AlbertForQuestionAnswering(_Albert, BertForQuestionAnswering):
    """The encoder and a start and an end score for every token."""


class AlbertForWordInContext(_Albert, BertForWordInContext):
    """bertology's WiC head (models/bert.py) on ALBERT's pooler; transformers has no such class."""


SPEC = encoder_variant(
    AlbertConfig,
    (AlbertModel, AlbertForPreTraining, AlbertForMaskedLM, AlbertForSequenceClassification,
     AlbertForTokenClassification, AlbertForQuestionAnswering, AlbertForWordInContext),
    heads={"sequence": AlbertForSequenceClassification, "token": AlbertForTokenClassification,
           "span": AlbertForQuestionAnswering, "wic": AlbertForWordInContext},
    describe=lambda c: (f"ALBERT encoder ({c.num_hidden_layers} layers{', shared' if c.share_layers else ''}, "
                        f"{c.hidden_size} wide, {c.embedding_width}-wide embeddings, {c.vocab_size:,}-token "
                        "vocabulary)"),
    tokenizer_classes={"albert": "AlbertTokenizer"},
)
