"""Claim 4 (masked vs left-to-right LM along pre-training) end to end at --quick scale."""

import json

import pytest

from bertology.claims.checkpoints import QUICK_CHECKPOINTS, doubling_steps
from bertology.claims.experiment import QUICK

OUTCOMES = ("reproduced", "not reproduced", "inconclusive (within seed range)")


@pytest.mark.slow
def test_directionality_quick(run_quick):
    results, out = run_quick("directionality", "glue/SST-2", "glue/MRPC")
    steps = doubling_steps(QUICK["max_steps"], QUICK_CHECKPOINTS)
    assert [(row["model"], row["task"]) for row in results["rows"]] == [
        ("MLM", "SST-2"), ("MLM", "MRPC"), ("LTR", "SST-2"), ("LTR", "MRPC")]
    for row in results["rows"]:
        for step in steps:
            values = row[f"step {step:,}"]
            assert len(values) == 2  # one per seed
            assert all(0.25 < v < 0.9 for v in values)  # SST-2 balanced, MRPC 68% positive: a broken run is far off
    assert len(results["verdicts"]) == 4 and all(v["outcome"] in OUTCOMES for v in results["verdicts"])
    for task in ("sst2", "mrpc"):
        assert (out / f"directionality_{task}.png").stat().st_size > 10_000
    text = (out / "results.md").read_text()
    assert "| LTR | MRPC |" in text and "mlm_accuracy" in text and "perplexity" in text
    # the left-to-right models are fine-tuned with the causal mask kept, every kept step
    for step in steps:
        config = json.loads((out / "runs" / f"ltr-step-{step}-mrpc" / "seed-1" / "config.json").read_text())
        assert config["causal"] is True
