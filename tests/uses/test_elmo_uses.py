"""ELMo's biLM where BERT's features are used: `embed` and `explain senses` (its three layers, and
its character CNN's token layer as the context-free view); `explain attention` refuses it."""

import numpy as np
import pytest
import torch
from helpers import save_tiny_elmo

from bertology import Tokenizer, UserError
from bertology.inference.embedding import embed_texts, load_encoder
from bertology.models.elmo import ELMoModel
from bertology.uses.explain import DEFAULT_SENTENCES, explain_attention, sense_vectors


@pytest.fixture(scope="module")
def tiny_elmo(tmp_path_factory, minilm_dir):
    """A random tiny biLM with MiniLM's vocabulary, its character ids filled in."""
    return save_tiny_elmo(tmp_path_factory.mktemp("tiny_elmo"), Tokenizer.from_pretrained(minilm_dir))


def test_embed_pools_elmos_layers(tiny_elmo):
    model, tokenizer = load_encoder(tiny_elmo, device="cpu")
    assert isinstance(model.stack, ELMoModel)
    texts = ["the river bank flooded", "a bank raised its rates again"]
    vectors = embed_texts(model, tokenizer, texts, layers="sum_all", pooling="mean", precision="fp32")
    assert vectors.shape == (2, 32)  # both directions' 16 side by side
    ids = torch.tensor([tokenizer.encode(texts[1])])
    with torch.no_grad():
        expected = torch.stack(model(ids).hidden_states).sum(0)[0].mean(0)
    np.testing.assert_allclose(vectors[1], expected.numpy(), rtol=1e-5, atol=1e-6)


def test_senses_use_elmos_token_layer_as_the_context_free_view(tiny_elmo, tmp_path):
    model, tokenizer = load_encoder(tiny_elmo, device="cpu")
    vectors = sense_vectors(model, tokenizer, "bank", DEFAULT_SENTENCES["bank"], layer="last")
    assert vectors.contextual.shape == (16, 32)
    assert all(np.array_equal(row, vectors.static[0]) for row in vectors.static)  # one token-layer vector everywhere
    assert not all(np.allclose(row, vectors.contextual[0]) for row in vectors.contextual)
    with pytest.raises(UserError, match="ELMo biLM .* has no attention maps to draw"):
        explain_attention(str(tiny_elmo), "the bank", tmp_path / "a.png")


def test_word_vectors_from_each_direction_where_it_has_read_the_whole_word(tiny_elmo, tiny_model):
    from bertology.inference.embedding import embed_tokens

    model, tokenizer = load_encoder(tiny_elmo, device="cpu")
    text = "unaffable bankers"
    pieces = tokenizer.tokenize(text)
    assert len(pieces) > 2  # a word of several pieces, so "ends" differs from "first"
    (found,) = embed_tokens(model, tokenizer, [text], word_pieces="ends", precision="fp32")
    (every,) = embed_tokens(model, tokenizer, [text], word_pieces="none", precision="fp32")
    first_word = pieces.index(next(p for p in pieces[1:] if not p.startswith("##"))) - 1  # its last piece
    np.testing.assert_allclose(found.vectors[0, :16], every.vectors[first_word, :16])  # forward: after "unaffable"
    np.testing.assert_allclose(found.vectors[0, 16:], every.vectors[0, 16:])  # backward: at its first piece
    np.testing.assert_allclose(found.vectors[1, :16], every.vectors[-1, :16])
    bert, bert_tokenizer = load_encoder(tiny_model, device="cpu")
    with pytest.raises(UserError, match="'ends' takes each direction of a biLM"):
        embed_tokens(bert, bert_tokenizer, [text], word_pieces="ends")
