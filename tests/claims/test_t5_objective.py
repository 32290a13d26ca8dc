"""Claim 9 (T5's span length and corruption rate) end to end at --quick scale."""

import pytest

from bertology.claims.t5_objective import RANDOM, label, settings

OUTCOMES = ("reproduced", "not reproduced", "inconclusive (within seed range)")


@pytest.mark.slow
def test_t5_objective_quick(run_quick):
    results, out = run_quick("t5-objective", "glue/SST-2", "glue/MRPC")
    names = [row["pre-training"] for row in results["rows"]]
    # --quick sweeps the ends of both ranges and the shared baseline
    assert names == ["span 1, 15%", "span 3, 15%", "span 10, 15%", "span 3, 50%", RANDOM]
    assert names[:-1] == [label(*setting) for setting in settings(quick=True)]
    assert len(settings()) == 8 and label(3, 0.15) in map(lambda s: label(*s), settings())
    for row in results["rows"]:
        for column in ("SST-2 accuracy", "MRPC accuracy", "MRPC F1"):
            assert len(row[column]) == 2 and all(0 <= v <= 1 for v in row[column])  # one per seed
        # the quick updates are enough for label words: the answers decode and read back as labels
        assert row["SST-2 invalid answers"] < 0.5 and row["MRPC invalid answers"] < 0.5
        assert all(v >= 0.3 for v in row["SST-2 accuracy"] + row["MRPC accuracy"])
    verdicts = results["verdicts"]
    assert len(verdicts) == 8 and all(v["outcome"] in OUTCOMES for v in verdicts)
    assert verdicts[0]["better"] != verdicts[0]["worse"] and verdicts[-1]["worse"] == RANDOM
    for plot in ("t5_span_length.png", "t5_corruption_rate.png"):
        assert (out / plot).stat().st_size > 10_000
    assert "| span 10, 15% |" in (out / "results.md").read_text()
