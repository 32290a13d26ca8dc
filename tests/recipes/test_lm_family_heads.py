"""GPT and XLNet through the token and span commands: a tiny random GPT (GPT-1's layout, a WordPiece
vocabulary) and XLNet (a unigram vocabulary, as XLNet's SentencePiece) fine-tuned with `bertology
finetune --task conll2003` on 32 CoNLL-2003 sentences and `--task squad` on a few SQuAD paragraphs,
then `evaluate`; the metrics it reports are recomputed here from `predict`'s output with seqeval and
SQuAD's official answer normalisation. Then the heads `load_task_model` picks and their layer depths."""

import collections
import json
import re
import string

import pytest
import torch
from helpers import run_cli
from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score

from bertology.data.tokenizer import train_tokenizer
from bertology.models.gpt import GPTConfig, GPTForQuestionAnswering, GPTForTokenClassification, GPTLMHeadModel
from bertology.models.xlnet import (
    XLNetConfig,
    XLNetForQuestionAnsweringSimple,
    XLNetForTokenClassification,
    XLNetLMHeadModel,
)
from bertology.recipes.task_training import gradual_unfreezer, layer_depth, load_task_model, num_layers_of
from bertology.tasks.readers import TASKS

SQUAD_SOURCE = "squad/train-v2.0.subset-first10articles.json"
# family -> (the language model, its task classes and config.json `architectures` for conll2003 and squad)
EXPECTED = {"gpt": {"conll2003": (GPTForTokenClassification, "GPTForTokenClassification"),
                    "squad": (GPTForQuestionAnswering, "GPTForQuestionAnswering")},
            "xlnet": {"conll2003": (XLNetForTokenClassification, "XLNetForTokenClassification"),
                      "squad": (XLNetForQuestionAnsweringSimple, "XLNetForQuestionAnsweringSimple")}}


def conll_sentences(path, count: int) -> list[str]:
    """The first `count` sentences of a CoNLL file (blocks of lines), -DOCSTART- left out."""
    blocks = [b for b in path.read_text().split("\n\n") if b.strip() and not b.startswith("-DOCSTART-")]
    return blocks[:count]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory, data_dir):
    """A CoNLL-2003 folder (32 training, 16 dev sentences) and a SQuAD v1.1 folder (the answerable
    questions of two paragraphs, to train on and as dev) cut from the shared data."""
    root = tmp_path_factory.mktemp("lm_heads")
    conll = data_dir / "conll2003"
    (root / "conll").mkdir()
    for name, count in (("train.txt", 32), ("valid.txt", 16)):
        (root / "conll" / name).write_text("\n\n".join(conll_sentences(conll / name, count)) + "\n")
    article = json.loads((data_dir / SQUAD_SOURCE).read_text())["data"][0]
    (root / "squad").mkdir()
    # dev: the training paragraphs again, where a tiny model's answers overlap the gold ones after
    # a few epochs (on unseen paragraphs its F1 is 0, which would make the comparison below vacuous)
    for name, paragraphs in (("train-v1.1.json", article["paragraphs"][:2]), ("dev-v1.1.json", article["paragraphs"][:2])):
        paragraphs = [{**p, "qas": [qa for qa in p["qas"] if not qa.get("is_impossible")]} for p in paragraphs]
        (root / "squad" / name).write_text(json.dumps({"version": "1.1", "data": [{**article, "paragraphs": paragraphs}]}))
    (root / "text.txt").write_text("\n".join([" ".join(line.split()[0] for line in block.splitlines())
                                              for block in conll_sentences(conll / "train.txt", 400)]
                                             + [p["context"] for p in article["paragraphs"]]
                                             + [qa["question"] for p in article["paragraphs"] for qa in p["qas"]]) + "\n")
    return root


@pytest.fixture(scope="module")
def models(tasks):
    """family -> a tiny random language model directory (2 layers x 32) with its vocabulary."""
    torch.manual_seed(0)
    gpt = tasks / "gpt"
    tokenizer = train_tokenizer([tasks / "text.txt"], vocab_size=600, out_dir=gpt)
    GPTLMHeadModel(GPTConfig(vocab_size=tokenizer.vocab_size, n_positions=128, n_embd=32, n_layer=2,
                             n_head=4)).save_pretrained(gpt)
    xlnet = tasks / "xlnet"
    tokenizer = train_tokenizer([tasks / "text.txt"], vocab_size=600, out_dir=xlnet, model="unigram")
    XLNetLMHeadModel(XLNetConfig(vocab_size=tokenizer.vocab_size, d_model=32, n_layer=2, n_head=4,
                                 d_inner=64)).save_pretrained(xlnet)
    return {"gpt": gpt, "xlnet": xlnet}


def normalize_answer(text: str) -> str:
    """SQuAD's official evaluate-v1.1.py normalisation: lower case, no punctuation, articles or extra spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def squad_scores(dev_file, predictions: dict[str, str]) -> dict[str, float]:
    """Exact match and F1 (fractions), each question's best over its gold answers, as SQuAD's script."""
    exact, f1 = [], []
    for article in json.loads(dev_file.read_text())["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                predicted = normalize_answer(predictions[qa["id"]]).split()
                golds = [normalize_answer(a["text"]).split() for a in qa["answers"]]
                exact.append(max(float(predicted == gold) for gold in golds))
                scores = []
                for gold in golds:
                    common = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
                    scores.append(0.0 if common == 0 else
                                  2 * common / len(predicted) * common / len(gold) / (common / len(predicted) + common / len(gold)))
                f1.append(max(scores))
    return {"exact_match": sum(exact) / len(exact), "f1": sum(f1) / len(f1)}


def conll_scores(predicted_file) -> dict[str, float]:
    """Entity precision, recall and F1 and token accuracy from `predict`'s CoNLL columns (word gold
    predicted), by seqeval (conlleval's counting)."""
    gold, predicted = [], []
    for block in predicted_file.read_text().split("\n\n"):
        rows = [line.split() for line in block.splitlines() if line.strip()]
        if rows:
            gold.append([row[1] for row in rows])
            predicted.append([row[2] for row in rows])
    return {"precision": precision_score(gold, predicted), "recall": recall_score(gold, predicted),
            "f1": f1_score(gold, predicted), "accuracy": accuracy_score(gold, predicted)}


TASK_RUNS = {  # task -> (data folder, the dev examples for predict, extra finetune flags)
    "conll2003": ("conll", "conll/valid.txt", ["--epochs", 3, "--lr", 3e-3]),  # a CoNLL .txt, not plain text
    "squad": ("squad", "squad/dev-v1.1.json", ["--epochs", 2, "--lr", 3e-3, "--max-seq-len", 96, "--doc-stride", 48,
                                              "--max-query-length", 24]),
}


@pytest.mark.slow
@pytest.mark.parametrize("family", list(EXPECTED))
@pytest.mark.parametrize("task", list(TASK_RUNS))
def test_finetune_evaluate_and_predict_agree_on_token_and_span_tasks(family, task, models, tasks, tmp_path, capsys):
    folder, dev_name, flags = TASK_RUNS[task]
    out = tmp_path / "ft"
    status, _, err = run_cli(capsys, "finetune", "--task", task, "--data", tasks / folder, "--model", models[family],
                             "--out", out, "--batch-size", 8, "--precision", "fp32", "--seed", 1, "--no-progress", *flags)
    assert status == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [EXPECTED[family][task][1]] and config["finetuning_task"] == task
    trained = json.loads((out / "eval_results.json").read_text())
    status, _, err = run_cli(capsys, "evaluate", "--data", tasks / folder, "--model", out, "--out", tmp_path / "e.json",
                             "--precision", "fp32")
    assert status == 0, err
    evaluated = json.loads((tmp_path / "e.json").read_text())
    suffix = ".txt" if task == "conll2003" else ".json"
    status, _, err = run_cli(capsys, "predict", "--model", out, "--input", tasks / dev_name,
                             "--out", tmp_path / f"p{suffix}", "--precision", "fp32")
    assert status == 0, err
    if task == "conll2003":
        recomputed = conll_scores(tmp_path / "p.txt")
        assert recomputed["accuracy"] > 0.5  # most dev tokens are "O": a tagger that runs gets those
    else:
        predictions = json.loads((tmp_path / "p.json").read_text())
        recomputed = squad_scores(tasks / dev_name, predictions)
        contexts = {qa["id"]: p["context"] for p in json.loads((tasks / dev_name).read_text())["data"][0]["paragraphs"]
                    for qa in p["qas"]}
        assert predictions.keys() == contexts.keys()
        assert all(answer and answer in contexts[qid] for qid, answer in predictions.items())
        assert recomputed["f1"] > 0  # some predicted span overlaps its answer
    for metric, value in recomputed.items():  # what finetune and evaluate report is what predict's output scores
        assert evaluated[metric] == pytest.approx(value, abs=1e-9), metric
        assert trained[metric] == pytest.approx(value, abs=1e-9), metric


@pytest.mark.parametrize("family", list(EXPECTED))
def test_load_task_model_picks_the_token_and_span_heads_and_layers_have_depths(family, models):
    for task, (model_class, _) in EXPECTED[family].items():
        model = load_task_model(str(models[family]), TASKS[task])
        assert type(model) is model_class and num_layers_of(model) == 2
        head = "classifier.weight" if task == "conll2003" else "qa_outputs.weight"
        depths = {name: layer_depth(model, name) for name, _ in model.named_parameters()}
        embedding = "transformer.wte.weight" if family == "gpt" else "transformer.word_embedding.weight"
        top = "transformer.h.1.attn.c_attn.weight" if family == "gpt" else "transformer.layer.1.ff.layer_1.weight"
        assert depths[embedding] == 0 and depths[top] == 2 and depths[head] == 3
        gradual_unfreezer(model)(0)  # the first epoch: the head and the top layer train
        assert {name for name, p in model.named_parameters() if p.requires_grad} == {
            name for name, depth in depths.items() if depth >= 2}
