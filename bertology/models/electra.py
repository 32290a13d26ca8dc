"""ELECTRA as transformers lays it out: BERT's encoder (models/bert.py) under ELECTRA's names.

Clark et al. 2020, "ELECTRA: Pre-training Text Encoders as Discriminators Rather Than Generators":
a small masked-LM generator fills masked positions, and the discriminator, the model kept, tells
every token whether it was replaced. Both are BERT encoders with factorized embeddings (bert.py's
`embedding_size`; transformers' `embeddings_project`) and no pooler. A checkpoint is one of them:

- the discriminator, `ElectraForPreTraining`: the encoder and a dense + activation + one logit per
  token head (bert.py's `BertDiscriminatorHead`);
- the generator, `ElectraForMaskedLM`: the encoder and a masked-LM head whose activation is always
  exact GELU, its output matrix the word embeddings unless tie_word_embeddings is false;
- fine-tuned: the sentence head (transformers' ElectraClassificationHead) is dropout, dense, GELU,
  dropout and `out_proj` on the first token; the token and span heads are BERT's.

(`bertology pretrain --arch bert --objective electra` trains both on BERT's layout and keeps the
discriminator's encoder; this family reads and writes ELECTRA's.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from .. import checkpoint
from .base import ModelOutput
from .bert import (
    BERTOLOGY_SWITCHES,
    BertConfig,
    BertDiscriminatorHead,
    BertForMaskedLM,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertForWordInContext,
    BertLayout,
    BertModel,
    BertPreTrainedModel,
    encoder_variant,
)


@dataclass
class ElectraConfig(BertConfig):
    """transformers' ElectraConfig: BertConfig's fields with ELECTRA's defaults (electra-small's sizes).
    config.json always holds embedding_size."""

    MODEL_TYPE: ClassVar[str] = "electra"
    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("electra",)
    WHAT: ClassVar[str] = "an ELECTRA encoder"
    NOT_STORED: ClassVar[tuple[str, ...]] = BERTOLOGY_SWITCHES
    LAYOUT: ClassVar[BertLayout] = BertLayout(pooler=False, mlm_activation="gelu", summary_activation="gelu",
                                              strict=True, variants=("factorized embeddings",))

    embedding_size: int | None = 128
    hidden_size: int = 256
    num_attention_heads: int = 4
    intermediate_size: int = 1024

    def stored_extras(self) -> dict[str, Any]:
        """transformers' ElectraConfig reads a missing embedding_size as 128: it is always written."""
        return {"embedding_size": self.embedding_width}


# ELECTRA's names: BERT's encoder under `electra.`, the projection and the heads its own.
KEYS = checkpoint.KeyTable(
    (
        ("embeddings.projection", ("embeddings_project",)),
        *(row for row in checkpoint.BERT_ENCODER_ROWS if row[0] != "embeddings.projection"),
        ("discriminator.dense", ("discriminator_predictions.dense",)),
        ("discriminator.out.dense", ("discriminator_predictions.dense_prediction",)),
        ("mlm.dense", ("generator_predictions.dense",)),
        ("mlm.norm", ("generator_predictions.LayerNorm",)),
        ("mlm.bias", ("generator_lm_head.bias",)),
        ("mlm.decoder", ("generator_lm_head",)),  # untied output matrices only
        ("classifier.dense", ("classifier",)),  # the token classifier
        ("qa_outputs", ("qa_outputs",)),
    ),
    prefix="electra.", redundant=("embeddings.position_ids",))
# The sequence classifier's ElectraClassificationHead: `classifier.dense` is its summary layer.
SEQUENCE_KEYS = KEYS.with_rows(("summary.dense", ("classifier.dense",)), ("classifier.dense", ("classifier.out_proj",)))


class _Electra:
    """What makes a bert.py class ELECTRA's: its config and its names."""

    config_class = ElectraConfig
    keys = KEYS


class ElectraModel(_Electra, BertModel):
    """The bare encoder (no pooler), as the discriminator's or the generator's."""


class ElectraForPreTraining(_Electra, BertPreTrainedModel):
    """The discriminator: the encoder and a replaced-or-original logit for every token."""

    onnx_output_names = ("logits",)

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.discriminator = BertDiscriminatorHead(config)
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False) -> ModelOutput:
        """Returns logits (B, T), above 0 for "replaced"; with labels (B, T; 1 = replaced) their
        binary cross-entropy over the real tokens (transformers')."""
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)
        logits = self.discriminator(out.last_hidden_state)
        loss = None
        if labels is not None:
            real = torch.ones_like(labels, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
            loss = F.binary_cross_entropy_with_logits(logits.float()[real], labels[real].float())
        return ModelOutput(loss=loss, logits=logits, hidden_states=out.hidden_states, attentions=out.attentions)


class ElectraForMaskedLM(_Electra, BertForMaskedLM):
    """The generator: the encoder and the masked-LM head (`generator_predictions`, `generator_lm_head`)."""


class ElectraForSequenceClassification(_Electra, BertForSequenceClassification):
    """The encoder and ElectraClassificationHead: dense + GELU on the first token, then `out_proj`."""

    keys = SEQUENCE_KEYS


class ElectraForTokenClassification(_Electra, BertForTokenClassification):
    """The encoder and a linear layer on every token."""


class ElectraForQuestionAnswering(_Electra, BertForQuestionAnswering):
    """The encoder and a start and an end score for every token."""


class ElectraForWordInContext(_Electra, BertForWordInContext):
    """bertology's WiC head (models/bert.py), on a dense + GELU summary of the first token where
    BERT reads its pooler; transformers has no such class."""


SPEC = encoder_variant(
    ElectraConfig,
    (ElectraModel, ElectraForPreTraining, ElectraForMaskedLM, ElectraForSequenceClassification,
     ElectraForTokenClassification, ElectraForQuestionAnswering, ElectraForWordInContext),
    heads={"sequence": ElectraForSequenceClassification, "token": ElectraForTokenClassification,
           "span": ElectraForQuestionAnswering, "wic": ElectraForWordInContext},
    describe=lambda c: (f"ELECTRA encoder ({c.num_hidden_layers} layers, {c.hidden_size} wide, "
                        f"{c.embedding_width}-wide embeddings, {c.vocab_size:,}-token vocabulary)"),
    tokenizer_classes={"electra": "ElectraTokenizer"},
)
