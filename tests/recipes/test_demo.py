"""`bertology demo` end to end with a short budget: every step runs and every output is written."""

import json

from bertology.cli import main


def test_demo_writes_results_and_pictures(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--pretrain-time", "15s", "--no-progress"]) == 0
    results = json.loads((out / "results.json").read_text())
    for name in ("pretrained", "from_scratch"):
        assert 0 <= results[name]["accuracy"] <= 1 and "mcc" in results[name]
    assert len(results["labels"]) >= 2 and results["pretraining"]["steps"] > 0
    assert 0 < results["pretraining"]["mlm_accuracy"] < 1
    for picture in ("finetuning.png", "pretrained/training_curves.png", "finetuned_pretrained/learning_curve.png"):
        assert (out / picture).stat().st_size > 10_000, picture
    table = capsys.readouterr().out
    assert "pre-trained, then fine-tuned" in table and "fine-tuned from scratch" in table
    # the evaluation modules' docstrings never reach the pre-training corpus
    corpus = "".join(p.read_text() for p in (out / "corpus").iterdir())
    dev = [json.loads(line)["text"] for line in (out / "task" / "dev.jsonl").read_text().splitlines()]
    assert not any(text[:80] in corpus for text in dev[:50])
    assert main(["demo", "--out", str(out)]) == 2  # an earlier run is never overwritten
