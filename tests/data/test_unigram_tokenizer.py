"""The unigram vocabulary (SentencePiece's, T5's): trained the same on every run, T5's sentinels,
saved and loaded by bertology and by transformers with the same ids, and its bad inputs."""

import json
import math

import pytest
import transformers

from bertology.cli import main
from bertology.data.tokenizer import SPECIAL_TOKENS, Tokenizer, train_tokenizer
from bertology.errors import UserError
from bertology.ops import IGNORE_INDEX
from bertology.tasks.inputs import InputSettings, encode_tokens
from bertology.tasks.readers import TASKS, TokenExample

WIKI_VALID = "wikitext-2-raw/wiki.valid.raw"
TEXTS = ["The Eiffel Tower, completed in 1889, is 330 metres tall.", "Café résumé — №5 Élan",
         "  spaces   and\ttabs\nnewlines  ", "東京タワー and 서울", "<extra_id_0> is a sentinel [MASK]"]


@pytest.fixture(scope="module")
def unigram(data_dir, tmp_path_factory):
    """A 3,000-piece unigram vocabulary with T5's 100 sentinels, trained on WikiText-2 valid; (tokenizer, folder)."""
    out = tmp_path_factory.mktemp("unigram")
    return train_tokenizer([data_dir / WIKI_VALID], vocab_size=3000, model="unigram", sentinels=100, out_dir=out), out


def test_the_same_vocabulary_and_scores_on_every_run(unigram, data_dir):
    first, _ = unigram
    again = train_tokenizer([data_dir / WIKI_VALID], vocab_size=3000, model="unigram", sentinels=100)
    ids = list(range(first.vocab_size))
    assert again.convert_ids_to_tokens(ids) == first.convert_ids_to_tokens(ids) and again.scores == first.scores


def test_layout_special_tokens_first_sentinels_last_in_t5_order(unigram):
    tokenizer, _ = unigram
    assert tokenizer.vocab_size == 3000 and tokenizer.model == "unigram"
    assert tokenizer.convert_ids_to_tokens(list(range(5))) == list(SPECIAL_TOKENS)
    sentinels = tokenizer.sentinel_token_ids
    assert sentinels == list(range(2999, 2899, -1))  # <extra_id_0> is the last id, as in T5
    assert tokenizer.convert_ids_to_tokens(sentinels[:2]) == ["<extra_id_0>", "<extra_id_1>"]
    assert set(sentinels) <= tokenizer.special_token_ids
    learned = tokenizer.scores[5:2900]
    assert all(score < 0 for score in learned) and learned == sorted(learned, reverse=True)
    assert math.isclose(sum(math.exp(s) for s in learned), 1.0, abs_tol=0.05)  # log probabilities


def test_segmentation_is_the_most_probable_and_decoding_restores_the_text(unigram):
    tokenizer, _ = unigram
    pieces = tokenizer.tokenize("the tower was completed in 1889")
    assert pieces[0] == "▁the" and "▁tower" in pieces and all(p.startswith("▁") or "▁" not in p for p in pieces)
    for text in TEXTS[:3]:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == " ".join(tokenizer.normalize(text).split())
    assert tokenizer.normalize("Straße №5") == "straße no5"  # NFKC, then lowercase
    # a character the corpus never had is [UNK] (no byte fallback, as T5's vocabulary)
    assert tokenizer.encode("ß", add_special_tokens=False) == [tokenizer.convert_tokens_to_ids("▁"), tokenizer.unk_token_id]
    # sentinels and the special tokens are never split
    ids = tokenizer.encode(TEXTS[4], add_special_tokens=False)
    assert tokenizer.sentinel_token_ids[0] in ids and tokenizer.mask_token_id in ids
    assert tokenizer.encode("hello")[0] == tokenizer.cls_token_id and tokenizer.encode("hello")[-1] == tokenizer.sep_token_id


def test_saved_folder_loads_here_and_in_transformers_with_the_same_ids(unigram):
    tokenizer, folder = unigram
    again = Tokenizer.from_pretrained(folder)
    assert again.model == "unigram" and again.scores == tokenizer.scores
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    for text in TEXTS:
        assert again.encode(text) == tokenizer.encode(text) == theirs(text)["input_ids"], text
    assert theirs.convert_tokens_to_ids("<extra_id_0>") == tokenizer.sentinel_token_ids[0]


def test_command_line_trains_a_unigram_vocabulary_with_sentinels(data_dir, tmp_path, capsys):
    assert main(["tokenizer", "train", "--corpus", str(data_dir / WIKI_VALID), "--out", str(tmp_path), "--model", "unigram",
                 "--vocab-size", "1000", "--sentinels", "100"]) == 0
    assert "uncased unigram vocabulary of 1000 tokens" in capsys.readouterr().out
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_model"] == "unigram" and len(config["extra_special_tokens"]) == 100


def test_bad_inputs_are_one_line_errors(data_dir, tmp_path, unigram):
    with pytest.raises(UserError, match="too small: use at least 128 besides the 100 sentinels"):
        train_tokenizer([data_dir / WIKI_VALID], vocab_size=200, model="unigram", sentinels=100)
    with pytest.raises(UserError, match="one score per token"):
        Tokenizer(list(SPECIAL_TOKENS) + ["a"], scores=[0.0])
    _, folder = unigram
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer_config.json").write_text((folder / "tokenizer_config.json").read_text())
    with pytest.raises(UserError, match="tokenizer.json: not found"):
        Tokenizer.from_pretrained(broken)
    (broken / "tokenizer.json").write_text('{"model": {"type": "WordPiece", "vocab": {}}}')
    with pytest.raises(UserError, match="expected a Unigram model"):
        Tokenizer.from_pretrained(broken)
    (broken / "tokenizer_config.json").write_text('{"tokenizer_model": "bpe"}')
    with pytest.raises(UserError, match="'tokenizer_model' must be wordpiece or unigram"):
        Tokenizer.from_pretrained(broken)


def test_tagging_labels_every_word_once_on_its_first_piece(unigram):
    # A unigram piece "▁word" starts at the space before its word: mapped by its start, every
    # word after the first lost its label to the word before.
    tokenizer, _ = unigram
    words = ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]
    tags = ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]
    spec = TASKS["conll2003"]
    (feature,) = encode_tokens(spec, [TokenExample("0", words, tags, "x:1")], tokenizer, InputSettings()).features
    labelled = [(t, w) for t, w in enumerate(feature.word_ids) if w is not None]
    assert [w for _, w in labelled] == list(range(len(words)))
    assert [spec.labels[label] for label in feature.token_labels if label != IGNORE_INDEX] == tags
    # each label sits on a piece of its own word: the piece's last character is inside the word
    offsets = tokenizer([" ".join(words)], return_tensors=None, return_offsets_mapping=True)["offset_mapping"][0]
    starts = [sum(len(word) + 1 for word in words[:k]) for k in range(len(words))]
    for t, w in labelled:
        assert starts[w] <= offsets[t][1] - 1 < starts[w] + len(words[w]), (t, w, offsets[t])
