"""`bertology serve`: predictions and embeddings over HTTP, micro-batching, limits, errors, shutdown."""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from helpers import free_port, save_task_model, save_tiny_gpt, save_tiny_t5

from bertology.cli import main
from bertology.errors import UserError
from bertology.inference.embedding import embed_texts
from bertology.inference.generation import GenerationConfig
from bertology.inference.predict import predict
from bertology.inference.predictor import Predictor
from bertology.tasks.inputs import encode
from bertology.tasks.readers import SequenceExample, SpanExample, TokenExample
from bertology.uses.generate import generate_text, load_generator
from bertology.uses.serve import ServeConfig, bind, create_app, load_served

SENTENCES = ["a gorgeous , witty , seductive movie .", "the worst film of the year .",
             "it 's a charming and often affecting journey .", "unflinchingly bleak and desperate",
             "an odd , haphazard mess", "good", "meh ."]


@pytest.fixture(scope="module")
def models(tmp_path_factory, minilm_dir, tiny_model):
    """Tiny model directories: sst2 (classification), stsb (pair regression), conll2003 (tagging),
    squad_v2 (question answering), with weights drawn wide (std 0.3) so that their outputs differ
    clearly from text to text, and a bare encoder."""
    root = tmp_path_factory.mktemp("serve")
    dirs = {task: save_task_model(root / task, minilm_dir, task, seed=1, initializer_range=0.3)
            for task in ("sst2", "stsb", "conll2003", "squad_v2")}
    return {**dirs, "encoder": tiny_model}


def client_for(model_dir, predictor: Predictor | None = None, **settings) -> TestClient:
    """A test client of the app serving `model_dir` (or `predictor`, loaded from it) with ServeConfig `settings`."""
    config = ServeConfig(model=str(model_dir), precision="fp32", **settings)
    return TestClient(create_app(predictor or Predictor.load(str(model_dir), "fp32"), config))


@pytest.fixture(scope="module")
def sst2(models):
    with client_for(models["sst2"], max_texts=8, max_text_chars=200, max_body_bytes=4000) as client:
        yield client


@pytest.mark.slow
def test_classification_gives_probabilities_and_the_labels_of_bertology_predict(sst2, models, tmp_path):
    response = sst2.post("/predict", json={"texts": SENTENCES})
    assert response.status_code == 200
    predictions = response.json()["predictions"]
    assert len(predictions) == len(SENTENCES)
    for p in predictions:
        assert set(p["scores"]) == {"0", "1"} and sum(p["scores"].values()) == pytest.approx(1, abs=1e-6)
        assert p["label"] == max(p["scores"], key=p["scores"].get)
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    assert main(["predict", "--model", str(models["sst2"]), "--input", str(tmp_path / "in.txt"),
                 "--out", str(tmp_path / "p.tsv"), "--precision", "fp32"]) == 0
    labels = [line.split("\t")[1] for line in (tmp_path / "p.tsv").read_text().splitlines()[1:]]
    assert [p["label"] for p in predictions] == labels and set(labels) == {"0", "1"}


def test_embed_shapes_normalisation_and_pooling(sst2, models):
    vectors = np.array(sst2.post("/embed", json={"texts": SENTENCES[:3]}).json()["embeddings"])
    assert vectors.shape == (3, 128)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    raw = np.array(sst2.post("/embed", json={"texts": SENTENCES[:3], "normalize": False}).json()["embeddings"])
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1, atol=1e-3)
    assert np.allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), vectors, atol=1e-5)
    cls = np.array(sst2.post("/embed", json={"texts": SENTENCES[:3], "pooling": "cls"}).json()["embeddings"])
    assert not np.allclose(cls, vectors, atol=1e-3)
    predictor = Predictor.load(str(models["sst2"]), "fp32")
    direct = embed_texts(predictor.encoder, predictor.tokenizer, SENTENCES[:3], pooling="mean", normalize=True,
                         precision="fp32")
    assert np.allclose(vectors, direct, atol=1e-5)


@pytest.mark.slow
def test_concurrent_requests_share_batches_and_match_single_requests(models):
    with client_for(models["sst2"], max_wait_ms=300) as client:
        single = [client.post("/predict", json={"texts": [s]}).json()["predictions"][0] for s in SENTENCES]
        before = client.get("/info").json()["batching"]["predict"]
        assert before["largest_batch"] == 1 and before["batches"] == len(SENTENCES)
        results = [None] * len(SENTENCES)

        def ask(i):
            results[i] = client.post("/predict", json={"texts": [SENTENCES[i]]}).json()["predictions"][0]

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(SENTENCES))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = client.get("/info").json()["batching"]["predict"]
    assert stats["largest_batch"] > 1 and stats["items"] == 2 * len(SENTENCES)
    assert stats["batches"] < 2 * len(SENTENCES)
    for got, want in zip(results, single):
        assert got["label"] == want["label"]
        assert got["scores"]["1"] == pytest.approx(want["scores"]["1"], abs=1e-5)


def test_max_batch_one_runs_every_text_alone(models):
    with client_for(models["sst2"], max_batch=1, max_wait_ms=100) as client:
        assert client.post("/predict", json={"texts": SENTENCES[:4]}).status_code == 200
        stats = client.get("/info").json()["batching"]["predict"]
    assert stats == {"batches": 4, "items": 4, "largest_batch": 1, "queued": 0}


def wait_until_queued(get, count: int) -> None:
    """Poll /info until `count` texts wait in the predict batcher (`get` fetches a path)."""
    deadline = time.monotonic() + 20
    while get("/info").json()["batching"]["predict"]["queued"] < count:
        assert time.monotonic() < deadline, "the request never reached the batcher"
        time.sleep(0.02)


@pytest.mark.slow
def test_a_full_queue_answers_503_and_the_server_recovers(models):
    with client_for(models["sst2"], max_texts=2, max_queue=2, max_wait_ms=2000) as client:
        waiting = threading.Thread(target=lambda: client.post("/predict", json={"texts": SENTENCES[:2]}))
        waiting.start()
        wait_until_queued(client.get, 2)  # the first request's two texts now fill the queue
        refused = client.post("/predict", json={"texts": ["good"]})
        waiting.join()
        assert refused.status_code == 503 and "overloaded" in refused.json()["detail"]
        assert refused.headers["retry-after"] == "1"
        assert client.post("/predict", json={"texts": ["good"]}).status_code == 200


MALFORMED = [  # (body or None for a JSON-encoded one, JSON body, status, words the message must hold)
    (b'{"texts": ["good",', None, 400, "malformed JSON"),
    (None, {"texts": "good"}, 422, "texts: Input should be a valid list"),
    (None, {"texts": ["good", 3]}, 422, "texts[1]: Input should be a valid string"),
    (None, {"text": ["good"]}, 422, "texts: Field required"),
    (None, {}, 422, "texts: Field required"),
    (None, {"texts": []}, 422, "texts: empty list"),
    (None, {"texts": ["good", "  \n"]}, 422, "texts[1]: empty text"),
    (None, {"texts": ["good"] * 9}, 422, "texts: 9 texts; at most 8"),
    (None, {"texts": ["good", "x" * 201]}, 422, "texts[1]: 201 characters; at most 200"),
    (None, {"texts": ["good"], "text_pairs": ["fine"]}, 422, "text_pairs: this model's task (sst2) takes single"),
    (b"[1, 2]", None, 422, "body: expected a JSON object"),
    (b"", None, 422, "body: missing"),
    (None, {"texts": ["x " * 2500]}, 413, "larger than 4,000 bytes"),
]


@pytest.mark.parametrize("raw, body, status, message", MALFORMED)
def test_malformed_requests_get_a_4xx_naming_the_field_and_the_server_goes_on(sst2, raw, body, status, message):
    content = raw if raw is not None else json.dumps(body).encode()
    response = sst2.post("/predict", content=content, headers={"content-type": "application/json"})
    assert response.status_code == status
    assert message in response.json()["detail"] and "\n" not in response.json()["detail"]
    assert sst2.get("/health").json() == {"status": "ok", "family": "bert", "task": "sst2"}


def test_unknown_route_wrong_method_streamed_body_and_content_type(sst2):
    assert sst2.get("/nowhere").status_code == 404 and sst2.get("/nowhere").json() == {"detail": "Not Found"}
    assert sst2.get("/predict").status_code == 405
    assert sst2.post("/health").status_code == 405

    def chunks():  # a streamed body has no Content-Length: its size is counted as it arrives
        yield b'{"texts": ["'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"]}'

    response = sst2.post("/predict", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    form = sst2.post("/predict", content=b'{"texts": ["good"]}', headers={"content-type": "text/plain"})
    assert form.status_code == 415 and "Content-Type: application/json" in form.json()["detail"]
    assert sst2.post("/embed", json={"texts": ["good"], "pooling": "median"}).status_code == 422
    assert sst2.get("/health").json() == {"status": "ok", "family": "bert", "task": "sst2"}


def test_info_describes_model_limits_and_batching(sst2):
    info = sst2.get("/info").json()
    assert info["task"] == "sst2" and info["kind"] == "classification" and info["labels"] == ["0", "1"]
    assert info["family"] == "bert"
    assert info["max_seq_len"] == 64 and info["parameters"] > 0 and info["version"]
    assert info["limits"] == {"max_texts": 8, "max_text_chars": 200, "max_body_bytes": 4000}
    assert info["batching"]["max_batch"] == 64
    schema = sst2.get("/openapi.json").json()
    assert {"/predict", "/embed", "/health", "/info"} <= set(schema["paths"])
    assert sst2.get("/docs").status_code == 200


def predicted(predictor: Predictor, examples: list):
    """What `bertology predict` says for `examples` with the model `predictor` holds (fp32)."""
    return predict(predictor.model, predictor.tokenizer, predictor.spec, examples, predictor.settings,
                   precision="fp32")


@pytest.mark.slow
def test_pair_regression_tagging_and_question_answering(models):
    texts, pairs = ["a man plays", "a dog"], ["a man sings", "a cat"]
    predictor = Predictor.load(str(models["stsb"]), "fp32")
    with client_for(models["stsb"], predictor) as client:
        ok = client.post("/predict", json={"texts": texts, "text_pairs": pairs})
        assert ok.status_code == 200
        scores = [p["score"] for p in ok.json()["predictions"]]
        examples = [SequenceExample(str(i), a, b, None, "x") for i, (a, b) in enumerate(zip(texts, pairs))]
        expected = predicted(predictor, examples)
        assert scores == pytest.approx(expected, abs=1e-5) and abs(scores[0] - scores[1]) > 1e-3
        missing = client.post("/predict", json={"texts": ["a man plays"]})
        assert missing.status_code == 422 and "text_pairs: missing" in missing.json()["detail"]
        mismatch = client.post("/predict", json={"texts": ["a", "b"], "text_pairs": ["c"]})
        assert mismatch.status_code == 422 and mismatch.json()["detail"].startswith("text_pairs: 2 texts but 1")
    predictor = Predictor.load(str(models["conll2003"]), "fp32")
    with client_for(models["conll2003"], predictor) as client:
        tagged = client.post("/predict", json={"texts": ["EU rejects German call", "Peter  lives in Paris"]}).json()
    first, second = tagged["predictions"]
    assert first["tokens"] == ["EU", "rejects", "German", "call"]
    assert second["tokens"] == ["Peter", "lives", "in", "Paris"]
    expected = predicted(predictor, [TokenExample(str(i), p["tokens"], None, "x")
                                     for i, p in enumerate((first, second))])
    assert [first["tags"], second["tags"]] == expected and len(set(first["tags"] + second["tags"])) > 1

    # SQuAD 2.0 says "no answer" when the [CLS] score beats the best span's by more than
    # null_score_threshold: +inf forces a span and -inf forces "no answer", so that what a random
    # model answers is known in advance in both forms.
    context = "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy."
    question = {"texts": ["Who gave their name to Normandy?"], "text_pairs": [context]}
    predictor = Predictor.load(str(models["squad_v2"]), "fp32")
    predictor.settings.null_score_threshold = math.inf
    with client_for(models["squad_v2"], predictor) as client:
        answer = client.post("/predict", json=question).json()["predictions"][0]
    expected = predicted(predictor, [SpanExample("0", question["texts"][0], context, [], False, "x")])
    assert answer["answer"] == expected["0"]
    assert answer["answer"] and context[answer["start"]: answer["end"]] == answer["answer"] and 0 < answer["score"] <= 1
    predictor.settings.null_score_threshold = -math.inf
    with client_for(models["squad_v2"], predictor) as client:
        answer = client.post("/predict", json=question).json()["predictions"][0]
    assert answer == {"answer": "", "start": None, "end": None, "score": None}


def test_span_answers_carry_offsets_and_probabilities_across_windows(models):
    predictor = Predictor.load(str(models["squad_v2"]), precision="fp32")
    predictor.settings.doc_stride = 32
    predictor.settings.null_score_threshold = math.inf  # always a span (see the test above), so offsets to check
    context = " ".join(SENTENCES * 6)  # several windows of 64 tokens
    questions = ["what movie ?", "who ?"]
    expected = predicted(predictor, [SpanExample(str(i), q, context, [], False, "x") for i, q in enumerate(questions)])
    answers = predictor.predict(questions, [context, context])
    assert [a["answer"] for a in answers] == [expected[str(i)] for i in range(2)]  # what `bertology predict` says
    encoded = encode(predictor.spec, [SpanExample("0", questions[0], context, [], False, "x")], predictor.tokenizer,
                     predictor.settings, training=False)
    assert len(encoded.features) > 1
    for answer in answers:
        assert answer["answer"] and context[answer["start"]: answer["end"]] == answer["answer"]
        assert 0 < answer["score"] <= 1


def test_bare_encoder_embeds_but_does_not_predict(models):
    with client_for(models["encoder"]) as client:
        response = client.post("/predict", json={"texts": ["good"]})
        assert response.status_code == 400 and "bare encoder" in response.json()["detail"]
        vectors = client.post("/embed", json={"texts": ["good", "bad"]}).json()["embeddings"]
        assert np.array(vectors).shape == (2, 128)
        assert client.get("/info").json()["kind"] == "encoder"


@pytest.mark.slow
def test_command_line_mistakes_are_one_line(models, tmp_path, capsys):
    assert main(["serve", "--model", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no such model directory" in err and len(err.splitlines()) == 1
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--model", str(models["sst2"]), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"cannot listen on 127.0.0.1:{port}" in err and len(err.splitlines()) == 1


def test_bound_socket_is_tcp_so_answers_on_kept_alive_connections_are_not_delayed():
    """asyncio sets TCP_NODELAY only on sockets whose protocol is IPPROTO_TCP; with proto 0 every
    answer on a reused connection waited ~40 ms (Nagle's algorithm meeting delayed ACKs)."""
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP and sock.type == socket.SOCK_STREAM
    finally:
        sock.close()


@pytest.mark.slow
def test_server_process_answers_then_stops_gracefully_on_sigterm(models):
    """A real `python -m bertology serve`: a request queued when SIGTERM arrives is still answered."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    server = subprocess.Popen([sys.executable, "-m", "bertology", "serve", "--model", str(models["sst2"]),
                               "--port", str(port), "--max-wait-ms", "2000", "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.communicate()
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.2)
        answer = {}
        request = threading.Thread(target=lambda: answer.update(
            response=httpx.post(f"{url}/predict", json={"texts": ["good"]}, timeout=30)))
        request.start()
        wait_until_queued(lambda path: httpx.get(url + path), 1)  # it waits in the batcher for up to 2 s
        server.send_signal(signal.SIGTERM)
        request.join()
        assert answer["response"].status_code == 200 and answer["response"].json()["predictions"][0]["label"] in "01"
        assert server.wait(timeout=15) == 0
        out = server.stdout.read()
        assert f"at {url}" in out and len(out.strip().splitlines()) == 1
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    model_dir = save_tiny_gpt(tmp_path_factory.mktemp("gpt"))
    with client_for(model_dir, load_served(str(model_dir), "fp32"), max_texts=4, max_new_tokens=16,
                    max_beams=3) as client:
        yield client, model_dir


def test_generate_gives_what_bertology_generate_gives(gpt):
    client, model_dir = gpt
    prompts = ["the cat", "import os and sys to"]
    model, tokenizer = load_generator(model_dir)
    for settings in ({"max_new_tokens": 8}, {"max_new_tokens": 6, "num_beams": 3},
                     {"max_new_tokens": 8, "do_sample": True, "top_k": 5, "temperature": 0.7, "seed": 3}):
        response = client.post("/generate", json={"prompts": prompts, **settings})
        assert response.status_code == 200, response.text
        seed = settings.pop("seed", 0)
        expected = generate_text(model, tokenizer, prompts, GenerationConfig(**settings), seed=seed)
        assert response.json() == {"continuations": expected}
    stopped = client.post("/generate", json={"prompts": prompts[:1], "max_new_tokens": 8, "stop": ["the"]}).json()
    assert "the" not in stopped["continuations"][0]
    info = client.get("/info").json()
    assert info["kind"] == "generation" and info["context"] == 48 and info["model_type"] == "openai-gpt"
    assert info["family"] == "gpt" and client.get("/health").json() == {"status": "ok", "family": "gpt", "task": None}
    assert info["limits"]["max_new_tokens"] == 16 and info["limits"]["max_beams"] == 3


@pytest.mark.parametrize("body, status, message", [
    ({"prompts": ["  "]}, 422, "prompts[0]: empty text"),
    ({"prompts": []}, 422, "prompts: empty list"),
    ({"prompts": ["a"] * 5}, 422, "prompts: 5 texts; at most 4"),
    ({"prompts": ["the cat"], "top_p": 1.5}, 422, "top_p (--top-p) must be in (0, 1], got 1.5"),
    ({"prompts": ["the cat"], "max_new_tokens": 17}, 422, "max_new_tokens: 17; at most 16"),
    ({"prompts": ["the cat"], "num_beams": 4}, 422, "num_beams: 4; at most 3"),
    ({"prompts": ["the cat"], "num_beams": 2, "do_sample": True}, 422, "choose beam search or sampling"),
    ({"prompts": ["the cat"], "temperature": 0}, 422, "temperature (--temperature) must be positive"),
    ({"prompts": [" ".join(["cat"] * 40)]}, 422, "prompts: prompt 1 has 41 tokens"),
    ({"prompts": ["the cat"], "max_new_tokens": "8"}, 422, "max_new_tokens: Input should be a valid integer"),
    ({"prompts": ["the cat"], "beams": 2}, 422, "beams: Extra inputs are not permitted"),
    ({"prompts": ["the cat"], "seed": 2**70}, 422, "seed: Input should be less than or equal to 4294967295"),
    ({"prompts": ["the cat"], "seed": -1}, 422, "seed: Input should be greater than or equal to 0"),
])
def test_generate_rejects_bad_requests_with_4xx_and_keeps_serving(gpt, body, status, message):
    client, _ = gpt
    response = client.post("/generate", json=body)
    assert response.status_code == status and message in response.json()["detail"], response.text
    assert "\n" not in response.json()["detail"]
    assert client.post("/generate", json={"prompts": ["the cat"], "max_new_tokens": 2}).status_code == 200


def test_each_model_answers_only_the_routes_it_can(gpt, sst2):
    client, _ = gpt
    for route in ("/predict", "/embed"):
        response = client.post(route, json={"texts": ["good"]})
        assert response.status_code == 400 and "generates text (openai-gpt): it serves /generate only" in response.json()["detail"]
    response = sst2.post("/generate", json={"prompts": ["good"]})
    assert response.status_code == 400 and "(classification) does not generate text" in response.json()["detail"]
    with pytest.raises(UserError, match="computes in fp32 only"):
        load_served(str(client.get("/info").json()["model_dir"]), "bf16")


def test_generate_serves_a_t5s_outputs(tmp_path):
    model_dir = save_tiny_t5(tmp_path)
    prompts = ["a <extra_id_0> ran in the <extra_id_1>", "the module reads a file"]
    with client_for(model_dir, load_served(str(model_dir), "fp32")) as client:
        response = client.post("/generate", json={"prompts": prompts, "max_new_tokens": 8, "num_beams": 2})
        assert response.status_code == 200, response.text
        model, tokenizer = load_generator(model_dir)
        expected = generate_text(model, tokenizer, prompts, GenerationConfig(max_new_tokens=8, num_beams=2))
        assert response.json() == {"continuations": expected}
        info = client.get("/info").json()
        assert info["model_type"] == "t5" and info["encoder_decoder"] is True
        response = client.post("/generate", json={"prompts": ["x"], "max_new_tokens": 64})
        assert response.status_code == 422 and "decoder limit of 63 tokens" in response.json()["detail"]


def test_a_lone_surrogate_in_any_text_is_answered_not_a_500(gpt, sst2):
    """JSON's "\\ud800" escape decodes to a lone surrogate, which the tokenizers refuse (a TypeError: 500)."""
    client, _ = gpt
    for route, field, answer in (("/generate", "prompts", "continuations"),):
        response = client.post(route, content='{"%s": ["the cat \\ud800"], "max_new_tokens": 2}' % field,
                               headers={"content-type": "application/json"})
        assert response.status_code == 200 and len(response.json()[answer]) == 1, response.text
    for route, answer in (("/predict", "predictions"), ("/embed", "embeddings")):
        response = sst2.post(route, content='{"texts": ["good \\udc80 film"]}',
                             headers={"content-type": "application/json"})
        assert response.status_code == 200 and response.json()[answer] == sst2.post(route, json={"texts": [
            "good \ufffd film"]}).json()[answer], response.text
