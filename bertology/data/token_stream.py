"""A recurrent language model's batches: the corpus as one stream of tokens, read in parallel rows.

An LSTM language model (ULMFiT's AWD-LSTM, models/awd_lstm.py) is trained the way Merity et
al. and fastai's `LMDataLoader` train it, not on independent sequences: each epoch the training
documents are joined, in a fresh seeded order and each opened by [CLS] (fastai's `xxbos`),
into one stream; the stream is cut into `rows` equal rows, and batch k is columns
k*bptt .. (k+1)*bptt of every row, its labels the same columns shifted by one token. Row r of
batch k+1 continues row r of batch k, so the model carries its state from batch to batch and
sees context far longer than one window (truncated back-propagation through time).

XLNet pre-trained with memory (`pretrain --arch xlnet --mem-len`) reads the same stream: its
segment recurrence carries each row's memory from batch to batch as an LSTM carries its state.

Everything is a pure function of (seed, epoch, batch index): a resumed run reads the same
batches, and a rank reads its own block of rows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .shards import TokenizedCorpus


class TokenStream:
    """Step -> batches of a token stream (see the module docstring).

    Args:
        corpus, documents: the tokenized corpus and the documents to read (indices).
        rows: parallel rows of the whole stream (batch size x ranks).
        bptt: tokens per batch and row.
        seed: the documents' order in epoch e is drawn from (seed, e); shuffle=False keeps
            the given order (held-out evaluation).
        bos_id: the token that opens every document.
        reverse: read each row from its end (ELMo's backward language model, which predicts
            each token from the ones after it): the rows of the same stream, reversed.
    """

    def __init__(self, corpus: TokenizedCorpus, documents: np.ndarray, rows: int, bptt: int, seed: int,
                 bos_id: int, shuffle: bool = True, reverse: bool = False):
        self.corpus, self.documents = corpus, np.asarray(documents)
        self.rows, self.bptt, self.seed, self.bos_id, self.shuffle = rows, bptt, seed, bos_id, shuffle
        self.reverse = reverse
        sentence_offsets, document_offsets = corpus.sentence_offsets, corpus.document_offsets
        token_starts = sentence_offsets[document_offsets[self.documents]]
        token_stops = sentence_offsets[document_offsets[self.documents + 1]]
        self.num_tokens = int((token_stops - token_starts).sum()) + len(self.documents)  # + one [CLS] each
        self.row_length = self.num_tokens // rows
        # The labels need one token beyond the inputs; 0 when the text is too short for one batch.
        self.batches_per_epoch = max((self.row_length - 1) // bptt, 0)
        self._epoch, self._grid = None, None

    def epoch_grid(self, epoch: int) -> np.ndarray:
        """The stream of one epoch as (rows, row_length) int64 token ids (cached for the current epoch)."""
        if self._epoch != epoch:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.documents)) if self.shuffle \
                else np.arange(len(self.documents))
            pieces = []
            for index in self.documents[order]:
                pieces.append(np.array([self.bos_id]))
                pieces.extend(self.corpus.document(int(index)))
            stream = np.concatenate(pieces).astype(np.int64)
            self._grid = stream[: self.rows * self.row_length].reshape(self.rows, self.row_length)
            if self.reverse:
                self._grid = np.ascontiguousarray(self._grid[:, ::-1])
            self._epoch = epoch
        return self._grid

    def batch(self, index: int, first_row: int = 0, num_rows: int | None = None) -> dict[str, torch.Tensor]:
        """Batch `index` of the run (epoch index // batches_per_epoch), rows first_row .. + num_rows:
        input_ids and labels (num_rows, bptt), attention_mask (all ones: no padding in a stream) and
        `new_stream` (a bool scalar, true at an epoch's first batch, where the carried state restarts)."""
        epoch, k = divmod(index, self.batches_per_epoch)
        grid = self.epoch_grid(epoch)[first_row: first_row + (num_rows or self.rows)]
        window = torch.from_numpy(np.ascontiguousarray(grid[:, k * self.bptt: (k + 1) * self.bptt + 1]))
        return {"input_ids": window[:, :-1], "labels": window[:, 1:], "attention_mask": torch.ones_like(window[:, :-1]),
                "new_stream": torch.tensor(k == 0)}


class StreamBatches:
    """The Trainer's step -> micro-batches over a TokenStream: step s reads stream batches
    s*A .. s*A + A - 1 (A = grad_accum, consecutive, so the state carries through them) and
    this rank's block of `batch_size` rows of each. With a `backward` stream (the same stream
    reversed) each micro-batch also holds its batch under `backward_` keys. `prepare(batch,
    index)`, when given, finishes each micro-batch from its stream batch index (XLNet's
    factorisation orders, drawn afresh for each batch and the same on a resumed run)."""

    def __init__(self, stream: TokenStream, batch_size: int, grad_accum: int, rank: int = 0,
                 backward: TokenStream | None = None,
                 prepare: Callable[[dict[str, torch.Tensor], int], dict[str, torch.Tensor]] | None = None):
        self.stream, self.batch_size, self.grad_accum, self.rank = stream, batch_size, grad_accum, rank
        self.backward, self.prepare = backward, prepare

    def micro_batch(self, index: int) -> dict[str, torch.Tensor]:
        """Stream batch `index`, this rank's rows (and the backward stream's, prefixed), prepared."""
        batch = self.stream.batch(index, self.rank * self.batch_size, self.batch_size)
        if self.backward is not None:
            reverse = self.backward.batch(index, self.rank * self.batch_size, self.batch_size)
            batch.update({f"backward_{key}": value for key, value in reverse.items() if key != "attention_mask"})
        return self.prepare(batch, index) if self.prepare is not None else batch

    def __call__(self, step: int) -> list[dict[str, torch.Tensor]]:
        return [self.micro_batch(step * self.grad_accum + k) for k in range(self.grad_accum)]
