"""The encoder and its heads: parity with transformers, invariances, and the variant switches."""

import pytest
import torch
import torch.nn.functional as F
import transformers
from helpers import at_real_tokens
from safetensors.torch import load_file

from bertology import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    UserError,
)
from bertology.ops import IGNORE_INDEX, relative_position_bucket

TOL = 1e-5


def tiny_config(**overrides):
    return BertConfig.from_preset("tiny", vocab_size=211, max_position_embeddings=64, **overrides)


def random_batch(vocab_size=211, lengths=(17, 9, 30, 4), seed=0):
    """Ids (B, T) right-padded with 0, attention mask and mixed segment ids."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.zeros(len(lengths), T, dtype=torch.long)
    mask = torch.zeros_like(ids)
    types = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(5, vocab_size, (n,), generator=g)
        mask[b, :n] = 1
        types[b, n // 2:n] = 1
    return ids, mask, types


def wiki_sentences(data_dir, count):
    """`count` real WikiText-2 lines of varied length (needs the shared data)."""
    path = data_dir / "wikitext-2-raw/wiki.test.raw"
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line and not line.startswith("=")]
    return lines[:count]


@pytest.mark.slow
def test_minilm_hidden_states_match_transformers(minilm_dir, data_dir):
    sentences = wiki_sentences(data_dir, 48)
    reference_tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    batch = reference_tokenizer(sentences, padding=True, truncation=True, max_length=128, return_tensors="pt")
    lengths = batch["attention_mask"].sum(1)
    assert len(sentences) >= 32 and lengths.min() < 40 and lengths.max() == 128  # really padded, varied
    ours = BertModel.from_pretrained(minilm_dir)
    ref = transformers.BertModel.from_pretrained(minilm_dir).eval()
    with torch.no_grad():
        a = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], output_hidden_states=True)
        b = ref(**batch, output_hidden_states=True)
    real = batch["attention_mask"].bool()
    assert len(a.hidden_states) == len(b.hidden_states) == 7
    for layer, (x, y) in enumerate(zip(a.hidden_states, b.hidden_states)):
        assert (x - y)[real].abs().max() < TOL, f"layer {layer}"
    assert (a.pooler_output - b.pooler_output).abs().max() < TOL


def test_padding_does_not_change_real_positions():
    torch.manual_seed(0)
    model = BertModel(tiny_config()).eval()
    ids, mask, types = random_batch()
    with torch.no_grad():
        padded = model(ids, mask, types, output_hidden_states=True)
        for b in range(ids.shape[0]):
            n = int(mask[b].sum())
            alone = model(ids[b:b + 1, :n], None, types[b:b + 1, :n], output_hidden_states=True)
            for x, y in zip(padded.hidden_states, alone.hidden_states):
                assert (x[b, :n] - y[0]).abs().max() < TOL
            assert (padded.pooler_output[b] - alone.pooler_output[0]).abs().max() < TOL


def hf_config(config: BertConfig, **extra):
    return transformers.BertConfig(**{k: v for k, v in config.to_dict().items() if k != "model_type"}, **extra)


@pytest.mark.slow
def test_pretraining_model_round_trips_to_transformers(tmp_path):
    torch.manual_seed(0)
    ours = BertForPreTraining(tiny_config()).eval()
    ours.save_pretrained(tmp_path)
    ref, info = transformers.BertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids, mask, types = random_batch()
    with torch.no_grad():
        a = ours(ids, mask, types)
        b = ref.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types)
    assert (at_real_tokens(a.prediction_logits - b.prediction_logits, mask)).abs().max() < TOL
    assert (a.seq_relationship_logits - b.seq_relationship_logits).abs().max() < TOL


@pytest.mark.slow
def test_pretraining_model_round_trips_from_transformers(tmp_path):
    torch.manual_seed(1)
    ref = transformers.BertForPreTraining(hf_config(tiny_config())).eval()
    ref.save_pretrained(tmp_path)
    ours = BertForPreTraining.from_pretrained(tmp_path)
    assert ours.newly_initialized == []
    ids, mask, types = random_batch(seed=3)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 1:4] = ids[:, 1:4]
    nsp = torch.tensor([0, 1, 1, 0])
    with torch.no_grad():
        a = ours(ids, mask, types)
        b = ref(input_ids=ids, attention_mask=mask, token_type_ids=types)
        a_loss = ours(ids, mask, types, labels=labels, next_sentence_label=nsp).loss
        b_loss = ref(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsp).loss
    assert (at_real_tokens(a.prediction_logits - b.prediction_logits, mask)).abs().max() < TOL
    assert (a.seq_relationship_logits - b.seq_relationship_logits).abs().max() < TOL
    assert abs(a_loss.item() - b_loss.item()) < TOL


@pytest.mark.parametrize(
    "ours_cls, ref_cls, extra",
    [
        (BertForSequenceClassification, transformers.BertForSequenceClassification, {"num_labels": 3}),
        (BertForSequenceClassification, transformers.BertForSequenceClassification, {"num_labels": 1}),
        (BertForTokenClassification, transformers.BertForTokenClassification, {"num_labels": 5}),
        (BertForQuestionAnswering, transformers.BertForQuestionAnswering, {}),
        (BertForMaskedLM, transformers.BertForMaskedLM, {}),
    ],
)
@pytest.mark.slow
def test_task_heads_match_transformers(tmp_path, ours_cls, ref_cls, extra):
    torch.manual_seed(2)
    config = tiny_config(**extra)
    ref = ref_cls(hf_config(config)).eval()
    ref.save_pretrained(tmp_path)
    ours = ours_cls.from_pretrained(tmp_path)
    assert ours.newly_initialized == []
    ids, mask, types = random_batch(seed=4)
    B, T = ids.shape
    g = torch.Generator().manual_seed(5)
    if ours_cls is BertForQuestionAnswering:
        kwargs = {"start_positions": torch.tensor([1, 2, 0, 3]), "end_positions": torch.tensor([3, 5, 0, 40])}
        fields = ("start_logits", "end_logits")
    else:
        if ours_cls is BertForSequenceClassification:
            labels = torch.rand(B, generator=g) if config.num_labels == 1 else torch.randint(0, 3, (B,), generator=g)
        elif ours_cls is BertForTokenClassification:
            labels = torch.randint(0, 5, (B, T), generator=g).masked_fill(mask == 0, IGNORE_INDEX)
        else:
            labels = torch.full_like(ids, IGNORE_INDEX)
            labels[:, 2] = ids[:, 2]
        kwargs = {"labels": labels}
        fields = ("logits",) if ours_cls is not BertForMaskedLM else ()
    with torch.no_grad():
        a = ours(ids, mask, types, **kwargs)
        b = ref(input_ids=ids, attention_mask=mask, token_type_ids=types, **kwargs)
    assert abs(a.loss.item() - b.loss.item()) < TOL
    for field in fields:
        assert at_real_tokens(getattr(a, field) - getattr(b, field), mask).abs().max() < TOL, field
    if ours_cls is BertForMaskedLM:  # sparse prediction: only the labelled positions were scored
        assert a.logits.shape == (B, ref.config.vocab_size)
        assert (a.logits - b.logits[:, 2]).abs().max() < TOL


@pytest.mark.parametrize("cls", [BertModel, BertForPreTraining, BertForMaskedLM, BertForSequenceClassification,
                                 BertForTokenClassification, BertForQuestionAnswering])
@pytest.mark.slow
def test_save_and_reload_gives_identical_outputs(tmp_path, cls):
    torch.manual_seed(3)
    model = cls(tiny_config(pre_layer_norm=True, embedding_size=64)).eval()
    model.save_pretrained(tmp_path)
    again = cls.from_pretrained(tmp_path)
    ids, mask, types = random_batch(seed=6)
    with torch.no_grad():
        a, b = model(ids, mask, types), again(ids, mask, types)
    for field in a.keys():
        assert torch.equal(a[field], b[field]), field
    assert not list(tmp_path.glob("*.tmp"))  # atomic writes leave no temporaries


def test_sparse_prediction_equals_dense_logits_at_labelled_positions():
    torch.manual_seed(4)
    model = BertForMaskedLM(tiny_config()).eval()
    ids, mask, types = random_batch(seed=7)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 3] = 10
    labels[2, [1, 20]] = 11
    with torch.no_grad():
        dense = model(ids, mask, types).logits
        sparse = model(ids, mask, types, labels=labels)
    assert sparse.logits.shape == (3, 211)
    assert (sparse.logits - dense[labels != IGNORE_INDEX]).abs().max() < TOL
    expected = F.cross_entropy(dense[labels != IGNORE_INDEX], labels[labels != IGNORE_INDEX])
    assert abs(sparse.loss.item() - expected.item()) < TOL


def test_attention_weights_path_matches_fused_path():
    torch.manual_seed(5)
    model = BertModel(tiny_config()).eval()
    ids, mask, types = random_batch(seed=8)
    with torch.no_grad():
        fused = model(ids, mask, types)
        explicit = model(ids, mask, types, output_attentions=True)
    assert len(explicit.attentions) == 2 and explicit.attentions[0].shape == (4, 2, 30, 30)
    assert torch.allclose(explicit.attentions[0].sum(-1), torch.ones(4, 2, 30))
    assert (explicit.attentions[0][..., mask[:, None, None, :].expand(-1, 2, 30, -1) == 0]).abs().max() == 0
    real = mask.bool()
    assert (fused.last_hidden_state - explicit.last_hidden_state)[real].abs().max() < TOL


def test_albert_switches_reduce_parameters():
    base = BertModel(tiny_config()).num_parameters()
    factorized = BertModel(tiny_config(embedding_size=32)).num_parameters()
    shared = BertModel(tiny_config(share_layers=True)).num_parameters()
    layer = sum(p.numel() for p in BertModel(tiny_config()).layers[0].parameters())
    assert shared == base - layer  # two layers became one
    # Embedding tables shrink from 128 to 32 columns; a 32 -> 128 projection is added.
    table_rows = 211 + 64 + 2
    assert factorized == base - table_rows * (128 - 32) - 2 * (128 - 32) + (32 * 128 + 128)


def test_causal_attention_ignores_future_tokens():
    torch.manual_seed(6)
    model = BertModel(tiny_config(causal=True)).eval()
    ids, _, _ = random_batch(lengths=(12, 12))
    changed = ids.clone()
    changed[:, 8:] = 7
    with torch.no_grad():
        a = model(ids).last_hidden_state
        b = model(changed).last_hidden_state
    assert (a[:, :8] - b[:, :8]).abs().max() < TOL
    assert (a[:, 8:] - b[:, 8:]).abs().max() > 1e-3


def test_causal_pooler_reads_the_last_real_token():
    # [CLS] under a causal mask sees only itself: pooling it would give every input the same vector.
    torch.manual_seed(6)
    model = BertModel(tiny_config(causal=True)).eval()
    ids = torch.tensor([[2, 11, 12, 13, 3, 0, 0], [2, 11, 14, 15, 16, 17, 3]])
    mask = (ids != 0).long()
    with torch.no_grad():
        out = model(ids, mask)
        alone = model(ids[:1, :5]).pooler_output
        bidirectional = BertModel(tiny_config()).eval()
        bidirectional.load_state_dict(model.state_dict())
        first = bidirectional(ids, mask).pooler_output
    assert (out.pooler_output[0] - out.pooler_output[1]).abs().max() > 1e-3  # the inputs differ after [CLS]
    assert (out.pooler_output[:1] - alone).abs().max() < TOL  # padding does not move it
    expected = torch.tanh(model.pooler(out.last_hidden_state[[0, 1], [4, 6]]))
    assert (out.pooler_output - expected).abs().max() < TOL
    assert (first - torch.tanh(bidirectional.pooler(bidirectional(ids, mask).last_hidden_state[:, 0]))).abs().max() < TOL


def test_no_segment_embeddings_variant():
    """type_vocab_size=0 (RoBERTa): no segment table at all, outputs blind to token_type_ids, and
    otherwise exactly the BERT whose segment embeddings are zero."""
    torch.manual_seed(7)
    model = BertModel(tiny_config(type_vocab_size=0)).eval()
    assert model.embeddings.token_type_embeddings is None
    assert not any("token_type" in name for name in model.state_dict())
    assert model.num_parameters() == BertModel(tiny_config()).num_parameters() - 2 * 128  # the (2, 128) table
    ids, mask, types = random_batch()
    bert = BertModel(tiny_config()).eval()
    missing, unexpected = bert.load_state_dict(model.state_dict(), strict=False)
    assert missing == ["embeddings.token_type_embeddings.weight"] and unexpected == []
    with torch.no_grad():
        bert.embeddings.token_type_embeddings.weight.zero_()
        plain = model(ids, mask).last_hidden_state
        assert plain.shape == (4, 30, 128)
        assert torch.equal(model(ids, mask, types).last_hidden_state, plain)
        assert torch.equal(model(ids, mask, 1 - types).last_hidden_state, plain)
        assert torch.equal(bert(ids, mask, types).last_hidden_state, plain)  # adding zeros changes no bit


def test_too_long_input_is_a_clear_error():
    model = BertModel(tiny_config())
    with pytest.raises(Exception, match="max_position_embeddings"):
        model(torch.ones(1, 65, dtype=torch.long))


@pytest.mark.slow
def test_training_step_reduces_loss():
    torch.manual_seed(8)
    model = BertForSequenceClassification(tiny_config(num_labels=2))
    ids, mask, types = random_batch()
    labels = torch.tensor([0, 1, 1, 0])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(10):
        loss = model(ids, mask, types, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5


# --- Relative positions (position_embedding_type "relative": T5's bucketed bias) ----------


def relative_config(**overrides) -> BertConfig:
    settings = dict(vocab_size=100, position_embedding_type="relative", relative_attention_num_buckets=8,
                    relative_attention_max_distance=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertConfig.from_preset("tiny", **{**settings, **overrides})


def test_relative_positions_make_left_padding_change_nothing():
    """With no absolute positions a token sees only distances: a left-padded copy of a sequence
    encodes to the same vectors; with BERT's absolute embeddings it does not."""
    ids = torch.randint(5, 100, (1, 12), generator=torch.Generator().manual_seed(0))
    padded = torch.cat([torch.zeros(1, 4, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 12, dtype=torch.long)], dim=1)
    for relative in (True, False):
        torch.manual_seed(0)
        config = relative_config() if relative else BertConfig.from_preset("tiny", vocab_size=100,
                                                                            hidden_dropout_prob=0.0)
        model = BertModel(config, add_pooling_layer=False).eval()
        with torch.no_grad():
            alone = model(ids).last_hidden_state[0]
            shifted = model(padded, mask).last_hidden_state[0, 4:]
        assert torch.allclose(alone, shifted, atol=1e-5) == relative


def test_relative_bias_is_t5s_buckets_and_reaches_every_layer():
    torch.manual_seed(0)
    model = BertModel(relative_config(), add_pooling_layer=False).eval()
    assert model.embeddings.position_embeddings is None
    bias = model.position_bias(20, None, torch.float32, "cpu")
    distances = torch.arange(20)[None, :] - torch.arange(20)[:, None]
    buckets = relative_position_bucket(distances, True, 8, 16)
    assert torch.equal(bias[0], model.relative_attention_bias.weight[buckets].permute(2, 0, 1))
    # distances -19..19 reach every bucket but 4 (a key after the query at distance 0 cannot be)
    assert buckets.unique().tolist() == [0, 1, 2, 3, 5, 6, 7]
    # the table is trained: a loss on the output reaches it
    model.train()
    model(torch.randint(5, 100, (2, 20))).last_hidden_state.sum().backward()
    assert model.relative_attention_bias.weight.grad.abs().sum() > 0
    causal = BertModel(relative_config(causal=True), add_pooling_layer=False).eval()
    causal_bias = causal.position_bias(6, causal.attention_mask(None, 6, "cpu"), torch.float32, "cpu")
    assert (causal_bias[0, :, 0, 1:] == torch.finfo(torch.float32).min).all()  # the causal mask kept


def test_relative_model_saves_loads_and_explains_its_mistakes(tmp_path):
    torch.manual_seed(0)
    model = BertForMaskedLM(relative_config())
    model.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    assert "bert.encoder.relative_attention_bias.weight" in state
    assert not any("position_embeddings" in key for key in state)
    again = BertForMaskedLM.from_pretrained(tmp_path)
    assert again.config.position_embedding_type == "relative"
    assert again.config.transformers_incompatibility() == "relative positions"
    ids = torch.randint(5, 100, (2, 9))
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model.eval()(ids).logits)
    with pytest.raises(UserError, match="transformers' relative_key variants are not supported"):
        BertConfig.from_dict({"position_embedding_type": "relative_key"})
    with pytest.raises(UserError, match="'relative_attention_num_buckets' must be an integer in"):
        relative_config(relative_attention_num_buckets=2)
