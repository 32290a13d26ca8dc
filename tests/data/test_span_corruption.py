"""T5's span corruption on fixed seeds: the noise density and span length it promises, sentinels
in order, and input + target giving the text back exactly."""

import pytest
import torch

from bertology.data.span_corruption import corrupt_spans, random_segmentation, random_spans_noise_mask, reassemble

SENTINELS = list(range(1099, 999, -1))  # 100 ids, the first span's first (T5: <extra_id_0> is the last id)


def test_noise_density_and_mean_span_length_over_10k_tokens():
    generator = torch.Generator().manual_seed(0)
    noise_tokens = spans = total = 0
    for length in [512] * 16 + [137, 1000, 64, 777]:  # 10,170 tokens in texts of several lengths
        mask = random_spans_noise_mask(length, 0.15, 3.0, generator)
        assert mask.shape == (length,) and not mask[0]  # texts start with a kept run
        noise_tokens += int(mask.sum())
        spans += int((mask & ~torch.cat([mask.new_zeros(1), mask[:-1]])).sum())
        total += length
    assert total >= 10_000
    assert abs(noise_tokens / total - 0.15) <= 0.01 * 0.15
    assert abs(noise_tokens / spans - 3.0) <= 0.1 * 3.0


def test_segmentation_is_random_and_exact():
    generator = torch.Generator().manual_seed(1)
    draws = [random_segmentation(20, 5, generator) for _ in range(50)]
    assert all(int(d.sum()) == 20 and len(d) == 5 and int(d.min()) >= 1 for d in draws)
    assert len({tuple(d.tolist()) for d in draws}) > 40  # not one fixed split


@pytest.mark.parametrize("seed", range(5))
def test_input_and_target_reassemble_the_text_with_sentinels_in_order(seed):
    generator = torch.Generator().manual_seed(seed)
    text = torch.randint(5, 999, (300,), generator=generator)
    mask = random_spans_noise_mask(len(text), 0.15, 3.0, generator)
    inputs, targets = corrupt_spans(text, mask, SENTINELS)
    in_sentinels = [t for t in inputs.tolist() if t in SENTINELS]
    out_sentinels = [t for t in targets.tolist() if t in SENTINELS]
    spans = len(in_sentinels)
    assert in_sentinels == SENTINELS[:spans]  # one per dropped span, in order
    assert out_sentinels[:spans] == SENTINELS[:spans] and len(out_sentinels) in (spans, spans + 1)
    assert targets[0] == SENTINELS[0]
    assert len(inputs) == 300 - int(mask.sum()) + spans
    assert reassemble(inputs.tolist(), targets.tolist(), SENTINELS) == text.tolist()
    # the dropped tokens are exactly the target's non-sentinel tokens, in order
    assert [t for t in targets.tolist() if t not in SENTINELS] == text[mask].tolist()


def test_the_papers_example():
    words = "Thank you for inviting me to your party last week .".split()
    ids = torch.arange(len(words))
    mask = torch.tensor([w in ("for", "inviting", "last") for w in words])
    inputs, targets = corrupt_spans(ids, mask, [100, 101, 102])
    show = {100: "<X>", 101: "<Y>", 102: "<Z>", **dict(enumerate(words))}
    assert " ".join(show[i] for i in inputs.tolist()) == "Thank you <X> me to your party <Y> week ."
    assert " ".join(show[i] for i in targets.tolist()) == "<X> for inviting <Y> last <Z>"


def test_too_short_texts_and_too_few_sentinels_are_errors():
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="cannot be corrupted"):
        random_spans_noise_mask(1, 0.15, 3.0, generator)
    mask = random_spans_noise_mask(2, 0.15, 3.0, generator)
    assert mask.tolist() == [False, True]
    with pytest.raises(ValueError, match="more than the 2 sentinel tokens"):
        corrupt_spans(torch.arange(100), torch.arange(100) % 4 == 1, [500, 501])
