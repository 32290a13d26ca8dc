"""TagLM's tagger: the CRF against enumerating every tag sequence, padding, save and load."""

import itertools

import pytest
import torch

from bertology.errors import UserError
from bertology.models.taglm import CRF, PAD_WORD, UNKNOWN_WORD, TagLMConfig, TagLMForTokenClassification


def random_crf(num_tags: int, seed: int) -> CRF:
    torch.manual_seed(seed)
    crf = CRF(num_tags)
    with torch.no_grad():
        for param in crf.parameters():
            param.normal_()
    return crf


def brute_force(crf: CRF, emissions: torch.Tensor, length: int) -> tuple[torch.Tensor, list[int]]:
    """log-sum-exp of every tag sequence's score and the best sequence, by enumeration (one sentence)."""
    scores = {}
    for tags in itertools.product(range(emissions.shape[-1]), repeat=length):
        score = crf.start_transitions[tags[0]] + crf.end_transitions[tags[-1]]
        score = score + sum(emissions[t, tag] for t, tag in enumerate(tags))
        score = score + sum(crf.transitions[a, b] for a, b in zip(tags, tags[1:]))
        scores[tags] = score
    values = torch.stack(list(scores.values()))
    return torch.logsumexp(values, 0), list(max(scores, key=lambda k: scores[k]))


def test_crf_loss_and_viterbi_equal_enumeration_over_every_tag_sequence():
    crf = random_crf(3, seed=0)
    torch.manual_seed(1)
    emissions = torch.randn(3, 4, 3)
    lengths = [4, 2, 1]
    mask = torch.arange(4)[None, :] < torch.tensor(lengths)[:, None]
    tags = torch.randint(0, 3, (3, 4))
    partition = crf.log_partition(emissions, mask)
    gold = crf.sequence_score(emissions, tags, mask)
    paths = crf.viterbi(emissions, mask)
    for b, length in enumerate(lengths):
        expected_partition, expected_path = brute_force(crf, emissions[b], length)
        torch.testing.assert_close(partition[b], expected_partition)
        assert paths[b] == expected_path
        own = (crf.start_transitions[tags[b, 0]] + crf.end_transitions[tags[b, length - 1]]
               + sum(emissions[b, t, tags[b, t]] for t in range(length))
               + sum(crf.transitions[tags[b, t - 1], tags[b, t]] for t in range(1, length)))
        torch.testing.assert_close(gold[b], own)
        assert partition[b] > own  # the partition bounds every single sequence
    loss = crf(emissions, tags, mask)
    torch.testing.assert_close(loss, (partition - gold).mean())
    assert loss > 0


def test_crf_learns_a_transition_the_emissions_do_not_show():
    """Tag 1 always follows tag 0: the emissions are uninformative for it, the transitions learn it."""
    crf = CRF(2)
    optimizer = torch.optim.Adam(crf.parameters(), lr=0.1)
    tags = torch.tensor([[0, 1, 0, 1, 0, 1]])
    emissions = torch.zeros(1, 6, 2)
    emissions[0, 0, 0] = 5.0  # only the first tag is given away
    mask = torch.ones(1, 6, dtype=torch.bool)
    for _ in range(100):
        optimizer.zero_grad()
        crf(emissions, tags, mask).backward()
        optimizer.step()
    assert crf.viterbi(emissions, mask) == [[0, 1, 0, 1, 0, 1]]


def tiny_tagger(lm_size: int = 0, seed: int = 0) -> TagLMForTokenClassification:
    torch.manual_seed(seed)
    config = TagLMConfig(word_vocab_size=5, word_embedding_dim=8, char_embedding_dim=4, char_filters=6,
                         lstm_size=8, lm_size=lm_size, num_labels=3, id2label={0: "O", 1: "B-PER", 2: "I-PER"})
    return TagLMForTokenClassification(config, [PAD_WORD, UNKNOWN_WORD, "john", "smith", "runs"]).eval()


def test_padding_changes_no_sentence_and_unknown_words_share_a_row():
    model = tiny_tagger(lm_size=4)
    sentences = [["John", "Smith", "runs"], ["Zork"]]
    batch = model.encode_words(sentences)
    assert batch["word_ids"].tolist() == [[2, 3, 4], [1, 0, 0]]  # lower-cased lookup; "zork" unknown
    lm = torch.randn(2, 3, 4)
    together = model(**batch, lm_states=lm).logits
    alone = model(**model.encode_words(sentences[1:]), lm_states=lm[1:, :1]).logits
    torch.testing.assert_close(together[1, :1], alone[0])


def test_loss_trains_and_save_load_round_trip(tmp_path):
    model = tiny_tagger().train()
    batch = model.encode_words([["John", "Smith", "runs"], ["runs"]])
    labels = torch.tensor([[1, 2, 0], [0, -100, -100]])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
    model.eval()
    out = model(**batch)
    assert model.decode(out.logits, batch["attention_mask"]) == [["B-PER", "I-PER", "O"], ["O"]]
    model.save_pretrained(tmp_path)
    loaded = TagLMForTokenClassification.from_pretrained(tmp_path)
    torch.testing.assert_close(loaded(**batch).logits, out.logits)


def test_a_tagger_refuses_missing_or_unexpected_lm_states_and_a_bad_vocabulary(tmp_path):
    with_lm, without = tiny_tagger(lm_size=4), tiny_tagger()
    batch = with_lm.encode_words([["runs"]])
    with pytest.raises(UserError, match="reads a biLM"):
        with_lm(**batch)
    with pytest.raises(UserError, match="does not read"):
        without(**batch, lm_states=torch.zeros(1, 1, 4))
    without.save_pretrained(tmp_path)
    (tmp_path / "words.txt").write_text("[PAD]\n[UNK]\njohn\n", encoding="utf-8")
    with pytest.raises(UserError, match="words.txt: 3 words"):
        TagLMForTokenClassification.from_pretrained(tmp_path)
