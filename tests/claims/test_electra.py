"""Claim 8 (ELECTRA vs the masked LM against pre-training compute) end to end at --quick scale."""

import pytest

from bertology.claims.checkpoints import QUICK_CHECKPOINTS, doubling_steps
from bertology.claims.electra_efficiency import at_compute
from bertology.claims.experiment import QUICK

OUTCOMES = ("reproduced", "not reproduced", "inconclusive (within seed range)")


def test_scores_at_a_compute_between_checkpoints_interpolate_in_log_flops():
    curve = {1e12: [0.5, 0.6], 4e12: [0.7, 0.6]}
    assert at_compute(curve, 2e12) == pytest.approx([0.6, 0.6])  # halfway in log FLOPs, seed with seed
    assert at_compute(curve, 4e12) == [0.7, 0.6]
    assert at_compute(curve, 9e12) == [0.7, 0.6]  # beyond the last checkpoint: the last one's
    assert at_compute(curve, 1e11) == [0.5, 0.6]


@pytest.mark.slow
def test_electra_quick(run_quick):
    results, out = run_quick("electra", "glue/SST-2", "glue/MRPC")
    steps = doubling_steps(QUICK["max_steps"], QUICK_CHECKPOINTS)
    assert [(row["model"], row["task"]) for row in results["rows"]] == [
        ("MLM", "SST-2"), ("MLM", "MRPC"), ("ELECTRA", "SST-2"), ("ELECTRA", "MRPC")]
    for row in results["rows"]:
        for step in steps:
            values = row[f"step {step:,}"]
            assert len(values) == 2  # one per seed
            assert all(0.25 < v < 0.9 for v in values)  # SST-2 balanced, MRPC 68% positive: a broken run is far off
    flops = {row["model"]: float(row["FLOPs per step"]) for row in results["rows"]}
    assert 1e9 < flops["MLM"] < flops["ELECTRA"] < 1.5 * flops["MLM"]  # the generator adds a little
    assert len(results["verdicts"]) == 4 and all(v["outcome"] in OUTCOMES for v in results["verdicts"])
    for task in ("sst2", "mrpc"):
        assert (out / f"electra_{task}.png").stat().st_size > 10_000
    text = (out / "results.md").read_text()
    assert "| ELECTRA | MRPC |" in text and "equal pre-training compute" in text
    assert "rtd_auc" in text and "disc_auc" in text  # the detector's held-out diagnostics
    assert (out / "runs" / f"electra-step-{steps[0]}-sst2" / "seed-1" / "eval_results.json").exists()
