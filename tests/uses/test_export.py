"""bertology export: transformers copies, int8 round trips and ONNX parity, on tiny random models."""

import json
import sys

import pytest
import torch
from helpers import at_real_tokens, save_task_model

from bertology import BertConfig, BertModel, Tokenizer, UserError
from bertology.cli import main
from bertology.inference.modeldir import load_model
from bertology.inference.onnx import OnnxModel
from bertology.inference.predict import predict
from bertology.inference.runners import load_finetuned
from bertology.models.quantized import load_quantized, quantize
from bertology.tasks.readers import TASKS, SpanExample, read_examples
from bertology.uses.export import export_model

SENTENCES = ["a gorgeous , witty , seductive movie .", "the worst film of the year .", "it 's a charming journey .",
             "unflinchingly bleak and desperate", "an utterly incompetent conclusion .", "fun and thoughtful ."]


@pytest.fixture(scope="module")
def models(tmp_path_factory, minilm_dir):
    """Tiny model directories: sst2 (sequence), conll2003 (token), squad (span) and a bare encoder,
    every weight, bias and LayerNorm drawn at random, wide (std 0.2): a wrong weight mapping moves
    the outputs far (see the transformers test)."""
    root = tmp_path_factory.mktemp("models")
    return {name: save_task_model(root / name, minilm_dir, task, seed=seed, initializer_range=0.2, random_biases=True)
            for seed, (name, task) in enumerate([("sst2", "sst2"), ("conll2003", "conll2003"), ("squad", "squad"),
                                                 ("encoder", None)])}


@pytest.fixture(scope="module")
def sst2_data(tmp_path_factory):
    """A six-sentence SST-2 dev file in GLUE's format."""
    folder = tmp_path_factory.mktemp("sst2")
    rows = [f"{s}\t{i % 2}" for i, s in enumerate(SENTENCES)]
    (folder / "dev.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    return folder


def padded_batch(batch=3, length=13, seed=7):
    """A batch of another shape than the exporter's example, rows padded to different lengths."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, length, dtype=torch.long)
    for row in range(1, batch):
        mask[row, length - 3 * row:] = 0
    ids = torch.randint(1000, 30000, (batch, length), generator=g) * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": (torch.arange(length) > 6).long() * mask}


OUTPUTS = {"sst2": ("logits",), "conll2003": ("logits",), "squad": ("start_logits", "end_logits"),
           "encoder": ("last_hidden_state", "pooler_output")}


@pytest.fixture(scope="module")
def onnx_dirs(tmp_path_factory, models):
    """Each tiny model exported to ONNX once (the export takes a few seconds)."""
    root = tmp_path_factory.mktemp("onnx")
    return {name: export_model(directory, "onnx", root / name) for name, directory in models.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OUTPUTS))
def test_onnx_matches_pytorch_on_padded_batches_of_other_shapes(models, onnx_dirs, name):
    torch_model, onnx_model = load_model(models[name]), OnnxModel(onnx_dirs[name])
    for shape in ((3, 13), (1, 5), (5, 40)):
        batch = padded_batch(*shape)
        with torch.no_grad():
            expected = torch_model(**batch)
        actual = onnx_model(**batch)
        for field in OUTPUTS[name]:
            assert actual[field].shape == expected[field].shape
            difference = at_real_tokens(actual[field] - expected[field], batch["attention_mask"])
            assert difference.abs().max() < 1e-4, (field, shape)
    # padding does not change a row's outputs (at its real tokens)
    batch = padded_batch(2, 10)  # row 1: 7 real tokens, 3 padding
    padded, alone = onnx_model(**batch), onnx_model(**{k: v[1:, :7] for k, v in batch.items()})
    for field in OUTPUTS[name]:
        row = padded[field][1:]
        row = row[:, :7] if row.shape[1] == 10 else row  # per-token outputs: the real tokens
        assert (row - alone[field]).abs().max() < 1e-4, field


@pytest.mark.slow
def test_onnx_export_holds_graph_config_and_tokenizer(onnx_dirs):
    files = {p.name for p in onnx_dirs["sst2"].iterdir()}
    assert {"model.onnx", "config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json"} <= files
    assert "model.safetensors" not in files
    config = json.loads((onnx_dirs["sst2"] / "config.json").read_text())
    assert config["bertology_export"] == "onnx" and config["architectures"] == ["BertForSequenceClassification"]
    assert not list(onnx_dirs["sst2"].parent.glob(".*.tmp"))  # the staging folder was renamed, nothing left over


@pytest.mark.slow
def test_onnx_span_predictions_equal_pytorch(models, onnx_dirs):
    torch_model, tokenizer, spec, settings = load_finetuned(str(models["squad"]))
    onnx_model, *_ = load_finetuned(str(onnx_dirs["squad"]))
    assert isinstance(onnx_model, OnnxModel)
    context = "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy."
    examples = [SpanExample(str(i), q, context, [], False, f"q{i}")
                for i, q in enumerate(["Who gave their name to Normandy?", "In what centuries?"])]
    assert predict(onnx_model, tokenizer, spec, examples, settings) == predict(torch_model, tokenizer, spec, examples,
                                                                               settings, precision="fp32")


@pytest.mark.slow
def test_int8_reload_is_the_quantized_model_exactly(tmp_path, models):
    for name in ("sst2", "squad"):
        quantized = quantize(load_model(models[name]))
        out = export_model(models[name], "int8", tmp_path / name)
        reloaded = load_quantized(out)
        assert type(load_model(out)) is type(quantized)
        batch = padded_batch()
        with torch.no_grad():
            a, b = quantized(**batch), reloaded(**batch)
        for field in OUTPUTS[name]:
            assert torch.equal(a[field], b[field]), (name, field)
        qkv = reloaded.bert.layers[0].attention.qkv
        assert qkv.weight().dtype == torch.qint8 and qkv.weight().qscheme() == torch.per_channel_affine


@pytest.mark.slow
def test_int8_stays_close_to_fp32_and_is_smaller(tmp_path, minilm_dir):
    """The real all-MiniLM-L6-v2: int8 sentence vectors point where the fp32 ones do."""
    out = export_model(minilm_dir, "int8", tmp_path / "minilm-int8")
    fp32, int8 = load_model(minilm_dir), load_model(out)
    batch = Tokenizer.from_pretrained(out)(SENTENCES, padding=True, return_tensors="pt")
    real = batch["attention_mask"][..., None].float()
    with torch.no_grad():
        vectors = [(m(**batch).last_hidden_state * real).sum(1) / real.sum(1) for m in (fp32, int8)]  # mean pooling
    cosine = torch.nn.functional.cosine_similarity(*vectors)
    assert cosine.min() > 0.93  # measured 0.95-0.98 (int8 SST-2 dev accuracy 0.8945 vs fp32 0.8991)
    assert not torch.equal(*vectors)  # really quantized
    assert (out / "model.safetensors").stat().st_size < 0.7 * (minilm_dir / "model.safetensors").stat().st_size


def test_int8_is_never_run_under_bf16_autocast(tmp_path, models, sst2_data):
    out = export_model(models["sst2"], "int8", tmp_path / "int8")
    model, tokenizer, spec, settings = load_finetuned(str(out))
    assert model.inference_precision == "fp32"
    examples = read_examples(spec, sst2_data / "dev.tsv", "dev")
    assert len(predict(model, tokenizer, spec, examples, settings, precision="auto")) == len(SENTENCES)
    with pytest.raises(UserError, match="fp32 only"):
        predict(model, tokenizer, spec, examples, settings, precision="bf16")


def agree_to_fp32_rounding(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether two computations of one output tensor differ only by fp32 rounding: by at most
    1e-4 of the largest |value| of `expected`.

    Our Linear runs on oneDNN and transformers' on PyTorch's matmul: the same fp32 products summed
    in another order (bit for bit the same on 1 or 2 threads: not a matter of CPU load). The
    rounding left is set by the size of the whole tensor, not of each element (a hidden value of
    0.004 carries the error of the values around 3 it was computed from): measured at 0.2-1.0e-5 of
    the largest |value|, so an element-wise 1e-5 was a coin toss. A wrong weight mapping (two tensors
    swapped, a matrix transposed, layers or label rows out of order) moves some output by 3e-2 to 2x
    the largest |value|: 1e-4 sits 10x above the one and 300x below the other.
    """
    return bool((actual - expected).abs().max() <= 1e-4 * expected.abs().max())


@pytest.mark.parametrize("name, auto_class", [("sst2", "AutoModelForSequenceClassification"),
                                              ("conll2003", "AutoModelForTokenClassification"),
                                              ("squad", "AutoModelForQuestionAnswering"), ("encoder", "AutoModel")])
def test_hf_export_loads_in_transformers_with_the_same_outputs(tmp_path, models, name, auto_class):
    transformers = pytest.importorskip("transformers")
    out = export_model(models[name], "hf", tmp_path / name)
    theirs, info = getattr(transformers, auto_class).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    if name in ("sst2", "conll2003"):
        assert theirs.config.id2label == dict(enumerate(TASKS[name].labels))
    ours = load_model(models[name])
    batch = padded_batch()
    with torch.no_grad():
        expected, actual = ours(**batch), theirs.eval()(**batch)
    real = batch["attention_mask"]
    assert all(agree_to_fp32_rounding(at_real_tokens(actual[field], real), at_real_tokens(expected[field], real))
               for field in OUTPUTS[name])
    # ... and a wrong mapping would show: the last layer's query and key biases swapped, the smallest
    # change of those measured (see agree_to_fp32_rounding)
    attention = theirs.base_model.encoder.layer[-1].attention.self
    with torch.no_grad():
        query_bias = attention.query.bias.clone()
        attention.query.bias.copy_(attention.key.bias)
        attention.key.bias.copy_(query_bias)
        wrong = theirs(**batch)
    assert not any(agree_to_fp32_rounding(at_real_tokens(wrong[field], real), at_real_tokens(expected[field], real))
                   for field in OUTPUTS[name])
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    ours = Tokenizer.from_pretrained(out)(SENTENCES, padding=False, return_tensors=None)
    assert tokenizer(SENTENCES)["input_ids"] == ours["input_ids"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["hf", "int8", "onnx"])
def test_evaluate_and_predict_run_on_every_export(tmp_path, models, onnx_dirs, sst2_data, fmt):
    out = onnx_dirs["sst2"] if fmt == "onnx" else tmp_path / fmt
    if fmt != "onnx":
        assert main(["export", "--model", str(models["sst2"]), "--format", fmt, "--out", str(out)]) == 0
    results = {}
    for name, directory, precision in (("fp32", models["sst2"], "fp32"), (fmt, out, "auto")):
        assert main(["evaluate", "--data", str(sst2_data), "--model", str(directory), "--precision", precision,
                     "--out", str(tmp_path / f"{name}.json")]) == 0
        results[name] = json.loads((tmp_path / f"{name}.json").read_text())["accuracy"]
    if fmt != "int8":
        assert results[fmt] == results["fp32"]
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    assert main(["predict", "--model", str(out), "--input", str(tmp_path / "in.txt"),
                 "--out", str(tmp_path / "p.tsv")]) == 0
    lines = (tmp_path / "p.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == len(SENTENCES) + 1


@pytest.mark.slow
def test_user_mistakes_are_one_line_errors(tmp_path, models, sst2_data, monkeypatch, capsys):
    source = str(models["sst2"])

    def fails(*args):
        assert main(["export", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("bertology: error:") and err.count("\n") == 1
        return err

    assert "--format must be one of hf, int8, onnx, got 'tflite'" in fails("--model", source, "--format", "tflite",
                                                                           "--out", str(tmp_path / "a"))
    assert "no such model directory" in fails("--model", str(tmp_path / "nope"), "--format", "hf", "--out",
                                              str(tmp_path / "b"))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep me")
    assert "not empty" in fails("--model", source, "--format", "hf", "--out", str(busy))
    assert main(["export", "--model", source, "--format", "hf", "--out", str(busy), "--force"]) == 0
    assert not (busy / "notes.txt").exists() and (busy / "model.safetensors").is_file()
    assert "replace the model" in fails("--model", source, "--format", "hf", "--out", source, "--force")
    int8 = export_model(source, "int8", tmp_path / "int8")
    assert "already an int8 export" in fails("--model", str(int8), "--format", "onnx", "--out", str(tmp_path / "c"))
    assert main(["evaluate", "--data", str(sst2_data), "--model", str(int8), "--precision", "bf16"]) == 2
    assert "fp32 only" in capsys.readouterr().err

    albert = tmp_path / "albert"
    torch.manual_seed(0)
    BertModel(BertConfig.from_preset("tiny", vocab_size=100, share_layers=True)).save_pretrained(albert)
    assert "cannot represent" in fails("--model", str(albert), "--format", "hf", "--out", str(tmp_path / "d"))

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    missing = fails("--model", source, "--format", "onnx", "--out", str(tmp_path / "e"))
    assert 'onnxruntime is not installed: pip install "bertology[export]"' in missing
    assert not (tmp_path / "e").exists()


def test_a_failed_export_leaves_nothing_behind(tmp_path, models, monkeypatch):
    import bertology.uses.export as export

    def broken(model, path, context, device):
        path.write_bytes(b"half a graph")
        raise RuntimeError("exporter crashed")

    monkeypatch.setattr(export, "write_onnx", broken)
    with pytest.raises(RuntimeError, match="exporter crashed"):
        export_model(models["sst2"], "onnx", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
