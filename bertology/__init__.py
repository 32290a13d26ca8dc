"""bertology: BERT end to end in one readable, fast PyTorch codebase.

Train a WordPiece vocabulary, pre-train an encoder, fine-tune it, pull features,
distil, export and serve. The public names follow Hugging Face transformers so
that habits carry over.
"""

from .config import PRESETS, BertConfig
from .errors import UserError
from .model import (
    BertForMaskedLM,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    ModelOutput,
)
from .tokenizer import Tokenizer

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "BertConfig",
    "BertForMaskedLM",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "ModelOutput",
    "Tokenizer",
    "UserError",
    "__version__",
]
