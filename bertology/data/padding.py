"""Padding rows of token ids into a batch: what pre-training batches and task batches share."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_rows(input_ids: Sequence[Sequence[int]], token_type_ids: Sequence[Sequence[int]],
             pad_id: int) -> dict[str, torch.Tensor]:
    """Rows of ids (and their segment ids) of different lengths -> a right-padded batch.

    Returns input_ids (B, T) padded with `pad_id`, token_type_ids (B, T) padded with 0 and
    attention_mask (B, T), 1 on real tokens and 0 on padding; T = the longest row. int64.
    """
    lengths = torch.tensor([len(row) for row in input_ids])
    width = int(lengths.max())
    ids = torch.full((len(input_ids), width), pad_id, dtype=torch.long)
    segments = torch.zeros_like(ids)
    for row, (tokens, types) in enumerate(zip(input_ids, token_type_ids)):
        ids[row, : len(tokens)] = torch.as_tensor(tokens)
        segments[row, : len(types)] = torch.as_tensor(types)
    attention_mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    return {"input_ids": ids, "token_type_ids": segments, "attention_mask": attention_mask}
