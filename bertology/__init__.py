"""bertology: BERT end to end in one readable, fast PyTorch codebase.

Train a WordPiece vocabulary, pre-train an encoder, fine-tune it, pull features,
distil, export and serve. The public names follow Hugging Face transformers so
that habits carry over.

Names are imported on first use, so `bertology --help` starts without loading PyTorch.
"""

from importlib import import_module

__version__ = "0.1.0"

_PUBLIC = {
    "SIZES": "models.base",
    "BertConfig": "models.bert",
    "UserError": "errors",
    "BertModel": "models.bert",
    "BertForPreTraining": "models.bert",
    "BertForMaskedLM": "models.bert",
    "BertForSequenceClassification": "models.bert",
    "BertForTokenClassification": "models.bert",
    "BertForQuestionAnswering": "models.bert",
    "ModelOutput": "models.base",
    "Tokenizer": "data.tokenizer",
}

# Python APIs that mirror a command group: `bertology.static.train(...)` as `bertology static train`.
_MODULES = {"static": "recipes.static_vectors"}

__all__ = [*_PUBLIC, *_MODULES, "__version__"]


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    if name in _MODULES:
        return import_module(f".{_MODULES[name]}", __name__)
    raise AttributeError(f"module 'bertology' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
