"""Claim 6 (RoBERTa's findings) end to end at --quick scale."""

import pytest

from bertology.claims.experiment import GLUE_TASKS, QUICK

OUTCOMES = ("reproduced", "not reproduced", "inconclusive (within seed range)")


@pytest.mark.slow
def test_roberta_quick(run_quick):
    results, out = run_quick("roberta", "glue/SST-2", "glue/MRPC")
    rows = results["rows"]
    # --quick: the longest run is the shared tiny MLM's, the shorter ones a quarter and a half of it
    longest = QUICK["max_steps"]
    steps = (longest // 4, longest // 2, longest)
    static, dynamic = (f"{kind}, tiny BERT, {longest} steps on a corpus slice"
                       for kind in ("static masks (BERT's 10 copies)", "dynamic masks (RoBERTa's)"))
    assert [row["model"] for row in rows] == [
        static, dynamic, f"MLM + NSP, segment pairs (BERT), {longest} steps",
        *(f"MLM, full sentences (RoBERTa), {count} steps" for count in steps)]
    assert any(note.startswith("Static vs dynamic masking (Table 1): --quick: the slice") for note in results["notes"])
    for row in rows:
        assert 0.0 <= row["held-out MLM accuracy"] < 0.5  # a few steps: at or just above zero
        for task in GLUE_TASKS:
            assert len(row[task]) == 2  # one per seed
            assert all(0.2 < v < 1 for v in row[task])
    statements = [v["statement"] for v in results["verdicts"]]
    assert statements[:2] == [f"dynamic masking matches or beats static on {task}" for task in GLUE_TASKS]
    assert statements[2:4] == [f"full sentences without NSP beat segment pairs with NSP on {task}"
                               for task in GLUE_TASKS]
    assert statements[4:] == [f"training {longer} steps beats {shorter} on {task}"
                              for task in GLUE_TASKS for shorter, longer in zip(steps, steps[1:])]
    assert all(v["outcome"] in OUTCOMES for v in results["verdicts"])
    for plot in ("roberta_longer.png", "roberta_nsp.png", "roberta_masking.png"):
        assert (out / plot).stat().st_size > 10_000
    text = (out / "results.md").read_text()
    assert f"| MLM + NSP, segment pairs (BERT), {longest} steps |" in text and "not run" not in text
    assert (out / "runs" / f"roberta-{steps[1]}-sst2" / "seed-1" / "eval_results.json").exists()
    assert (out / "runs" / f"static-masks-{longest}-mrpc" / "seed-1" / "eval_results.json").exists()
