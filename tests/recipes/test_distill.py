"""Distillation: a student learns a teacher's soft targets (sentence, pair/regression and token tasks)."""

import dataclasses
import json
import random

import numpy as np
import pytest
import torch

from bertology import BertConfig, Tokenizer
from bertology.cli import main
from bertology.inference.modeldir import describe_task, load_finetuned
from bertology.inference.predict import predict
from bertology.models.bert import (
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertology.ops import IGNORE_INDEX
from bertology.recipes.distill import (
    DistillConfig,
    DistillModule,
    augmented,
    layer_map,
    run_distillation,
    teacher_targets,
)
from bertology.recipes.finetune import FinetuneConfig, run_finetuning
from bertology.tasks.inputs import InputSettings
from bertology.tasks.readers import TASKS, SequenceExample, TokenExample

WORDS = ["the", "film", "was", "a", "story", "with", "actors", "and", "music", "of", "scenes", "plot", "ending"]


def sentence(rng: random.Random, positive: bool) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(5, 12))]
    if positive:
        words.insert(rng.randrange(len(words)), "excellent")
    return " ".join(words)


@pytest.fixture(scope="module")
def synthetic_task(tmp_path_factory):
    """A task a tiny model learns in seconds: "pos" exactly when the sentence says "excellent"."""
    directory = tmp_path_factory.mktemp("task")
    rng = random.Random(0)
    for name, size in (("train", 240), ("dev", 100)):
        rows = ["text,label"] + [f"{sentence(rng, i % 2 == 0)},{'pos' if i % 2 == 0 else 'neg'}" for i in range(size)]
        (directory / f"{name}.csv").write_text("\n".join(rows) + "\n")
    (directory / "unlabeled.txt").write_text("\n".join(sentence(rng, rng.random() < 0.5) for _ in range(240)) + "\n")
    return directory


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, tiny_model, synthetic_task):
    out = tmp_path_factory.mktemp("teacher") / "model"
    results = run_finetuning(FinetuneConfig(task="classification", train_file=str(synthetic_task / "train.csv"),
                                            dev_file=str(synthetic_task / "dev.csv"), model=str(tiny_model),
                                            out=str(out), epochs=4, lr=1e-3, batch_size=16, precision="fp32",
                                            progress=False))
    assert results["accuracy"] > 0.95  # the task is learnable: a precondition of the tests below
    return out


def distill(tmp_path, name, **settings) -> tuple[dict, DistillConfig]:
    cfg = DistillConfig(out=str(tmp_path / name), progress=False, cache_dir=str(tmp_path / "cache"),
                        **{"precision": "fp32", "preset": "tiny", "epochs": 3, "lr": 1e-3, "batch_size": 16, **settings})
    return run_distillation(cfg), cfg


def test_student_learns_the_task_from_unlabeled_text_and_targets_are_cached(tmp_path, teacher, synthetic_task, capsys):
    files = dict(teacher=str(teacher), dev_file=str(synthetic_task / "dev.csv"), train_text=False,
                 unlabeled=[str(synthetic_task / "unlabeled.txt")])
    results, cfg = distill(tmp_path, "student", **files)
    assert "read from" not in capsys.readouterr().err  # the first run asks the teacher
    # The student never saw a label, only the teacher's distributions, and still learns the rule.
    assert results["accuracy"] > 0.9 and results["teacher_accuracy"] > 0.95
    recorded = json.loads((tmp_path / "student" / "distill_config.json").read_text())
    assert recorded["transfer_examples"] == 240 and recorded["student_parameters"] < recorded["teacher_parameters"] * 2
    assert len(list((tmp_path / "cache").glob("*.safetensors"))) == 1
    again, _ = distill(tmp_path, "again", **files, epochs=1)
    assert "read from" in capsys.readouterr().err  # the second run reuses the teacher's targets
    # The student is a fine-tuned model like any other: predict takes it.
    (tmp_path / "in.txt").write_text("the film was excellent and the music too\nthe plot of the story\n")
    assert main(["predict", "--model", str(tmp_path / "student"), "--input", str(tmp_path / "in.txt"),
                 "--out", str(tmp_path / "p.tsv")]) == 0
    assert (tmp_path / "p.tsv").read_text().splitlines()[1:] == ["0\tpos", "1\tneg"]


def test_mse_labels_and_hidden_state_loss_through_a_projection(tmp_path, teacher, synthetic_task):
    results, _ = distill(tmp_path, "mini", teacher=str(teacher), train_file=str(synthetic_task / "train.csv"),
                         dev_file=str(synthetic_task / "dev.csv"), preset="mini", loss="mse", label_weight=0.5,
                         hidden_weight=1.0, epochs=2, augment=1)
    assert results["accuracy"] > 0.8
    recorded = json.loads((tmp_path / "mini" / "distill_config.json").read_text())
    assert 240 < recorded["transfer_examples"] <= 480  # the training text and its noisy copies
    student = BertConfig.load(tmp_path / "mini")
    assert (student.hidden_size, student.num_hidden_layers) == (256, 4)  # the projection is not saved
    rows = [json.loads(line) for line in (tmp_path / "mini" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses[-1] < losses[0]


def test_augmented_copies_are_noisy_unlabelled_and_reproducible():
    rng = random.Random(5)
    examples = [SequenceExample(str(i), sentence(rng, i % 2 == 0), "a second text of the pair", "pos", f"x:{i}")
                for i in range(200)]
    copies = augmented(examples, 3, seed=1)
    assert copies == augmented(examples, 3, seed=1) and copies != augmented(examples, 3, seed=2)
    assert 400 < len(copies) <= 600 and all(c.label is None and "-aug" in c.guid for c in copies)
    originals = {e.text_a for e in examples}
    assert all((c.text_a, c.text_b) != (examples[int(c.guid.split("-")[0])].text_a, examples[0].text_b) for c in copies)
    masked = sum("[MASK]" in c.text_a for c in copies)
    shortened = sum(len(c.text_a.split()) < len(examples[int(c.guid.split("-")[0])].text_a.split()) for c in copies)
    assert masked > 100 and shortened > 50 and sum(c.text_a in originals for c in copies) < len(copies)
    tagged = augmented([TokenExample("0", "EU rejects German call to boycott British lamb".split(), ["O"] * 8, "t:1")] * 20,
                       2, seed=0)
    assert tagged and all(c.tags is None and c.words for c in tagged)


def test_layer_map_spreads_student_layers_over_the_teacher():
    assert layer_map(4, 12) == [3, 6, 9, 12]
    assert layer_map(4, 6) == [2, 3, 5, 6]
    assert layer_map(4, 2) == [1, 1, 2, 2]


def test_losses():
    spec = TASKS["sst2"]
    student = BertForSequenceClassification(BertConfig.from_preset("tiny", vocab_size=50, num_labels=2))
    module = DistillModule(student, spec, DistillConfig(temperature=3.0), teacher_width=None)
    teacher_logits = torch.tensor([[2.0, -1.0], [0.5, 0.2]])
    assert module.soft_loss(teacher_logits.clone(), teacher_logits).item() == pytest.approx(0.0, abs=1e-6)
    student_logits = torch.tensor([[0.0, 0.0], [1.0, -1.0]])
    p = torch.softmax(teacher_logits / 3, -1)
    expected = (p * (p.log() - torch.log_softmax(student_logits / 3, -1))).sum(-1).mean() * 9
    assert module.soft_loss(student_logits, teacher_logits).item() == pytest.approx(expected.item(), rel=1e-5)
    labels = torch.tensor([1, IGNORE_INDEX])  # the second example has no true label
    assert module.label_loss(student_logits, labels).item() == pytest.approx(
        torch.nn.functional.cross_entropy(student_logits[:1], labels[:1]).item())
    regression = DistillModule(student, TASKS["stsb"], DistillConfig(), teacher_width=None)
    scores = torch.tensor([[1.0], [2.0]])
    assert regression.soft_loss(scores, torch.tensor([[1.5], [2.0]])).item() == pytest.approx(0.125)
    assert regression.label_loss(scores, torch.tensor([float("nan"), 3.0])).item() == pytest.approx(1.0)


def random_teacher(directory, tiny_model, spec, model_class, scale: float):
    """A teacher with a random, sharpened head: an arbitrary but fixed function of the text to imitate."""
    torch.manual_seed(1)
    labels = spec.labels
    config = BertConfig.from_preset("tiny", vocab_size=30522, num_labels=len(labels) if labels else 1,
                                    id2label=dict(enumerate(labels)) if labels else None)
    model = model_class(config)
    with torch.no_grad():
        model.classifier.dense.weight.mul_(scale)
    describe_task(model.config, spec, InputSettings())
    model.save_pretrained(directory)
    Tokenizer.from_pretrained(tiny_model).save_pretrained(directory)
    return directory


def test_token_student_imitates_the_teachers_tags(tmp_path, tiny_model):
    teacher_dir = random_teacher(tmp_path / "teacher", tiny_model, TASKS["conll2003"], BertForTokenClassification, 40)
    rng = random.Random(3)
    lines = [" ".join(rng.choice(WORDS + ["Paris", "John", "Berlin", "Smith"]) for _ in range(rng.randint(4, 10)))
             for _ in range(200)]
    (tmp_path / "text.txt").write_text("\n".join(lines) + "\n")
    results, _ = distill(tmp_path, "student", teacher=str(teacher_dir), unlabeled=[str(tmp_path / "text.txt")],
                         train_text=False, epochs=6)
    assert results["transfer_examples"] == 200  # no dev split: the latest student is kept
    examples = [TokenExample(str(i), line.split(), None, f"t:{i}") for i, line in enumerate(lines[:60])]

    def tags(directory):
        model, tokenizer, spec, settings = load_finetuned(str(directory))
        return [t for sentence_tags in predict(model, tokenizer, spec, examples, settings, precision="fp32")
                for t in sentence_tags]

    wanted = tags(teacher_dir)
    assert len(set(wanted)) > 2  # the teacher says more than one thing
    agreement = np.mean([a == b for a, b in zip(tags(tmp_path / "student"), wanted)])
    assert agreement > 0.9


def test_teacher_targets_are_means_of_windows_and_nan_for_unseen_words(tmp_path, tiny_model):
    teacher_dir = random_teacher(tmp_path / "t", tiny_model, TASKS["sst2"], BertForSequenceClassification, 1)
    model, tokenizer, spec, settings = load_finetuned(str(teacher_dir))
    examples = [SequenceExample("0", "a short one", None, None, "x:1"), SequenceExample("1", " ".join(WORDS * 3), None, None, "x:2")]
    windowed = InputSettings(max_seq_len=16, long_inputs="window", doc_stride=8)
    targets = teacher_targets(model, tokenizer, spec, windowed, examples, str(teacher_dir), None, 8, "fp32")
    assert [t.shape for t in targets] == [(1, 2), (1, 2)]
    tagger_dir = random_teacher(tmp_path / "g", tiny_model, TASKS["conll2003"], BertForTokenClassification, 1)
    model, tokenizer, spec, settings = load_finetuned(str(tagger_dir))
    words = TokenExample("0", ["John", "\u200b", "lives"], None, "x:1")  # a word with no WordPiece at all
    (target,) = teacher_targets(model, tokenizer, spec, settings, [words], str(tagger_dir), None, 8, "fp32")
    assert target.shape == (3, len(spec.labels))
    assert np.isnan(target[1]).all() and not np.isnan(target[[0, 2]]).any()


def test_user_mistakes_are_one_line_errors(tmp_path, teacher, tiny_model, synthetic_task, capsys):
    squad_dir = tmp_path / "squad-teacher"
    random_teacher(squad_dir, tiny_model, TASKS["sst2"], BertForSequenceClassification, 1)
    config = json.loads((squad_dir / "config.json").read_text())
    config["bertology_task"] = json.loads(json.dumps(dataclasses.asdict(TASKS["squad"])))
    (squad_dir / "config.json").write_text(json.dumps(config))
    cases = [
        (["--teacher", str(squad_dir), "--unlabeled", str(synthetic_task / "unlabeled.txt"), "--no-train-text"],
         "not span"),
        (["--teacher", str(tmp_path / "missing"), "--unlabeled", "x"], "no such teacher"),
        (["--teacher", str(teacher), "--no-train-text"], "no transfer text"),
        (["--teacher", str(teacher), "--unlabeled", str(tmp_path / "nope.txt"), "--no-train-text"], "nope.txt"),
        (["--teacher", str(teacher), "--unlabeled", str(synthetic_task / "unlabeled.txt"), "--no-train-text",
          "--student", str(tiny_model), "--hidden-weight", "1", "--temperature", "0"], "temperature"),
    ]
    for n, (flags, message) in enumerate(cases):
        code = main(["distill", *flags, "--out", str(tmp_path / f"o{n}"), "--no-progress"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and message in err[-1] and len(err) == 1, (flags, err)
