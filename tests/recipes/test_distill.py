"""Distillation: a student learns a teacher's soft targets (sentence, pair/regression and token tasks)."""

import dataclasses
import json
import random

import numpy as np
import pytest
import torch
from helpers import WORDS, keyword_sentence, save_task_model

from bertology import BertConfig, BertModel, Tokenizer, UserError
from bertology.cli import main
from bertology.inference.predict import predict
from bertology.inference.runners import load_finetuned
from bertology.models.awd_lstm import AWDLSTMConfig, AWDLSTMForSequenceClassification
from bertology.models.bert import BertForSequenceClassification
from bertology.ops import IGNORE_INDEX
from bertology.recipes.distill import (
    DistillConfig,
    DistillModule,
    augmented,
    layer_map,
    make_student,
    run_distillation,
    teacher_targets,
)
from bertology.recipes.task_training import load_task_model
from bertology.tasks.inputs import InputSettings
from bertology.tasks.readers import TASKS, SequenceExample, TokenExample, read_examples


@pytest.fixture(scope="module")
def teacher(keyword_model):
    """The tiny encoder fine-tuned on the keyword task (2 layers, 128 wide; dev accuracy > 0.95,
    checked by the first test below)."""
    return keyword_model


def distill(tmp_path, name, **settings) -> tuple[dict, DistillConfig]:
    cfg = DistillConfig(out=str(tmp_path / name), progress=False, cache_dir=str(tmp_path / "cache"),
                        **{"precision": "fp32", "preset": "tiny", "epochs": 3, "lr": 1e-3, "batch_size": 16, **settings})
    return run_distillation(cfg), cfg


@pytest.mark.slow
def test_a_smaller_student_learns_the_task_from_unlabeled_text_and_targets_are_cached(tmp_path, teacher, keyword_task,
                                                                                     capsys):
    # The student: one layer, half the teacher's width (1 layer x 64 vs 2 x 128), random weights;
    # small, it takes a larger learning rate (at the teacher's 1e-3 it needs twice the epochs).
    student_init = tmp_path / "student-init"
    torch.manual_seed(0)
    BertModel(BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=256)).save_pretrained(student_init)
    Tokenizer.from_pretrained(teacher).save_pretrained(student_init)
    files = dict(teacher=str(teacher), student=str(student_init), dev_file=str(keyword_task / "dev.csv"),
                 train_text=False, unlabeled=[str(keyword_task / "unlabeled.txt")], lr=3e-3)
    results, cfg = distill(tmp_path, "student", **files)
    assert "read from" not in capsys.readouterr().err  # the first run asks the teacher
    # The student never saw a label, only the teacher's distributions, and still learns the rule.
    assert results["accuracy"] > 0.9 and results["teacher_accuracy"] > 0.95
    recorded = json.loads((tmp_path / "student" / "distill_config.json").read_text())
    assert recorded["transfer_examples"] == 240 and recorded["student_parameters"] < recorded["teacher_parameters"] / 2
    student = BertConfig.load(tmp_path / "student")
    assert (student.hidden_size, student.num_hidden_layers) == (64, 1)
    # What distillation is for: the student says what the teacher says, far more often than the
    # same student before training (a random head: about half the time on this balanced dev set).
    teacher_model, tokenizer, spec, settings = load_finetuned(str(teacher))
    dev = read_examples(spec, keyword_task / "dev.csv", "dev")
    wanted = predict(teacher_model, tokenizer, spec, dev, settings, precision="fp32")
    trained = predict(load_finetuned(str(tmp_path / "student"))[0], tokenizer, spec, dev, settings, precision="fp32")
    torch.manual_seed(cfg.seed)
    untrained = predict(load_task_model(str(student_init), spec), tokenizer, spec, dev, settings, precision="fp32")
    agreement, before = (np.mean([a == b for a, b in zip(labels, wanted)]) for labels in (trained, untrained))
    assert agreement > 0.9 and agreement > before + 0.3, (agreement, before)
    assert len(list((tmp_path / "cache").glob("*.safetensors"))) == 1
    again, _ = distill(tmp_path, "again", **files, epochs=1)
    assert "read from" in capsys.readouterr().err  # the second run reuses the teacher's targets
    # The student is a fine-tuned model like any other: predict takes it.
    (tmp_path / "in.txt").write_text("the film was excellent and the music too\nthe plot of the story\n")
    assert main(["predict", "--model", str(tmp_path / "student"), "--input", str(tmp_path / "in.txt"),
                 "--out", str(tmp_path / "p.tsv")]) == 0
    assert (tmp_path / "p.tsv").read_text().splitlines()[1:] == ["0\tpos", "1\tneg"]


@pytest.mark.slow
def test_mse_labels_and_hidden_state_loss_through_a_projection(tmp_path, teacher, keyword_task):
    results, _ = distill(tmp_path, "mini", teacher=str(teacher), train_file=str(keyword_task / "train.csv"),
                         dev_file=str(keyword_task / "dev.csv"), preset="mini", loss="mse", label_weight=0.5,
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
    examples = [SequenceExample(str(i), keyword_sentence(rng, i % 2 == 0), "a second text of the pair", "pos", f"x:{i}")
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


def random_teacher(directory, tiny_model, task: str, scale: float):
    """A teacher with a random, sharpened head: an arbitrary but fixed function of the text to imitate."""
    return save_task_model(directory, tiny_model, task, seed=1, max_seq_len=InputSettings().max_seq_len,
                           head_scale=scale)


@pytest.mark.slow
def test_token_student_imitates_the_teachers_tags(tmp_path, tiny_model):
    teacher_dir = random_teacher(tmp_path / "teacher", tiny_model, "conll2003", 40)
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


@pytest.mark.slow
def test_teacher_targets_are_means_of_windows_and_nan_for_unseen_words(tmp_path, tiny_model):
    teacher_dir = random_teacher(tmp_path / "t", tiny_model, "sst2", 1)
    model, tokenizer, spec, settings = load_finetuned(str(teacher_dir))
    examples = [SequenceExample("0", "a short one", None, None, "x:1"), SequenceExample("1", " ".join(WORDS * 3), None, None, "x:2")]
    windowed = InputSettings(max_seq_len=16, long_inputs="window", doc_stride=8)
    targets = teacher_targets(model, tokenizer, spec, windowed, examples, str(teacher_dir), None, 8, "fp32")
    assert [t.shape for t in targets] == [(1, 2), (1, 2)]
    tagger_dir = random_teacher(tmp_path / "g", tiny_model, "conll2003", 1)
    model, tokenizer, spec, settings = load_finetuned(str(tagger_dir))
    words = TokenExample("0", ["John", "\u200b", "lives"], None, "x:1")  # a word with no WordPiece at all
    (target,) = teacher_targets(model, tokenizer, spec, settings, [words], str(tagger_dir), None, 8, "fp32")
    assert target.shape == (3, len(spec.labels))
    assert np.isnan(target[1]).all() and not np.isnan(target[[0, 2]]).any()


@pytest.mark.slow
def test_user_mistakes_are_one_line_errors(tmp_path, tiny_model, keyword_task, capsys):
    teacher = random_teacher(tmp_path / "teacher", tiny_model, "sst2", 1)  # any fine-tuned model: no training here
    squad_dir = tmp_path / "squad-teacher"
    random_teacher(squad_dir, tiny_model, "sst2", 1)
    awd = tmp_path / "awd-lstm"
    AWDLSTMForSequenceClassification(AWDLSTMConfig(vocab_size=30, emb_sz=8, n_hid=8)).save_pretrained(awd)
    config = json.loads((squad_dir / "config.json").read_text())
    config["bertology_task"] = json.loads(json.dumps(dataclasses.asdict(TASKS["squad"])))
    (squad_dir / "config.json").write_text(json.dumps(config))
    cases = [
        (["--teacher", str(squad_dir), "--unlabeled", str(keyword_task / "unlabeled.txt"), "--no-train-text"],
         "not span"),
        (["--teacher", str(tmp_path / "missing"), "--unlabeled", "x"], "missing: no such model directory"),
        (["--teacher", str(teacher), "--no-train-text"], "no transfer text"),
        (["--teacher", str(awd), "--unlabeled", "x"], "model family awd-lstm; distill's teacher is a fine-tuned BERT"),
        (["--teacher", str(teacher), "--unlabeled", str(tmp_path / "nope.txt"), "--no-train-text"], "nope.txt"),
        (["--teacher", str(teacher), "--unlabeled", str(keyword_task / "unlabeled.txt"), "--no-train-text",
          "--student", str(tiny_model), "--hidden-weight", "1", "--temperature", "0"], "temperature"),
        (["--teacher", str(teacher), "--unlabeled", "x", "--student-layers", "0"], "--student-layers: must be positive"),
        (["--teacher", str(teacher), "--unlabeled", str(keyword_task / "unlabeled.txt"), "--no-train-text",
          "--student-layers", "3"], f"--student-layers 3: {teacher} has 2 layers"),
        (["--teacher", str(teacher), "--unlabeled", str(keyword_task / "unlabeled.txt"), "--no-train-text",
          "--student", str(tiny_model), "--student-layers", "3"], f"--student-layers 3: {tiny_model} has 2 layers"),
        (["--teacher", str(teacher), "--unlabeled", "x", "--student", str(awd), "--student-layers", "1"],
         f"--student-layers cuts a BERT-family encoder; {awd} is model family awd-lstm"),
    ]
    for n, (flags, message) in enumerate(cases):
        code = main(["distill", *flags, "--out", str(tmp_path / f"o{n}"), "--no-progress"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and message in err[-1] and len(err) == 1, (flags, err)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


@pytest.mark.slow
def test_student_layers_cut_the_teacher_or_the_student_and_the_head_starts_fresh(tmp_path, tiny_model):
    teacher_dir = random_teacher(tmp_path / "teacher", tiny_model, "sst2", 1)
    teacher, tokenizer, spec, _ = load_finetuned(str(teacher_dir))
    for layers, kept in ((1, [0]), (2, [0, 1])):
        cfg = DistillConfig(teacher=str(teacher_dir), student_layers=layers)
        torch.manual_seed(cfg.seed)
        student, student_tokenizer = make_student(cfg, spec, tokenizer, teacher.config)
        assert student_tokenizer is tokenizer and student.config.num_hidden_layers == layers
        assert (student.config.hidden_size, student.config.num_labels) == (128, 2)
        assert len(student.bert.layers) == layers
        assert all(same_weights(student.bert.layers[j], teacher.bert.layers[i]) for j, i in enumerate(kept))
        assert same_weights(student.bert.embeddings, teacher.bert.embeddings)
        assert same_weights(student.bert.pooler, teacher.bert.pooler)
        # DistilBERT's student brings no task head from its teacher.
        assert not same_weights(student.classifier, teacher.classifier)
    with pytest.raises(UserError, match="--student-layers must be positive, got 0"):  # the Python API's check
        DistillConfig(teacher=str(teacher_dir), out=str(tmp_path / "o"), student_layers=0, unlabeled=["x"]).validate()
    # With --student, that encoder is what is cut (here: a different random tiny model).
    cfg = DistillConfig(teacher=str(teacher_dir), student=str(tiny_model), student_layers=1)
    student, _ = make_student(cfg, spec, tokenizer, teacher.config)
    pretrained = BertModel.from_pretrained(tiny_model)
    assert student.config.num_hidden_layers == 1
    assert same_weights(student.bert.layers[0], pretrained.layers[0])
    assert same_weights(student.bert.embeddings, pretrained.embeddings)
    assert not same_weights(student.bert.layers[0], teacher.bert.layers[0])
    # A --student with a head for this very task is cut under a fresh head too.
    student, _ = make_student(DistillConfig(teacher=str(teacher_dir), student=str(teacher_dir), student_layers=2),
                              spec, tokenizer, teacher.config)
    assert same_weights(student.bert, teacher.bert) and not same_weights(student.classifier, teacher.classifier)


@pytest.mark.slow
def test_a_distilbert_student_from_half_the_teachers_layers_trains_and_evaluates(tmp_path, capsys, keyword_model,
                                                                                keyword_task):
    out = tmp_path / "student"
    code = main(["distill", "--teacher", str(keyword_model), "--train-file", str(keyword_task / "train.csv"),
                 "--dev-file", str(keyword_task / "dev.csv"), "--student-layers", "1", "--out", str(out),
                 "--epochs", "2", "--lr", "1e-3", "--precision", "fp32", "--cache-dir", str(tmp_path / "cache"),
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    config = BertConfig.load(out)
    assert (config.num_hidden_layers, config.hidden_size) == (1, 128)  # half the teacher's layers, its width
    recorded = json.loads((out / "distill_config.json").read_text())
    assert recorded["student_layers"] == 1 and recorded["student_parameters"] < recorded["teacher_parameters"]
    capsys.readouterr()
    assert main(["evaluate", "--data", str(keyword_task / "dev.csv"), "--model", str(out), "--precision", "fp32",
                 "--out", str(tmp_path / "scores.json")]) == 0
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert scores["accuracy"] > 0.8, scores
