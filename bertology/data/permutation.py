"""Permutation language modelling's inputs: factorisation orders, partial prediction, and the masks
that make XLNet's two-stream attention follow them (Yang et al. 2019, "XLNet", sections 2.2-2.3).

For each sequence a factorisation order is drawn at random (a permutation of its text tokens);
only the last 1/K of the order is predicted (partial prediction, K = 6 as in the paper), each
target from the tokens before it in the order. Nothing is moved: the order lives in the masks.

As the release's `_local_perm` (zihangdai/xlnet, data_utils.py) builds them:
- the tokens that are not predicted form the order's first part and all see each other (a
  target may see every one of them; none of them sees a target, so nothing leaks);
- a target's query stream sees those tokens and the targets before it in the order, never
  itself; its content stream also sees itself (the model adds that: models/xlnet.py);
- `perm_mask[b, i, j] = 1` means token i may not see token j.

One difference from the release: its [CLS] and [SEP] ("functional tokens") take a random place
in the order; here they are context that every token sees, like the tokens not predicted. They
are the same symbols in every sequence and say nothing about the targets.

Example (7 text tokens between [CLS] and [SEP], K = 6): one target, the last of the order;
`target_mapping` has one row, one-hot on its position, and `labels` its token id.

With memory (`with_memory`: XLNet pre-trained on a token stream, `pretrain --mem-len`), the
segment's mask is widened over the remembered positions, which every token of their document sees.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops import IGNORE_INDEX

PREDICT_RATIO = 6  # K: predict the last 1/K of each factorisation order


def num_targets(num_tokens: int, ratio: int = PREDICT_RATIO) -> int:
    """How many of `num_tokens` text tokens a sequence predicts: floor(num_tokens / ratio), and at
    least one when there are two tokens or more (one of them must stay as context)."""
    if num_tokens < 2:
        return 0
    return max(num_tokens // ratio, 1)


def permutation_targets(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_mask: torch.Tensor,
                        generator: torch.Generator, ratio: int = PREDICT_RATIO) -> dict[str, torch.Tensor]:
    """Sample a factorisation order per sequence and build what XLNet's forward needs.

    Args:
        input_ids, attention_mask: (B, T), attention_mask 1 = a real token.
        special_mask: (B, T) bool, [CLS], [SEP] and padding: never predicted.
        generator: the source of every random choice (the same seed gives the same orders).
        ratio: K, the share 1/K of each order that is predicted.
    Returns:
        perm_mask (B, T, T) float, 1 = token i may not see token j; target_mapping (B, P, T) float,
        row p one-hot on the position of a sequence's p-th target (targets by position), P the
        most targets of any sequence (shorter sequences' extra rows are zero); labels (B, P) the
        targets' token ids, -100 on the extra rows.
    """
    batch, length = input_ids.shape
    candidates = (attention_mask == 1) & ~special_mask
    rank = torch.full((batch, length), -1, dtype=torch.long)  # place in the order; -1 = context, not predicted
    targets = torch.zeros(batch, length, dtype=torch.bool)
    for row in range(batch):
        positions = candidates[row].nonzero().squeeze(1).cpu()
        order = positions[torch.randperm(len(positions), generator=generator)]  # the factorisation order
        predicted = order[len(order) - num_targets(len(order), ratio):]  # its last 1/K
        targets[row, predicted] = True
        rank[row, predicted] = torch.arange(len(order) - len(predicted), len(order))
    # The release's rule: i may not see j when j is a target not before i in the order; a target
    # compares its own rank (so it does not see itself), a context token rank + 1 = 0 (so it sees no target).
    own = torch.where(targets, rank, rank + 1)
    perm_mask = (own[:, :, None] <= rank[:, None, :]) & targets[:, None, :]
    counts = targets.sum(1)
    most = int(counts.max()) if batch else 0
    target_mapping = torch.zeros(batch, most, length)
    labels = torch.full((batch, most), IGNORE_INDEX, dtype=torch.long)
    for row in range(batch):
        positions = targets[row].nonzero().squeeze(1)
        target_mapping[row, torch.arange(len(positions)), positions] = 1.0
        labels[row, :len(positions)] = input_ids[row, positions].cpu()
    device = input_ids.device
    return {"perm_mask": perm_mask.float().to(device), "target_mapping": target_mapping.to(device),
            "labels": labels.to(device)}


def with_memory(perm_mask: torch.Tensor, document_starts: torch.Tensor, remembered: torch.Tensor,
                mem_len: int) -> torch.Tensor:
    """The permutation mask over [memory; segment] for a stream segment read after M remembered
    positions (Transformer-XL's segment recurrence, as XLNet pre-trains with it).

    The memory is text read before the segment: every query, in both streams, sees all of its
    document's memory, as context ahead of the whole factorisation order; only the segment is
    permuted. A token sees its own document only: memory written before a document start and the
    segment's tokens of another document are hidden, so a row's memory is reset where its stream
    opens a new document.

    Args:
        perm_mask: (B, T, T) the segment's mask (`permutation_targets`), 1 = i may not see j.
        document_starts: (B, T) bool, the token that opens each document ([CLS] in the stream).
        remembered: (B,) how many of the M memory positions, counted from the end, belong to the
            document the segment's first token is in (0: none, nothing to attend to).
        mem_len: M, the memory positions the model is given (0: no memory).
    Returns:
        (B, T, M + T) float, 1 = token i may not see key j, the memory's positions first.

    Example (M = 3, remembered = 2, a segment "x [CLS] y"): x sees the last two memory positions
    and itself, [CLS] and y no memory and not x.
    """
    documents = document_starts.long().cumsum(1)  # (B, T): 0 = the document the memory continues
    columns = torch.arange(mem_len, device=perm_mask.device)
    stale = columns[None, :] < (mem_len - remembered)[:, None]  # (B, M): an earlier document's
    keys = torch.cat([-stale.long(), documents], dim=1)  # stale memory: document -1, no query's
    other_document = documents[:, :, None] != keys[:, None, :]
    return (F.pad(perm_mask, (mem_len, 0)).bool() | other_document).float()
