"""Claim 2 (pre-training cuts label needs) end to end at --quick scale."""

import pytest

from bertology.claims.label_needs import QUICK_LABELS

OUTCOMES = ("reproduced", "not reproduced", "inconclusive (within seed range)")


@pytest.mark.slow
def test_label_needs_quick(run_quick):
    results, out = run_quick("label-needs", "glue/SST-2")
    models = [row["model"] for row in results["rows"]]
    assert models == ["BERT, random weights", "ULMFiT (AWD-LSTM, 3 stages)", "BERT, pre-trained here",
                      "all-MiniLM-L6-v2"]
    for row in results["rows"]:
        for count in QUICK_LABELS:
            values = row[f"{count:,} labels"]
            assert len(values) == 2  # one per seed
            assert all(0.3 < v < 1 for v in values)  # SST-2 is balanced: a broken run scores far off
    assert [v["outcome"] in OUTCOMES for v in results["verdicts"]] == [True] * len(QUICK_LABELS)
    assert (out / "label_needs.png").stat().st_size > 10_000
    assert "| all-MiniLM-L6-v2 |" in (out / "results.md").read_text()
    assert "SST-2 dev (80 sentences)" in results["scale"]  # what --quick used, not the full 872
    # each run's own model and metrics are kept, one folder per seed
    assert (out / "runs" / "all-minilm-l6-v2-20" / "seed-1" / "eval_results.json").exists()
