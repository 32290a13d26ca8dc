"""The objectives reach the masked LM through the model's forward: one loss, checked against a direct computation."""

import pytest
import torch
import torch.nn.functional as F

from bertology.models.bert import BertConfig
from bertology.ops import IGNORE_INDEX
from bertology.training.loop import metrics_from_counts
from bertology.training.objectives import build_objective

VOCAB = 60


def batch(seed: int = 0, batch_size: int = 4, length: int = 12) -> dict[str, torch.Tensor]:
    """Random ids with [CLS]=2 first and [SEP]=3 last, padding at the end of the last row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch_size, length), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    mask = torch.ones_like(ids)
    mask[-1, -3:] = 0
    ids[-1, -3:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
            "special_mask": (ids < 5), "pair_labels": torch.tensor([0, 1, 1, 0])}


def config() -> BertConfig:
    return BertConfig.from_preset("tiny", vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_masked_lm_loss_and_accuracy_match_a_direct_computation(name):
    torch.manual_seed(0)
    objective = build_objective(name, config(), mask_token_id=4).eval()
    prepared = objective.prepare(batch(), torch.Generator().manual_seed(1))
    out = objective(prepared)
    counts = {k: float(v) for k, v in out.counts.items()}

    # Independently: the full (B, T, V) logits of the same model, scored at the labelled positions.
    model = objective.model
    encoded = model.bert(prepared["input_ids"], prepared["attention_mask"], prepared["token_type_ids"])
    logits = model.mlm(encoded.last_hidden_state, model.bert.embeddings.word_embeddings.weight)  # (B, T, V)
    labels = prepared["labels"]
    positions = labels != IGNORE_INDEX
    mlm_loss = F.cross_entropy(logits[positions], labels[positions])
    expected = mlm_loss
    if name == "bert":
        expected = expected + F.cross_entropy(model.nsp(encoded.pooler_output), prepared["pair_labels"])
        assert counts["nsp_total"] == 4
    assert torch.allclose(out.loss, expected, atol=1e-5)
    assert counts["mlm_total"] == positions.sum().item() > 0
    assert counts["mlm_correct"] == (logits[positions].argmax(-1) == labels[positions]).sum().item()
    metrics = metrics_from_counts(counts)
    assert metrics["mlm_loss"] == pytest.approx(mlm_loss.item(), abs=1e-5)


def test_causal_lm_predicts_the_next_token_through_the_same_loss():
    torch.manual_seed(0)
    objective = build_objective("clm", config(), mask_token_id=4).eval()
    prepared = objective.prepare(batch(), torch.Generator())
    labels = prepared["labels"]
    assert torch.equal(labels[0, :-1], prepared["input_ids"][0, 1:]) and labels[0, -1] == IGNORE_INDEX
    out = objective(prepared)
    logits = objective.model(prepared["input_ids"], prepared["attention_mask"]).logits  # (B, T, V)
    positions = labels != IGNORE_INDEX
    assert torch.allclose(out.loss, F.cross_entropy(logits[positions], labels[positions]), atol=1e-5)
    assert "perplexity" in metrics_from_counts({k: float(v) for k, v in out.counts.items()})


def test_electra_generator_loss_is_the_masked_lm_loss_of_its_generator():
    torch.manual_seed(0)
    objective = build_objective("electra", config(), mask_token_id=4).eval()
    prepared = objective.prepare(batch(), torch.Generator().manual_seed(3))
    out = objective(prepared)
    generator = objective.generator
    logits = generator(prepared["input_ids"], prepared["attention_mask"], prepared["token_type_ids"]).logits
    labels = prepared["labels"]
    positions = labels != IGNORE_INDEX
    gen_loss = F.cross_entropy(logits[positions], labels[positions]).item()
    metrics = metrics_from_counts({k: float(v) for k, v in out.counts.items()})
    assert metrics["mlm_loss"] == pytest.approx(gen_loss, abs=1e-5)
    assert out.loss.item() == pytest.approx(gen_loss + 50 * metrics["rtd_loss"], rel=1e-5)


def test_electra_options_the_paper_studies():
    from dataclasses import replace

    from bertology.data.pretraining import mask_tokens

    wide = replace(config(), hidden_size=256, num_attention_heads=4, intermediate_size=1024)
    for size, width in ((0.125, 32), (0.25, 64), (0.5, 128), (1.0, 256)):
        objective = build_objective("electra", wide, mask_token_id=4, generator_size=size)
        assert objective.generator.config.hidden_size == width
        # the release shares the embedding tables and the embeddings' LayerNorm with the generator
        generator, discriminator = objective.generator.bert.embeddings, objective.discriminator.embeddings
        assert generator.norm is discriminator.norm and generator.word_embeddings is discriminator.word_embeddings

    # near-zero temperature: every sample is the generator's most likely token
    torch.manual_seed(0)
    objective = build_objective("electra", config(), mask_token_id=4, temperature=1e-4).eval()
    prepared = objective.prepare(batch(), torch.Generator().manual_seed(3))
    seen = {}
    objective.discriminator.register_forward_hook(lambda module, args, out: seen.update(inputs=args[0]))
    with torch.no_grad():
        objective(prepared)
        logits = objective.generator(prepared["input_ids"], prepared["attention_mask"], prepared["token_type_ids"]).logits
    masked = prepared["labels"] != IGNORE_INDEX
    assert torch.equal(seen["inputs"][masked], logits[masked].argmax(-1))

    # the release's generator input: 85% [MASK], the rest kept, never a random token
    ids = torch.randint(5, VOCAB, (64, 128), generator=torch.Generator().manual_seed(0))
    special = torch.zeros_like(ids, dtype=torch.bool)
    corrupted, labels = mask_tokens(ids, special, VOCAB, 4, torch.Generator().manual_seed(1),
                                    replace_with_mask=0.85, replace_with_random=0.0)
    chosen = labels != IGNORE_INDEX
    is_mask = corrupted[chosen] == 4
    assert bool(((corrupted[chosen] == ids[chosen]) | is_mask).all())
    assert is_mask.double().mean().item() == pytest.approx(0.85, abs=0.02)  # over ~1,200 targets
    assert torch.equal(corrupted[~chosen], ids[~chosen])
