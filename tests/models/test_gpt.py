"""GPT against transformers' OpenAIGPTLMHeadModel and GPT2LMHeadModel on the same random weights:
logits, greedy and beam generation token for token, and directories loading both ways; then the
generation settings and their errors; then the task heads against transformers' sequence, token
and question-answering classes."""

import json
import re

import pytest
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, OpenAIGPTConfig, OpenAIGPTLMHeadModel

from bertology.errors import UserError
from bertology.inference.generation import GenerationConfig, filter_logits, generate
from bertology.inference.modeldir import load_model
from bertology.models import family_of
from bertology.models.gpt import (
    GPTConfig,
    GPTForQuestionAnswering,
    GPTForSequenceClassification,
    GPTForTokenClassification,
    GPTLMHeadModel,
    GPTModel,
    StaticCache,
)

LAYOUTS = {"openai-gpt": (OpenAIGPTLMHeadModel, OpenAIGPTConfig), "gpt2": (GPT2LMHeadModel, GPT2Config)}
SMALL = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4)


def reference(model_type: str, seed: int = 0):
    """transformers' model with random weights, large enough (std 0.2) that a wrong wiring shows."""
    model_class, config_class = LAYOUTS[model_type]
    torch.manual_seed(seed)
    model = model_class(config_class(**SMALL)).eval()
    with torch.no_grad():  # every tensor random, LayerNorms and biases included, whatever the library's init
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model


def left_padded_prompts(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts of 9 and 6 tokens, the shorter left-padded with id 0."""
    ids = torch.randint(1, 99, (2, 9), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0
    return ids, mask


@pytest.fixture(params=list(LAYOUTS))
def pair(request, tmp_path):
    """(transformers' model, ours loaded from the directory transformers saved)."""
    theirs = reference(request.param)
    theirs.save_pretrained(tmp_path / "theirs")
    ours = load_model(tmp_path / "theirs")
    assert type(ours) is GPTLMHeadModel and ours.config.model_type == request.param
    return theirs, ours


def test_logits_match_transformers(pair):
    theirs, ours = pair
    ids, mask = left_padded_prompts()
    with torch.no_grad():
        expected, got = theirs(ids).logits, ours(ids).logits
        assert expected.abs().mean() > 0.1  # not a near-zero output that anything would match
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        expected = theirs(ids, attention_mask=mask).logits
        got = ours(ids, mask).logits
    real = mask.bool()  # padded positions' outputs are meaningless in both
    torch.testing.assert_close(got[real], expected[real], rtol=0, atol=1e-5)


def test_a_directory_saved_here_loads_in_transformers_with_every_key(pair, tmp_path):
    theirs, ours = pair
    ours.save_pretrained(tmp_path / "ours")
    model_class = type(theirs)
    loaded, info = model_class.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids, _ = left_padded_prompts()
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(ids).logits, ours(ids).logits, rtol=0, atol=1e-5)
    assert family_of(tmp_path / "ours").name == "gpt"
    again = GPTLMHeadModel.from_pretrained(tmp_path / "ours")
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), ours.state_dict().values()))


def test_greedy_generation_matches_transformers_token_for_token(pair):
    theirs, ours = pair
    ids, mask = left_padded_prompts()
    expected = theirs.generate(ids, attention_mask=mask, max_new_tokens=32, do_sample=False, pad_token_id=0)
    for use_cache in (True, False):
        got = generate(ours, ids, mask, GenerationConfig(max_new_tokens=32, use_cache=use_cache))
        assert got.tolist() == expected.tolist()


def test_beam_search_matches_transformers(pair):
    theirs, ours = pair
    ids, mask = left_padded_prompts(seed=2)
    expected = theirs.generate(ids, attention_mask=mask, max_new_tokens=12, num_beams=4, do_sample=False,
                               pad_token_id=0, eos_token_id=5)
    got = generate(ours, ids, mask, GenerationConfig(max_new_tokens=12, num_beams=4, eos_token_id=5))
    assert got.tolist() == expected.tolist()


def test_the_cache_gives_the_logits_of_the_whole_sequence():
    model = GPTLMHeadModel(GPTConfig(**SMALL, pre_layer_norm=True)).eval()
    ids = torch.randint(0, 99, (3, 12))
    with torch.no_grad():
        whole = model(ids).logits
        out = model(ids[:, :5])
        pieces, past = [out.logits], out.past_key_values
        for t in range(5, 12):
            out = model(ids[:, t:t + 1], past_key_values=past)
            pieces.append(out.logits)
            past = out.past_key_values
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, rtol=0, atol=1e-5)
    assert past[0][0].shape == (3, 4, 12, 8)


def test_a_static_cache_written_in_place_gives_the_logits_of_the_whole_sequence():
    """The prompt, then one token at a time into buffers of 16 positions: the same logits, the
    cache the same object throughout, the positions not yet reached left untouched."""
    model = GPTLMHeadModel(GPTConfig(**SMALL, pre_layer_norm=True)).eval()
    ids = torch.randint(0, 99, (3, 12))
    cache = StaticCache(model.config, 3, 16, "cpu", torch.float32)
    mask = torch.ones(3, 16, dtype=torch.long)  # over the cache's positions; the causal mask hides those ahead
    with torch.no_grad():
        whole = model(ids).logits
        pieces = [model(ids[:, :5], mask, past_key_values=cache, cache_position=torch.arange(5)).logits]
        for t in range(5, 12):
            out = model(ids[:, t:t + 1], mask, past_key_values=cache, cache_position=torch.tensor([t]))
            assert out.past_key_values is cache
            pieces.append(out.logits)
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, rtol=0, atol=1e-5)
    keys = cache.layers[0][0]
    assert keys.shape == (3, 4, 16, 8) and keys[:, :, :12].abs().sum() > 0 and not keys[:, :, 12:].any()


def test_the_lm_loss_is_next_token_cross_entropy():
    model = GPTLMHeadModel(GPTConfig(**SMALL)).eval()
    ids = torch.randint(0, 99, (2, 7))
    labels = ids.clone()
    labels[0, 3] = -100
    out = model(ids, labels=labels)
    keep = labels[:, 1:] != -100
    logits = model(ids).logits[:, :-1][keep]
    torch.testing.assert_close(out.logits, logits)  # with labels: the scored positions' logits only
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(logits, labels[:, 1:][keep]))
    assert out.masked_lm_correct == (logits.argmax(-1) == labels[:, 1:][keep]).sum()
    out.loss.backward()
    assert model.transformer.wte.weight.grad is not None and model.lm_head.weight is model.transformer.wte.weight


def test_the_bare_model_loads_without_the_head(tmp_path):
    lm = GPTLMHeadModel(GPTConfig(**SMALL)).eval()
    lm.save_pretrained(tmp_path)
    bare = GPTModel.from_pretrained(tmp_path)
    ids = torch.randint(0, 99, (1, 5))
    with torch.no_grad():
        torch.testing.assert_close(bare(ids).last_hidden_state, lm.transformer(ids).last_hidden_state)


def test_gpt2_initialisation_scales_the_residual_projections():
    config = GPTConfig(**{**SMALL, "n_embd": 256, "n_layer": 8}, pre_layer_norm=True)
    torch.manual_seed(0)
    model = GPTLMHeadModel(config)
    assert model.transformer.h[0].attn.c_proj.weight.std().item() == pytest.approx(0.02 / 4, rel=0.05)
    assert model.transformer.h[0].attn.c_attn.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_filter_logits_keeps_the_top_k_and_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    kept = lambda x: torch.isfinite(x[0]).nonzero().flatten().tolist()  # noqa: E731
    assert kept(filter_logits(logits, top_k=2)) == [0, 1]
    assert kept(filter_logits(logits, top_p=0.5)) == [0]  # the first token alone reaches 0.5
    assert kept(filter_logits(logits, top_p=0.8)) == [0, 1, 2]  # 0.5 + 0.2 < 0.8 <= 0.85
    assert kept(filter_logits(logits, top_p=1.0)) == [0, 1, 2, 3, 4]
    shuffled = logits[:, [3, 0, 4, 2, 1]]  # the nucleus follows the values, not the positions
    assert kept(filter_logits(shuffled, top_p=0.8)) == [1, 3, 4]
    # the distribution of logits / temperature (shifted, so that a tiny temperature cannot overflow)
    torch.testing.assert_close(filter_logits(logits, temperature=2.0).softmax(-1), (logits / 2).softmax(-1))


def test_extreme_sampling_settings_give_the_most_probable_token_not_nan():
    """A temperature of 1e-40 made every logit +-inf, and a top_p of 1e-300 is 0 in float32 (every token
    dropped): both gave "probability tensor contains either inf, nan" before."""
    logits = torch.tensor([[1.0, 3.0, 2.0, -1.0]])
    for warped in (filter_logits(logits, temperature=1e-40), filter_logits(logits, top_p=1e-300)):
        assert warped.softmax(-1).tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_sampling_is_reproducible_and_top_k_1_is_greedy():
    model = GPTLMHeadModel(GPTConfig(**SMALL, initializer_range=0.2)).eval()
    ids, mask = left_padded_prompts()
    sample = lambda seed, **kw: generate(model, ids, mask, GenerationConfig(max_new_tokens=10, do_sample=True, **kw),  # noqa: E731
                                         generator=torch.Generator().manual_seed(seed))
    assert torch.equal(sample(3), sample(3)) and not torch.equal(sample(3), sample(4))
    greedy = generate(model, ids, mask, GenerationConfig(max_new_tokens=10))
    assert torch.equal(sample(5, top_k=1), greedy)


def test_generation_stops_at_eos_and_pads_what_ended():
    model = GPTLMHeadModel(GPTConfig(**SMALL, initializer_range=0.2)).eval()
    ids, mask = left_padded_prompts()
    free = generate(model, ids, mask, GenerationConfig(max_new_tokens=10))
    eos = free[0, 9 + 2].item()  # the first prompt's third new token ends it
    got = generate(model, ids, mask, GenerationConfig(max_new_tokens=10, eos_token_id=eos, pad_token_id=98))
    first_end = (got[0, 9:] == eos).nonzero()[0].item()
    assert first_end <= 2 and (got[0, 9 + first_end + 1:] == 98).all()


@pytest.mark.parametrize("settings, message", [
    (dict(top_p=1.5), "top_p (--top-p) must be in (0, 1], got 1.5"),
    (dict(temperature=0.0), "temperature (--temperature) must be positive"),
    (dict(max_new_tokens=0), "max_new_tokens (--max-new-tokens) must be"), (dict(top_k=0), "top_k (--top-k) must be"),
    (dict(num_beams=2, do_sample=True), "choose beam search or sampling")])
def test_bad_generation_settings_are_one_line_errors(settings, message):
    model = GPTLMHeadModel(GPTConfig(**SMALL)).eval()
    with pytest.raises(UserError, match=re.escape(message)):
        generate(model, torch.tensor([[1, 2]]), config=GenerationConfig(**settings))


def test_prompts_that_do_not_fit_are_one_line_errors():
    model = GPTLMHeadModel(GPTConfig(**SMALL)).eval()
    with pytest.raises(UserError, match="the prompt is empty"):
        generate(model, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(UserError, match="after a prompt of 60 tokens goes beyond the model's context of 64 positions"):
        generate(model, torch.ones(1, 60, dtype=torch.long), config=GenerationConfig(max_new_tokens=10))


def test_config_round_trips_and_bad_fields_are_named(tmp_path):
    for pre_layer_norm in (False, True):
        config = GPTConfig.from_preset("tiny", vocab_size=500, pre_layer_norm=pre_layer_norm)
        config.save(tmp_path)
        assert GPTConfig.load(tmp_path) == config
    assert "afn" in GPTConfig(**SMALL).to_dict() and "activation_function" in GPTConfig(**SMALL, pre_layer_norm=True).to_dict()
    with pytest.raises(UserError, match="'n_embd' \\(30\\) must be divisible by 'n_head' \\(4\\)"):
        GPTConfig(**{**SMALL, "n_embd": 30})
    with pytest.raises(UserError, match="model_type 'bert' is not a GPT"):
        GPTConfig.from_dict({"model_type": "bert"})
    with pytest.raises(UserError, match="n_inner needs pre_layer_norm"):
        GPTConfig(**SMALL, n_inner=48).to_dict()


# --- Fine-tuning the GPT paper's way: the last token's state, and the auxiliary LM loss ----


CLASSIFIERS = {"openai-gpt": (transformers.OpenAIGPTForSequenceClassification, OpenAIGPTConfig),
               "gpt2": (transformers.GPT2ForSequenceClassification, GPT2Config)}


@pytest.mark.parametrize("layout", list(CLASSIFIERS))
def test_classifier_matches_transformers_both_ways(layout, tmp_path):
    model_class, config_class = CLASSIFIERS[layout]
    torch.manual_seed(0)
    theirs = model_class(config_class(**SMALL, num_labels=3, pad_token_id=0)).eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.normal_(0.0, 0.3)
    theirs.save_pretrained(tmp_path / "theirs")
    ours = load_model(tmp_path / "theirs")
    assert type(ours) is GPTForSequenceClassification and ours.config.num_labels == 3
    ids = torch.randint(1, 99, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    ids[1, 5:], mask[1, 5:] = 0, 0  # right padding: the last real token is read
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(ours(ids, mask).logits, expected, rtol=0, atol=1e-5)
    ours.save_pretrained(tmp_path / "ours")
    back, info = model_class.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(input_ids=ids, attention_mask=mask).logits, expected, rtol=0, atol=1e-5)


def test_classifier_loss_adds_half_the_language_model_loss():
    torch.manual_seed(0)
    model = GPTForSequenceClassification(GPTConfig(**SMALL, num_labels=2, resid_pdrop=0.0, embd_pdrop=0.0,
                                                   attn_pdrop=0.0)).eval()
    ids = torch.randint(1, 99, (2, 7), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    labels = torch.tensor([0, 1])
    with torch.no_grad():
        out = model(ids, mask, labels=labels)
        task = torch.nn.functional.cross_entropy(out.logits, labels)
        lm = GPTLMHeadModel(model.config)
        lm.transformer.load_state_dict(model.transformer.state_dict())
        lm_loss = lm.eval()(ids, mask, labels=ids.masked_fill(mask == 0, -100)).loss
    torch.testing.assert_close(out.loss, task + 0.5 * lm_loss)
    model.config.lm_coef = 0.0
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask, labels=labels).loss, task)


# --- Token and span heads: transformers' GPT-2 classes; GPT-1 has none there, so its body ----------


# head -> (transformers' GPT-2 class, ours, the outputs compared)
TASK_HEADS = {"token": (transformers.GPT2ForTokenClassification, GPTForTokenClassification, ("logits",)),
              "span": (transformers.GPT2ForQuestionAnswering, GPTForQuestionAnswering, ("start_logits", "end_logits"))}


def head_outputs(out, names: tuple[str, ...]) -> torch.Tensor:
    """The named outputs of a token or span head, stacked: (outputs, B, T[, labels])."""
    return torch.stack([getattr(out, name) for name in names])


def right_padded(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of 9 tokens, the second 5 real tokens and 4 of padding (id 0), as bertology pads."""
    ids = torch.randint(1, 99, (2, 9), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    ids[1, 5:], mask[1, 5:] = 0, 0
    return ids, mask


@pytest.mark.parametrize("head", list(TASK_HEADS))
def test_token_and_span_heads_match_gpt2s_both_ways(head, tmp_path):
    model_class, our_class, names = TASK_HEADS[head]
    torch.manual_seed(0)
    theirs = model_class(GPT2Config(**SMALL, num_labels=5)).eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.normal_(0.0, 0.3)
    theirs.save_pretrained(tmp_path / "theirs")
    ours = load_model(tmp_path / "theirs")
    assert type(ours) is our_class
    ids, mask = right_padded()
    with torch.no_grad():
        # each row as transformers computes it alone, unpadded: the padding changes nothing at real positions
        expected = [head_outputs(theirs(input_ids=ids[:1]), names)[:, 0],
                    head_outputs(theirs(input_ids=ids[1:, :5]), names)[:, 0]]
        assert expected[0].abs().mean() > 0.1  # not a near-zero output that anything would match
        got = head_outputs(ours(ids, mask), names)
        torch.testing.assert_close(got[:, 0], expected[0], rtol=0, atol=1e-5)
        torch.testing.assert_close(got[:, 1, :5], expected[1], rtol=0, atol=1e-5)
    ours.save_pretrained(tmp_path / "ours")
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert config["architectures"] == [model_class.__name__]
    back, info = model_class.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        torch.testing.assert_close(head_outputs(back.eval()(input_ids=ids[:1]), names)[:, 0], expected[0],
                                   rtol=0, atol=1e-5)


@pytest.mark.parametrize("head", list(TASK_HEADS))
def test_gpt1_token_and_span_heads_read_transformers_gpt1_body(head, tmp_path):
    """transformers has no GPT-1 token or span class: the same heads on GPT-1's body give the
    head's linear layer on OpenAIGPTModel's states, and the directory names our class."""
    _, our_class, names = TASK_HEADS[head]
    torch.manual_seed(0)
    body = transformers.OpenAIGPTModel(OpenAIGPTConfig(**SMALL)).eval()
    with torch.no_grad():
        for parameter in body.parameters():
            parameter.normal_(0.0, 0.3)
    body.save_pretrained(tmp_path / "body")
    ours = our_class.from_language_model(tmp_path / "body", 5, None).eval()
    linear = ours.classifier if head == "token" else ours.qa_outputs
    ids, mask = right_padded()
    with torch.no_grad():
        linear.weight.normal_(0.0, 0.3)
        expected = linear(body(input_ids=ids[:1]).last_hidden_state)  # (B, T, labels or start and end)
        expected = expected[None] if head == "token" else expected.permute(2, 0, 1)  # as head_outputs stacks them
        torch.testing.assert_close(head_outputs(ours(ids[:1]), names), expected, rtol=0, atol=1e-5)
    ours.save_pretrained(tmp_path / "ours")
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert config["model_type"] == "openai-gpt" and config["architectures"] == [our_class.__name__]
    again = load_model(tmp_path / "ours")
    assert type(again) is our_class
    with torch.no_grad():
        torch.testing.assert_close(head_outputs(again(ids, mask), names), head_outputs(ours(ids, mask), names))


def test_token_and_span_losses_add_half_the_language_model_loss():
    torch.manual_seed(0)
    config = GPTConfig(**SMALL, num_labels=3, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    tagger, reader = GPTForTokenClassification(config).eval(), GPTForQuestionAnswering(config).eval()
    ids, mask = right_padded(seed=2)
    labels = torch.randint(0, 3, ids.shape, generator=torch.Generator().manual_seed(3)).masked_fill(mask == 0, -100)
    starts, ends = torch.tensor([2, 7]), torch.tensor([4, 20])  # 20: past the row, no loss (as transformers)
    with torch.no_grad():
        lm = GPTLMHeadModel(config).eval()
        lm.transformer.load_state_dict(tagger.transformer.state_dict())
        lm_loss = lm(ids, mask, labels=ids.masked_fill(mask == 0, -100)).loss
        out = tagger(ids, mask, labels=labels)
        task = torch.nn.functional.cross_entropy(out.logits[mask.bool()], labels[mask.bool()])
        torch.testing.assert_close(out.loss, task + 0.5 * lm_loss)
        lm.transformer.load_state_dict(reader.transformer.state_dict())
        lm_loss = lm(ids, mask, labels=ids.masked_fill(mask == 0, -100)).loss
        out = reader(ids, mask, start_positions=starts, end_positions=ends)
        span = (torch.nn.functional.cross_entropy(out.start_logits, starts)
                + torch.nn.functional.cross_entropy(out.end_logits[:1], ends[:1])) / 2
        torch.testing.assert_close(out.loss, span + 0.5 * lm_loss)


def test_a_task_model_starts_from_any_gpt_directory_with_a_fresh_head(tmp_path):
    classifier = GPTForSequenceClassification(GPTConfig(**SMALL, num_labels=2, pre_layer_norm=True))
    classifier.save_pretrained(tmp_path / "classifier")
    tagger = GPTForTokenClassification.from_language_model(tmp_path / "classifier", 9, None)
    assert tagger.classifier.weight.shape == (9, 32) and tagger.config.num_labels == 9
    assert all(torch.equal(a, b) for a, b in zip(tagger.transformer.state_dict().values(),
                                                 classifier.transformer.state_dict().values()))
