"""`bertology demo` end to end with a short budget: every step runs and every output is written."""

import json
from collections import Counter

import pytest
from sklearn.metrics import matthews_corrcoef

from bertology.cli import main
from bertology.inference.modeldir import load_finetuned
from bertology.inference.predict import predict
from bertology.tasks.readers import read_examples

pytestmark = pytest.mark.slow  # pre-training, then two fine-tuning runs: minutes on 2 busy cores


def test_demo_writes_results_and_pictures(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--pretrain-time", "15s", "--no-progress"]) == 0
    results = json.loads((out / "results.json").read_text())
    # the task's numbers, counted here from the files the demo wrote
    train, dev = ([json.loads(line) for line in (out / "task" / f"{split}.jsonl").read_text().splitlines()]
                  for split in ("train", "dev"))
    gold = [row["label"] for row in dev]
    assert (results["train_examples"], results["dev_examples"]) == (len(train), len(dev))
    assert sorted(results["labels"]) == sorted({row["label"] for row in train}) and len(results["labels"]) >= 2
    assert results["majority_rate"] == pytest.approx(max(Counter(gold).values()) / len(gold))
    for name in ("pretrained", "from_scratch"):
        # the reported scores are those of the saved model's dev predictions, and both models learnt
        # the task (the README's full demo: 0.72 and 0.64; 15 s of pre-training changes little)
        model, tokenizer, spec, settings = load_finetuned(str(out / f"finetuned_{name}"))
        predicted = predict(model, tokenizer, spec, read_examples(spec, out / "task" / "dev.jsonl", "dev"), settings)
        accuracy = sum(p == g for p, g in zip(predicted, gold)) / len(gold)
        assert results[name]["accuracy"] == pytest.approx(accuracy, abs=1e-9)
        assert results[name]["mcc"] == pytest.approx(matthews_corrcoef(gold, predicted), abs=1e-9)
        assert accuracy > 2 * results["majority_rate"], name
    rows = [json.loads(line) for line in (out / "pretrained" / "metrics.jsonl").read_text().splitlines()]
    evaluations = [row for row in rows if row.get("split") == "eval"]
    assert results["pretraining"]["steps"] == evaluations[-1]["step"] > 0
    assert results["pretraining"]["mlm_accuracy"] == evaluations[-1]["mlm_accuracy"]
    for picture in ("finetuning.png", "pretrained/training_curves.png", "finetuned_pretrained/learning_curve.png"):
        assert (out / picture).stat().st_size > 10_000, picture
    table = capsys.readouterr().out
    assert "pre-trained, then fine-tuned" in table and "fine-tuned from scratch" in table
    # the evaluation modules' docstrings never reach the pre-training corpus
    corpus = "".join(p.read_text() for p in (out / "corpus").iterdir())
    dev = [json.loads(line)["text"] for line in (out / "task" / "dev.jsonl").read_text().splitlines()]
    assert not any(text[:80] in corpus for text in dev[:50])
    assert main(["demo", "--out", str(out)]) == 2  # an earlier run is never overwritten
