"""Tests for bertology.data.tokenizer.

The tests that matter most are parity tests: on a real BERT vocabulary our ids equal
those of transformers' BertTokenizerFast, and on a vocabulary we train they equal those
of the pure-Python reference (Google's algorithm, as kept in transformers), line by line
over WikiText-2. The rest pin the Hangul policy, saving and loading, the shape of the
encoded batch, and the one-line errors a user sees.
"""

import json
import unicodedata

import pytest
import torch
import transformers

from bertology.data.corpus import ReadStats
from bertology.data.tokenizer import (
    MIN_VOCAB_SIZE,
    SPECIAL_TOKENS,
    Tokenizer,
    train_tokenizer,
)
from bertology.errors import UserError

WIKI_TEST = "wikitext-2-raw/wiki.test.raw"
WIKI_VALID = "wikitext-2-raw/wiki.valid.raw"

HARD_CASES = {
    "accents": "Café naïve résumé Ångström",
    "chinese": "我爱北京天安门",
    "japanese-dakuten": "がぎぐげご パピプペポ ｶﾞｷﾞ",
    "korean": "안녕하세요 세계",
    "emoji": "😀 👍🏽 👨\u200d👩\u200d👧",
    "control-chars": "\x00\x07 tab\tnew\nline\u200b",
    "word-over-100-chars": "a" * 101,
    "word-of-100-chars": "a" * 100,
    "empty": "",
    "spaces": "   ",
    "unicode-whitespace": "\t\n \u3000\u2028\u00a0",
    "punctuation": "Hello, world!!! (really?) -- \"quotes\" 'single' [brackets] {braces} ... ¿¡«»",
    "mixed-symbols": "don't U.S.A. $3.50 e-mail 50% #1 @user C++ x^2 a_b",
    "special-tokens-in-text": "[MASK] and [SEP] inside, [mask] lower",
    "german-turkish-greek": "Straße İstanbul Ωμέγα",
    "compatibility-forms": "ﬁ ＡＢＣ ①",
    "devanagari": "नमस्ते दुनिया",
    "arabic": "مرحبا بالعالم",
    "thai": "สวัสดีชาวโลก",
    "combining-accent": "e\u0301 vs \u00e9",
    "bom-nbsp-replacement": "\ufeffBOM and \u00a0nbsp\ufffd",
}

PAIRS = [
    ("Who wrote the tokenizer?", "The tokenizer was written by a team of engineers in a great hurry."),
    ("A fairly long first sentence that goes on and on and on.", "Short."),
    ("", "only the second text"),
    ("same length here", "same length there"),
]


def read_lines(path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def ids_of(tokenizer: Tokenizer, texts, pairs=None) -> list[list[int]]:
    """Unpadded, untruncated ids, as lists."""
    return tokenizer(texts, pairs, padding=False, truncation=False, return_tensors=None)["input_ids"]


def assert_same_ids(ours: list[list[int]], theirs: list[list[int]], texts: list[str], tokenizer: Tokenizer):
    """Fail on the first differing text, showing it and both token sequences."""
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            pytest.fail(
                f"text {i} differs: {texts[i][:200]!r}\n"
                f"ours:   {tokenizer.convert_ids_to_tokens(a)[:60]}\n"
                f"theirs: {tokenizer.convert_ids_to_tokens(b)[:60]}"
            )


def reference_tokenizer(vocab_file, do_lower_case: bool):
    """Google's pure-Python algorithm as kept in transformers (renamed *Legacy in transformers 5)."""
    cls = getattr(transformers, "BertTokenizerLegacy", None) or transformers.BertTokenizer
    return cls(vocab_file=str(vocab_file), do_lower_case=do_lower_case)


def write_vocab(path, tokens) -> None:
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")


@pytest.fixture(scope="module")
def wiki_lines(data_dir) -> list[str]:
    return read_lines(data_dir / WIKI_TEST)


@pytest.fixture(scope="module")
def minilm(minilm_dir) -> Tokenizer:
    return Tokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def minilm_fast(minilm_dir):
    return transformers.BertTokenizerFast.from_pretrained(minilm_dir)


@pytest.fixture(scope="module", params=["uncased", "cased"])
def trained(request, data_dir, tmp_path_factory):
    """A WordPiece vocabulary trained on WikiText-2 valid, saved; (tokenizer, folder)."""
    out_dir = tmp_path_factory.mktemp(f"wordpiece-{request.param}")
    tokenizer = train_tokenizer(
        [data_dir / WIKI_VALID], vocab_size=8000, cased=request.param == "cased", out_dir=out_dir
    )
    return tokenizer, out_dir


@pytest.fixture(scope="module")
def korean(tmp_path_factory):
    """An uncased vocabulary trained on a small Korean and English corpus; (tokenizer, folder)."""
    corpus = tmp_path_factory.mktemp("korean-corpus") / "ko.txt"
    lines = [
        "안녕하세요 세계. 한국어는 아름답습니다.",
        "서울에서 만나요! 오늘 날씨가 좋네요.",
        "Café and naïve résumé in Seoul.",
    ]
    corpus.write_text("\n".join(lines * 20) + "\n", encoding="utf-8")
    out_dir = tmp_path_factory.mktemp("wordpiece-korean")
    tokenizer = train_tokenizer([corpus], vocab_size=MIN_VOCAB_SIZE + 200, min_frequency=1, out_dir=out_dir)
    return tokenizer, out_dir


# --- Parity with BERT on a real checkpoint's vocabulary -----------------------------------


@pytest.mark.slow
def test_matches_bert_fast_on_every_wikitext_line(minilm, minilm_fast, wiki_lines):
    theirs = minilm_fast(wiki_lines, padding=False, truncation=False)["input_ids"]
    assert_same_ids(ids_of(minilm, wiki_lines), theirs, wiki_lines, minilm)


@pytest.mark.parametrize("text", HARD_CASES.values(), ids=HARD_CASES.keys())
def test_matches_bert_fast_on_hard_cases(minilm, minilm_fast, text):
    ours = minilm([text], return_tensors=None, return_offsets_mapping=True)
    theirs = minilm_fast([text], return_offsets_mapping=True)
    assert ours["input_ids"] == theirs["input_ids"]
    assert list(map(list, ours["offset_mapping"][0])) == list(map(list, theirs["offset_mapping"][0]))
    assert ours.word_ids(0) == theirs.word_ids(0)


@pytest.mark.parametrize("text", HARD_CASES.values(), ids=HARD_CASES.keys())
def test_matches_python_reference_on_hard_cases(minilm, minilm_dir, text):
    reference = reference_tokenizer(minilm_dir / "vocab.txt", do_lower_case=True)
    assert minilm.tokenize(text) == reference.tokenize(text)


def test_word_final_sigma_follows_the_rust_engine(minilm, minilm_fast, minilm_dir):
    # A documented difference: Python's str.lower() gives a word-final "ς", the engine "σ".
    text = "ΟΔΟΣ"
    assert minilm.tokenize(text) == minilm_fast.tokenize(text)
    assert minilm.tokenize(text) != reference_tokenizer(minilm_dir / "vocab.txt", True).tokenize(text)


@pytest.mark.parametrize("max_length", [5, 8, 12, 20])
def test_pairs_truncate_longest_first_like_bert_fast(minilm, minilm_fast, max_length):
    firsts, seconds = zip(*PAIRS)
    ours = minilm(list(firsts), list(seconds), max_length=max_length)
    theirs = minilm_fast(
        list(firsts),
        list(seconds),
        max_length=max_length,
        truncation="longest_first",
        padding=True,
        return_tensors="pt",
    )
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(ours[key], theirs[key]), key
    assert ours["input_ids"].shape[1] <= max_length


# --- Parity with the pure-Python reference on a vocabulary we train ------------------------


@pytest.mark.slow
def test_trained_vocab_matches_python_reference_on_every_wikitext_line(trained, wiki_lines):
    tokenizer, out_dir = trained
    reference = reference_tokenizer(out_dir / "vocab.txt", do_lower_case=tokenizer.do_lower_case)
    theirs = reference(wiki_lines)["input_ids"]
    assert_same_ids(ids_of(tokenizer, wiki_lines), theirs, wiki_lines, tokenizer)


def test_trained_vocab_layout(trained):
    tokenizer, _ = trained
    assert tokenizer.vocab_size == len(tokenizer) == 8000
    assert tokenizer.convert_ids_to_tokens(list(range(5))) == list(SPECIAL_TOKENS)
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id) == (0, 1, 2)
    assert (tokenizer.sep_token_id, tokenizer.mask_token_id) == (3, 4)
    assert tokenizer.special_token_ids == {0, 1, 2, 3, 4}


@pytest.mark.slow
def test_training_is_deterministic(data_dir, tmp_path):
    corpus = [data_dir / WIKI_VALID]
    first = train_tokenizer(corpus, vocab_size=2000, out_dir=tmp_path / "a")
    second = train_tokenizer(corpus, vocab_size=2000, out_dir=tmp_path / "b")
    assert first.convert_ids_to_tokens(range(2000)) == second.convert_ids_to_tokens(range(2000))


def test_training_reads_folders_recursively(tmp_path):
    (tmp_path / "corpus" / "nested").mkdir(parents=True)
    (tmp_path / "corpus" / "a.txt").write_text("apple banana\n" * 50, encoding="utf-8")
    (tmp_path / "corpus" / "nested" / "b.raw").write_text("cherry durian\n" * 50, encoding="utf-8")
    (tmp_path / "corpus" / "ignored.json").write_text("zzzzqqqq\n" * 50, encoding="utf-8")
    tokenizer = train_tokenizer([tmp_path / "corpus"], vocab_size=MIN_VOCAB_SIZE)
    assert tokenizer.tokenize("apple cherry") == ["apple", "cherry"]
    assert "zzzzqqqq" not in tokenizer.tokenize("zzzzqqqq")


# --- Hangul policy ---------------------------------------------------------------------------


def test_bert_mode_splits_hangul_into_jamo_and_strips_accents(minilm):
    assert not minilm.keep_hangul
    assert minilm.normalize("안녕하세요 Café") == unicodedata.normalize("NFD", "안녕하세요") + " cafe"


def test_keep_hangul_keeps_syllables_and_strips_accents():
    tokenizer = Tokenizer(list(SPECIAL_TOKENS), keep_hangul=True)
    assert tokenizer.normalize("안녕하세요 Café Ångström") == "안녕하세요 cafe angstrom"
    assert tokenizer.normalize(unicodedata.normalize("NFD", "한국어")) == "한국어"


def test_keep_hangul_changes_nothing_when_case_and_accents_are_kept():
    tokenizer = Tokenizer(list(SPECIAL_TOKENS), do_lower_case=False, keep_hangul=True)
    assert tokenizer.normalize("안녕 Café") == "안녕 Café"


@pytest.mark.slow
def test_keep_hangul_equals_bert_on_text_without_hangul(wiki_lines):
    bert = Tokenizer(list(SPECIAL_TOKENS))
    keep = Tokenizer(list(SPECIAL_TOKENS), keep_hangul=True)
    texts = wiki_lines + [text for name, text in HARD_CASES.items() if name != "korean"]
    assert [keep.normalize(t) for t in texts] == [bert.normalize(t) for t in texts]


def test_trained_korean_vocab_uses_syllables_and_round_trips(korean):
    tokenizer, _ = korean
    assert tokenizer.keep_hangul
    text = "안녕하세요 세계"
    tokens = tokenizer.tokenize(text)
    assert "[UNK]" not in tokens
    assert all("\uac00" <= char <= "\ud7a3" for token in tokens for char in token.removeprefix("##"))
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_bert_mode_korean_round_trips_up_to_nfc(minilm):
    text = "안녕하세요"
    assert unicodedata.normalize("NFC", minilm.decode(minilm.encode(text))) == text


# --- Saving and loading -----------------------------------------------------------------------


@pytest.mark.slow
def test_save_and_reload_gives_identical_ids(trained, wiki_lines):
    tokenizer, out_dir = trained
    reloaded = Tokenizer.from_pretrained(out_dir)
    assert repr(reloaded) == repr(tokenizer)
    assert ids_of(reloaded, wiki_lines) == ids_of(tokenizer, wiki_lines)


def test_saved_files(trained):
    tokenizer, out_dir = trained
    config = json.loads((out_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["do_lower_case"] == tokenizer.do_lower_case
    assert config["keep_hangul"] is True
    special_tokens = json.loads((out_dir / "special_tokens_map.json").read_text(encoding="utf-8"))
    assert special_tokens["mask_token"] == "[MASK]"
    assert (out_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")[:5] == list(SPECIAL_TOKENS)
    pipeline = json.loads((out_dir / "tokenizer.json").read_text(encoding="utf-8"))
    assert pipeline["padding"] is None and pipeline["truncation"] is None


@pytest.mark.slow
def test_transformers_loads_the_trained_tokenizer(trained, wiki_lines):
    tokenizer, out_dir = trained
    theirs = transformers.AutoTokenizer.from_pretrained(out_dir)
    assert_same_ids(ids_of(tokenizer, wiki_lines), theirs(wiki_lines)["input_ids"], wiki_lines, tokenizer)
    first, second = PAIRS[0]
    ours = tokenizer(first, second, return_tensors=None)
    assert {key: theirs(first, second)[key] for key in ours} == {key: rows[0] for key, rows in ours.items()}


def test_transformers_loads_the_korean_tokenizer(korean):
    tokenizer, out_dir = korean
    texts = ["안녕하세요 세계", "서울에서 만나요! Café"]
    theirs = transformers.AutoTokenizer.from_pretrained(out_dir)
    assert theirs(texts)["input_ids"] == ids_of(tokenizer, texts)


def test_resaving_a_bert_checkpoint_keeps_it_identical(minilm, minilm_dir, tmp_path, wiki_lines):
    minilm.save_pretrained(tmp_path)
    assert (tmp_path / "vocab.txt").read_bytes() == (minilm_dir / "vocab.txt").read_bytes()
    texts = wiki_lines[:200] + list(HARD_CASES.values())
    assert ids_of(Tokenizer.from_pretrained(tmp_path), texts) == ids_of(minilm, texts)
    theirs = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    assert theirs(texts)["input_ids"] == ids_of(minilm, texts)


def test_ignores_padding_in_a_shipped_tokenizer_json(minilm, minilm_dir):
    # The MiniLM folder's tokenizer.json pads every row to 128.
    assert json.loads((minilm_dir / "tokenizer.json").read_text(encoding="utf-8"))["padding"] is not None
    assert len(minilm.encode("hello world")) == 4


# --- The encoded batch ---------------------------------------------------------------------------


def test_worked_example_from_the_docstring():
    tokenizer = Tokenizer([*SPECIAL_TOKENS, "un", "##aff", "##able"])
    assert tokenizer.tokenize("unaffable") == ["un", "##aff", "##able"]
    assert tokenizer.tokenize("unaffablex") == ["[UNK]"]


def test_padding_to_longest_gives_long_tensors_and_keeps_rows_unchanged(minilm):
    texts = ["a short one", "a somewhat longer sentence with more words in it", ""]
    batch = minilm(texts)
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask"}
    for value in batch.values():
        assert value.dtype == torch.long and value.shape == batch["input_ids"].shape
    for row, text in enumerate(texts):
        alone = minilm.encode(text)
        assert batch["input_ids"][row, : len(alone)].tolist() == alone
        assert batch["attention_mask"][row].sum().item() == len(alone)
        assert set(batch["input_ids"][row, len(alone) :].tolist()) <= {minilm.pad_token_id}


def test_padding_to_max_length_and_truncation(minilm):
    batch = minilm(["one two three four five six seven", "one"], max_length=6, padding="max_length")
    assert batch["input_ids"].shape == (2, 6)
    assert batch["input_ids"][0, -1].item() == minilm.sep_token_id
    assert batch["attention_mask"][1].tolist() == [1, 1, 1, 0, 0, 0]


def test_no_padding_gives_lists(minilm):
    batch = minilm(["one", "one two"], padding=False)
    assert batch["input_ids"] == [minilm.encode("one"), minilm.encode("one two")]


def test_single_text_is_a_batch_of_one(minilm):
    assert minilm("hello")["input_ids"].tolist() == [minilm.encode("hello")]


def test_alignment_for_tagging_and_question_answering(minilm):
    question, context = "Who?", "Ada Lovelace wrote it."
    batch = minilm(question, context, return_offsets_mapping=True)
    tokens = batch.tokens(0)
    sequence_ids = batch.sequence_ids(0)
    assert tokens[0] == "[CLS]" and sequence_ids[0] is None and batch.word_ids(0)[0] is None
    first_sep = tokens.index("[SEP]")
    assert batch["token_type_ids"][0].tolist() == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
    for token, sequence, (start, end) in zip(tokens, sequence_ids, batch["offset_mapping"][0].tolist()):
        if sequence is None:
            assert (start, end) == (0, 0)
        else:
            text = (question, context)[sequence]
            assert text[start:end].lower() == token.removeprefix("##")


def test_special_tokens_are_never_split(minilm):
    ids = minilm.encode("hello [MASK] world", add_special_tokens=False)
    assert minilm.mask_token_id in ids
    assert minilm.special_token_ids == {0, 100, 101, 102, 103}


def test_token_and_id_conversion(minilm):
    tokens = minilm.tokenize("unaffable tokenizer")
    assert minilm.convert_ids_to_tokens(minilm.convert_tokens_to_ids(tokens)) == tokens
    assert minilm.convert_tokens_to_ids("not-a-token") == minilm.unk_token_id
    assert minilm.convert_ids_to_tokens(minilm.cls_token_id) == "[CLS]"


def test_decode_round_trip(minilm):
    text = "hello, world! this is a small test of decoding."
    ids = minilm.encode(text)
    assert minilm.decode(ids) == text
    assert minilm.decode(torch.tensor(ids)) == text
    assert minilm.decode(ids, skip_special_tokens=False) == f"[CLS] {text} [SEP]"


def test_max_length_too_small_for_special_tokens(minilm):
    with pytest.raises(UserError, match="max_length=2"):
        minilm("question", "context", max_length=2)


# --- User errors --------------------------------------------------------------------------------


def test_missing_folder(tmp_path):
    with pytest.raises(UserError, match="not-there"):
        Tokenizer.from_pretrained(tmp_path / "not-there")


def test_missing_vocab_file(tmp_path):
    with pytest.raises(UserError, match="vocab.txt"):
        Tokenizer.from_pretrained(tmp_path)


def test_empty_vocab(tmp_path):
    (tmp_path / "vocab.txt").write_bytes(b"")
    with pytest.raises(UserError, match=r"vocab\.txt: the vocabulary is empty"):
        Tokenizer.from_pretrained(tmp_path)


def test_vocab_without_special_tokens(tmp_path):
    write_vocab(tmp_path / "vocab.txt", ["[PAD]", "[UNK]", "hello"])
    with pytest.raises(UserError, match=r"vocab\.txt: .*lacks the special tokens \[CLS\] \[SEP\] \[MASK\]"):
        Tokenizer.from_pretrained(tmp_path)


def test_duplicate_vocab_entry(tmp_path):
    write_vocab(tmp_path / "vocab.txt", [*SPECIAL_TOKENS, "hello", "world", "hello"])
    with pytest.raises(UserError, match=r"vocab\.txt:8: duplicate token 'hello' \(first on line 6\)"):
        Tokenizer.from_pretrained(tmp_path)


def test_vocab_not_utf8(tmp_path):
    (tmp_path / "vocab.txt").write_bytes("\n".join(SPECIAL_TOKENS).encode() + b"\ncaf\xe9\n")
    with pytest.raises(UserError, match=r"vocab\.txt:6: not valid UTF-8"):
        Tokenizer.from_pretrained(tmp_path)


def test_bad_tokenizer_config(tmp_path):
    write_vocab(tmp_path / "vocab.txt", SPECIAL_TOKENS)
    (tmp_path / "tokenizer_config.json").write_text('{\n  "do_lower_case": "yes"\n}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"tokenizer_config\.json: field 'do_lower_case' must be true or false"):
        Tokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{\n  "do_lower_case": true,\n}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"tokenizer_config\.json:3: invalid JSON"):
        Tokenizer.from_pretrained(tmp_path)


def test_training_on_a_missing_path(tmp_path):
    with pytest.raises(UserError, match="nowhere.txt: no such file or folder"):
        train_tokenizer([tmp_path / "nowhere.txt"], vocab_size=1000)


def test_training_on_a_folder_without_text_files(tmp_path):
    (tmp_path / "notes.md").write_text("hello\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"folder holds no corpus files"):
        train_tokenizer([tmp_path], vocab_size=1000)


def test_training_on_an_empty_corpus(tmp_path):
    corpus = tmp_path / "blank.txt"
    corpus.write_text("\n   \n\t\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"blank\.txt: the corpus has no text"):
        train_tokenizer([corpus], vocab_size=1000)


def test_training_on_a_file_that_is_not_utf8(tmp_path):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes(b"first line\nsecond line\ncaf\xe9 au lait\n")
    with pytest.raises(UserError, match=r"latin1\.txt:3: not valid UTF-8.*--skip-bad-lines skips such lines"):
        train_tokenizer([corpus], vocab_size=1000)


def test_training_skips_bad_lines_and_counts_them_once(tmp_path):
    """skip_bad_lines drops the line from both passes over the corpus, and it is counted once."""
    good = [f"line {i} of lobsters and crustaceans, number {i % 7}" for i in range(60)]
    (tmp_path / "clean.txt").write_text("\n".join(good) + "\n", encoding="utf-8")
    (tmp_path / "bad.txt").write_bytes(("\n".join(good[:30]) + "\ncaf\xe9 fran\xe7ais\n").encode("latin-1")
                                       + ("\n".join(good[30:]) + "\n").encode("utf-8"))
    with pytest.raises(UserError, match=r"bad\.txt:31: not valid UTF-8"):
        train_tokenizer([tmp_path / "bad.txt"], vocab_size=MIN_VOCAB_SIZE + 50)
    stats = ReadStats()
    skipped = train_tokenizer([tmp_path / "bad.txt"], vocab_size=MIN_VOCAB_SIZE + 50, skip_bad_lines=True,
                              stats=stats)
    assert (stats.files, stats.skipped_lines) == (1, 1)
    clean = train_tokenizer([tmp_path / "clean.txt"], vocab_size=MIN_VOCAB_SIZE + 50)
    assert skipped.convert_ids_to_tokens(list(range(skipped.vocab_size))) == clean.convert_ids_to_tokens(
        list(range(clean.vocab_size)))


def test_words_over_100_characters_become_unk_as_in_transformers():
    """MAX_INPUT_CHARS_PER_WORD is transformers' 100, not the 200 of Google's tokenization.py:
    a word of 150 characters is [UNK] here (Google's would split it)."""
    tokenizer = Tokenizer([*SPECIAL_TOKENS, "a", "##a"])
    assert tokenizer.tokenize("a" * 100) == ["a"] + ["##a"] * 99
    assert tokenizer.tokenize("a" * 150) == ["[UNK]"]


def test_training_with_too_small_a_vocab(tmp_path):
    corpus = tmp_path / "hanzi.txt"
    corpus.write_text("".join(chr(0x4E00 + i) for i in range(300)) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=f"vocab_size={MIN_VOCAB_SIZE - 1} is too small"):
        train_tokenizer([corpus], vocab_size=MIN_VOCAB_SIZE - 1)
    with pytest.raises(UserError, match="its alphabet alone"):
        train_tokenizer([corpus], vocab_size=200, min_frequency=1)
