"""T5's span corruption: drop random spans of a text, replace each by one sentinel token, and
ask the model for the dropped spans.

Raffel et al. 2020, section 3.1.4, and the reference code (`random_spans_noise_mask` and
`noise_span_to_unique_sentinel` in google-research/text-to-text-transfer-transformer): of a
text of n tokens, round(n x noise_density) are noise, cut into round(noise / mean_span_length)
spans. The noise tokens and the kept tokens are each split into that many non-empty runs at
random, and the runs alternate, kept first, so the density is exact for every text and the
mean span length is exact up to rounding.

    text:     Thank you for inviting me to your party last week .
    input:    Thank you <X> me to your party <Y> week .
    target:   <X> for inviting <Y> last <Z>

A target is the text with the *kept* runs replaced by sentinels: each dropped span follows
the sentinel that replaced it in the input, and a text that ends with kept tokens ends its
target with one more sentinel (<Z> above). Sentinels are used in order, the first span's
first (T5's <extra_id_0>, <extra_id_1>, ...), so interleaving the input's runs with the
target's gives the text back exactly (`reassemble` does it, for the tests).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def random_segmentation(num_items: int, num_segments: int, generator: torch.Generator) -> torch.Tensor:
    """The lengths (num_segments,) of a uniformly random split of num_items into non-empty runs."""
    first_of_segment = torch.zeros(num_items, dtype=torch.bool)
    cuts = torch.randperm(num_items - 1, generator=generator)[:num_segments - 1] + 1
    first_of_segment[cuts] = True
    first_of_segment[0] = True
    segment = first_of_segment.long().cumsum(0) - 1
    return torch.bincount(segment, minlength=num_segments)


def random_spans_noise_mask(length: int, noise_density: float, mean_span_length: float,
                            generator: torch.Generator) -> torch.Tensor:
    """(length,) bool, True for noise: round(length x density) noise tokens (at least 1 and at
    most length - 1) in round(noise / mean_span_length) spans, the text starting with kept tokens."""
    if length < 2:
        raise ValueError(f"a text of {length} token(s) cannot be corrupted: it needs a kept and a noise token")
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = min(max(round(num_noise / mean_span_length), 1), num_noise, length - num_noise)
    noise_lengths = random_segmentation(num_noise, num_spans, generator)
    kept_lengths = random_segmentation(length - num_noise, num_spans, generator)
    runs = torch.stack([kept_lengths, noise_lengths], dim=1).flatten()  # kept, noise, kept, noise, ...
    is_noise_run = torch.arange(len(runs)) % 2 == 1
    return torch.repeat_interleave(is_noise_run, runs)


def _runs_to_sentinels(tokens: torch.Tensor, replaced: torch.Tensor, sentinels: Sequence[int]) -> torch.Tensor:
    """tokens (n,) with each run of `replaced` positions turned into one sentinel, in order."""
    starts = replaced & ~torch.cat([replaced.new_zeros(1), replaced[:-1]])
    run_number = starts.long().cumsum(0) - 1
    if int(run_number.max()) >= len(sentinels):
        raise ValueError(f"{int(run_number.max()) + 1} spans need more than the {len(sentinels)} sentinel tokens")
    out = torch.where(starts, torch.as_tensor(sentinels, dtype=tokens.dtype)[run_number.clamp(min=0)], tokens)
    return out[~replaced | starts]


def corrupt_spans(tokens: torch.Tensor, noise_mask: torch.Tensor, sentinels: Sequence[int]
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, target) of a text `tokens` (n,) and its `noise_mask` (n,): the input has each noise
    span replaced by a sentinel, the target each kept run; `sentinels` are the ids in order."""
    return _runs_to_sentinels(tokens, noise_mask, sentinels), _runs_to_sentinels(tokens, ~noise_mask, sentinels)


def reassemble(inputs: Sequence[int], targets: Sequence[int], sentinels: Sequence[int]) -> list[int]:
    """The text that `corrupt_spans` made (inputs, targets) from: each sentinel of the input is
    replaced by the run that follows the same sentinel in the target."""
    sentinel_set = set(sentinels)
    following: dict[int, list[int]] = {}
    current: list[int] = []
    for token in targets:
        if token in sentinel_set:
            current = following.setdefault(token, [])
        else:
            current.append(token)
    text: list[int] = []
    for token in inputs:
        text.extend(following.get(token, []) if token in sentinel_set else [token])
    return text
