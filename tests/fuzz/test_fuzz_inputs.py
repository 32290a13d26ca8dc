"""The fuzz tier: generated and mutated inputs of the seven kinds bertology reads (corpus text,
GLUE TSV, custom CSV/TSV/JSONL tables, CoNLL, SQuAD JSON, model directories, the HTTP API).

Every outcome must be a valid result or bertology's own one-line error (UserError; a 4xx with
a one-line detail over HTTP): never another exception, never a hang (each case runs under an
alarm), never NaN in an output. Hypothesis runs derandomized with no example database, so the
same cases run every time and a failure reproduces (tests/fuzz_helpers.py); a failure found here
becomes a plain regression test beside the code it concerns. `CASES` below totals 2,150; the
families' commands and the faults are test_fuzz_families.py's.
"""

import gzip
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from fuzz_helpers import fuzz_settings, json_values, mutated, outcome, time_limit, write
from hypothesis import given
from hypothesis import strategies as st

from bertology.data.corpus import read_documents
from bertology.data.tokenizer import Tokenizer, train_tokenizer
from bertology.inference.embedding import embed_texts, load_encoder
from bertology.models.bert import BertConfig, BertModel
from bertology.tasks.readers import TASKS, generic_task, read_conll, read_glue, read_squad, read_table
from bertology.text import is_invisible

pytestmark = pytest.mark.slow

CASES = {"corpus": 400, "glue": 300, "table": 400, "conll": 300, "squad": 300, "model_dir": 150, "http": 300}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def settings_for(kind: str):
    return fuzz_settings(CASES[kind])


def assert_clean_text(text: str) -> None:
    """What every reader promises about a text it returns."""
    assert isinstance(text, str) and not _CONTROL.search(text) and "\r" not in text, repr(text)


# -- corpus text ---------------------------------------------------------------------------------

CORPUS = (b" = Valkyria Chronicles III = \n\n Senj\xc5\x8d no Valkyria 3 : Unrecorded Chronicles is a game .\n"
          b" It was released in January 2011 in Japan . Mr. Smith wrote it .\n\n = = Gameplay = = \n\n"
          b" The game 's battle system was carried over . \n")
JSONL_CORPUS = (b'{"text": "First document. It has two sentences."}\n'
                b'{"text": "Second \\u00e9 document.\\nA new line.", "id": 2}\n')


@settings_for("corpus")
@given(data=st.data())
def test_fuzz_corpus(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("corpus")
    suffix = data.draw(st.sampled_from((".txt", ".jsonl", ".txt.gz")))
    content = data.draw(mutated(JSONL_CORPUS if suffix == ".jsonl" else CORPUS))
    if suffix == ".txt.gz":
        packed = gzip.compress(content, mtime=0)
        content = packed[: data.draw(st.integers(len(packed) // 2, len(packed)))]
    path = write(folder, "corpus" + suffix, content)
    skip = data.draw(st.booleans())
    documents = outcome(lambda: list(read_documents([path], skip_bad_lines=skip)))
    for document in documents or []:
        assert document
        for sentence in document:
            assert_clean_text(sentence)
            assert sentence.strip()


# -- GLUE TSV ------------------------------------------------------------------------------------

SST2 = b"sentence\tlabel\nit 's a charming and often affecting journey . \t1\nunflinchingly bleak and desperate \t0\n"
MRPC = (b"Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t702876\t702977\tAmrozi accused his brother .\t"
        b"Referring to him as only \" the witness \" , Amrozi accused his brother .\n0\t2108705\t2108831\t"
        b"Yucaipa owned Dominick 's .\tYucaipa bought Dominick 's in 1995 .\n")


@settings_for("glue")
@given(data=st.data())
def test_fuzz_glue(tmp_path_factory, data):
    task, base = data.draw(st.sampled_from((("sst2", SST2), ("mrpc", MRPC))))
    split = data.draw(st.sampled_from(("train", "dev", "test")))
    path = write(tmp_path_factory.mktemp("glue"), f"{split}.tsv", data.draw(mutated(base)))
    spec = TASKS[task]
    examples = outcome(lambda: read_glue(spec, path, split))
    for example in examples or []:
        for text in (example.text_a, example.text_b):
            if text is not None:
                assert_clean_text(text)
                assert not is_invisible(text)
        assert example.label is None or example.label in spec.labels


# -- custom tables -------------------------------------------------------------------------------

TABLES = {
    ".csv": b'text,label\n"a gorgeous, witty movie",pos\nthe worst film,neg\n',
    ".tsv": b"text\tlabel\na gorgeous movie\tpos\nthe worst film\tneg\n",
    ".jsonl": b'{"text": "a gorgeous movie", "label": "pos"}\n{"text": "the worst film", "label": 0}\n',
}
REGRESSION_TABLES = {
    ".csv": b"text,label\nfine,0.5\nbad,-2\n",
    ".tsv": b"text\tlabel\nfine\t0.5\nbad\t1e3\n",
    ".jsonl": b'{"text": "fine", "label": 0.5}\n{"text": "bad", "label": "3"}\n',
}


@settings_for("table")
@given(data=st.data())
def test_fuzz_custom_table(tmp_path_factory, data):
    suffix = data.draw(st.sampled_from(tuple(TABLES)))
    regression = data.draw(st.booleans())
    spec = generic_task("regression") if regression else generic_task("classification",
                                                                        data.draw(st.sampled_from((None, ("pos", "neg")))))
    base = (REGRESSION_TABLES if regression else TABLES)[suffix]
    path = write(tmp_path_factory.mktemp("table"), "train" + suffix, data.draw(mutated(base)))
    examples = outcome(lambda: read_table(spec, path, "train"))
    for example in examples or []:
        assert_clean_text(example.text_a)
        assert not is_invisible(example.text_a)
        if regression:
            assert isinstance(example.label, float) and math.isfinite(example.label)
        else:
            assert isinstance(example.label, str) and example.label.strip()


# -- CoNLL ---------------------------------------------------------------------------------------

CONLL = (b"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\n"
         b"call NN I-NP O\n. . O O\n\nPeter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n")


@settings_for("conll")
@given(data=st.data())
def test_fuzz_conll(tmp_path_factory, data):
    path = write(tmp_path_factory.mktemp("conll"), "train.txt", data.draw(mutated(CONLL)))
    spec = TASKS["conll2003"]
    examples = outcome(lambda: read_conll(spec, path))
    for example in examples or []:
        assert len(example.words) == len(example.tags) > 0
        for word in example.words:
            assert_clean_text(word)
            assert not is_invisible(word)
        previous = "O"
        for tag in example.tags:
            assert tag in spec.labels
            assert not tag.startswith("I-") or previous[2:] == tag[2:]  # IOB2: an entity starts with B-
            previous = tag


# -- SQuAD JSON ----------------------------------------------------------------------------------

SQUAD = {"version": "v2.0", "data": [{"title": "Normans", "paragraphs": [{
    "context": "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy.",
    "qas": [{"id": "q1", "question": "What gave its name to Normandy?",
             "answers": [{"text": "The Normans", "answer_start": 0}], "is_impossible": False},
            {"id": "q2", "question": "Who wrote it?", "answers": [], "is_impossible": True,
             "plausible_answers": [{"text": "Normans", "answer_start": 4}]}]}]}]}

@st.composite
def squad_documents(draw) -> bytes:
    """SQuAD with one node replaced by generated JSON (a structural fault), or with its bytes mutated."""
    document = json.loads(json.dumps(SQUAD))
    if draw(st.booleans()):
        return draw(mutated(json.dumps(document).encode()))
    node, paths = document, []
    while isinstance(node, (dict, list)) and node:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = draw(st.sampled_from(keys))
        paths.append((node, key))
        node = node[key]
        if draw(st.integers(0, 3)) == 0:
            break
    parent, key = paths[-1]
    if draw(st.integers(0, 4)) == 0 and isinstance(parent, dict):
        del parent[key]
    else:
        parent[key] = draw(json_values)
    return json.dumps(document).encode()


@settings_for("squad")
@given(data=st.data())
def test_fuzz_squad(tmp_path_factory, data):
    path = write(tmp_path_factory.mktemp("squad"), "dev.json", data.draw(squad_documents()))
    spec = TASKS[data.draw(st.sampled_from(("squad", "squad_v2")))]
    split = data.draw(st.sampled_from(("train", "dev")))
    examples = outcome(lambda: read_squad(spec, path, split))
    for example in examples or []:
        for text in (example.question, example.context, *(a["text"] for a in example.answers)):
            assert_clean_text(text)
            assert not is_invisible(text)


# -- model directories ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> Path:
    """A tiny encoder (2 layers, 32 wide) with a 300-piece vocabulary trained on CORPUS-like text,
    small enough that each case copies it in a millisecond."""
    root = tmp_path_factory.mktemp("small_model")
    corpus = write(root, "corpus.txt", CORPUS * 20 + b"the a an of to in is was it he she they we you\n" * 20)
    tokenizer = train_tokenizer([corpus], vocab_size=300, out_dir=root / "tokenizer", min_frequency=1)
    model_dir = root / "model"
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).save_pretrained(model_dir)
    Tokenizer.from_pretrained(root / "tokenizer").save_pretrained(model_dir)
    return model_dir


@st.composite
def model_damage(draw, model_dir: Path):
    """(file name, new bytes) for one file of the model directory."""
    name = draw(st.sampled_from(("config.json", "config.json", "model.safetensors", "vocab.txt")))
    original = (model_dir / name).read_bytes()
    if name == "config.json" and draw(st.booleans()):
        config = json.loads(original)
        key = draw(st.sampled_from(sorted(config)) | st.text(max_size=10))
        config[key] = draw(json_values)
        return name, json.dumps(config).encode()
    if name == "model.safetensors":
        data = bytearray(original)
        header = 8 + int.from_bytes(original[:8], "little")
        for _ in range(draw(st.integers(1, 4))):
            where = draw(st.integers(0, header + 64) | st.integers(0, len(data) - 1))
            data[where] = draw(st.integers(0, 255))  # the header, or a byte of some tensor
        if draw(st.integers(0, 9)) == 0:
            data = data[: draw(st.integers(0, len(data)))]
        return name, bytes(data)
    return name, draw(mutated(original[:4000])) + (original[4000:] if name == "vocab.txt" else b"")


@settings_for("model_dir")
@given(data=st.data())
def test_fuzz_model_directory(small_model, tmp_path_factory, data):
    target = tmp_path_factory.mktemp("model_dir") / "model"
    shutil.copytree(small_model, target)
    name, content = data.draw(model_damage(small_model))
    (target / name).write_bytes(content)

    def load_and_embed():
        model, tokenizer = load_encoder(target)
        return embed_texts(model, tokenizer, ["the game was released in Japan .", "Mr. Smith"], pooling="mean")

    vectors = outcome(load_and_embed)
    if vectors is not None:
        assert vectors.shape[0] == 2 and np.isfinite(vectors).all()


# -- the HTTP API --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(minilm_dir, tmp_path_factory):
    from fastapi.testclient import TestClient
    from helpers import save_task_model

    from bertology.inference.predictor import Predictor
    from bertology.uses.serve import ServeConfig, create_app

    classifier = save_task_model(tmp_path_factory.mktemp("http") / "sst2", minilm_dir, "sst2")
    config = ServeConfig(model=str(classifier), precision="fp32", max_texts=8, max_text_chars=300,
                         max_body_bytes=20000)
    with TestClient(create_app(Predictor.load(str(classifier), "fp32"), config)) as test_client:
        yield test_client


texts = st.lists(st.text(max_size=40) | st.sampled_from(["", " ", "\u200b", "\x00", "a" * 400, "good film"]),
                 max_size=10)
bodies = st.one_of(
    st.fixed_dictionaries({"texts": texts}, optional={"pooling": st.text(max_size=6) | st.sampled_from(["mean", "cls"]),
                                                      "normalize": json_values, "text_pairs": texts}),
    json_values,
)


@settings_for("http")
@given(route=st.sampled_from(("/predict", "/embed", "/predict", "/embed", "/info", "/nowhere")),
       body=bodies, raw=st.one_of(st.none(), st.binary(max_size=200)),
       content_type=st.sampled_from(("application/json", "application/json", "text/plain", "")))
def test_fuzz_http(client, route, body, raw, content_type):
    content = raw if raw is not None else json.dumps(body).encode()
    with time_limit():
        if route == "/info":
            response = client.get(route)
        else:
            response = client.post(route, content=content, headers={"content-type": content_type} if content_type else {})
    assert response.status_code < 500, response.text
    payload = response.json()
    if response.status_code >= 400:
        detail = payload["detail"]
        assert isinstance(detail, str) and detail.strip() and "\n" not in detail, payload
        return
    if route == "/embed":
        assert np.isfinite(np.array(payload["embeddings"], dtype=float)).all()
    if route == "/predict":
        for prediction in payload["predictions"]:
            assert all(math.isfinite(p) for p in prediction["scores"].values())
