"""Claim 7 (ALBERT shrinks parameters, not compute) end to end at --quick scale."""

import pytest

from bertology.claims.experiment import GLUE_TASKS

OUTCOMES = ("reproduced", "not reproduced", "inconclusive (within seed range)")
# --quick runs the tiny width (128), so the factorised embeddings are 64 wide (half the width, as E=128 at mini)
MODELS = ["BERT", "factorised embeddings (E=64)", "shared layers", "both (ALBERT, E=64)"]


@pytest.mark.slow
def test_albert_quick(run_quick):
    results, out = run_quick("albert", "glue/SST-2", "glue/MRPC")
    rows = {row["model"]: row for row in results["rows"]}
    assert list(rows) == MODELS
    parameters = {name: float(row["parameters"].removesuffix("M")) for name, row in rows.items()}
    # deterministic: each switch cuts parameters, both together the most
    assert parameters["BERT"] > parameters["shared layers"] > parameters["both (ALBERT, E=64)"]
    assert parameters["BERT"] > parameters["factorised embeddings (E=64)"] > parameters["both (ALBERT, E=64)"]
    assert rows["BERT"]["BERT's parameters / this"] == 1.0
    for row in rows.values():
        assert len(row["training tokens/s (timed here)"]) == 2 and len(row["inference sentences/s"]) == 2  # rounds
        assert all(v > 10 for v in row["training tokens/s (timed here)"] + row["inference sentences/s"])
        assert row["tokens/s of its pre-training run"] > 10
        for task in GLUE_TASKS:
            assert len(row[task]) == 2  # one per seed
            assert all(0.2 < v < 1 for v in row[task])
    verdicts = results["verdicts"]
    assert len(verdicts) == 3 + 3 + 3 * len(GLUE_TASKS)  # parameters, compute, downstream for each switch
    assert [v["outcome"] for v in verdicts[:3]] == ["reproduced"] * 3  # fewer parameters is arithmetic
    assert all(v["outcome"] in OUTCOMES for v in verdicts)
    for plot in ("albert_accuracy.png", "albert_cost.png"):
        assert (out / plot).stat().st_size > 10_000
    assert "| shared layers |" in (out / "results.md").read_text()
    assert (out / "runs" / "albert-mrpc" / "seed-1" / "eval_results.json").exists()
