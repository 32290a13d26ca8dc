"""The objectives reach the masked LM through the model's forward: one loss, checked against a direct computation;
XLNet's permutation LM carries its memory from one stream batch to the next."""

import pytest
import torch
import torch.nn.functional as F

from bertology.data.permutation import with_memory
from bertology.models.bert import BertConfig
from bertology.models.xlnet import XLNetConfig
from bertology.ops import IGNORE_INDEX
from bertology.training.loop import metrics_from_counts
from bertology.training.objectives import Memory, build_objective

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
    objective = build_objective("electra", config(), mask_token_id=4, generator_temperature=1e-4).eval()
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


# ----- XLNet's permutation LM with Transformer-XL's memory (`pretrain --mem-len`) ----------------

CLS = 1  # the token opening each document of the stream: the config's bos_token_id


def xlnet_objectives(mem_len: int, rows: int = 2):
    """A permutation-LM objective with memory and one without, holding the same weights (no dropout;
    large random weights, so that what a token reads shows in the loss)."""
    xlnet = XLNetConfig(vocab_size=VOCAB, d_model=32, n_layer=2, n_head=4, d_inner=64, dropout=0.0,
                        initializer_range=0.3, pad_token_id=0, bos_token_id=CLS)
    torch.manual_seed(0)
    remembering = build_objective("plm", xlnet, mask_token_id=4, rows=rows, mem_len=mem_len)
    alone = build_objective("plm", xlnet, mask_token_id=4)
    alone.model.load_state_dict(remembering.model.state_dict())
    return remembering, alone


def stream_batch(seed: int, rows: int = 2, length: int = 6, new_stream: bool = False, starts=()):
    """A token stream batch (data/token_stream.py's keys): random text, [CLS] at (row, position) `starts`."""
    ids = torch.randint(5, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))
    for row, position in starts:
        ids[row, position] = CLS
    return {"input_ids": ids, "labels": ids, "attention_mask": torch.ones_like(ids),
            "new_stream": torch.tensor(new_stream)}


def layer_inputs(objective, batch, memory):
    """Each layer's content-stream input (layers, B, T, D) for `batch` read after `memory` (None: nothing)."""
    mems = list(memory.states) if memory is not None else None
    perm_mask = with_memory(batch["perm_mask"], batch["document_starts"],
                            memory.remembered if memory is not None else torch.zeros(2, dtype=torch.long),
                            mems[0].shape[1] if mems else 0)
    out = objective.model.transformer(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], perm_mask,
                                      batch["target_mapping"], mems=mems, output_hidden_states=True)
    return torch.stack(out.hidden_states[:-1])


def test_the_memory_a_row_reads_next_is_its_layer_states_of_this_step_detached_and_resets_at_a_new_document():
    objective, _ = xlnet_objectives(mem_len=8)
    first = objective.prepare(stream_batch(0, new_stream=True, starts=[(1, 0)]), torch.Generator().manual_seed(0))
    objective(first)
    memory = objective.memory.get(torch.tensor(False))
    assert memory.states.shape == (2, 2, 8, 32)  # (layers, rows, mem_len, width)
    assert memory.states.grad_fn is None and not memory.states.requires_grad  # no gradient into the past
    with torch.no_grad():
        states = layer_inputs(objective, first, None)
    torch.testing.assert_close(memory.states[:, :, 2:], states, rtol=0, atol=1e-5)  # 6 positions read, right-aligned
    assert not memory.states[:, :, :2].any() and memory.remembered.tolist() == [6, 6]
    after_first = memory.states.clone()

    # Row 0 continues its document; row 1 opens a new one at position 3.
    second = objective.prepare(stream_batch(1, starts=[(1, 3)]), torch.Generator().manual_seed(1))
    step = objective(second)
    assert step.counts["permutation_lm_total"] > 0
    with torch.no_grad():
        states = layer_inputs(objective, second, Memory(after_first, torch.tensor([6, 6])))
    expected = torch.cat([after_first, states], dim=2)[:, :, -8:]  # the last mem_len of all read
    torch.testing.assert_close(objective.memory.states, expected, rtol=0, atol=1e-5)
    assert objective.memory.remembered.tolist() == [8, 3]  # row 1 remembers its new document only

    # The reset: row 1's new document reads nothing of the memory; its earlier tokens, and row 0, do.
    noise = after_first + torch.randn(after_first.shape, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        clean = layer_inputs(objective, second, Memory(after_first, torch.tensor([6, 6])))[1]
        noisy = layer_inputs(objective, second, Memory(noise, torch.tensor([6, 6])))[1]
    torch.testing.assert_close(noisy[1, 3:], clean[1, 3:], rtol=0, atol=1e-5)
    assert (noisy[1, :3] - clean[1, :3]).abs().max() > 1e-3 and (noisy[0] - clean[0]).abs().max() > 1e-3

    # An epoch's first batch starts from nothing.
    assert objective.memory.get(torch.tensor(True)) is None


def test_the_loss_with_memory_equals_the_loss_without_at_the_first_step_and_differs_after():
    remembering, alone = xlnet_objectives(mem_len=6)
    losses = []
    for index in range(3):
        batch = remembering.prepare(stream_batch(index, new_stream=index == 0), torch.Generator().manual_seed(index))
        without = {key: batch[key] for key in ("input_ids", "attention_mask", "token_type_ids", "perm_mask",
                                                "target_mapping", "labels")}
        losses.append((remembering(batch).loss.item(), alone(without).loss.item()))
    assert losses[0][0] == pytest.approx(losses[0][1], abs=1e-6)  # empty memory: the segment alone
    for with_memory_loss, alone_loss in losses[1:]:
        assert abs(with_memory_loss - alone_loss) > 1e-2  # the memory is read


def test_memory_settings_the_objective_refuses():
    xlnet = XLNetConfig(vocab_size=VOCAB, d_model=32, n_layer=1, n_head=4, d_inner=64, bos_token_id=None)
    with pytest.raises(ValueError, match="bos_token_id"):
        build_objective("plm", xlnet, mask_token_id=4, mem_len=4)
    with pytest.raises(ValueError, match="reuse_len"):
        build_objective("plm", XLNetConfig(vocab_size=VOCAB, d_model=32, n_layer=1, n_head=4, d_inner=64,
                                           reuse_len=2), mask_token_id=4, mem_len=4)


def test_span_word_accuracy_picks_among_words_while_span_accuracy_lets_the_sentinel_win():
    """Dropped tokens [5, 6], sentinel 9, eos 1: at the first dropped token the sentinel outscores
    the right word, which is second: span misses it, span_word (words only) hits it; structure
    tokens never count in either."""
    from bertology.models.t5 import T5Config

    config = T5Config.from_preset("tiny", vocab_size=12, decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)
    objective = build_objective("t5", config, None, sentinel_ids=[9, 10])
    labels = torch.tensor([[9, 5, 6, 1]])  # <extra_id_0> 5 6 eos
    logits = torch.full((4, 12), -5.0)
    logits[0, 9] = 3.0  # the sentinel: right
    logits[1, 9], logits[1, 5] = 4.0, 2.0  # the sentinel beats the right word 5
    logits[2, 7], logits[2, 6] = 2.0, 1.0  # a wrong word beats 6
    logits[3, 1] = 3.0  # eos: right

    class Scripted(torch.nn.Module):
        config = objective.model.config

        def forward(self, input_ids, attention_mask, labels):
            loss = F.cross_entropy(logits, labels[labels != IGNORE_INDEX])
            hits = (logits.argmax(-1) == labels[labels != IGNORE_INDEX]).sum()
            return type("Out", (), {"loss": loss, "logits": logits, "masked_lm_loss": loss, "masked_lm_correct": hits})

    objective.model = Scripted()
    out = objective({"input_ids": torch.tensor([[5, 9, 1]]), "attention_mask": torch.ones(1, 3), "labels": labels})
    metrics = metrics_from_counts({k: float(v) for k, v in out.counts.items()})
    assert metrics["span_accuracy"] == 0.0 and metrics["span_word_accuracy"] == 0.5
    assert metrics["lm_accuracy"] == 0.5  # the sentinel and eos: the structure is what the plain accuracy rewards
