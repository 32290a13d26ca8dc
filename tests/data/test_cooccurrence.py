"""GloVe's co-occurrence counting (data/cooccurrence.py) against a brute-force count."""

import numpy as np
import pytest

from bertology.data.cooccurrence import CooccurrenceCounter, window_pairs


def brute_force(sentences: list[list[int]], vocab_size: int, window: int) -> np.ndarray:
    """X[i, j] = sum of 1/|t - u| over every two positions t != u of a sentence, |t - u| <= window."""
    X = np.zeros((vocab_size, vocab_size))
    for sentence in sentences:
        for t, i in enumerate(sentence):
            for u, j in enumerate(sentence):
                if 0 < abs(t - u) <= window:
                    X[i, j] += 1.0 / abs(t - u)
    return X


def test_window_pairs_of_two_sentences():
    ids = np.array([7, 8, 9, 5, 6])  # sentences [7, 8, 9] and [5, 6]
    positions = np.array([0, 1, 2, 0, 1])
    rows, cols, weights = window_pairs(ids, positions, window=2)
    pairs = sorted(zip(rows.tolist(), cols.tolist(), weights.tolist()))
    assert pairs == [(5, 6, 1.0), (7, 8, 1.0), (7, 9, 0.5), (8, 9, 1.0)]  # nothing crosses the boundary
    assert rows.dtype == cols.dtype == np.int32 and weights.dtype == np.float32


@pytest.mark.parametrize("chunk_tokens", [1, 7, 50, 1 << 20])  # chunk sizes force 0 to many merges
def test_counts_match_brute_force(chunk_tokens):
    rng = np.random.default_rng(0)
    sentences = [rng.integers(0, 9, size=rng.integers(0, 12)).tolist() for _ in range(40)]
    counter = CooccurrenceCounter(vocab_size=9, window=3, chunk_tokens=chunk_tokens)
    for sentence in sentences:
        counter.add(sentence)
    X = counter.matrix()
    assert X.shape == (9, 9) and X.dtype == np.float32
    assert np.allclose(X.toarray(), brute_force(sentences, 9, 3), rtol=1e-6)
    assert counter.tokens == sum(map(len, sentences))
    assert counter.pairs == sum(max(len(s) - d, 0) for s in sentences for d in (1, 2, 3))


def test_repeated_word_counts_itself_twice():
    counter = CooccurrenceCounter(vocab_size=2, window=5)
    counter.add([1, 1])
    counter.add([0])  # a one-word sentence has no pairs
    X = counter.matrix().toarray()
    assert X.tolist() == [[0.0, 0.0], [0.0, 2.0]]  # (1, 1) at distance 1, seen from both sides


def test_matrix_can_be_read_midway_and_counting_continues():
    counter = CooccurrenceCounter(vocab_size=3, window=1, chunk_tokens=2)
    counter.add([0, 1])
    assert counter.matrix().toarray()[0, 1] == 1.0
    counter.add([0, 1, 2])
    X = counter.matrix().toarray()
    assert X[0, 1] == X[1, 0] == 2.0 and X[1, 2] == 1.0 and X[0, 2] == 0.0


def test_bad_settings():
    with pytest.raises(ValueError):
        CooccurrenceCounter(vocab_size=3, window=0)


def test_a_window_beyond_the_longest_sentence_counts_the_same_at_once():
    """GloVe's --window 1e9 looped over every distance up to it (a hang)."""
    import time

    ids = np.array([3, 1, 4, 1, 5, 9, 2], dtype=np.int32)
    positions = np.array([0, 1, 2, 3, 0, 1, 2])  # two sentences, of 4 and 3 words
    start = time.perf_counter()
    far = window_pairs(ids, positions, 10**9)
    assert time.perf_counter() - start < 1
    for got, expected in zip(far, window_pairs(ids, positions, 3)):
        np.testing.assert_array_equal(got, expected)
    assert all(len(part) == 0 for part in window_pairs(ids[:1], positions[:1], 5))  # a one-word sentence
