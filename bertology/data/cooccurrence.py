"""Counting word co-occurrences for GloVe, streamed and chunked so a large corpus counts in bounded memory.

GloVe (Pennington et al. 2014) fits word vectors to X, the symmetric matrix of weighted
co-occurrence counts: every pair of words at distance d <= window inside one sentence adds
1/d to X[i, j] and to X[j, i] ("word pairs that are d words apart contribute 1/d to the
total count"). Words outside the vocabulary are removed before the window is laid down, as
glove.c and gensim do, so the distance counts vocabulary words only.

`CooccurrenceCounter` takes one sentence of word ids at a time and works in chunks of about
`chunk_tokens` tokens: a chunk's pairs are made with numpy, one array operation per distance
(no Python loop per token), and summed into a sparse matrix (scipy's COO -> CSR conversion
adds duplicate pairs). Chunk matrices are merged the way a log-structured merge tree merges
runs: a new matrix is added into the one before it while it is at least half that one's size,
so each count is merged O(log(chunks)) times and the pending matrices together stay under
about twice the final one.

Memory: the chunk's pair arrays, 12 bytes x chunk_tokens x window (row, column, weight;
about 120 MB for 2^20 tokens and window 10), plus the accumulated matrix, 8 bytes per
distinct ordered pair (float32 count + int32 column index) and up to twice that while
merging, and 4 bytes per vocabulary word for the row pointers. The number of distinct pairs
is at most vocabulary^2 and at most corpus tokens x window: it grows with the window
(almost linearly for small windows) and with the vocabulary, and sub-linearly with the
corpus, since a larger corpus mostly repeats pairs already seen. Only the distinct pairs'
matrix depends on the corpus size; counting time is linear in it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp


def window_pairs(ids: np.ndarray, positions: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ordered pairs (earlier word, later word, 1/distance) of a chunk of sentences.

    Args:
        ids: (N,) word ids of consecutive sentences, concatenated.
        positions: (N,) each token's position within its sentence (0 at a sentence's start),
            so a pair crosses no sentence boundary when the later word's position is >= d.
        window: the largest distance counted.
    Returns:
        rows, cols: (P,) int32 ids of the earlier and the later word of each pair;
        weights: (P,) float32, 1/d. Each unordered pair appears once; `CooccurrenceCounter`
        adds the transpose to make X symmetric.
    """
    rows, cols, weights = [], [], []
    # No pair is farther apart than the longest sentence: a larger window counts nothing more.
    for distance in range(1, min(window, int(positions.max(initial=0))) + 1):
        inside = positions[distance:] >= distance  # (N - d,) the later word is d words into its sentence
        rows.append(ids[:-distance][inside])
        cols.append(ids[distance:][inside])
        weights.append(np.full(len(rows[-1]), 1.0 / distance, dtype=np.float32))
    if not rows:  # one-word sentences only
        return np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32)
    return np.concatenate(rows).astype(np.int32), np.concatenate(cols).astype(np.int32), np.concatenate(weights)


class CooccurrenceCounter:
    """Accumulates GloVe's co-occurrence matrix one sentence at a time (see the module docstring).

    Args:
        vocab_size: V; word ids are 0 .. V-1.
        window: the largest distance counted (symmetric: words on both sides).
        chunk_tokens: tokens gathered before their pairs are made and summed; bounds the
            memory of the pair arrays (see the module docstring).
    """

    def __init__(self, vocab_size: int, window: int, chunk_tokens: int = 1 << 20):
        if vocab_size <= 0 or window <= 0 or chunk_tokens <= 0:
            raise ValueError("vocab_size, window and chunk_tokens must be positive")
        self.vocab_size, self.window, self.chunk_tokens = vocab_size, window, chunk_tokens
        self.tokens = 0  # tokens counted so far
        self.pairs = 0  # ordered (earlier, later) pairs counted so far
        self._ids: list[np.ndarray] = []
        self._pending = 0  # tokens in self._ids
        self._runs: list[sp.csr_matrix] = []  # partial sums, each at most half the size of the one before

    def add(self, sentence: Sequence[int] | np.ndarray) -> None:
        """Count one sentence, given as the word ids of its in-vocabulary words, in order."""
        if len(sentence) == 0:
            return
        self._ids.append(np.asarray(sentence, dtype=np.int32))
        self._pending += len(sentence)
        if self._pending >= self.chunk_tokens:
            self._flush()

    def _flush(self) -> None:
        if not self._ids:
            return
        lengths = np.fromiter(map(len, self._ids), dtype=np.int64, count=len(self._ids))
        ids = np.concatenate(self._ids)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)  # (N,) each token's sentence start
        positions = np.arange(len(ids)) - starts
        rows, cols, weights = window_pairs(ids, positions, self.window)
        self.tokens += len(ids)
        self.pairs += len(rows)
        self._ids, self._pending = [], 0
        chunk = sp.csr_matrix((weights, (rows, cols)), shape=(self.vocab_size, self.vocab_size))  # sums repeated pairs
        chunk.sum_duplicates()
        self._runs.append(chunk)
        while len(self._runs) > 1 and 2 * self._runs[-1].nnz >= self._runs[-2].nnz:
            top = self._runs.pop()
            self._runs[-1] = self._runs[-1] + top

    def matrix(self) -> sp.csr_matrix:
        """X: (V, V) float32 CSR, symmetric, X[i, j] = sum over co-occurrences of 1/distance."""
        self._flush()
        total = sp.csr_matrix((self.vocab_size, self.vocab_size), dtype=np.float32)
        for run in self._runs:
            total = total + run
        self._runs = [total]
        symmetric = (total + total.T).tocsr()
        symmetric.sum_duplicates()
        return symmetric.astype(np.float32)
