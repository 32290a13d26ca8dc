"""The claims' quick tier: every claim's --quick run shares one pre-training cache, as the claims
themselves share pre-trained models, so a tiny model is pre-trained once per test session."""

import pytest

from bertology.claims import find_claim, run_claim
from bertology.claims.experiment import ReproduceConfig


@pytest.fixture(scope="session")
def claims_cache(tmp_path_factory):
    """One pre-training cache for every quick claim of the session."""
    return tmp_path_factory.mktemp("claims_cache")


@pytest.fixture
def run_quick(tmp_path, data_dir, claims_cache):
    """Run a claim with --quick into a fresh folder (`settings`: more ReproduceConfig settings);
    returns (its results, the folder)."""
    def run(name: str, *needed: str, **settings) -> tuple[dict, object]:
        for relative in ("wikitext-2-raw/wiki.valid.raw", *needed):
            data_dir / relative  # skips the test when the data set is absent
        out = tmp_path / find_claim(name).name
        cfg = ReproduceConfig(claim=name, out=str(out), data=str(data_dir.root), quick=True,
                              cache_dir=str(claims_cache), **settings)
        return run_claim(cfg), out
    return run
