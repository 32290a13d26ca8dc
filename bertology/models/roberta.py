"""RoBERTa as transformers lays it out: BERT's encoder (models/bert.py) under RoBERTa's names.

Liu et al. 2019, "RoBERTa: A Robustly Optimized BERT Pretraining Approach", changed how BERT is
trained (no next-sentence task, dynamic masking, full sentences, large batches, GPT-2's byte-level
BPE), not the encoder. What a RoBERTa checkpoint does differently is three switches of bert.py's
`BertLayout`, and names:

- positions count the real tokens from pad_token_id + 1 (fairseq's `make_positions`), so a
  512-token model has 514 position rows, and one segment embedding (type_vocab_size 1);
- the masked-LM head (`lm_head`) always uses exact GELU;
- the sentence head (transformers' RobertaClassificationHead) is dropout, dense, tanh, dropout and
  `out_proj` on <s>, where BERT has its pooler and one linear layer;
- transformers' prefix `roberta.` and head names, in the key table `KEYS`.

A directory transformers writes (`RobertaModel`, `RobertaForMaskedLM`, `RobertaForSequenceClassification`,
`...ForTokenClassification`, `...ForQuestionAnswering`) loads here with its byte-level BPE tokenizer,
and what bertology writes loads in transformers' AutoModel classes. (`bertology pretrain --arch bert
--objective roberta` trains RoBERTa's recipe on BERT's layout; this family reads and writes RoBERTa's.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .. import checkpoint
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


@dataclass
class RobertaConfig(BertConfig):
    """transformers' RobertaConfig: BertConfig's fields with RoBERTa's defaults (roberta-base's sizes,
    pad_token_id 1, 514 positions, one segment)."""

    MODEL_TYPE: ClassVar[str] = "roberta"
    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("roberta",)
    WHAT: ClassVar[str] = "a RoBERTa encoder"
    NOT_STORED: ClassVar[tuple[str, ...]] = (*BERTOLOGY_SWITCHES, "embedding_size")
    LAYOUT: ClassVar[BertLayout] = BertLayout(positions_after_padding=True, mlm_activation="gelu",
                                              summary_activation="tanh", strict=True)

    vocab_size: int = 50265
    max_position_embeddings: int = 514  # 512 tokens after the pad_token_id + 1 offset
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1


# RoBERTa's names: BERT's encoder under `roberta.`, its heads' own.
KEYS = checkpoint.KeyTable(
    checkpoint.BERT_ENCODER_ROWS + (
        ("mlm.dense", ("lm_head.dense",)),
        ("mlm.norm", ("lm_head.layer_norm",)),
        ("mlm.bias", ("lm_head.bias",)),
        ("mlm.decoder", ("lm_head.decoder",)),  # untied output matrices only
        ("classifier.dense", ("classifier",)),  # the token classifier
        ("qa_outputs", ("qa_outputs",)),
    ),
    prefix="roberta.", redundant=("embeddings.position_ids", "lm_head.decoder.bias"), decoder_bias="lm_head.decoder.bias")
# The sequence classifier's RobertaClassificationHead: `classifier.dense` is its summary layer.
SEQUENCE_KEYS = KEYS.with_rows(("summary.dense", ("classifier.dense",)), ("classifier.dense", ("classifier.out_proj",)))


class _Roberta:
    """What makes a bert.py class RoBERTa's: its config and its names."""

    config_class = RobertaConfig
    keys = KEYS


class RobertaModel(_Roberta, BertModel):
    """The bare encoder and its <s> pooler (transformers' RobertaModel)."""


class RobertaForMaskedLM(_Roberta, BertForMaskedLM):
    """The encoder and `lm_head`, its output matrix the word embeddings unless tie_word_embeddings is false."""


class RobertaForSequenceClassification(_Roberta, BertForSequenceClassification):
    """The encoder and RobertaClassificationHead: dense + tanh on <s>, then `out_proj`."""

    keys = SEQUENCE_KEYS


class RobertaForTokenClassification(_Roberta, BertForTokenClassification):
    """The encoder and a linear layer on every token."""


class RobertaForQuestionAnswering(_Roberta, BertForQuestionAnswering):
    """The encoder and a start and an end score for every token."""


class RobertaForWordInContext(_Roberta, BertForWordInContext):
    """bertology's WiC head (models/bert.py) on RoBERTa's pooler; transformers has no such class."""


SPEC = encoder_variant(
    RobertaConfig,
    (RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification, RobertaForTokenClassification,
     RobertaForQuestionAnswering, RobertaForWordInContext),
    heads={"sequence": RobertaForSequenceClassification, "token": RobertaForTokenClassification,
           "span": RobertaForQuestionAnswering, "wic": RobertaForWordInContext},
    describe=lambda c: (f"RoBERTa encoder ({c.num_hidden_layers} layers, {c.hidden_size} wide, "
                        f"{c.vocab_size:,}-token vocabulary)"),
    tokenizer_classes={"roberta": "RobertaTokenizer"},
)
