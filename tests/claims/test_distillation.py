"""Claim 11 (distillation beats training the small model directly) end to end at --quick scale."""

import pytest

from bertology.claims.distillation import QUICK_DEV, QUICK_LABELS

OUTCOMES = ("reproduced", "not reproduced", "inconclusive (within seed range)")


@pytest.mark.slow
def test_distillation_quick(run_quick):
    results, out = run_quick("distillation", "glue/SST-2")
    rows = {row["model"]: row["SST-2 dev accuracy"] for row in results["rows"]}
    assert list(rows) == ["teacher: all-MiniLM-L6-v2",
                          "student pre-trained here, fine-tuned", "student pre-trained here, distilled",
                          "student from random weights, fine-tuned", "student from random weights, distilled"]
    assert len(rows["teacher: all-MiniLM-L6-v2"]) == 1  # one teacher
    for name, values in rows.items():
        if name.startswith("student"):
            assert len(values) == 2  # one per seed
        # SST-2 is balanced: a broken run scores far off; the dev subset has QUICK_DEV sentences
        assert all(0.3 < v < 1 and round(v * QUICK_DEV) == pytest.approx(v * QUICK_DEV) for v in values)
    assert [v["better"] for v in results["verdicts"]] == ["student pre-trained here, distilled",
                                                          "student from random weights, distilled"]
    assert all(v["outcome"] in OUTCOMES for v in results["verdicts"])
    assert (out / "distillation.png").stat().st_size > 10_000
    markdown = (out / "results.md").read_text()
    assert "| student from random weights, distilled |" in markdown and f"{QUICK_LABELS:,} labels" in markdown
    # every student is kept, one folder per seed, with the teacher's score beside its own
    distilled = out / "runs" / "pretrained-distilled" / "seed-1"
    assert (distilled / "eval_results.json").exists() and (distilled / "distill_config.json").exists()
    assert (out / "runs" / "teacher" / "eval_results.json").exists()
