"""`head_bilstm`: the BERT paper's Table 5 "+ BiLSTM", a randomly initialised BiLSTM between the encoder
and the sequence, token and span heads (models/bert.py's HeadBiLSTM), and `finetune --head-bilstm`."""

import json

import pytest
import torch
from helpers import run_cli, save_tiny_gpt

from bertology import UserError
from bertology.inference.modeldir import check_model_dir
from bertology.inference.runners import load_finetuned
from bertology.models.bert import (
    BertConfig,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)
from bertology.recipes.task_training import gradual_unfreezer, layer_depth, load_task_model

HEADS = (BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering)


def tiny(**overrides) -> BertConfig:
    return BertConfig.from_preset("tiny", vocab_size=100, num_labels=3, **{"head_bilstm": True, **overrides})


def build(cls, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return cls(tiny(**overrides)).eval()


def outputs(model, ids, mask=None) -> list[torch.Tensor]:
    """The head's outputs: logits, or the start and end logits."""
    with torch.no_grad():
        out = model(ids, mask)
    return [out.logits] if out.logits is not None else [out.start_logits, out.end_logits]


def assert_one_line_error(status, out, err, *fragments):
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("bertology: error:"), err
    for fragment in fragments:
        assert fragment in err, err


@pytest.mark.parametrize("cls", HEADS)
def test_each_head_reads_a_bilstm_of_the_encoders_width(cls):
    model = build(cls)
    lstm = model.bilstm.lstm
    assert lstm.bidirectional and lstm.num_layers == 1 and lstm.hidden_size == 64  # 128 wide: half each way
    ids, mask = torch.randint(5, 100, (2, 7)), torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    shapes = [tuple(t.shape) for t in outputs(model, ids, mask)]
    assert shapes == {BertForSequenceClassification: [(2, 3)], BertForTokenClassification: [(2, 7, 3)],
                      BertForQuestionAnswering: [(2, 7), (2, 7)]}[cls]
    # sentences are read from the BiLSTM's final states, so the pooler is left out
    assert model.bert.pooler is None and all(name.startswith(("bert.", "bilstm.", "classifier.", "qa_outputs."))
                                             for name in model.state_dict())


def test_the_switch_needs_an_even_width_and_is_a_boolean():
    with pytest.raises(UserError, match="even 'hidden_size'"):
        BertConfig(hidden_size=129, num_attention_heads=3, head_bilstm=True)
    with pytest.raises(UserError, match="'head_bilstm' must be true or false"):
        BertConfig(head_bilstm=1)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cls", HEADS)
def test_padding_never_reaches_a_rows_real_positions(cls, causal):
    """A row alone, and padded in a batch with a longer row: the same outputs at its real positions,
    though the backward direction would read the padding first if the rows were not packed."""
    model = build(cls, causal=causal)
    torch.manual_seed(1)
    short, long = torch.randint(5, 100, (1, 5)), torch.randint(5, 100, (1, 9))
    alone = outputs(model, short)
    batch = torch.cat([torch.nn.functional.pad(short, (0, 4), value=0), long])  # pad id 0 after the short row
    mask = torch.tensor([[1] * 5 + [0] * 4, [1] * 9])
    padded = outputs(model, batch, mask)
    for one, both in zip(alone, padded):
        real = both[:1] if cls is BertForSequenceClassification else both[:1, :5]
        torch.testing.assert_close(real, one, rtol=0, atol=1e-5)


@pytest.mark.parametrize("cls", HEADS)
def test_save_and_load_restore_the_bilstm(tmp_path, cls):
    model = build(cls)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["head_bilstm"] is True
    loaded = type(model).from_pretrained(tmp_path)
    assert loaded.newly_initialized == [] and loaded.config.head_bilstm
    ids, mask = torch.randint(5, 100, (2, 6)), torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    for before, after in zip(outputs(model, ids, mask), outputs(loaded, ids, mask)):
        assert torch.equal(before, after)


def test_a_pretrained_encoder_gets_a_fresh_bilstm_and_a_new_task_drops_an_old_one(tmp_path):
    encoder = build(BertModel, head_bilstm=False)
    encoder.save_pretrained(tmp_path / "encoder")
    model = BertForQuestionAnswering.from_pretrained(tmp_path / "encoder", head_bilstm=True)
    fresh = [name for name in model.newly_initialized if name.startswith("bilstm.")]
    assert len(fresh) == 8  # input and recurrent weights and biases, each way
    model.save_pretrained(tmp_path / "qa")
    plain = BertForTokenClassification.from_pretrained(tmp_path / "qa", drop_head=True, head_bilstm=False)
    assert plain.bilstm is None and plain.newly_initialized == ["classifier.dense.weight", "classifier.dense.bias"]


def test_a_causal_encoder_gets_its_right_context_back_through_the_bilstm():
    """The point of the paper's row: under a causal mask the first token's state cannot see what follows
    it, so without the BiLSTM its start score ignores a later change; the BiLSTM's backward direction reads it."""
    ids = torch.randint(5, 100, (1, 8))
    changed = ids.clone()
    changed[0, 6] = (ids[0, 6] + 1 - 5) % 95 + 5  # another token, late in the row
    for head_bilstm in (False, True):
        model = build(BertForQuestionAnswering, causal=True, head_bilstm=head_bilstm)
        before, after = outputs(model, ids)[0][0, 0], outputs(model, changed)[0][0, 0]
        if head_bilstm:
            assert abs(float(before - after)) > 1e-6
        else:
            torch.testing.assert_close(before, after, rtol=0, atol=1e-6)


def test_the_bilstm_trains_as_part_of_the_head():
    model = build(BertForSequenceClassification)
    names = [name for name, _ in model.named_parameters() if name.startswith("bilstm.")]
    assert names and all(layer_depth(model, name) == 3 for name in names)  # 2 layers: the head is depth 3
    gradual_unfreezer(model)(0)  # the first epoch: the head and the top layer
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert set(names) <= trainable and "bert.layers.1.ffn_in.weight" in trainable
    assert "bert.layers.0.ffn_in.weight" not in trainable


@pytest.mark.slow
def test_finetune_with_the_switch_then_evaluate_and_refuse_exports(capsys, tmp_path, tiny_model, keyword_task):
    out = tmp_path / "ft"
    status, _, err = run_cli(capsys, "finetune", "--head-bilstm", "--task", "classification", "--train-file",
                             keyword_task / "train.csv", "--dev-file", keyword_task / "dev.csv", "--model", tiny_model,
                             "--out", out, "--epochs", "1", "--batch-size", "32", "--lr", "1e-3", "--precision", "fp32",
                             "--no-progress", "--no-learning-curve")
    assert status == 0, err
    assert json.loads((out / "config.json").read_text())["head_bilstm"] is True
    assert check_model_dir(out) == []  # the BiLSTM's tensors are where config.json says they should be
    spec = load_finetuned(str(out))[2]
    again = load_task_model(str(out), spec)  # fine-tuning it further keeps its head, the BiLSTM with it
    assert again.bilstm is not None and again.newly_initialized == []
    saved = json.loads((out / "eval_results.json").read_text())
    status, _, err = run_cli(capsys, "evaluate", "--data", keyword_task / "dev.csv", "--model", out, "--precision",
                             "fp32", "--out", tmp_path / "eval.json")
    assert status == 0, err
    assert json.loads((tmp_path / "eval.json").read_text())["accuracy"] == pytest.approx(saved["accuracy"])
    for fmt in ("hf", "int8"):
        assert_one_line_error(*run_cli(capsys, "export", "--model", out, "--format", fmt, "--out", tmp_path / fmt),
                              "--head-bilstm", f"no {fmt} export")


@pytest.mark.slow
def test_the_switch_is_for_a_fine_tuned_bert_family_encoder_only(capsys, tmp_path, tiny_model, keyword_task):
    task = ["--task", "classification", "--train-file", keyword_task / "train.csv", "--dev-file",
            keyword_task / "dev.csv"]
    assert_one_line_error(*run_cli(capsys, "finetune", "--head-bilstm", *task, "--model", tiny_model, "--mode",
                                   "features", "--out", tmp_path / "a"), "--feature-head bilstm")
    assert_one_line_error(*run_cli(capsys, "finetune", "--head-bilstm", "--task", "wic", "--data", tmp_path,
                                   "--model", tiny_model, "--out", tmp_path / "b"), "does not apply to wic")
    gpt = save_tiny_gpt(tmp_path / "gpt")
    assert_one_line_error(*run_cli(capsys, "finetune", "--head-bilstm", *task, "--model", gpt, "--out", tmp_path / "c"),
                          "BERT-family encoder", "openai-gpt decoder")
    assert_one_line_error(*run_cli(capsys, "finetune", "--head-bilstm", "--arch", "taglm", "--task", "conll2003",
                                   "--data", tmp_path, "--out", tmp_path / "d"), "--head-bilstm is not an option")
