"""Fine-tuning end to end on tiny models and real task files, plus the pieces it is made of."""

import csv
import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from helpers import save_tiny_elmo

from bertology import BertModel, Tokenizer, UserError
from bertology.cli import main
from bertology.data.tokenizer import train_tokenizer
from bertology.inference.predict import predict
from bertology.inference.predictor import Predictor
from bertology.inference.runners import load_finetuned
from bertology.inference.text_to_text import Casting, casting_for, encode_inputs, predict_text
from bertology.models.awd_lstm import AWDLSTMConfig, AWDLSTMLMHeadModel
from bertology.models.gpt import GPTConfig, GPTLMHeadModel
from bertology.models.static import StaticConfig, StaticVectors, tokenize_words
from bertology.models.t5 import T5Config, T5ForConditionalGeneration
from bertology.recipes.finetune import FinetuneConfig, run_finetuning
from bertology.recipes.task_training import gradual_unfreezer, layer_depth, load_task_model
from bertology.tasks.inputs import (
    Encoded,
    Feature,
    InputSettings,
    bucketed_batches,
    decode_spans,
    decode_tokens,
    encode,
)
from bertology.tasks.readers import TASKS, SequenceExample, SpanExample, TokenExample, read_examples
from bertology.tasks.splits import read_inputs
from bertology.uses.serve import ServeConfig, create_app, load_served


def finetune(tmp_path, name, **settings):
    cfg = FinetuneConfig(out=str(tmp_path / name), progress=False, **{"precision": "fp32", **settings})
    return run_finetuning(cfg), tmp_path / name


def csv_labels(path) -> list[str]:
    """The label column of a task file, read here with the csv module (not the task readers)."""
    with open(path, newline="") as f:
        return [row["label"] for row in csv.DictReader(f, delimiter="\t" if path.suffix == ".tsv" else ",")]


def accuracy(predicted: list[str], gold: list[str]) -> float:
    """The fraction of predictions equal to their gold label (one each)."""
    assert len(predicted) == len(gold)
    return float(np.mean([p == g for p, g in zip(predicted, gold)]))


@pytest.mark.slow
def test_a_tiny_encoder_learns_a_learnable_task_far_above_its_untrained_head(keyword_model, keyword_task, tiny_model):
    """Fails if fine-tuning stops learning: the keyword task ("pos" exactly when the sentence says
    "excellent") is learnt to > 0.95 in a few seconds, while the same encoder with its random head
    is near chance; the recorded dev accuracy is the one counted here from the predictions."""
    model, tokenizer, spec, settings = load_finetuned(str(keyword_model))
    dev = read_examples(spec, keyword_task / "dev.csv", "dev")
    gold = csv_labels(keyword_task / "dev.csv")
    trained = accuracy(predict(model, tokenizer, spec, dev, settings, precision="fp32"), gold)
    torch.manual_seed(0)
    untrained = accuracy(predict(load_task_model(str(tiny_model), spec), tokenizer, spec, dev, settings,
                                 precision="fp32"), gold)
    assert json.loads((keyword_model / "eval_results.json").read_text())["accuracy"] == pytest.approx(trained)
    assert trained > 0.95 and untrained < 0.75, (trained, untrained)  # half the dev rows are "pos"


@pytest.mark.slow
def test_sst2_writes_model_results_curve_and_scores_like_evaluate(tmp_path, tiny_model, data_dir, capsys):
    sst2 = data_dir / "glue/SST-2"
    results, out = finetune(tmp_path, "run", task="sst2", data=str(sst2), model=str(tiny_model),
                            max_train_examples=200, epochs=2, batch_size=16, lr=1e-3)
    assert set(results) >= {"task", "split", "accuracy"} and results["task"] == "sst2"
    # the reported accuracy is the one counted here from the model's dev predictions
    assert main(["predict", "--model", str(out), "--input", str(sst2 / "dev.tsv"), "--out", str(tmp_path / "d.tsv"),
                 "--precision", "fp32"]) == 0
    dev_predictions = [line.split("\t")[1] for line in (tmp_path / "d.tsv").read_text().splitlines()[1:]]
    assert results["accuracy"] == pytest.approx(accuracy(dev_predictions, csv_labels(sst2 / "dev.tsv")), abs=1e-9)
    for name in ("config.json", "model.safetensors", "vocab.txt", "eval_results.json", "metrics.jsonl",
                 "learning_curve.png", "finetune_config.json"):
        assert (out / name).is_file(), name
    assert not (out / "checkpoints").exists()
    recorded = json.loads((out / "finetune_config.json").read_text())
    assert recorded["train_examples"] == 200 and recorded["train_examples_longer_than_max_seq_len"] == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("split") == "eval" for r in rows) == 2  # one evaluation per epoch
    assert main(["evaluate", "--data", str(sst2), "--model", str(out), "--out", str(tmp_path / "e.json")]) == 0
    again = json.loads((tmp_path / "e.json").read_text())
    assert again["accuracy"] == pytest.approx(results["accuracy"], abs=1e-9)
    (tmp_path / "in.txt").write_text("a gorgeous , witty , seductive movie .\nthe worst film of the year .\n")
    assert main(["predict", "--model", str(out), "--input", str(tmp_path / "in.txt"), "--out", str(tmp_path / "p.tsv")]) == 0
    lines = (tmp_path / "p.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 3 and all(l.split("\t")[1] in "01" for l in lines[1:])


@pytest.mark.slow
def test_same_seed_same_metrics_and_seeds_report_median_and_spread(tmp_path, tiny_model, data_dir):
    mrpc = data_dir / "glue/MRPC"
    common = dict(task="mrpc", data=str(mrpc), model=str(tiny_model), max_train_examples=96, epochs=1, batch_size=16)
    first, _ = finetune(tmp_path, "a", **common)
    second, _ = finetune(tmp_path, "b", **common)
    assert first == second
    summary, out = finetune(tmp_path, "seeds", seeds=3, **common)
    assert summary["seeds"] == 3 and len(summary["runs"]) == 3
    f1s = sorted(run["f1"] for run in summary["runs"])
    assert summary["f1"] == f1s[1] and summary["f1_min"] == f1s[0] and summary["f1_max"] == f1s[2]
    assert json.loads((out / "eval_results.json").read_text())["f1"] == summary["f1"]
    assert all((out / f"seed-{seed}" / "model.safetensors").is_file() for seed in (42, 43, 44))


@pytest.mark.slow
def test_pretrained_minilm_learns_sst2_from_500_examples(tmp_path, minilm_dir, data_dir):
    """Fails if fine-tuning stops working: a real pretrained encoder must beat chance by far."""
    results, _ = finetune(tmp_path, "minilm", task="sst2", data=str(data_dir / "glue/SST-2"), model=str(minilm_dir),
                          max_train_examples=500, epochs=2, batch_size=16, lr=2e-4, precision="auto")
    assert results["accuracy"] > 0.70  # measured 0.775; always predicting one class gives 0.509


@pytest.mark.slow
def test_conll_and_predict_in_conll_format(tmp_path, tiny_model, data_dir):
    conll = data_dir / "conll2003"
    results, out = finetune(tmp_path, "ner", task="conll2003", data=str(conll), model=str(tiny_model),
                            max_train_examples=64, epochs=1, batch_size=16, lr=1e-3)
    assert {"precision", "recall", "f1", "accuracy"} <= set(results)
    (tmp_path / "s.txt").write_text("EU rejects German call to boycott British lamb .\n")
    assert main(["predict", "--model", str(out), "--input", str(tmp_path / "s.txt"), "--out", str(tmp_path / "t.conll")]) == 0
    rows = [line.split() for line in (tmp_path / "t.conll").read_text().splitlines() if line]
    assert [r[0] for r in rows][:3] == ["EU", "rejects", "German"] and all(r[1] in TASKS["conll2003"].labels for r in rows)


@pytest.mark.slow
def test_squad_v2_trains_and_predicts_answer_texts(tmp_path, tiny_model, data_dir):
    squad = data_dir / "squad/train-v2.0.subset-first10articles.json"
    # A threshold no [CLS] score can clear: always a span, never SQuAD 2.0's "no answer", so that
    # every prediction is a text to check against its context.
    results, out = finetune(tmp_path, "qa", task="squad_v2", data=str(squad), model=str(tiny_model),
                            max_train_examples=48, epochs=1, batch_size=16, lr=1e-3, max_seq_len=192,
                            null_score_threshold=1e9)
    assert {"exact_match", "f1"} <= set(results)
    assert results["f1"] >= results["exact_match"]  # an exact match has F1 1 too, question by question
    assert main(["predict", "--model", str(out), "--input", str(squad), "--out", str(tmp_path / "p.json")]) == 0
    predictions = json.loads((tmp_path / "p.json").read_text())
    contexts = {qa["id"]: paragraph["context"] for article in json.loads(squad.read_text())["data"]
                for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    assert predictions.keys() == contexts.keys()  # one answer per question of the file
    assert all(answer and answer in contexts[question] for question, answer in predictions.items())


# ----- inputs and decoding --------------------------------------------------------------------

def test_long_sequences_are_cut_and_counted_or_windowed(tiny_model):
    tokenizer = Tokenizer.from_pretrained(tiny_model)
    examples = [SequenceExample("0", "word " * 100, None, "1", "x:1"), SequenceExample("1", "short one", None, "0", "x:2")]
    cut = encode(TASKS["sst2"], examples, tokenizer, InputSettings(max_seq_len=32), training=True)
    assert cut.too_long == 1 and len(cut.features) == 2 and len(cut.features[0].input_ids) == 32
    windows = encode(TASKS["sst2"], examples, tokenizer, InputSettings(max_seq_len=32, long_inputs="window", doc_stride=16),
                     training=True)
    covered = [f for f in windows.features if f.example == 0]
    assert len(covered) == 6 and all(len(f.input_ids) <= 32 and f.input_ids[0] == tokenizer.cls_token_id for f in covered)


def test_token_labels_sit_on_first_pieces_and_windows_pick_the_most_central(tiny_model):
    tokenizer = Tokenizer.from_pretrained(tiny_model)
    spec = TASKS["conll2003"]
    example = TokenExample("0", ["Unaffable", "Johannesburg", "x"], ["O", "B-LOC", "O"], "x:1")
    encoded = encode(spec, [example], tokenizer, InputSettings(max_seq_len=128), training=True)
    feature = encoded.features[0]
    labelled = [(t, w) for t, w in enumerate(feature.word_ids) if w is not None]
    assert [w for _, w in labelled] == [0, 1, 2]
    assert [feature.token_labels[t] for t, _ in labelled] == [0, spec.labels.index("B-LOC"), 0]
    assert sum(l != -100 for l in feature.token_labels) == 3
    # two windows both covering word 0: the one where it is more central wins
    rows = [Feature([2, 5, 3], [0] * 3, 0, word_ids=[None, 0, None], centrality=[0, 0, 0]),
            Feature([2, 5, 3], [0] * 3, 0, word_ids=[None, 0, None], centrality=[0, 5, 0])]
    logits = [np.eye(9)[[0, 1, 0]], np.eye(9)[[0, 3, 0]]]
    tags = decode_tokens(spec, Encoded(rows, 1), logits, [TokenExample("0", ["w"], None, "")])
    assert tags == [[spec.labels[3]]]


def test_span_search_respects_context_order_length_and_no_answer():
    context = "The cat sat on the mat."
    example = SpanExample("q", "Where?", context, [], False, "x")
    offsets = [None, None, (0, 3), (4, 7), (8, 11), (12, 14), (15, 18), (19, 22), None]
    feature = Feature(list(range(9)), [0] * 9, 0, offsets=offsets)
    start = np.full(9, -5.0)
    end = np.full(9, -5.0)
    start[6], end[7] = 3.0, 3.0  # "the mat"
    start[1], end[1] = 10.0, 10.0  # the question's tokens score high but are not context
    settings = InputSettings(max_answer_length=5)
    assert decode_spans(Encoded([feature], 1), [start], [end], [example], settings, False) == {"q": "the mat"}
    end[3] = 4.0  # an end before the best start is never chosen
    assert decode_spans(Encoded([feature], 1), [start], [end], [example], settings, False) == {"q": "the mat"}
    start[0], end[0] = 9.0, 9.0  # [CLS] beats the span: SQuAD 2.0 answers ""
    assert decode_spans(Encoded([feature], 1), [start], [end], [example], settings, True) == {"q": ""}


def test_bucketed_batches_cover_every_row_once_with_similar_lengths():
    lengths = list(np.random.default_rng(0).integers(5, 200, 1000))
    batches = bucketed_batches(lengths, 32, np.random.default_rng(1))
    assert sorted(i for b in batches for i in b) == list(range(1000))
    spread = np.mean([max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches])
    assert spread < 40  # random batches would spread over ~180


# ----- ULMFiT ---------------------------------------------------------------------------------

def test_layer_depths_and_gradual_unfreezing(tiny_model):
    model = load_task_model(str(tiny_model), TASKS["sst2"])
    assert layer_depth(model, "bert.embeddings.word_embeddings.weight") == 0
    assert layer_depth(model, "bert.layers.1.attention.qkv.weight") == 2
    assert layer_depth(model, "classifier.dense.weight") == 3
    unfreeze = gradual_unfreezer(model)
    trainable = lambda: {n.split(".")[1] if n.startswith("bert.") else n.split(".")[0]  # noqa: E731
                         for n, p in model.named_parameters() if p.requires_grad}
    unfreeze(0)
    assert trainable() == {"layers", "pooler", "classifier"}
    assert not model.bert.layers[0].attention.qkv.weight.requires_grad and model.bert.layers[1].attention.qkv.weight.requires_grad
    unfreeze(2)
    assert trainable() == {"embeddings", "layers", "pooler", "classifier"}


@pytest.mark.slow
def test_ulmfit_options_train_only_what_they_should(tmp_path, tiny_model, data_dir):
    before = load_task_model(str(tiny_model), TASKS["sst2"]).bert.state_dict()
    _, out = finetune(tmp_path, "ulmfit", task="sst2", data=str(data_dir / "glue/SST-2"), model=str(tiny_model),
                      max_train_examples=64, epochs=1, batch_size=16, lr=1e-3, gradual_unfreezing=True,
                      layer_lr_decay=0.5, schedule="slanted_triangular")
    after = BertModel.from_pretrained(out).state_dict()
    assert torch.equal(before["embeddings.word_embeddings.weight"], after["embeddings.word_embeddings.weight"])
    assert torch.equal(before["layers.0.attention.qkv.weight"], after["layers.0.attention.qkv.weight"])
    assert not torch.equal(before["layers.1.attention.qkv.weight"], after["layers.1.attention.qkv.weight"])


# ----- feature-based mode ---------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("head,layers,lr", [("linear", "mix", 1e-2), ("bilstm", "sum_last_four", 1e-3)])
def test_feature_mode_trains_a_head_on_cached_features(tmp_path, tiny_model, keyword_task, head, layers, lr):
    common = dict(task="classification", train_file=str(keyword_task / "train.csv"),
                  dev_file=str(keyword_task / "dev.csv"), model=str(tiny_model), epochs=4, batch_size=16, lr=lr,
                  mode="features", feature_head=head, feature_layers=layers, cache_dir=str(tmp_path / "cache"))
    results, out = finetune(tmp_path, "feat", **common)
    # even a random encoder's frozen features show whether a sentence says "excellent" (measured:
    # 0.99 linear, 1.0 BiLSTM; half the dev rows are "pos")
    assert results["mode"] == "features" and results["accuracy"] > 0.9
    cached = sorted((tmp_path / "cache" / "features").iterdir())
    assert len(cached) == 2  # train and dev
    stamps = [p.stat().st_mtime_ns for p in cached]
    again, _ = finetune(tmp_path, "feat2", **common)  # reuses the cache, same result
    assert [p.stat().st_mtime_ns for p in cached] == stamps and again["accuracy"] == results["accuracy"]
    encoder = BertModel.from_pretrained(out).state_dict()
    original = BertModel.from_pretrained(tiny_model).state_dict()
    assert all(torch.equal(encoder[k], original[k]) for k in original)  # the encoder stayed frozen
    assert main(["evaluate", "--data", str(keyword_task / "dev.csv"), "--model", str(out), "--out",
                 str(tmp_path / "e.json")]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["accuracy"] == pytest.approx(results["accuracy"], abs=0.01)


# ----- bad input ------------------------------------------------------------------------------

def test_user_mistakes_are_one_line_errors(tmp_path, tiny_model, capsys):
    (tmp_path / "glue").mkdir()
    (tmp_path / "glue" / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t7\n")
    (tmp_path / "glue" / "dev.tsv").write_text("sentence\tlabel\nfine\t1\n")
    code = main(["finetune", "--task", "sst2", "--data", str(tmp_path / "glue"), "--model", str(tiny_model),
                 "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "train.tsv:3" in err and len(err.splitlines()) == 1
    code = main(["finetune", "--task", "nope", "--data", "x", "--model", str(tiny_model), "--out", str(tmp_path / "o")])
    assert code == 2 and "unknown task" in capsys.readouterr().err
    with pytest.raises(UserError, match="not a fine-tuned model"):
        from bertology.recipes.finetune import run_evaluation
        run_evaluation(None, str(tmp_path / "glue"), str(tiny_model))


@pytest.fixture(scope="module")
def tiny_gpt(tmp_path_factory, minilm_dir):
    """A random tiny GPT (GPT-2 layout, 2 layers x 128) with MiniLM's vocabulary. (GPT-1's post-LN
    layout learns the keyword task too, but needs 8 epochs from random weights: 0.57 after 4.)"""
    out = tmp_path_factory.mktemp("tiny_gpt")
    torch.manual_seed(0)
    GPTLMHeadModel(GPTConfig.from_preset("tiny", vocab_size=30522, n_positions=128, pre_layer_norm=True)).save_pretrained(out)
    Tokenizer.from_pretrained(minilm_dir).save_pretrained(out)
    return out


def test_gpt_fine_tunes_the_gpt_papers_way_and_evaluates_predicts_and_serves(tmp_path, tiny_gpt, keyword_task):
    """The keyword task through the same finetune / evaluate / predict / serve commands as BERT:
    the classifier reads the last token ([SEP], the GPT paper's extract token)."""
    results, out = finetune(tmp_path, "gpt", task="classification", train_file=str(keyword_task / "train.csv"),
                            dev_file=str(keyword_task / "dev.csv"), model=str(tiny_gpt), epochs=4, batch_size=16,
                            lr=1e-3)
    assert results["accuracy"] > 0.95, results
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["GPT2ForSequenceClassification"] and config["lm_coef"] == 0.5
    model, tokenizer, spec, settings = load_finetuned(str(out))
    dev = read_examples(spec, keyword_task / "dev.csv", "dev")
    assert accuracy(predict(model, tokenizer, spec, dev, settings, precision="fp32"),
                    csv_labels(keyword_task / "dev.csv")) == pytest.approx(results["accuracy"])
    predictor = Predictor.load(str(out), "fp32")
    assert predictor.kind == "classification"
    assert predictor.predict(["the film was excellent and the story"])[0]["label"] == "pos"
    with TestClient(create_app(load_served(str(out), "fp32"), ServeConfig(model=str(out)))) as client:
        response = client.post("/predict", json={"texts": ["a story with music", "excellent plot"]})
        assert [p["label"] for p in response.json()["predictions"]] == ["neg", "pos"]


def test_gpt_is_fine_tuned_whole(tmp_path, tiny_gpt, capsys):
    status = main(["finetune", "--task", "classification", "--train-file", "x.csv", "--model", str(tiny_gpt),
                   "--out", str(tmp_path / "f"), "--mode", "features"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "is fine-tuned whole here (--mode finetune)" in err


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory, keyword_task):
    """A random tiny T5 with a unigram vocabulary of the keyword task's text."""
    out = tmp_path_factory.mktemp("tiny_t5")
    tokenizer = train_tokenizer([keyword_task / "unlabeled.txt", keyword_task / "train.csv"], vocab_size=300,
                                model="unigram", sentinels=10, out_dir=out)
    torch.manual_seed(0)
    T5ForConditionalGeneration(T5Config.from_preset(
        "tiny", vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id, n_positions=64,
        eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.pad_token_id)).save_pretrained(out)
    return out


def test_t5_fine_tunes_text_to_text_scored_on_its_decoded_answers(tmp_path, tiny_t5, keyword_task, capsys):
    results, out = finetune(tmp_path, "t5", task="classification", train_file=str(keyword_task / "train.csv"),
                            dev_file=str(keyword_task / "dev.csv"), model=str(tiny_t5), epochs=3, batch_size=16,
                            lr=1e-3)
    assert results["accuracy"] > 0.95 and results["invalid"] < 0.05, results
    model = T5ForConditionalGeneration.from_pretrained(out)
    tokenizer = Tokenizer.from_pretrained(out)
    spec = load_config_task(out)
    casting = Casting(spec)
    dev = read_examples(spec, keyword_task / "dev.csv", "dev")
    inputs = encode_inputs(casting, tokenizer, dev, 128).ids
    answers = predict_text(model, tokenizer, inputs, max_new_tokens=6)
    labels = [casting.parse(answer, example)[0] for answer, example in zip(answers, dev)]
    assert accuracy(labels, csv_labels(keyword_task / "dev.csv")) == pytest.approx(results["accuracy"])
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--data", str(keyword_task / "dev.csv"), "--out",
                 str(tmp_path / "eval.json")]) == 0
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    assert evaluated["accuracy"] == pytest.approx(results["accuracy"]) and evaluated["invalid"] == results["invalid"]
    assert main(["predict", "--model", str(out), "--input", str(keyword_task / "dev.csv"), "--out",
                 str(tmp_path / "p.tsv")]) == 0
    assert [line.split("\t")[1] for line in (tmp_path / "p.tsv").read_text().splitlines()[1:]] == labels


def load_config_task(directory):
    from bertology.inference.modeldir import open_model_dir

    return open_model_dir(directory).task()[0]


def test_text_to_text_casting_is_t5s():
    sst2, stsb = TASKS["sst2"], TASKS["stsb"]
    example = SequenceExample("0", "a gorgeous, witty movie", None, "1", "dev.tsv:2")
    assert Casting(sst2).source(example) == "sst2 sentence: a gorgeous, witty movie"
    assert Casting(sst2).target(example) == "positive"
    assert Casting(sst2).parse("negative", example) == ("0", True)
    assert Casting(sst2).parse("positively", example) == ("0", False)  # invalid counts as the wrong label
    pair = SequenceExample("1", "A man plays.", "A man is playing.", 3.87, "dev.tsv:3")
    assert Casting(stsb).source(pair) == "stsb sentence1: A man plays. sentence2: A man is playing."
    assert Casting(stsb).target(pair) == "3.8"  # rounded to the nearest 0.2, as T5
    assert Casting(stsb).parse("4.2", pair) == (4.2, True) and Casting(stsb).parse("high", pair) == (2.5, False)
    with pytest.raises(UserError, match="text-to-text fine-tuning casts sequence tasks, CoNLL's tags and SQuAD's"):
        casting_for(TASKS["wic"])


def test_a_t5_target_longer_than_the_decoder_limit_is_a_one_line_error(tmp_path, tiny_t5, capsys):
    rows = "text,label\nthe film,pos\nthe plot," + "_".join(["excellent"] * 80) + "\n"
    for name in ("train.csv", "dev.csv"):
        (tmp_path / name).write_text(rows)
    status = main(["finetune", "--task", "classification", "--train-file", str(tmp_path / "train.csv"),
                   "--dev-file", str(tmp_path / "dev.csv"), "--model", str(tiny_t5), "--out", str(tmp_path / "o"),
                   "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and "train.csv:3: the target" in err[-1] and "the decoder takes 64 (n_positions)" in err[-1]


@pytest.fixture(scope="module")
def tiny_awd_lstm(tmp_path_factory, keyword_task):
    """A random tiny AWD-LSTM language model (3 LSTMs, 32/64 wide) with a WordPiece vocabulary of the keyword task's text."""
    out = tmp_path_factory.mktemp("tiny_awd_lstm")
    tokenizer = train_tokenizer([keyword_task / "unlabeled.txt", keyword_task / "train.csv"], vocab_size=300, out_dir=out)
    torch.manual_seed(0)
    AWDLSTMLMHeadModel(AWDLSTMConfig(vocab_size=tokenizer.vocab_size, emb_sz=32, n_hid=64,
                                       pad_token_id=tokenizer.pad_token_id)).save_pretrained(out)
    return out


def test_awd_lstm_fine_tunes_as_ulmfits_classifier_and_evaluates_predicts_and_serves(tmp_path, tiny_awd_lstm,
                                                                                      keyword_task):
    """ULMFiT's third stage through the same commands as BERT: concat pooling over the LSTM's
    states under the slanted triangle, here from random weights (gradual unfreezing, which keeps
    the lower LSTMs frozen for the first epochs, is for a pre-trained one: 0.67 here)."""
    results, out = finetune(tmp_path, "awd", task="classification", train_file=str(keyword_task / "train.csv"),
                            dev_file=str(keyword_task / "dev.csv"), model=str(tiny_awd_lstm), epochs=5, batch_size=16,
                            lr=1e-2, schedule="slanted_triangular",
                            drop_mult=0.5)
    assert results["accuracy"] > 0.95, results
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["AWDLSTMForSequenceClassification"]
    assert config["weight_p"] == 0.25 and config["output_p"] == 0.2  # fastai's classifier dropouts x drop_mult
    model, tokenizer, spec, settings = load_finetuned(str(out))
    dev = read_examples(spec, keyword_task / "dev.csv", "dev")
    assert accuracy(predict(model, tokenizer, spec, dev, settings, precision="fp32"),
                    csv_labels(keyword_task / "dev.csv")) == pytest.approx(results["accuracy"])
    with TestClient(create_app(load_served(str(out), "fp32"), ServeConfig(model=str(out)))) as client:
        response = client.post("/predict", json={"texts": ["a story with music", "excellent plot"]})
        assert [p["label"] for p in response.json()["predictions"]] == ["neg", "pos"]


def test_ulmfits_layer_groups_for_the_awd_lstm_classifier(tiny_awd_lstm):
    """fastai's groups: embedding, each LSTM, the head; gradual unfreezing trains the head and the
    top LSTM first and one more group each epoch."""
    spec = TASKS["sst2"]
    model = load_task_model(str(tiny_awd_lstm), spec)
    depths = {name: layer_depth(model, name) for name, _ in model.named_parameters()}
    assert depths["awd_lstm.encoder.weight"] == 0 and depths["awd_lstm.rnns.0.weight_hh_l0_raw"] == 1
    assert depths["awd_lstm.rnns.2.module.bias_ih_l0"] == 3 and depths["classifier.layers.1.2.weight"] == 4
    unfreeze = gradual_unfreezer(model)
    unfreeze(0)
    training = {name.split(".")[1] for name, p in model.named_parameters() if p.requires_grad}
    assert training == {"rnns", "layers"} and not model.awd_lstm.rnns[1].weight_hh_l0_raw.requires_grad
    unfreeze(3)
    assert all(p.requires_grad for p in model.parameters())
    with pytest.raises(UserError, match="an AWD-LSTM is fine-tuned here as ULMFiT's classifier"):
        load_task_model(str(tiny_awd_lstm), TASKS["conll2003"])


@pytest.mark.slow
def test_elmo_features_train_a_head_and_evaluate_and_predict(tmp_path, keyword_task):
    """ELMo's layers as features (its paper's use): a frozen biLM, the learned scalar mix and a
    head; the saved feature model (biLM without its softmax, and the head) predicts what it scored."""
    tokenizer = train_tokenizer([keyword_task / "unlabeled.txt", keyword_task / "train.csv"], vocab_size=300)
    lm_dir = save_tiny_elmo(tmp_path / "elmo", tokenizer, projection_dim=64, lstm_dim=128)
    common = dict(task="classification", train_file=str(keyword_task / "train.csv"), dev_file=str(keyword_task / "dev.csv"),
                  model=str(lm_dir), batch_size=16, lr=1e-2, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(UserError, match="is a fixed feature source: use --mode features"):
        finetune(tmp_path, "whole", **common)
    # Max pooling: a random biLM's layers carry the keyword in its own token's vectors and little
    # into its neighbours', so the mean over a sentence dilutes it (measured: 0.5 after 8 epochs).
    results, out = finetune(tmp_path, "features", mode="features", feature_layers="mix", feature_pooling="max",
                            epochs=20, **common)
    assert results["accuracy"] > 0.9, results
    assert json.loads((out / "config.json").read_text())["architectures"] == ["ELMoModel"]
    model, tokenizer, spec, settings = load_finetuned(str(out))
    dev = read_examples(spec, keyword_task / "dev.csv", "dev")
    assert accuracy(predict(model, tokenizer, spec, dev, settings, precision="fp32"),
                    csv_labels(keyword_task / "dev.csv")) == pytest.approx(results["accuracy"])


def test_word_vectors_beside_elmo_features_carry_what_the_features_lack(tmp_path, keyword_task):
    """ELMo's paper feeds its task models [x_k; ELMo_k]: --vectors puts each token's static
    vector in front of its features. A random biLM's mean-pooled features barely carry the
    keyword (measured: 0.5 after 8 epochs, see above); static vectors in which "excellent" stands
    out do, so the same head learns the task only with them, and the saved model (biLM, vectors,
    head) predicts what it scored."""
    tokenizer = train_tokenizer([keyword_task / "unlabeled.txt", keyword_task / "train.csv"], vocab_size=300)
    lm_dir = save_tiny_elmo(tmp_path / "elmo", tokenizer, projection_dim=64, lstm_dim=128)
    words = sorted({w for line in (keyword_task / "unlabeled.txt").read_text().splitlines()
                    for w in tokenize_words(line, lowercase=True)})
    table = 0.01 * torch.randn(len(words), 8, generator=torch.Generator().manual_seed(0))
    table[words.index("excellent")] = 3.0
    vectors_dir = tmp_path / "vectors"
    StaticVectors(StaticConfig("imported", 8, lowercase=True), words, table).save_pretrained(vectors_dir)
    common = dict(task="classification", train_file=str(keyword_task / "train.csv"), dev_file=str(keyword_task / "dev.csv"),
                  model=str(lm_dir), batch_size=16, lr=1e-2, cache_dir=str(tmp_path / "cache"), mode="features",
                  feature_layers="mix", epochs=8)
    without, _ = finetune(tmp_path, "without", **common)
    results, out = finetune(tmp_path, "with", vectors=str(vectors_dir), **common)
    assert results["accuracy"] > 0.9 and without["accuracy"] < 0.8, (results, without)  # measured: 1.0 and 0.66
    assert json.loads((out / "feature_head.json").read_text())["word_vector_size"] == 8
    model, tokenizer, spec, settings = load_finetuned(str(out))
    dev = read_examples(spec, keyword_task / "dev.csv", "dev")
    assert accuracy(predict(model, tokenizer, spec, dev, settings, precision="fp32"),
                    csv_labels(keyword_task / "dev.csv")) == pytest.approx(results["accuracy"])


def test_word_vectors_are_refused_where_they_have_no_place(tmp_path, tiny_model, keyword_task):
    common = dict(task="classification", train_file=str(keyword_task / "train.csv"), dev_file=str(keyword_task / "dev.csv"))
    with pytest.raises(UserError, match="--vectors goes with --mode features"):
        finetune(tmp_path, "a", model=str(tiny_model), vectors=str(tiny_model), **common)
    with pytest.raises(UserError, match="no such directory"):
        finetune(tmp_path, "b", model=str(tiny_model), mode="features", vectors=str(tmp_path / "none"), **common)
    with pytest.raises(UserError, match="takes a static-vectors directory"):
        finetune(tmp_path, "c", model=str(tiny_model), mode="features", vectors=str(tiny_model), **common)
    vectors_dir = tmp_path / "vectors"
    StaticVectors(StaticConfig("imported", 4, lowercase=True), ["excellent", "film"], torch.ones(2, 4)
                  ).save_pretrained(vectors_dir)
    with pytest.raises(UserError, match="reads word vectors already"):
        finetune(tmp_path, "d", model=str(vectors_dir), mode="features", vectors=str(vectors_dir), **common)


@pytest.mark.parametrize("name, first_line", [("valid.txt", "EU NNP B-NP B-ORG"), ("mine.txt", "-DOCSTART- -X- O O")])
def test_predict_reads_a_conll_txt_as_conll_and_other_txt_as_sentences(tmp_path, name, first_line):
    # CoNLL's own files end in .txt: read as plain text, every token line became a "sentence"
    conll = tmp_path / name
    lines = [first_line, "", "EU NNP B-NP B-ORG", "rejects VBZ B-VP O", ""] if first_line.startswith("-DOC") else \
        [first_line, "rejects VBZ B-VP O", ""]
    conll.write_text("\n".join(lines) + "\n")
    (example,) = read_inputs(TASKS["conll2003"], conll)
    assert example.words == ["EU", "rejects"]
    plain = tmp_path / "sentences.txt"
    plain.write_text("EU rejects German call\nPeter Blackburn\n")
    assert [e.words for e in read_inputs(TASKS["conll2003"], plain)] == [["EU", "rejects", "German", "call"],
                                                                      ["Peter", "Blackburn"]]
