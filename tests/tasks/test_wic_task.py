"""WiC as a fine-tuning task (`finetune --task wic`): the target spans of its encoding, the
SuperGLUE baseline's head (`BertForWordInContext`), a tiny run end to end, and one-line errors
for bad files. The Word-in-Context probe (`bertology wic`) has its own tests in tests/uses/."""

import json
import re

import pytest
import torch
from helpers import run_cli

from bertology import BertConfig, Tokenizer
from bertology.models.bert import BertForWordInContext
from bertology.tasks.inputs import InputSettings, encode
from bertology.tasks.readers import TASKS, read_examples

WIC = TASKS["wic"]


def first_lines(source, target, split: str, count: int):
    """Copy the first `count` pairs of a WiC split and their gold labels into folder `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for kind in ("data", "gold"):
        lines = (source / f"{split}.{kind}.txt").read_text(encoding="utf-8").splitlines(keepends=True)
        (target / f"{split}.{kind}.txt").write_text("".join(lines[:count]), encoding="utf-8")
    return target


def spelled(tokenizer: Tokenizer, ids: list[int]) -> str:
    """Tokens decoded back to text, without the spaces decoding puts between words and punctuation."""
    return tokenizer.decode(ids).replace(" ", "")


@pytest.mark.parametrize("max_seq_len", [128, 16])  # 16: most pairs are cut, around their targets
def test_each_target_span_holds_exactly_the_target_words_tokens(data_dir, minilm_dir, max_seq_len):
    tokenizer = Tokenizer.from_pretrained(minilm_dir)
    examples = read_examples(WIC, data_dir / "wic/dev.data.txt", "dev")[:60]
    encoded = encode(WIC, examples, tokenizer, InputSettings(max_seq_len=max_seq_len), training=False)
    assert len(encoded.features) == len(examples)
    assert (encoded.too_long > 30) == (max_seq_len == 16)
    for example, row in zip(examples, encoded.features):
        assert len(row.input_ids) <= max_seq_len and row.label == WIC.labels.index(example.label)
        for side, (first, last) in enumerate(row.targets):
            word = example.sentences[side][example.positions[side]]
            assert spelled(tokenizer, row.input_ids[first:last + 1]) == tokenizer.normalize(word).replace(" ", ""), \
                (example.where, side)
            assert set(row.token_type_ids[first:last + 1]) == {side}  # sentence 1 is segment A, sentence 2 B
    sep = tokenizer.sep_token_id
    assert all(row.input_ids[0] == tokenizer.cls_token_id and row.input_ids.count(sep) == 2 for row in encoded.features)


def test_the_head_reads_the_mean_of_each_targets_tokens_beside_the_pooled_cls():
    torch.manual_seed(0)
    model = BertForWordInContext(BertConfig.from_preset("tiny", vocab_size=100)).eval()
    input_ids = torch.randint(5, 100, (2, 10))
    spans = torch.tensor([[[1, 2], [6, 7]], [[3, 3], [8, 8]]])  # (B, 2 sentences, first and last token)
    out = model(input_ids, target_spans=spans, labels=torch.tensor([0, 1]))
    assert out.logits.shape == (2, 2) and out.loss.shape == ()
    encoded = model.bert(input_ids)
    hidden = encoded.last_hidden_state  # (B, T, H)
    by_hand = torch.cat([encoded.pooler_output,
                         torch.stack([hidden[0, 1:3].mean(0), hidden[1, 3]]),
                         torch.stack([hidden[0, 6:8].mean(0), hidden[1, 8]])], dim=-1)  # (B, 3H)
    torch.testing.assert_close(out.logits, model.classifier(by_hand))
    moved = spans.clone()
    moved[0, 1] = torch.tensor([4, 4])  # only pair 0's second target moves
    logits = model(input_ids, target_spans=moved).logits
    assert not torch.allclose(logits[0], out.logits[0]) and torch.equal(logits[1], out.logits[1])


@pytest.mark.slow
def test_finetune_then_evaluate_and_predict_a_tiny_model_on_real_wic_pairs(tmp_path, data_dir, tiny_model, capsys):
    wic = data_dir / "wic"
    folder = first_lines(wic, tmp_path / "wic", "train", 64)
    first_lines(wic, folder, "dev", 48)
    dev_lines = (wic / "dev.data.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "test.data.txt").write_text("".join(dev_lines[48:56]), encoding="utf-8")  # test data: no gold file
    out = tmp_path / "run"
    status, _, err = run_cli(capsys, "finetune", "--task", "wic", "--data", folder, "--model", tiny_model, "--out", out,
                             "--epochs", "1", "--batch-size", "16", "--lr", "1e-3", "--precision", "fp32",
                             "--no-progress", "--no-learning-curve")
    assert status == 0, err
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForWordInContext"]
    status, _, err = run_cli(capsys, "evaluate", "--data", folder / "dev.data.txt", "--model", out,
                             "--precision", "fp32", "--out", tmp_path / "dev.json")
    assert status == 0, err
    reported = json.loads((tmp_path / "dev.json").read_text())
    status, _, err = run_cli(capsys, "predict", "--model", out, "--input", folder / "dev.data.txt",
                             "--out", tmp_path / "dev.txt", "--precision", "fp32")
    assert status == 0, err
    predicted = (tmp_path / "dev.txt").read_text().splitlines()
    gold = (folder / "dev.gold.txt").read_text().split()
    assert len(predicted) == len(gold) == 48 and set(predicted) <= {"T", "F"}
    assert reported["accuracy"] == pytest.approx(sum(p == g for p, g in zip(predicted, gold)) / len(gold), abs=1e-12)
    # one epoch: the model kept is the one finetune scored on the same dev pairs
    assert json.loads((out / "eval_results.json").read_text())["accuracy"] == reported["accuracy"]
    status, _, err = run_cli(capsys, "predict", "--model", out, "--input", folder / "test.data.txt",
                             "--out", tmp_path / "test.txt")
    assert status == 0 and len((tmp_path / "test.txt").read_text().split()) == 8, err
    status, _, err = run_cli(capsys, "export", "--model", out, "--format", "hf", "--out", tmp_path / "hf")
    assert status == 2 and err.count("\n") == 1 and "BertForWordInContext" in err


PAIRS = ["bank\tN\t4-1\tHe sat by the bank of the river .\tThe bank raised its rates .",
         "run\tV\t0-2\tRun the program again .\tThey run a small hotel ."]


@pytest.mark.parametrize("data, gold, message", [
    (PAIRS, None, r"train\.gold\.txt: no such file"),
    (PAIRS, ["F", "T", "T"], r"train\.gold\.txt: 3 labels for the 2 pairs of train\.data\.txt; train\.gold\.txt:3 "
                             r"labels no pair"),
    ([PAIRS[0], "run\tV\t0-9\tRun the program again .\tThey run a small hotel ."], ["F", "T"],
     r"train\.data\.txt:2: '0-9' is not two token indexes"),
    (PAIRS, ["F", "yes"], r"train\.gold\.txt:2: expected T or F, got 'yes'"),
])
def test_bad_wic_files_stop_finetune_with_one_line_naming_file_and_line(tmp_path, tiny_model, capsys, data, gold,
                                                                         message):
    folder = tmp_path / "wic"
    folder.mkdir()
    (folder / "train.data.txt").write_text("\n".join(data) + "\n")
    (folder / "dev.data.txt").write_text("\n".join(PAIRS) + "\n")
    (folder / "dev.gold.txt").write_text("F\nF\n")
    if gold is not None:
        (folder / "train.gold.txt").write_text("\n".join(gold) + "\n")
    status, out, err = run_cli(capsys, "finetune", "--task", "wic", "--data", folder, "--model", tiny_model,
                               "--out", tmp_path / "run")
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith("bertology: error: ") and re.search(message, err), err
