"""CoVe's translation model (models/cove.py): shapes, padding invariance, save/load, and the searches
(beam 1 is greedy; a beam wide enough to keep every hypothesis finds the brute-force best)."""

import itertools
import json
import math

import pytest
import torch

from bertology.errors import UserError
from bertology.models import family_of
from bertology.models.base import load_pretrained
from bertology.models.cove import (
    SOURCE_SPECIALS,
    TARGET_SPECIALS,
    CoVeConfig,
    CoVeForTranslation,
    CoVeModel,
    detokenize,
    target_tokens,
)

ENGLISH = ["a", "man", "dog", "runs", "on", "grass", "red", "big"]
GERMAN = ["ein", "Mann", "Hund", "rennt", "."]


def tiny_model(seed: int = 0, german: list[str] = GERMAN, scale: float = 1.0, **overrides) -> CoVeForTranslation:
    """A random tiny model (8-d vectors, 6 per direction) over ENGLISH and `german`; eval mode.
    `scale` multiplies the output layer, making its distributions peakier or flatter."""
    torch.manual_seed(seed)
    config = CoVeConfig.from_preset("tiny", input_size=8, hidden_size=6, target_embedding_size=5,
                                    source_vocab_size=len(SOURCE_SPECIALS) + len(ENGLISH),
                                    decoder_vocab_size=len(TARGET_SPECIALS) + len(german), **overrides)
    model = CoVeForTranslation(config, [*SOURCE_SPECIALS, *ENGLISH], [*TARGET_SPECIALS, *german])
    with torch.no_grad():
        model.encoder.source_vectors[len(SOURCE_SPECIALS):] = torch.randn(len(ENGLISH), 8)
        model.decoder.output.weight.mul_(scale)
    return model.eval()


SENTENCES = [["a", "man", "runs"], ["a", "big", "red", "dog", "runs", "on", "grass"], ["Dog", "unseen"]]


def test_shapes_of_the_decoder_logits_and_the_features():
    model = tiny_model()
    ids, mask = model.source_ids(SENTENCES)
    assert ids.shape == mask.shape == (3, 7)
    assert ids[2, :2].tolist() == [model.source_index["dog"], 1]  # lower-cased like the vectors; unknown is <unk>
    decoder_ids, labels = model.target_ids([["ein", "Mann"], ["Hund", "rennt", "."], ["nie"]])
    assert decoder_ids.shape == labels.shape == (3, 4)
    assert decoder_ids[0].tolist() == [1, 4, 5, 0] and labels[0].tolist() == [4, 5, 2, -100]
    assert labels[2, :2].tolist() == [3, 2]  # an unknown German word is <unk>
    out = model(ids, mask, decoder_ids, labels)
    assert out.logits.shape == (3, 4, model.config.decoder_vocab_size) and out.loss.ndim == 0
    features = CoVeModel(model.config, model.source_words, model.target_words)
    features.load_state_dict(model.state_dict(), strict=False)
    values, real = features.eval()(SENTENCES)
    assert values.shape == (3, 7, 8 + 2 * 6) == (3, 7, features.hidden_size) and real.sum() == 12
    assert torch.equal(values[1, :, :8], model.encoder.source_vectors[ids[1]])  # [GloVe; CoVe]: GloVe first
    assert values[0, 3:].abs().sum() == 0 and values[2, 1, :8].abs().sum() == 0  # padding, an unknown word


def test_padding_does_not_change_the_encoder_at_real_words():
    model = tiny_model()
    alone_ids, alone_mask = model.source_ids([SENTENCES[0]])
    batch_ids, batch_mask = model.source_ids(SENTENCES)
    _, alone, alone_state = model.encoder(alone_ids, alone_mask)
    _, batch, batch_state = model.encoder(batch_ids, batch_mask)
    assert torch.allclose(alone[0], batch[0, :3], atol=1e-6)
    assert batch[0, 3:].abs().sum() == 0
    for (h1, c1), (h2, c2) in zip(alone_state, batch_state):  # the decoder starts from the same state
        assert torch.allclose(h1[0], h2[0], atol=1e-6) and torch.allclose(c1[0], c2[0], atol=1e-6)
    assert model.greedy_search(alone_ids, alone_mask, 6)[0] == model.greedy_search(batch_ids, batch_mask, 6)[0]


def test_saved_and_reloaded_models_give_identical_outputs(tmp_path):
    model = tiny_model()
    ids, mask = model.source_ids(SENTENCES)
    decoder_ids, labels = model.target_ids([["ein"], ["Hund", "rennt"], ["."]])
    model.save_pretrained(tmp_path / "mt")
    assert family_of(tmp_path / "mt").name == "cove"
    loaded = load_pretrained(tmp_path / "mt")
    assert isinstance(loaded, CoVeForTranslation) and loaded.target_words == model.target_words
    assert torch.equal(loaded(ids, mask, decoder_ids).logits, model(ids, mask, decoder_ids).logits)
    features = CoVeModel.from_pretrained(tmp_path / "mt")  # the decoder left out
    features.save_pretrained(tmp_path / "features")
    reloaded = load_pretrained(tmp_path / "features")
    assert isinstance(reloaded, CoVeModel)
    assert torch.equal(reloaded(SENTENCES)[0], features(SENTENCES)[0])
    assert json.loads((tmp_path / "features" / "config.json").read_text())["architectures"] == ["CoVeModel"]


def test_a_damaged_directory_is_a_one_line_error(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    words = tmp_path / "target_words.txt"
    words.write_text(words.read_text().replace("Mann\n", ""))
    with pytest.raises(UserError, match=r"target_words.txt: 8 words, but .*decoder_vocab_size 9") as error:
        load_pretrained(tmp_path)
    assert "\n" not in str(error.value)
    with pytest.raises(UserError, match="'hidden_size' must be a positive integer"):
        CoVeConfig(hidden_size=0)
    with pytest.raises(UserError, match="unknown preset"):
        CoVeConfig.from_preset("huge")


def test_beam_search_of_width_one_is_greedy_search():
    for seed in range(3):
        model = tiny_model(seed, scale=3.0)
        ids, mask = model.source_ids(SENTENCES)
        assert model.beam_search(ids, mask, 1, 8) == model.greedy_search(ids, mask, 8)


def normalized(model, ids, mask, hypothesis: list[int], max_length: int) -> float:
    """A hypothesis's score as beam search ranks them: log-probability / length (</s> counted)."""
    finished = len(hypothesis) < max_length
    total = model.sequence_log_prob(ids, mask, [hypothesis], [finished])
    return float(total) / (len(hypothesis) + finished)


def test_a_beam_that_keeps_every_hypothesis_finds_the_brute_force_best():
    max_length = 3
    model = tiny_model(1, german=["ein", "Hund"], scale=2.0)  # 4 tokens a hypothesis can use: </s> <unk> ein Hund
    usable = [2, 3, 4, 5]
    for sentence in SENTENCES:
        ids, mask = model.source_ids([sentence])
        candidates = [list(words) for n in range(max_length) for words in itertools.product(usable[1:], repeat=n)]
        candidates += [list(words) for words in itertools.product(usable[1:], repeat=max_length)]  # never finished
        scores = {tuple(c): normalized(model, ids, mask, c, max_length) for c in candidates}
        beam = model.beam_search(ids, mask, len(usable) ** max_length, max_length)[0]
        greedy = model.greedy_search(ids, mask, max_length)[0]
        assert scores[tuple(beam)] == pytest.approx(max(scores.values()), abs=1e-5)
        assert scores[tuple(beam)] >= scores[tuple(greedy)] - 1e-6


class TableDecoder(torch.nn.Module):
    """A decoder whose next-token distribution depends on the previous token only: row i of `probs`."""

    def __init__(self, probs: torch.Tensor):
        super().__init__()
        self.table = probs.clamp_min(1e-9).log()  # (V, V)

    def step(self, tokens, state, feed, memory, memory_mask):
        return torch.nn.functional.one_hot(tokens, self.table.shape[0]).float(), state

    def logits(self, feed):
        return feed @ self.table


def test_beam_search_finds_the_better_translation_that_greedy_walks_past():
    """A garden path: "ein" is likelier than "Hund" first, but after it nothing is likely, while
    "Hund" is almost surely followed by </s>. Greedy takes "ein"; a beam of 2 keeps "Hund" too."""
    model = tiny_model(german=["ein", "Hund"])
    eos, unk, ein, hund = 2, 3, 4, 5
    probs = torch.zeros(6, 6)
    probs[1, [eos, unk, ein, hund]] = torch.tensor([0.1, 0.0, 0.5, 0.4])  # after <s>
    probs[ein, [eos, unk, ein, hund]] = torch.tensor([0.26, 0.24, 0.25, 0.25])
    probs[hund, [eos, unk, ein, hund]] = torch.tensor([0.95, 0.0, 0.03, 0.02])
    probs[[eos, unk, 0], eos] = 1.0
    model.decoder = TableDecoder(probs)
    ids, mask = model.source_ids([SENTENCES[0]])
    greedy = model.greedy_search(ids, mask, 5)[0]
    beam = model.beam_search(ids, mask, 2, 5)[0]
    assert greedy == [ein] and beam == [hund]
    assert normalized(model, ids, mask, beam, 5) == pytest.approx(math.log(0.4 * 0.95) / 2, abs=1e-5)
    assert normalized(model, ids, mask, beam, 5) > normalized(model, ids, mask, greedy, 5) + 0.5


def test_german_tokens_and_detokenization():
    assert target_tokens("Ein Mann im T-Shirt (rot) spielt Fußball, fröhlich!") == [
        "Ein", "Mann", "im", "T", "-", "Shirt", "(", "rot", ")", "spielt", "Fußball", ",", "fröhlich", "!"]
    assert detokenize(target_tokens("Ein Mann im T-Shirt (rot) spielt Fußball, fröhlich!")) == \
        "Ein Mann im T-Shirt (rot) spielt Fußball, fröhlich!"
