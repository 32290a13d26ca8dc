"""Permutation LM inputs: the masks follow a sampled factorisation order, the last 1/K of it is
predicted, and the same seed draws the same orders; with memory, every token also sees its document's
memory, and none another document's."""

import torch

from bertology.data.permutation import num_targets, permutation_targets, with_memory
from bertology.models.xlnet import XLNetConfig, XLNetModel

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


def test_with_memory_every_token_sees_every_memory_position_and_a_target_still_not_itself():
    """A stream segment (no [CLS]) read after a full memory of 5: the memory is context before the whole order."""
    ids = torch.randint(10, 50, (2, 24), generator=torch.Generator().manual_seed(0))
    starts = ids == CLS
    segment = permutation_targets(ids, torch.ones_like(ids), starts, torch.Generator().manual_seed(1))
    mask = with_memory(segment["perm_mask"], starts, torch.tensor([5, 5]), 5)
    assert mask.shape == (2, 24, 5 + 24)
    assert torch.equal(mask[:, :, 5:], segment["perm_mask"])  # only the segment is permuted
    for row in range(2):
        targets = segment["target_mapping"][row].argmax(-1).tolist()
        assert targets
        for position in range(24):
            assert set(range(5)) <= visible(mask, row, position)  # every memory position
        for target in targets:
            assert 5 + target not in visible(mask, row, target)  # never its own content


def test_with_memory_a_new_document_sees_no_earlier_one():
    """Row 0 opens a document at position 4 and remembers 3 of 5 positions of its current one;
    row 1 remembers nothing (the start of its stream)."""
    ids = torch.randint(10, 50, (2, 8), generator=torch.Generator().manual_seed(0))
    ids[0, 4] = CLS
    no_order = torch.zeros(2, 8, 8)  # every segment token may see every other: only documents hide
    mask = with_memory(no_order, ids == CLS, torch.tensor([3, 0]), 5)
    for position in range(4):  # the document the memory continues: its last 3 positions, and itself
        assert visible(mask, 0, position) == {2, 3, 4} | {5 + p for p in range(4)}
    for position in range(4, 8):  # the new document: its own tokens only
        assert visible(mask, 0, position) == {5 + p for p in range(4, 8)}
    for position in range(8):
        assert visible(mask, 1, position) == {5 + p for p in range(8)}
    assert torch.equal(with_memory(no_order, ids == CLS, torch.tensor([3, 0]), 0)[1], torch.zeros(8, 8))


def test_an_xlnet_query_reads_the_memory_through_the_mask_but_not_its_own_token():
    """Through the model: a target's query-stream output moves with the memory's states and stays
    when its own token changes."""
    config = XLNetConfig(vocab_size=50, d_model=32, n_layer=2, n_head=4, d_inner=64, dropout=0.0,
                         initializer_range=0.3)
    torch.manual_seed(0)
    model = XLNetModel(config).eval()
    ids = torch.randint(10, 50, (1, 12), generator=torch.Generator().manual_seed(3))
    segment = permutation_targets(ids, torch.ones_like(ids), ids == CLS, torch.Generator().manual_seed(4))
    mask = with_memory(segment["perm_mask"], ids == CLS, torch.tensor([4]), 4)
    target = int(segment["target_mapping"][0, 0].argmax())
    mems = [torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(layer)) for layer in range(2)]

    def query(ids, mems):
        with torch.no_grad():
            return model(ids, perm_mask=mask, target_mapping=segment["target_mapping"][:, :1], mems=mems)\
                .last_hidden_state[0, 0]

    changed = ids.clone()
    changed[0, target] = (ids[0, target] + 1 - 10) % 40 + 10
    torch.testing.assert_close(query(changed, mems), query(ids, mems), rtol=0, atol=1e-5)
    assert (query(ids, [m + 1 for m in mems]) - query(ids, mems)).abs().max() > 1e-3
