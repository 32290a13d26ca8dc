"""Claim 5 (bigger models help) end to end at --quick scale."""

import pytest

from bertology.claims.experiment import GLUE_TASKS, size_label
from bertology.claims.model_size import QUICK_SIZES

OUTCOMES = ("reproduced", "not reproduced", "inconclusive (within seed range)")


@pytest.mark.slow
def test_model_size_quick(run_quick):
    results, out = run_quick("model-size", "glue/SST-2", "glue/MRPC")
    rows = results["rows"]
    assert [row["model"] for row in rows] == [size_label(preset) for preset in QUICK_SIZES]
    parameters = [float(row["parameters"].removesuffix("M")) for row in rows]
    assert parameters == sorted(parameters) and parameters[0] > 1  # millions, growing with size
    for row in rows:
        assert 0.0 < row["held-out MLM accuracy"] < 0.5  # learned a little: above 0, far from perfect
        for task in GLUE_TASKS:
            assert len(row[task]) == 2  # one per seed
            assert all(0.3 < v < 1 for v in row[task])  # a broken run scores far off (both sets near balanced)
    assert [v["statement"] for v in results["verdicts"]] == [
        f"the largest model beats the smallest on {task}" for task in GLUE_TASKS]
    assert all(v["outcome"] in OUTCOMES for v in results["verdicts"])
    assert any("Majority-class dev accuracy: SST-2 0.5" in note for note in results["notes"])
    assert (out / "model_size.png").stat().st_size > 10_000
    assert f"| {size_label('mini')} |" in (out / "results.md").read_text()
    assert (out / "runs" / "mini-mrpc" / "seed-1" / "eval_results.json").exists()
