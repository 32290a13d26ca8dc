"""Permutation LM inputs: the masks follow a sampled factorisation order, the last 1/K of it is
predicted, and the same seed draws the same orders."""

import torch

from bertology.data.permutation import num_targets, permutation_targets

CLS, SEP, PAD = 1, 2, 0


def batch(lengths: list[int], width: int):
    """Rows [CLS] text [SEP] of `lengths` text tokens (ids 10, 11, ...), right-padded to `width`."""
    ids = torch.full((len(lengths), width), PAD)
    for row, length in enumerate(lengths):
        ids[row, :length + 2] = torch.tensor([CLS, *range(10, 10 + length), SEP])
    mask = (ids != PAD).long()
    special = (ids == CLS) | (ids == SEP) | (ids == PAD)
    return ids, mask, special


def visible(perm_mask: torch.Tensor, row: int, position: int) -> set[int]:
    """The positions `position` may see (its query stream)."""
    return set((perm_mask[row, position] == 0).nonzero().squeeze(1).tolist())


def test_each_target_sees_exactly_the_context_and_the_targets_before_it_never_itself():
    ids, mask, special = batch([30, 23, 5], 32)
    for seed in range(5):
        out = permutation_targets(ids, mask, special, torch.Generator().manual_seed(seed))
        perm_mask, mapping = out["perm_mask"], out["target_mapping"]
        for row in range(3):
            targets = mapping[row].argmax(-1)[mapping[row].sum(-1) > 0].tolist()
            context = set(range(32)) - set(targets)  # [CLS], [SEP], padding (hidden by attention_mask) and text
            # The order among targets: a target sees the targets before it, so their counts of visible
            # targets are 0, 1, 2, ... in the order; recover it and check every target against it.
            seen_targets = {t: visible(perm_mask, row, t) & set(targets) for t in targets}
            order = sorted(targets, key=lambda t: len(seen_targets[t]))
            for place, target in enumerate(order):
                assert target not in visible(perm_mask, row, target)  # never its own content
                assert visible(perm_mask, row, target) == context | set(order[:place])
            for token in context:  # the rest see each other and no target
                assert visible(perm_mask, row, token) == context


def test_exactly_floor_of_one_sixth_of_the_text_tokens_are_predicted_with_their_own_ids():
    ids, mask, special = batch([30, 23, 5, 1], 32)
    out = permutation_targets(ids, mask, special, torch.Generator().manual_seed(0))
    mapping, labels = out["target_mapping"], out["labels"]
    assert [num_targets(n) for n in (30, 23, 5, 1, 0)] == [5, 3, 1, 0, 0]
    assert mapping.shape == (4, 5, 32) and labels.shape == (4, 5)
    for row, expected in enumerate([5, 3, 1, 0]):
        assert int(mapping[row].sum()) == expected and int((labels[row] != -100).sum()) == expected
        positions = mapping[row, :expected].argmax(-1)
        assert torch.equal(labels[row, :expected], ids[row, positions])  # the token itself (PLM), not the next
        assert not special[row, positions].any()  # never [CLS], [SEP] or padding
        assert positions.tolist() == sorted(positions.tolist())
    assert num_targets(12, ratio=3) == 4


def test_the_same_seed_gives_the_same_orders_and_another_seed_others():
    ids, mask, special = batch([40, 40], 42)
    first = permutation_targets(ids, mask, special, torch.Generator().manual_seed(7))
    again = permutation_targets(ids, mask, special, torch.Generator().manual_seed(7))
    other = permutation_targets(ids, mask, special, torch.Generator().manual_seed(8))
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["perm_mask"], other["perm_mask"])
    assert not torch.equal(first["perm_mask"][0], first["perm_mask"][1])  # each sequence its own order


def test_targets_are_spread_over_the_sequence_uniformly():
    """Over many draws each text position is a target about 1/6 of the time: the order is uniform."""
    ids, mask, special = batch([36], 38)
    generator = torch.Generator().manual_seed(0)
    hits = sum(permutation_targets(ids, mask, special, generator)["target_mapping"][0].sum(0) for _ in range(600))
    shares = hits[1:37] / 600
    assert torch.allclose(shares, torch.full_like(shares, 1 / 6), atol=0.07) and hits[0] == hits[37] == 0
