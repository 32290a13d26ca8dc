"""Tests for bertology.data.tokenizer_files: tokenizer folders as transformers writes them.

The nine model types' tokenizers are trained here on WikiText-2 valid and saved by transformers'
own classes (conftest.py: `transformers_tokenizers`), in the two layouts a user has: the files a
class reads (vocab.txt, vocab.json + merges.txt, spiece.model) and what transformers 5 writes
(tokenizer.json). On 2,000 lines of WikiText-2 test plus hard cases, bertology's ids, token types,
attention masks and decoded text equal transformers' AutoTokenizer's, for single texts, pairs and
padded batches; what bertology saves loads in AutoTokenizer with the same ids. Folders that
bertology 0.1 wrote still load with the ids it gave. Broken files are one-line errors naming them.
"""

import json
import shutil
from pathlib import Path

import pytest
import transformers
from helpers import TOKENIZER_CLASSES

from bertology.data.tokenizer import Tokenizer
from bertology.errors import UserError

MODEL_TYPES = tuple(TOKENIZER_CLASSES)
LAYOUTS = ("native", "saved")  # the files the class reads; what transformers 5 writes
OLD_FOLDERS = Path(__file__).parent / "bertology-0.1"  # written by bertology at c705f04

HARD_CASES = [
    "Café naïve résumé Ångström Straße İstanbul Ωμέγα",  # accents
    "我爱北京天安门 がぎぐげご 안녕하세요 세계",  # CJK
    "😀 👍🏽 👨\u200d👩\u200d👧",  # emoji, a skin tone, a joined family
    "\x00\x07 tab\tnew\nline\u200b ☃ \ue000 \ufffd",  # control and unknown characters
    # every family's special tokens inside the text
    "[MASK] and [SEP] <s> </s> <mask> <pad> <unk> <|endoftext|> <extra_id_0> <cls> <sep> <eop> [CLS] inside",
    "``quoted'' text  with   double spaces ",
    "",
    "   ",
    "a" * 120,
]

# The tokens each class puts around text A and the pair A B.
FRAMING = {
    "bert": ("[CLS] A [SEP]", "[CLS] A [SEP] B [SEP]"),
    "electra": ("[CLS] A [SEP]", "[CLS] A [SEP] B [SEP]"),
    "distilbert": ("[CLS] A [SEP]", "[CLS] A [SEP] B [SEP]"),
    "albert": ("[CLS] A [SEP]", "[CLS] A [SEP] B [SEP]"),
    "roberta": ("<s> A </s>", "<s> A </s> </s> B </s>"),
    "gpt2": ("A", "A B"),
    "openai-gpt": ("A", "A B"),
    "t5": ("A </s>", "A </s> B </s>"),
    "xlnet": ("A <sep> <cls>", "A <sep> B <sep> <cls>"),
}
ALL_ROLES = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"}
BERT_ROLES = {"unk", "sep", "pad", "cls", "mask"}
KIND_AND_ROLES = {
    "bert": ("wordpiece", BERT_ROLES), "electra": ("wordpiece", BERT_ROLES), "distilbert": ("wordpiece", BERT_ROLES),
    "roberta": ("bpe", ALL_ROLES), "gpt2": ("bpe", {"bos", "eos", "unk"}), "openai-gpt": ("bpe", {"unk"}),
    "t5": ("sentencepiece", {"eos", "unk", "pad"}), "xlnet": ("sentencepiece", ALL_ROLES),
    "albert": ("sentencepiece", ALL_ROLES),
}


@pytest.fixture(scope="module")
def texts(data_dir) -> list[str]:
    """The first 2,000 non-blank lines of WikiText-2 test, then the hard cases."""
    text = (data_dir / "wikitext-2-raw/wiki.test.raw").read_text(encoding="utf-8")
    return [line for line in text.split("\n") if line.strip()][:2000] + HARD_CASES


def folder(transformers_tokenizers, model_type: str, layout: str) -> Path:
    return transformers_tokenizers[model_type][LAYOUTS.index(layout)]


def unpadded(tokenizer: Tokenizer, texts, pairs=None) -> dict:
    return tokenizer(texts, pairs, padding=False, truncation=False, return_tensors=None)


def assert_same_rows(ours: list, theirs: list, texts: list[str], tokenizer: Tokenizer, what: str = "ids"):
    """Fail on the first differing row, showing its text and both rows."""
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            pytest.fail(f"{what} of text {i} differ: {texts[i][:120]!r}\nours:   {a[:40]}\ntheirs: {b[:40]}\n"
                        f"tokens: {tokenizer.convert_ids_to_tokens(a)[:40] if what == 'ids' else ''}")


# --- Parity with transformers' AutoTokenizer ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_ids_pairs_and_decoding_equal_transformers(transformers_tokenizers, texts, model_type):
    # Both layouts, each against AutoTokenizer on the same folder: bertology builds the native one
    # itself (vocab.txt, vocab.json + merges.txt, spiece.model) from all the lines; it runs the saved
    # tokenizer.json as is, checked on the first 500 and the hard cases.
    for layout, sample in (("native", texts), ("saved", texts[:500] + HARD_CASES)):
        firsts, seconds = sample[0:-1:2], sample[1::2]  # every line (but an odd last) once in a pair
        directory = folder(transformers_tokenizers, model_type, layout)
        ours, theirs = Tokenizer.from_pretrained(directory), transformers.AutoTokenizer.from_pretrained(directory)
        assert ours.vocab_size == len(theirs)
        ids = unpadded(ours, sample)["input_ids"]
        assert_same_rows(ids, theirs(sample)["input_ids"], sample, ours)
        ours_pairs, their_pairs = unpadded(ours, firsts, seconds), theirs(firsts, seconds, return_token_type_ids=True)
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            assert_same_rows(ours_pairs[key], their_pairs[key], firsts, ours, key)
        for skip in (False, True):
            decoded = [ours.decode(row, skip_special_tokens=skip) for row in ids]
            assert_same_rows(decoded, theirs.batch_decode(ids, skip_special_tokens=skip), sample, ours, "text")


@pytest.mark.slow
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_padded_batches_equal_transformers(transformers_tokenizers, texts, model_type):
    directory = folder(transformers_tokenizers, model_type, "saved")
    ours, theirs = Tokenizer.from_pretrained(directory), transformers.AutoTokenizer.from_pretrained(directory)
    if "pad" not in ours.special_tokens:
        with pytest.raises(ValueError):  # transformers will not pad without a pad token
            theirs(texts[:2], padding=True)
        if "eos" not in ours.special_tokens:  # the first GPT: nothing to pad with
            with pytest.raises(UserError, match="has no pad token"):
                ours(texts[:2])
            return
        theirs.pad_token = theirs.eos_token  # as GPT-2 users do; bertology pads with eos by itself
    batches = 0
    for start in range(0, 256, 16):
        a, b = texts[start:start + 16], texts[start + 1:start + 17]
        mine, reference = ours(a, b, truncation=False), theirs(a, b, padding=True, return_token_type_ids=True,
                                                               return_tensors="pt")
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            assert mine[key].tolist() == reference[key].tolist(), (start, key)
        batches += 1
    assert batches == 16
    first_column = mine["attention_mask"][:, 0].tolist()
    last_column = mine["attention_mask"][:, -1].tolist()
    padded_on_the_left = model_type == "xlnet"
    assert 0 in (first_column if padded_on_the_left else last_column)
    assert 0 not in (last_column if padded_on_the_left else first_column)


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_what_bertology_saves_loads_in_transformers_with_the_same_ids(transformers_tokenizers, texts, tmp_path,
                                                                      model_type, layout):
    directory = folder(transformers_tokenizers, model_type, layout)
    ours = Tokenizer.from_pretrained(directory)
    ours.save_pretrained(tmp_path)
    theirs, again = transformers.AutoTokenizer.from_pretrained(directory), transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert type(again) is type(theirs)
    sample = texts[:300] + HARD_CASES
    assert_same_rows(again(sample)["input_ids"], theirs(sample)["input_ids"], sample, ours)
    pairs = {"return_token_type_ids": True}
    assert again(sample[0:-1:2], sample[1::2], **pairs) == theirs(sample[0:-1:2], sample[1::2], **pairs)
    reloaded = Tokenizer.from_pretrained(tmp_path)
    assert unpadded(reloaded, sample)["input_ids"] == unpadded(ours, sample)["input_ids"]
    assert (reloaded.kind, reloaded.tokenizer_class, reloaded.padding_side, reloaded.special_tokens) == \
        (ours.kind, ours.tokenizer_class, ours.padding_side, ours.special_tokens)


# --- Roles, kinds and framing --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_special_tokens_by_role_kind_and_framing(transformers_tokenizers, texts, model_type):
    ours = Tokenizer.from_pretrained(folder(transformers_tokenizers, model_type, "saved"))
    theirs = transformers.AutoTokenizer.from_pretrained(folder(transformers_tokenizers, model_type, "saved"))
    kind, roles = KIND_AND_ROLES[model_type]
    assert ours.kind == kind and set(ours.special_tokens) == roles
    for role in roles:
        assert ours.special_token_id(role) == getattr(theirs, f"{role}_token_id")
    for role in ALL_ROLES - roles:
        with pytest.raises(UserError, match=f"has no {role} token") as error:
            ours.special_token_id(role)
        assert "\n" not in str(error.value)

    def framing(*texts) -> str:
        """The row's tokens, each run of text A's tokens written "A" and of B's "B"."""
        encoding = ours(*texts, padding=False, return_tensors=None)
        parts = []
        for token, sequence in zip(encoding.tokens(0), encoding.sequence_ids(0)):
            part = token if sequence is None else "AB"[sequence]
            if not parts or part not in "AB" or parts[-1] != part:
                parts.append(part)
        return " ".join(parts)

    assert (framing("some words here"), framing("some words", "more words")) == FRAMING[model_type]
    for first, second in zip(texts[:100:2], texts[1:100:2]):  # ids framed by `frame`, as by encoding the texts
        encoded = unpadded(ours, [first], [second])
        pieces = [ours.encode(text, add_special_tokens=False, truncation=False) for text in (first, second)]
        assert ours.frame(*pieces) == (encoded["input_ids"][0], encoded["token_type_ids"][0])
        assert ours.frame(pieces[0])[0] == unpadded(ours, [first])["input_ids"][0]
    if model_type == "t5":  # the sentinels of span corruption, <extra_id_0> first
        assert len(ours.sentinel_token_ids) == 100
        assert ours.sentinel_token_ids[0] == theirs.convert_tokens_to_ids("<extra_id_0>")


@pytest.mark.slow
def test_gpt2_text_start_and_end_are_its_end_of_text(transformers_tokenizers):
    gpt2 = Tokenizer.from_pretrained(folder(transformers_tokenizers, "gpt2", "saved"))
    end_of_text = gpt2.convert_tokens_to_ids("<|endoftext|>")
    assert gpt2.start_token_id == gpt2.end_token_id == gpt2.pad_token_id == end_of_text
    bert = Tokenizer.from_pretrained(folder(transformers_tokenizers, "bert", "saved"))
    assert (bert.start_token_id, bert.end_token_id) == (bert.cls_token_id, bert.sep_token_id)


# --- Folders written by bertology 0.1 -------------------------------------------------------------------


@pytest.mark.parametrize("model, expected", [
    ("wordpiece", ([2, 5, 6, 7, 8, 3], [2, 8, 10, 4, 1, 3, 5, 3])),
    ("unigram", ([2, 5, 6, 7, 8, 3], [2, 8, 9, 4, 1, 3, 5, 3])),
])
def test_folders_written_by_bertology_0_1_give_the_same_ids(model, expected, tmp_path):
    old = OLD_FOLDERS / model
    tokenizer = Tokenizer.from_pretrained(old)
    assert tokenizer.kind == model and tokenizer.keep_hangul == (model == "wordpiece")
    assert tokenizer.encode("unaffable hello") == expected[0]
    assert tokenizer.encode("Hello <extra_id_0> [MASK] 한", "un") == expected[1]
    assert tokenizer("x", "y", return_tensors=None)["token_type_ids"] == [[0, 0, 0, 1, 1]]
    tokenizer.save_pretrained(tmp_path)
    assert Tokenizer.from_pretrained(tmp_path).fingerprint == tokenizer.fingerprint
    assert (tmp_path / "vocab.txt").read_bytes() == (old / "vocab.txt").read_bytes()
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert theirs("Hello <extra_id_0> [MASK] 한", "un")["input_ids"] == expected[1]



def test_a_wordpiece_folder_of_0_1_resaved_by_transformers_reads_its_tokenizer_json(tmp_path):
    """transformers keeps 0.1's `tokenizer_model` key in tokenizer_config.json but writes no vocab.txt;
    the folder was refused as "vocab.txt: vocabulary file not found"."""
    transformers.AutoTokenizer.from_pretrained(OLD_FOLDERS / "wordpiece").save_pretrained(tmp_path)
    assert not (tmp_path / "vocab.txt").exists()
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_model"] == "wordpiece"
    tokenizer = Tokenizer.from_pretrained(tmp_path)
    assert tokenizer.encode("Hello <extra_id_0> [MASK] 한", "un") == [2, 8, 10, 4, 1, 3, 5, 3]
    assert tokenizer.fingerprint == Tokenizer.from_pretrained(OLD_FOLDERS / "wordpiece").fingerprint

# --- One-line errors naming the file ------------------------------------------------------------------


def one_line_error(directory: Path, match: str) -> str:
    with pytest.raises(UserError, match=match) as error:
        Tokenizer.from_pretrained(directory)
    assert "\n" not in str(error.value)
    return str(error.value)


def test_a_folder_without_tokenizer_files(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    message = one_line_error(tmp_path, "no tokenizer here")
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "spiece.model", "vocab.txt"):
        assert name in message


@pytest.mark.parametrize("content, match", [
    ("{\n  \"model\": \n", r"tokenizer\.json:3: invalid JSON"),
    ("[1, 2]", r"tokenizer\.json: not a tokenizer pipeline"),
    ('{"model": {"type": "Nonsense"}}', r"tokenizer\.json: not a tokenizer the `tokenizers` library can read"),
    ('{"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null, "post_processor": null, '
     '"decoder": null, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}}',
     r"tokenizer\.json: merge 1 \(a b\) needs 'ab', which tokenizer\.json's vocab lacks"),
])
def test_a_garbage_tokenizer_json(tmp_path, content, match):
    (tmp_path / "tokenizer.json").write_text(content, encoding="utf-8")
    one_line_error(tmp_path, match)


def test_merges_that_do_not_match_the_vocabulary(tmp_path):
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "c": 2, "ab": 3}), encoding="utf-8")
    one_line_error(tmp_path, r"merges\.txt: not found \(vocab\.json needs its merges\)")
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\nab c\n", encoding="utf-8")
    one_line_error(tmp_path, r"merges\.txt: merge 2 \(ab c\) needs 'abc', which vocab\.json lacks")
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b c\n", encoding="utf-8")
    one_line_error(tmp_path, r"merges\.txt:2: expected two tokens separated by one space")
    (tmp_path / "merges.txt").write_text("a b\n", encoding="utf-8")
    (tmp_path / "vocab.json").write_text('{"a": 0, "b": "one"}', encoding="utf-8")
    one_line_error(tmp_path, r"vocab\.json: expected a non-empty JSON object of token: id")


def test_a_truncated_sentencepiece_model(tmp_path, data_dir):
    import sentencepiece

    lines = (data_dir / "wikitext-2-raw/wiki.valid.raw").read_text(encoding="utf-8").split("\n")[:300]
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(tmp_path / "spiece"),
                                             vocab_size=200, minloglevel=2, num_threads=1)
    model = tmp_path / "model"
    model.mkdir()
    data = (tmp_path / "spiece.model").read_bytes()
    (model / "spiece.model").write_bytes(data)
    assert Tokenizer.from_pretrained(model).kind == "sentencepiece"  # whole, it loads
    (model / "spiece.model").write_bytes(data[: len(data) // 2])
    one_line_error(model, r"spiece\.model: not a SentencePiece model, or a truncated one")
    (model / "spiece.model").write_bytes(b"not a model at all")
    one_line_error(model, r"spiece\.model: not a SentencePiece model")


def test_bad_config_fields_name_the_file_and_field(tmp_path):
    shutil.copy(OLD_FOLDERS / "wordpiece" / "vocab.txt", tmp_path / "vocab.txt")
    for config, match in [({"padding_side": "middle"}, "field 'padding_side' must be"),
                          ({"unk_token": 3}, "field 'unk_token' must be a token"),
                          ({"model_max_length": -1}, "field 'model_max_length' must be a positive integer"),
                          ({"tokenizer_class": 7}, "field 'tokenizer_class' must be a class name"),
                          ({"mask_token": "[NOT-THERE]"}, r"vocab\.txt: the vocabulary lacks the special tokens \[NOT-THERE\]")]:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        one_line_error(tmp_path, match)
