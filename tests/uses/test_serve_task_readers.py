"""`bertology serve` for the fine-tuned models that read their task their own way: a T5 fine-tuned
text to text (its answers generated and read back, inference/text_to_text.py) and a feature head
over static word vectors (inference/static_heads.py). /predict takes the bodies a BERT on the same
task takes and answers what `bertology predict` writes; bad requests get a 4xx and the server goes on."""

import pytest
import torch
from fastapi.testclient import TestClient
from helpers import GPT_TEXT, run_cli, save_tiny_vectors, tiny_t5_config

from bertology.data.tokenizer import train_tokenizer
from bertology.errors import UserError
from bertology.inference import runners as runners_module
from bertology.inference import text_to_text as text_to_text_module
from bertology.inference.modeldir import describe_task
from bertology.inference.predictor import Predictor
from bertology.inference.runners import open_runner
from bertology.inference.static_heads import load_static_head, open_word_features, predict_examples
from bertology.inference.text_to_text import casting_for, predict_text
from bertology.models.features import FeatureHead, HeadConfig
from bertology.models.t5 import T5ForConditionalGeneration
from bertology.recipes.static_features import save_head
from bertology.tasks.inputs import InputSettings
from bertology.tasks.readers import TASKS, SequenceExample, SpanExample, TokenExample
from bertology.uses.serve import ServeConfig, create_app, load_served

SENTENCES = ["the cat sat on the mat", "a dog ran in the park after a ball", "the module reads a file",
             "import os and sys", "the dog looked at the cat and the ball"]
TAGGED = ["EU rejects German call", "the cat  sat in Paris"]
CONTEXT = "The Normans were the people who gave their name to Normandy, a region in France."
QUESTIONS = ["Who gave their name to Normandy?", "Where is Normandy?", "What did the cat sit on?"]
# The T5's vocabulary must write CoNLL's entity markers back (inference/text_to_text.EntityCasting).
T5_TEXT = [*GPT_TEXT, *TAGGED * 10, CONTEXT, *QUESTIONS, "[PER] [ORG] [LOC] [MISC] ; unanswerable"]


@pytest.fixture(scope="module")
def t5_dirs(tmp_path_factory):
    """A tiny random T5 (v1.1 layout, weights drawn wide so that outputs differ from text to text)
    saved as `bertology finetune` saves a T5 fine-tuned text to text for sst2, squad_v2 and
    conll2003: config.json records the task and its input settings."""
    root = tmp_path_factory.mktemp("t5")
    (root / "text.txt").write_text("\n".join(T5_TEXT) + "\n")
    tokenizer = train_tokenizer([root / "text.txt"], vocab_size=200, out_dir=root / "vocab", model="unigram",
                                sentinels=10)
    dirs = {}
    for task in ("sst2", "squad_v2", "conll2003"):
        torch.manual_seed(0)
        model = T5ForConditionalGeneration(tiny_t5_config(tokenizer))
        describe_task(model.config, TASKS[task], InputSettings(max_seq_len=64))
        model.save_pretrained(root / task)
        tokenizer.save_pretrained(root / task)
        dirs[task] = root / task
    return dirs


@pytest.fixture(scope="module")
def static_dirs(tmp_path_factory):
    """Random 8-d static vectors for the test sentences' words and random feature heads over them
    saved as `finetune --mode features` saves them: sst2 (linear, mean pooling), stsb (pairs,
    max pooling) and conll2003 (a small BiLSTM tagger), their weights drawn from N(0, 1)."""
    root = tmp_path_factory.mktemp("static")
    words = sorted({w.lower() for text in SENTENCES + TAGGED for w in text.split()})
    vectors = open_word_features(str(save_tiny_vectors(root / "vectors", words, dim=8)))
    dirs = {}
    for task, head, pooling in (("sst2", "linear", "mean"), ("stsb", "linear", "max"), ("conll2003", "bilstm", "mean")):
        spec = TASKS[task]
        torch.manual_seed(0)
        config = HeadConfig(spec.kind, [0], "sum", 8, 1 if spec.regression else len(spec.labels), head, pooling,
                            lstm_size=8)
        head = FeatureHead(config)
        with torch.no_grad():  # weights drawn wide, so that predictions differ from text to text
            for weight in head.parameters():
                weight.normal_(0, 1)
        save_head(head, vectors, spec, root / task)
        dirs[task] = root / task
    return dirs


def client_for(model_dir, **settings) -> TestClient:
    """A test client of the app serving `model_dir` as `bertology serve` loads it."""
    return TestClient(create_app(load_served(str(model_dir), "fp32"),
                                 ServeConfig(model=str(model_dir), precision="fp32", **settings)))


def predicted_file(capsys, model_dir, lines: list[str], tmp_path) -> str:
    """What `bertology predict` writes for a .txt file of `lines`."""
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    status, _, err = run_cli(capsys, "predict", "--model", model_dir, "--input", tmp_path / "in.txt",
                             "--out", tmp_path / "out")
    assert status == 0, err
    return (tmp_path / "out").read_text()


def glue_labels(written: str) -> list[str]:
    """The labels of a GLUE TSV that `bertology predict` wrote (index, prediction)."""
    return [line.split("\t")[1] for line in written.splitlines()[1:]]


def conll_tags(written: str) -> list[list[str]]:
    """The predicted tags of CoNLL columns that `bertology predict` wrote (a blank line after each sentence)."""
    return [[line.split()[-1] for line in block.splitlines()] for block in written.split("\n\n") if block.strip()]


# ----- a T5 fine-tuned text to text ----------------------------------------------------------------

def recording(monkeypatch) -> list[str]:
    """A list that receives every output `bertology predict` generates for a T5 (inference/text_to_text.py)."""
    written = []

    def record(*args, **kwargs) -> list[str]:
        texts = predict_text(*args, **kwargs)
        written.extend(texts)
        return texts

    monkeypatch.setattr(text_to_text_module, "predict_text", record)
    return written


def test_t5_classification_answers_what_bertology_predict_writes(t5_dirs, capsys, tmp_path, monkeypatch):
    with client_for(t5_dirs["sst2"]) as client:
        response = client.post("/predict", json={"texts": SENTENCES})
        assert response.status_code == 200, response.text
        predictions = response.json()["predictions"]
        info, health = client.get("/info").json(), client.get("/health").json()
    written = recording(monkeypatch)
    written_file = predicted_file(capsys, t5_dirs["sst2"], SENTENCES, tmp_path)
    assert [p["label"] for p in predictions] == glue_labels(written_file)
    # a random T5 writes no label (every answer is invalid): what it wrote must be what predict generated
    assert [p["output"] for p in predictions] == written and len(set(written)) > 1
    casting = casting_for(TASKS["sst2"])
    for text, p in zip(SENTENCES, predictions):
        assert set(p) == {"label", "output", "valid"}
        assert casting.parse(p["output"], SequenceExample("0", text, None, None, "x")) == (p["label"], p["valid"])
    assert health == {"status": "ok", "family": "t5", "task": "sst2"}
    assert (info["family"], info["task"], info["kind"], info["labels"]) == ("t5", "sst2", "classification", ["0", "1"])
    assert info["max_seq_len"] == 64 and info["embedding_size"] is None and info["parameters"] > 0


@pytest.mark.slow
def test_t5_question_answering_and_tagging_answer_what_bertology_predict_gives(t5_dirs, capsys, tmp_path,
                                                                               monkeypatch):
    model_dir = t5_dirs["squad_v2"]
    predictor = Predictor.load(str(model_dir), "fp32")
    with client_for(model_dir) as client:
        response = client.post("/predict", json={"texts": QUESTIONS, "text_pairs": [CONTEXT] * len(QUESTIONS)})
        assert response.status_code == 200, response.text
        answers = response.json()["predictions"]
    examples = [SpanExample(str(i), q, CONTEXT, [], False, "x") for i, q in enumerate(QUESTIONS)]
    expected = open_runner(str(model_dir), "fp32").predict(examples, batch_size=64)  # what `bertology predict` writes
    assert [a["answer"] for a in answers] == [expected[str(i)] for i in range(len(QUESTIONS))]
    assert len({a["answer"] for a in answers}) == len(QUESTIONS)
    for example, a in zip(examples, answers):
        assert set(a) == {"answer", "start", "end", "output", "valid"}
        parsed, valid = predictor.runner.casting.parse(a["output"], example)
        assert (parsed or "", valid) == (a["answer"], a["valid"])

    model_dir = t5_dirs["conll2003"]
    with client_for(model_dir) as client:
        response = client.post("/predict", json={"texts": TAGGED})
        assert response.status_code == 200, response.text
        tagged = response.json()["predictions"]
    written = recording(monkeypatch)
    assert [p["tokens"] for p in tagged] == [text.split() for text in TAGGED]
    assert [p["tags"] for p in tagged] == conll_tags(predicted_file(capsys, model_dir, TAGGED, tmp_path))
    assert [p["output"] for p in tagged] == written
    assert all(set(p) == {"tokens", "tags", "output", "valid"} for p in tagged)


def test_t5_outputs_are_read_as_labels_answers_and_tags_or_marked_invalid(t5_dirs, monkeypatch):
    """Known outputs in place of generation (a random T5 writes no label): each is read back as
    `bertology predict` reads it, and one that is no answer is marked invalid."""
    def generating(texts: list[str]) -> None:
        monkeypatch.setattr(runners_module, "predict_text",
                            lambda model, tokenizer, inputs, *args: texts[:len(inputs)])

    generating(["positive", "negative", "rather good"])
    with client_for(t5_dirs["sst2"]) as client:
        labels = client.post("/predict", json={"texts": SENTENCES[:3]}).json()["predictions"]
    assert labels == [{"label": "1", "output": "positive", "valid": True},
                      {"label": "0", "output": "negative", "valid": True},
                      {"label": "0", "output": "rather good", "valid": False}]  # the first label stands in

    generating(["The Normans", "unanswerable", "normandy", ""])
    questions = [*QUESTIONS, "Why?"]
    with client_for(t5_dirs["squad_v2"]) as client:
        answers = client.post("/predict", json={"texts": questions, "text_pairs": [CONTEXT] * 4}).json()["predictions"]
    start = CONTEXT.index("The Normans")
    assert answers == [
        {"answer": "The Normans", "start": start, "end": start + len("The Normans"), "output": "The Normans",
         "valid": True},
        {"answer": "", "start": None, "end": None, "output": "unanswerable", "valid": True},  # SQuAD 2.0's no answer
        {"answer": "normandy", "start": None, "end": None, "output": "normandy", "valid": True},  # not as written
        {"answer": "", "start": None, "end": None, "output": "", "valid": False}]

    generating(["EU [ORG] ; German [MISC]", "Paris [LOC] ; lamb [PER]"])
    with client_for(t5_dirs["conll2003"]) as client:
        tagged = client.post("/predict", json={"texts": TAGGED}).json()["predictions"]
    assert tagged == [
        {"tokens": ["EU", "rejects", "German", "call"], "tags": ["B-ORG", "O", "B-MISC", "O"],
         "output": "EU [ORG] ; German [MISC]", "valid": True},
        {"tokens": ["the", "cat", "sat", "in", "Paris"], "tags": ["O", "O", "O", "O", "B-LOC"],
         "output": "Paris [LOC] ; lamb [PER]", "valid": False}]  # no "lamb" here: the entity it could place stays


# ----- a feature head over static word vectors ---------------------------------------------------

def test_static_head_classification_gives_probabilities_and_bertology_predicts_labels(static_dirs, capsys,
                                                                                      tmp_path):
    with client_for(static_dirs["sst2"]) as client:
        response = client.post("/predict", json={"texts": SENTENCES})
        assert response.status_code == 200, response.text
        predictions = response.json()["predictions"]
        info, health = client.get("/info").json(), client.get("/health").json()
    assert [p["label"] for p in predictions] == glue_labels(predicted_file(capsys, static_dirs["sst2"], SENTENCES,
                                                                           tmp_path))
    for p in predictions:
        assert set(p["scores"]) == {"0", "1"} and sum(p["scores"].values()) == pytest.approx(1, abs=1e-6)
        assert p["label"] == max(p["scores"], key=p["scores"].get)
    assert len({round(p["scores"]["1"], 6) for p in predictions}) == len(SENTENCES)
    assert health == {"status": "ok", "family": "static", "task": "sst2"}
    assert (info["family"], info["kind"], info["takes_pairs"], info["max_seq_len"]) == ("static", "classification",
                                                                                         False, None)


def test_static_head_pairs_and_tagging_answer_what_bertology_predict_gives(static_dirs, capsys, tmp_path):
    head, vectors, spec = load_static_head(static_dirs["stsb"])
    pairs = list(zip(SENTENCES[:3], SENTENCES[2:5]))
    with client_for(static_dirs["stsb"]) as client:
        response = client.post("/predict", json={"texts": [a for a, _ in pairs], "text_pairs": [b for _, b in pairs]})
        assert response.status_code == 200, response.text
        scores = [p["score"] for p in response.json()["predictions"]]
    examples = [SequenceExample(str(i), a, b, None, "x") for i, (a, b) in enumerate(pairs)]
    assert scores == pytest.approx(predict_examples(head, vectors, spec, examples), abs=1e-6)
    assert len(set(scores)) == len(pairs)

    with client_for(static_dirs["conll2003"]) as client:
        response = client.post("/predict", json={"texts": TAGGED})
        assert response.status_code == 200, response.text
        tagged = response.json()["predictions"]
    assert [p["tokens"] for p in tagged] == [text.split() for text in TAGGED]
    assert [p["tags"] for p in tagged] == conll_tags(predicted_file(capsys, static_dirs["conll2003"], TAGGED, tmp_path))
    head, vectors, spec = load_static_head(static_dirs["conll2003"])
    words = [TokenExample(str(i), text.split(), None, "x") for i, text in enumerate(TAGGED)]
    assert [p["tags"] for p in tagged] == predict_examples(head, vectors, spec, words)


# ----- the same limits and refusals as for a BERT ---------------------------------------------------

BAD_REQUESTS = [  # (model, JSON body, status, words the message must hold)
    ("t5 sst2", {"texts": ["good", " \t"]}, 422, "texts[1]: empty text"),
    ("t5 sst2", {"text": ["good"]}, 422, "texts: Field required"),
    ("t5 sst2", {"texts": ["good"], "text_pairs": ["fine"]}, 422, "this model's task (sst2) takes single texts"),
    ("t5 sst2", {"texts": ["x" * 101]}, 422, "texts[0]: 101 characters; at most 100"),
    ("t5 sst2", {"texts": ["good"] * 5}, 422, "texts: 5 texts; at most 4"),
    ("t5 squad_v2", {"texts": ["Who?"]}, 422, "text_pairs: missing; this model's task (squad_v2) takes a context"),
    ("t5 squad_v2", {"texts": ["Who?"], "text_pairs": [""]}, 422, "text_pairs[0]: empty text"),
    ("t5 conll2003", {"texts": ["EU rejects"], "tokens": [["EU"]]}, 422, "tokens: Extra inputs are not permitted"),
    ("static sst2", {"texts": [""]}, 422, "texts[0]: empty text"),
    ("static sst2", {"texts": "good"}, 422, "texts: Input should be a valid list"),
    ("static stsb", {"texts": ["a", "b"], "text_pairs": ["c"]}, 422, "text_pairs: 2 texts but 1 text_pairs"),
    ("static conll2003", {"texts": ["x " * 60]}, 422, "texts[0]: 120 characters; at most 100"),
]


@pytest.fixture(scope="module")
def clients(t5_dirs, static_dirs):
    """A client per served model, with small limits: 4 texts of 100 characters per request."""
    dirs = {f"t5 {task}": d for task, d in t5_dirs.items()} | {f"static {task}": d for task, d in static_dirs.items()}
    opened = {name: client_for(d, max_texts=4, max_text_chars=100) for name, d in dirs.items()}
    for client in opened.values():
        client.__enter__()
    yield opened
    for client in opened.values():
        client.__exit__(None, None, None)


GOOD_REQUESTS = {"t5 sst2": {"texts": ["good"]}, "t5 squad_v2": {"texts": ["Who?"], "text_pairs": [CONTEXT]},
                 "t5 conll2003": {"texts": ["EU rejects"]}, "static sst2": {"texts": ["good"]},
                 "static stsb": {"texts": ["a cat"], "text_pairs": ["a dog"]}, "static conll2003": {"texts": ["a cat"]}}


@pytest.mark.parametrize("model, body, status, message", BAD_REQUESTS)
def test_bad_requests_get_a_4xx_naming_the_field_and_the_next_request_is_answered(clients, model, body, status,
                                                                                   message):
    client = clients[model]
    response = client.post("/predict", json=body)
    assert response.status_code == status and message in response.json()["detail"], response.text
    assert "\n" not in response.json()["detail"]
    assert client.post("/predict", json=GOOD_REQUESTS[model]).status_code == 200
    assert client.get("/health").json()["status"] == "ok"


def test_malformed_json_and_the_routes_these_models_do_not_serve_are_4xx(clients):
    for name in ("t5 sst2", "static sst2"):
        client = clients[name]
        broken = client.post("/predict", content=b'{"texts": ["good",', headers={"content-type": "application/json"})
        assert broken.status_code == 400 and "malformed JSON" in broken.json()["detail"]
        embed = client.post("/embed", json={"texts": ["good"]})
        assert embed.status_code == 400 and "has no layers to embed with" in embed.json()["detail"]
        generate = client.post("/generate", json={"prompts": ["good"]})
        assert generate.status_code == 400 and "(classification) does not generate text" in generate.json()["detail"]
        assert client.post("/predict", json={"texts": ["good"]}).status_code == 200


def test_precision_bf16_is_refused_in_one_line_for_both(t5_dirs, static_dirs):
    for model_dir in (t5_dirs["sst2"], static_dirs["sst2"]):
        with pytest.raises(UserError, match="computes in fp32 only"):
            load_served(str(model_dir), "bf16")


def test_openapi_schema_documents_what_a_t5_gives_instead_of_probabilities(clients):
    schema = clients["t5 sst2"].get("/openapi.json").json()["components"]["schemas"]
    assert {"TextClassPrediction", "TextScorePrediction", "TextTagPrediction", "TextSpanPrediction"} <= set(schema)
    valid = schema["TextClassPrediction"]["properties"]["valid"]["description"]
    assert '"invalid" prediction' in valid and "bertology predict" in valid
    assert "decoded" in schema["TextClassPrediction"]["properties"]["output"]["description"]
