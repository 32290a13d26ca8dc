"""Static word vectors beside an encoder's pieces (ELMo's [x_k; ELMo_k]): words put back together
from WordPiece and unigram pieces, each piece given its word's vector, and the head reading them."""

import pytest
import torch

from bertology.models.features import FeatureHead, HeadConfig, PieceWordVectors
from bertology.models.static import StaticConfig, StaticVectors

WORDS = ["river", "bank", "unaffable", "o'brien"]


def vectors() -> StaticVectors:
    table = torch.arange(len(WORDS) * 3, dtype=torch.float32).view(len(WORDS), 3) + 1  # row i: word i, no zeros
    return StaticVectors(StaticConfig("word2vec", 3, lowercase=True), WORDS, table)


def row(static: StaticVectors, word: str) -> torch.Tensor:
    return static.vectors[static.index[word]]


def test_wordpiece_pieces_are_joined_into_words_and_share_their_vector():
    pieces = ["[PAD]", "[CLS]", "[SEP]", "river", "bank", "un", "##aff", "##able", "o", "'", "brien", ",", "zebra"]
    lookup = PieceWordVectors(vectors(), pieces, "wordpiece", special_ids=[0, 1, 2])
    ids = [1, 3, 4, 5, 6, 7, 11, 12, 2]  # [CLS] river bank un ##aff ##able , zebra [SEP]
    assert lookup.words(ids) == [None, "river", "bank", "unaffable", "unaffable", "unaffable", ",", "zebra", None]
    out = lookup(torch.tensor([ids, [1, 4, 2, 0, 0, 0, 0, 0, 0]]))  # (2, 9, 3); the second row padded
    assert out.shape == (2, 9, 3)
    static = lookup.vectors
    assert torch.equal(out[0, 1], row(static, "river")) and torch.equal(out[0, 2], row(static, "bank"))
    for t in (3, 4, 5):  # every piece of "unaffable" gets the whole word's vector
        assert torch.equal(out[0, t], row(static, "unaffable"))
    # special tokens, punctuation (no word for the static tokenizer), an unknown word, padding: zeros
    for b, t in [(0, 0), (0, 6), (0, 7), (0, 8), (1, 0), (1, 2), (1, 5)]:
        assert not out[b, t].any(), (b, t)
    assert torch.equal(out[1, 1], row(static, "bank"))


def test_unigram_pieces_begin_a_word_at_the_space_mark_and_words_are_looked_up_lower_cased():
    pieces = ["<pad>", "\u2581River", "\u2581ba", "nk", "\u2581O", "'", "Brien", "\u2581"]
    lookup = PieceWordVectors(vectors(), pieces, "unigram", special_ids=[0])
    ids = [1, 2, 3, 4, 5, 6]
    assert lookup.words(ids) == ["River", "bank", "bank", "O'Brien", "O'Brien", "O'Brien"]
    out = lookup(torch.tensor([ids]))[0]
    assert torch.equal(out[0], row(lookup.vectors, "river")) and torch.equal(out[2], row(lookup.vectors, "bank"))
    assert torch.equal(out[5], row(lookup.vectors, "o'brien"))


def test_a_word_the_static_tokenizer_splits_gets_the_mean_of_its_words():
    lookup = PieceWordVectors(vectors(), ["river-bank"], "wordpiece", special_ids=[])
    expected = (row(lookup.vectors, "river") + row(lookup.vectors, "bank")) / 2
    assert torch.allclose(lookup(torch.tensor([[0]]))[0, 0], expected)


def test_the_lookup_saves_and_loads_with_its_pieces(tmp_path):
    pieces = ["[CLS]", "river", "##s", "bank"]
    lookup = PieceWordVectors(vectors(), pieces, "wordpiece", special_ids=[0])
    lookup.save_pretrained(tmp_path / "wv")
    again = PieceWordVectors.from_pretrained(tmp_path / "wv")
    ids = torch.tensor([[0, 1, 2, 3]])
    assert again.pieces == pieces and again.special_ids == {0} and torch.equal(again(ids), lookup(ids))


def test_the_head_puts_the_word_vectors_in_front_and_requires_them():
    config = HeadConfig("token", [0], "sum", width=4, num_labels=2, word_vector_size=3)
    head = FeatureHead(config)
    assert head.classifier.in_features == 7
    features, mask, words = torch.randn(2, 5, 4), torch.ones(2, 5, dtype=torch.long), torch.randn(2, 5, 3)
    logits = head.eval()(features, mask, words)
    expected = torch.cat([words, features], -1) @ head.classifier.weight.T + head.classifier.bias
    assert torch.allclose(logits, expected, atol=1e-6)
    with pytest.raises(ValueError, match="word vectors"):
        head(features, mask)
