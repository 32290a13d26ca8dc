"""`bertology serve` for a model fine-tuned on Word-in-Context (`finetune --task wic`): /predict takes
each pair's two sentences and the target word's index in each (WiC's "i1-i2"), answers the T/F
labels `bertology predict` writes for the same pairs with the softmax of the model's logits, and
refuses a bad request with a 4xx naming the field, then goes on serving."""

import pytest
import torch
from fastapi.testclient import TestClient
from helpers import run_cli, save_task_model

from bertology.cli import main
from bertology.errors import UserError
from bertology.inference.predictor import Predictor
from bertology.inference.runners import load_finetuned
from bertology.tasks.inputs import collate, encode
from bertology.tasks.readers import read_wic
from bertology.uses.serve import ServeConfig, create_app, load_served

TRAIN = [  # word, pos, i1-i2, sentence 1, sentence 2, same sense
    ("bank", "N", "4-1", "He sat by the bank of the river .", "The bank raised its rates .", "F"),
    ("bank", "N", "1-4", "The bank approved the loan .", "She works at a bank downtown .", "T"),
    ("run", "V", "0-2", "Run the program again .", "They run a small hotel .", "F"),
    ("runs", "V", "1-1", "She runs every morning .", "He runs five miles a day .", "T"),
]
PAIRS = [  # what the tests ask for: (sentence 1, sentence 2, [i1, i2])
    ("He sat by the bank of the river .", "The bank raised its rates .", [4, 1]),
    ("The bank approved the loan .", "She works at a bank downtown .", [1, 4]),
    ("Run the program again .", "They run a small hotel .", [0, 2]),
    ("She runs every morning .", "He runs five miles a day .", [1, 1]),
    ("A cold wind blew across the plain .", "He caught a cold in winter .", [1, 3]),
    ("Light the fire before dark .", "The box was light enough to carry .", [0, 3]),
    ("The play ended late .", "Children play in the park .", [1, 1]),
]


def body(pairs) -> dict:
    """The /predict request for (sentence 1, sentence 2, [i1, i2]) pairs."""
    return {"texts": [a for a, _, _ in pairs], "text_pairs": [b for _, b, _ in pairs],
            "target_indices": [indices for _, _, indices in pairs]}


def write_pairs(path, pairs) -> None:
    """`pairs` as a WiC data file (no gold file: test data); lemma and part of speech are the target as written."""
    lines = [f"{a.split()[i1]}\tN\t{i1}-{i2}\t{a}\t{b}\n" for a, b, (i1, i2) in pairs]
    path.write_text("".join(lines), encoding="utf-8")


@pytest.fixture(scope="module")
def wic_model(tmp_path_factory, minilm_dir):
    """The tiny encoder, its weights drawn wide (std 0.3, so that a random model's answers differ
    from pair to pair), fine-tuned on WiC for one epoch at a small learning rate, as
    tests/tasks/test_wic_task.py fine-tunes it (`bertology finetune --task wic`)."""
    root = tmp_path_factory.mktemp("serve_wic")
    encoder = save_task_model(root / "encoder", minilm_dir, seed=1, initializer_range=0.3)
    data = root / "wic"
    data.mkdir()
    for split, pairs in (("train", TRAIN * 4), ("dev", TRAIN)):
        (data / f"{split}.data.txt").write_text("".join("\t".join(p[:5]) + "\n" for p in pairs))
        (data / f"{split}.gold.txt").write_text("".join(p[5] + "\n" for p in pairs))
    assert main(["finetune", "--task", "wic", "--data", str(data), "--model", str(encoder), "--out",
                 str(root / "model"), "--epochs", "1", "--batch-size", "8", "--lr", "1e-5", "--precision", "fp32",
                 "--no-progress", "--no-learning-curve"]) == 0
    return root / "model"


def client_for(model_dir, **settings) -> TestClient:
    """A test client of the app serving `model_dir` as `bertology serve` loads it."""
    return TestClient(create_app(load_served(str(model_dir), "fp32"),
                                 ServeConfig(model=str(model_dir), precision="fp32", **settings)))


@pytest.fixture(scope="module")
def wic(wic_model):
    """The WiC model served with small limits: 4 texts of 200 characters per request."""
    with client_for(wic_model, max_texts=4, max_text_chars=200) as client:
        yield client


def test_labels_are_what_bertology_predict_writes_and_scores_the_softmax_of_the_logits(wic_model, tmp_path,
                                                                                       capsys):
    with client_for(wic_model, max_batch=3) as client:  # the pairs span three forward passes
        response = client.post("/predict", json=body(PAIRS))
        assert response.status_code == 200, response.text
        predictions = response.json()["predictions"]
    write_pairs(tmp_path / "pairs.data.txt", PAIRS)
    status, _, err = run_cli(capsys, "predict", "--model", wic_model, "--input", tmp_path / "pairs.data.txt",
                             "--out", tmp_path / "pairs.txt", "--precision", "fp32")
    assert status == 0, err
    written = (tmp_path / "pairs.txt").read_text().splitlines()
    assert [p["label"] for p in predictions] == written and set(written) == {"T", "F"}

    # the model's logits for the same pairs, read from the data file as `bertology predict` reads them
    model, tokenizer, spec, settings = load_finetuned(str(wic_model))
    encoded = encode(spec, read_wic(tmp_path / "pairs.data.txt", None), tokenizer, settings, training=False)
    with torch.no_grad():
        logits = model.eval()(**collate(encoded.features, "none", tokenizer.pad_token_id)).logits  # (pairs, 2)
    probabilities = torch.softmax(logits, dim=-1)
    for p, row in zip(predictions, probabilities.tolist()):
        assert set(p) == {"label", "scores"} and list(p["scores"]) == ["F", "T"]
        assert [p["scores"]["F"], p["scores"]["T"]] == pytest.approx(row, abs=1e-5)
        assert p["label"] == max(p["scores"], key=p["scores"].get)
    assert len({round(p["scores"]["T"], 6) for p in predictions}) == len(PAIRS)


def test_the_answer_follows_the_target_word(wic):
    """The same two sentences with another word as the target give another answer: the indices are read."""
    sentence, other = "The bank of the river was steep .", "She opened an account at the bank ."
    response = wic.post("/predict", json=body([(sentence, other, [1, 6]), (sentence, other, [4, 6])]))
    bank, river = (p["scores"]["T"] for p in response.json()["predictions"])
    assert bank != pytest.approx(river, abs=1e-4)
    alone = wic.post("/predict", json=body([(sentence, other, [4, 6])])).json()["predictions"][0]
    assert alone["scores"]["T"] == pytest.approx(river, abs=1e-5)


def test_info_and_health_name_the_task(wic):
    info, health = wic.get("/info").json(), wic.get("/health").json()
    assert health == {"status": "ok", "family": "bert", "task": "wic"}
    assert (info["task"], info["kind"], info["labels"]) == ("wic", "classification", ["F", "T"])
    assert info["takes_pairs"] and info["takes_targets"]


SENTENCE, OTHER = "He sat by the bank of the river .", "The bank raised its rates ."
GOOD = body([(SENTENCE, OTHER, [4, 1])])
BAD_REQUESTS = [  # (JSON body, status, words the message must hold)
    ({**GOOD, "target_indices": [[9, 1]]}, 422, "target_indices[0][0]: 9 is not a word index of texts[0], whose 9 "),
    ({**GOOD, "target_indices": [[4, 6]]}, 422, "target_indices[0][1]: 6 is not a word index of text_pairs[0], "
                                                "whose 6 "),
    ({**GOOD, "target_indices": [[4, -1]]}, 422, "target_indices[0][1]: -1 is not a word index of text_pairs[0]"),
    ({"texts": [SENTENCE], "text_pairs": [OTHER]}, 422, "target_indices: missing; this model's task (wic) takes"),
    ({**GOOD, "target_indices": [[4]]}, 422, "target_indices[0]: List should have at least 2 items"),
    ({**GOOD, "target_indices": [[4, 1, 2]]}, 422, "target_indices[0]: List should have at most 2 items"),
    ({**GOOD, "target_indices": [[4, "1"]]}, 422, "target_indices[0][1]: Input should be a valid integer"),
    ({**GOOD, "target_indices": [4, 1]}, 422, "target_indices[0]: Input should be a valid list"),
    ({"texts": [SENTENCE] * 2, "text_pairs": [OTHER] * 2, "target_indices": [[4, 1]]}, 422,
     "target_indices: 2 texts but 1 target_indices"),
    ({"texts": [SENTENCE] * 2, "text_pairs": [OTHER], "target_indices": [[4, 1]] * 2}, 422,
     "text_pairs: 2 texts but 1 text_pairs"),
    ({"texts": [SENTENCE], "target_indices": [[4, 1]]}, 422, "text_pairs: missing; this model's task (wic) takes"),
    ({**GOOD, "text_pairs": [" \t"]}, 422, "text_pairs[0]: empty text"),
    ({**GOOD, "texts": [""]}, 422, "texts[0]: empty text"),
    ({**GOOD, "texts": [SENTENCE] * 5, "text_pairs": [OTHER] * 5, "target_indices": [[4, 1]] * 5}, 422,
     "texts: 5 texts; at most 4"),
    # Found by encoding the pairs before they join a batch (a 400 would mean it failed in the batch, and with
    # it every other request's pairs there): a target only the tokenizer drops, and one of 159 tokens.
    ({**GOOD, "texts": ["He sat by the \u200b of the river ."]}, 422,
     "target_indices[0]: the target word '\\u200b' of sentence 1 gives no token"),
    ({**GOOD, "texts": ["He sat by the " + "-".join("a" * 80) + " of the river ."]}, 422,
     "target_indices[0]: the two target words alone take 160 tokens, more than max_seq_len 128"),
]


@pytest.mark.parametrize("request_body, status, message", BAD_REQUESTS)
def test_bad_requests_get_a_4xx_naming_the_field_and_the_next_request_is_answered(wic, request_body, status,
                                                                                   message):
    response = wic.post("/predict", json=request_body)
    assert response.status_code == status and message in response.json()["detail"], response.text
    assert "\n" not in response.json()["detail"]
    answered = wic.post("/predict", json=GOOD)
    assert answered.status_code == 200 and answered.json()["predictions"][0]["label"] in ("T", "F")
    assert wic.get("/health").json()["status"] == "ok"


def test_target_indices_are_refused_by_other_tasks_and_required_by_the_predictor(wic_model, tmp_path, minilm_dir):
    sst2 = save_task_model(tmp_path / "sst2", minilm_dir, "sst2")
    with client_for(sst2) as client:
        response = client.post("/predict", json={"texts": [SENTENCE], "target_indices": [[4, 1]]})
        assert response.status_code == 422
        assert response.json()["detail"] == "target_indices: this model's task (sst2) takes no target words"
        assert client.post("/predict", json={"texts": [SENTENCE]}).status_code == 200
    predictor = Predictor.load(str(wic_model), "fp32")
    with pytest.raises(UserError, match=r"^target_indices: required by this model's task \(wic\)$"):
        predictor.predict([SENTENCE], [OTHER])
    with client_for(wic_model) as client:
        served = client.post("/predict", json=GOOD).json()["predictions"][0]
    direct = predictor.predict([SENTENCE], [OTHER], target_indices=[[4, 1]])[0]
    assert direct["label"] == served["label"]
    assert direct["scores"]["T"] == pytest.approx(served["scores"]["T"], abs=1e-6)


def test_openapi_schema_documents_the_target_indices(wic):
    schema = wic.get("/openapi.json").json()["components"]["schemas"]
    targets = schema["PredictRequest"]["properties"]["target_indices"]
    assert "WiC" in targets["description"] and '"i1-i2"' in targets["description"]
    pair = targets["anyOf"][0]["items"]
    assert (pair["type"], pair["items"]["type"], pair["minItems"], pair["maxItems"]) == ("array", "integer", 2, 2)
    assert "WiC" in schema["PredictRequest"]["properties"]["text_pairs"]["description"]
    assert '"T"' in schema["ClassPrediction"]["description"]
