"""Every command on RoBERTa, ALBERT, ELECTRA and DistilBERT directories as transformers writes them
(a tiny random masked LM and the tokenizer its class saves; no download).

`bertology finetune` runs SST-2 (256 training examples) from each, and what it saves loads in
transformers' AutoModelForSequenceClassification and AutoTokenizer with every key, giving the same
logits and the same predictions as `bertology predict`; then evaluate, serve, embed, explain,
distill (the fine-tuned model as teacher, a student of its family) and info take the directory,
and a directory that cannot be used is a one-line error naming the file."""

import json
import shutil

import numpy as np
import pytest
import torch
import transformers
from fastapi.testclient import TestClient
from helpers import run_cli

from bertology.cli import main
from bertology.inference.modeldir import load_model
from bertology.inference.predictor import Predictor
from bertology.uses.serve import ServeConfig, create_app

FAMILIES = ("roberta", "albert", "electra", "distilbert")
MAX_SEQ_LEN = 64


def masked_lm_directory(model_type: str, tokenizer_dir, directory):
    """A tiny random masked LM of `model_type` (2 layers, 64 wide; matrices drawn at std 0.1) with the
    tokenizer transformers saved."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    if model_type == "distilbert":
        sizes = {"dim": 64, "n_layers": 2, "n_heads": 2, "hidden_dim": 128}
    else:
        sizes = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
    if model_type in ("albert", "electra"):
        sizes["embedding_size"] = 32
    offset = tokenizer.pad_token_id + 1 if model_type == "roberta" else 0  # RoBERTa's positions after the padding id
    config = transformers.AutoConfig.for_model(model_type, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                               max_position_embeddings=MAX_SEQ_LEN + offset, **sizes)
    torch.manual_seed(0)
    model = transformers.AutoModelForMaskedLM.from_config(config)
    with torch.no_grad():  # matrices wider than transformers' std 0.02, so that each sentence's logits differ
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.1)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def dev_sentences(data_dir) -> list[str]:
    """The first 200 SST-2 dev sentences."""
    rows = (data_dir / "glue/SST-2/dev.tsv").read_text(encoding="utf-8").splitlines()[1:201]
    return [row.split("\t")[0] for row in rows]


@pytest.fixture(scope="module")
def start_directory(transformers_tokenizers, tmp_path_factory):
    """family -> a transformers-written masked-LM directory of it (`masked_lm_directory`)."""
    built = {}

    def build(model_type: str):
        if model_type not in built:
            built[model_type] = masked_lm_directory(model_type, transformers_tokenizers[model_type][1],
                                                    tmp_path_factory.mktemp(model_type) / "start")
        return built[model_type]

    return build


@pytest.fixture(scope="module")
def finetuned(start_directory, data_dir, tmp_path_factory):
    """family -> (the transformers directory, the model `bertology finetune` saved from it on SST-2)."""
    built = {}

    def build(model_type: str):
        if model_type not in built:
            start = start_directory(model_type)
            out = start.parent / "sst2"
            status = main(["finetune", "--task", "sst2", "--data", str(data_dir / "glue/SST-2"), "--model", str(start),
                           "--out", str(out), "--max-train-examples", "256", "--epochs", "1",
                           "--max-seq-len", str(MAX_SEQ_LEN), "--lr", "1e-3", "--batch-size", "32", "--precision", "fp32",
                           "--no-progress", "--no-learning-curve"])
            assert status == 0
            built[model_type] = start, out
        return built[model_type]

    return build


@pytest.mark.slow
@pytest.mark.parametrize("model_type", FAMILIES)
def test_finetune_sst2_from_a_transformers_directory_and_transformers_predicts_the_same(
        model_type, finetuned, dev_sentences, tmp_path, capsys):
    _, out = finetuned(model_type)
    results = json.loads((out / "eval_results.json").read_text())
    assert results["task"] == "sst2" and results["step"] == 8  # 256 examples, batches of 32, one epoch
    theirs, info = transformers.AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert type(theirs).__name__ == f"{transformers.AutoConfig.from_pretrained(out).architectures[0]}"
    assert not any(info.values()), info
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    batch = tokenizer(dev_sentences, padding=True, truncation=True, max_length=MAX_SEQ_LEN, return_tensors="pt")
    with torch.no_grad():
        expected = theirs.eval()(**batch).logits
        inputs = [batch["input_ids"], batch["attention_mask"]] + [batch.get("token_type_ids")]
        got = load_model(out)(*inputs).logits
    assert batch["attention_mask"].min() == 0  # a padded batch
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)
    (tmp_path / "dev.txt").write_text("\n".join(dev_sentences) + "\n", encoding="utf-8")
    status, _, err = run_cli(capsys, "predict", "--model", out, "--input", tmp_path / "dev.txt", "--out",
                             tmp_path / "predictions.tsv", "--precision", "fp32")
    assert status == 0, err
    predicted = [line.split("\t")[1] for line in (tmp_path / "predictions.tsv").read_text().splitlines()[1:]]
    assert predicted == [theirs.config.id2label[i] for i in expected.argmax(-1).tolist()]
    # Tiny random encoders stay near SST-2's majority class after 8 steps; their logits still differ
    # from sentence to sentence, so equal logits say more than equal labels.
    assert (expected[:, 1] - expected[:, 0]).std() > 1e-3


@pytest.mark.slow
def test_evaluate_serve_embed_explain_and_info_take_a_roberta_directory(finetuned, data_dir, dev_sentences, tmp_path,
                                                                         capsys):
    start, out = finetuned("roberta")
    status, stdout, err = run_cli(capsys, "evaluate", "--model", out, "--data", data_dir / "glue/SST-2",
                                  "--precision", "fp32")
    assert status == 0 and "accuracy" in stdout, err
    config = ServeConfig(model=str(out), precision="fp32")
    with TestClient(create_app(Predictor.load(str(out), "fp32"), config)) as client:
        answers = client.post("/predict", json={"texts": dev_sentences[:4]}).json()
        vectors = client.post("/embed", json={"texts": dev_sentences[:4]}).json()
    assert len(answers["predictions"]) == 4 and np.asarray(vectors["embeddings"]).shape == (4, 64)
    (tmp_path / "lines.txt").write_text("\n".join(dev_sentences[:5]) + "\n", encoding="utf-8")
    for level in ("sentence", "token"):
        status, _, err = run_cli(capsys, "embed", "--model", start, "--input", tmp_path / "lines.txt", "--level", level,
                                 "--out", tmp_path / f"{level}.jsonl")
        assert status == 0, err
    words = [json.loads(line)["words"] for line in (tmp_path / "token.jsonl").read_text().splitlines()]
    assert words == [sentence.split() for sentence in dev_sentences[:5]]  # one vector per word, in any frame
    status, _, err = run_cli(capsys, "explain", "attention", "--model", out, "--text", dev_sentences[0],
                             "--out", tmp_path / "attention.png")
    assert status == 0 and (tmp_path / "attention.png").stat().st_size > 0, err
    status, stdout, err = run_cli(capsys, "info", out)
    assert status == 0, err
    lines = dict(line.split(":", 1) for line in stdout.splitlines() if not line.startswith(" "))
    assert lines["family"].strip().startswith("roberta: RoBERTa encoder (2 layers, 64 wide")
    assert lines["architecture"].strip() == "RobertaForSequenceClassification"
    assert lines["tokenizer"].strip().startswith("bpe (RobertaTokenizer)")
    assert lines["commands"].strip() == ("finetune, evaluate, predict, serve, embed, explain attention, explain senses, "
                                         "wic, distill (teacher, student, cut to --student-layers), export (hf, int8, onnx)")


@pytest.mark.slow
@pytest.mark.parametrize("student", ["preset", "layers"])
def test_distill_a_fine_tuned_electra_into_a_student_of_its_family(finetuned, data_dir, tmp_path, capsys, student):
    _, teacher = finetuned("electra")
    how = ["--preset", "tiny"] if student == "preset" else ["--student-layers", "1"]
    status, _, err = run_cli(capsys, "distill", "--teacher", teacher, "--data", data_dir / "glue/SST-2",
                             "--max-train-examples", "300", "--epochs", "1", "--precision", "fp32", *how,
                             "--cache-dir", tmp_path / "cache", "--out", tmp_path / "student", "--no-progress")
    assert status == 0, err
    saved, info = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "student",
                                                                                   output_loading_info=True)
    assert type(saved).__name__ == "ElectraForSequenceClassification" and not any(info.values()), info
    status, _, err = run_cli(capsys, "evaluate", "--model", tmp_path / "student", "--data", data_dir / "glue/SST-2")
    assert status == 0, err


@pytest.mark.slow
@pytest.mark.parametrize("model_type, damage, message", [
    ("albert", "config.json", "config.json: no such file"),
    ("albert", "model.safetensors", "no model.safetensors"),
    ("albert", "tokenizer.json", "no tokenizer here"),
    ("albert", "garble spiece.model", "spiece.model"),  # in place of tokenizer.json, as transformers 4 wrote it
    ("roberta", "garble tokenizer.json", "tokenizer.json"),
    ("roberta", "garble tokenizer_config.json", "tokenizer_config.json"),
    ("distilbert", "garble config.json", "config.json"),
])
def test_a_directory_missing_or_garbling_a_file_is_a_one_line_error_naming_it(start_directory, tmp_path, capsys,
                                                                                model_type, damage, message):
    start = start_directory(model_type)
    broken = shutil.copytree(start, tmp_path / "broken")
    verb, _, name = damage.rpartition(" ")
    if name == "spiece.model":
        (broken / "tokenizer.json").unlink()
    if verb == "garble":
        (broken / name).write_bytes(b"\x00\xff not what it should be {")
    else:
        (broken / name).unlink()
    capsys.readouterr()
    status, stdout, err = run_cli(capsys, "info", broken)
    assert status == 2 and stdout == "" and err.count("\n") == 1 and message in err, err
