"""Generation over a static key/value cache (inference/generation.py's StaticDecoding): the ids
greedy decoding and seeded sampling give are those of the cache that grows by concatenation and
of transformers' `generate`; a left-padded batch gives what each prompt gives alone; the compiled
decode step is traced once and replayed, never recompiled; what does not fit is refused.

The compiled step runs here with dynamo's aot_eager backend (the graph run by PyTorch's own
kernels): what is under test is the capture (one graph, no recompilation), which is the same for
every backend; inductor's build takes minutes on this machine, and CUDA graphs need a GPU
(bench/gpu.py measures them there).
"""

import re

import pytest
import torch
import transformers
from torch._dynamo.utils import counters

from bertology.errors import UserError
from bertology.inference.generation import GenerationConfig, StaticDecoding, generate
from bertology.models.gpt import GPTConfig, GPTLMHeadModel, StaticCache
from bertology.models.t5 import T5Config, T5ForConditionalGeneration

SMALL = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4)
LAYOUTS = {"gpt2": (transformers.GPT2LMHeadModel, transformers.GPT2Config),
           "openai-gpt": (transformers.OpenAIGPTLMHeadModel, transformers.OpenAIGPTConfig)}


@pytest.fixture(scope="module", params=list(LAYOUTS))
def pair(request, tmp_path_factory):
    """(transformers' model with every matrix drawn at std 0.3, so that a wrong wiring shows and
    continuations vary (random LayerNorms too make GPT-1's post-LN output one token forever); ours
    loaded from the directory it saved)."""
    model_class, config_class = LAYOUTS[request.param]
    torch.manual_seed(0)
    theirs = model_class(config_class(**SMALL)).eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 0.3)
    directory = tmp_path_factory.mktemp(request.param)
    theirs.save_pretrained(directory)
    return theirs, GPTLMHeadModel.from_pretrained(directory).eval()


def left_padded(lengths: list[int], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of these lengths (ids 1..98), left-padded with 0 to the longest: ids and mask (B, T)."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids, mask = torch.zeros(len(lengths), width, dtype=torch.long), torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, width - length:] = torch.randint(1, 99, (length,), generator=g)
        mask[row, width - length:] = 1
    return ids, mask


def static(**settings) -> GenerationConfig:
    return GenerationConfig(cache_implementation="static", **settings)


def dynamic(**settings) -> GenerationConfig:
    return GenerationConfig(cache_implementation="dynamic", **settings)


def test_the_static_cache_is_the_default_for_greedy_and_sampling_and_beam_search_keeps_the_dynamic_one(pair):
    _, ours = pair
    assert StaticDecoding.applies(ours, GenerationConfig())
    assert StaticDecoding.applies(ours, GenerationConfig(do_sample=True))
    assert not StaticDecoding.applies(ours, GenerationConfig(num_beams=2))
    assert not StaticDecoding.applies(ours, dynamic())
    assert not StaticDecoding.applies(ours, GenerationConfig(use_cache=False))


def test_greedy_ids_equal_the_dynamic_caches_and_transformers(pair):
    theirs, ours = pair
    ids, mask = left_padded([9, 6, 2])
    expected = theirs.generate(ids, attention_mask=mask, max_new_tokens=30, do_sample=False, pad_token_id=0)
    assert len({tuple(row) for row in expected[:, 9:].tolist()}) == 3  # the rows continue differently
    assert generate(ours, ids, mask, static(max_new_tokens=30)).tolist() == expected.tolist()
    assert generate(ours, ids, mask, dynamic(max_new_tokens=30)).tolist() == expected.tolist()


@pytest.mark.parametrize("settings", [dict(), dict(temperature=0.7, top_k=20, top_p=0.9)])
def test_seeded_samples_equal_the_dynamic_caches_and_transformers(pair, settings):
    """transformers draws from the global generator with torch.multinomial, as ours does when given none."""
    theirs, ours = pair
    ids, mask = left_padded([9, 6])
    torch.manual_seed(7)
    expected = theirs.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=True, pad_token_id=0,
                               top_k=settings.get("top_k", 0), **{k: v for k, v in settings.items() if k != "top_k"})
    torch.manual_seed(7)
    assert generate(ours, ids, mask, static(max_new_tokens=20, do_sample=True, **settings)).tolist() == expected.tolist()
    seeded = [generate(ours, ids, mask, config(max_new_tokens=20, do_sample=True, **settings),
                       generator=torch.Generator().manual_seed(3)) for config in (static, dynamic)]
    assert torch.equal(*seeded)


def test_a_left_padded_batch_gives_what_each_prompt_gives_alone(pair):
    _, ours = pair
    lengths = [9, 4, 1, 6]
    ids, mask = left_padded(lengths, seed=4)
    batch = generate(ours, ids, mask, static(max_new_tokens=15))
    for row, length in enumerate(lengths):
        alone = generate(ours, ids[row:row + 1, 9 - length:], config=static(max_new_tokens=15))
        assert batch[row, 9:].tolist() == alone[0, length:].tolist(), row


def test_ended_rows_are_padded_as_in_the_dynamic_cache(pair):
    """A row that ends keeps computing over the static cache (its mask says real); its tokens are padding."""
    _, ours = pair
    ids, mask = left_padded([9, 6])
    free = generate(ours, ids, mask, static(max_new_tokens=12))
    eos = free[1, 9 + 3].item()  # the second prompt's fourth new token ends it
    settings = dict(max_new_tokens=12, eos_token_id=eos, pad_token_id=98)
    got = generate(ours, ids, mask, static(**settings))
    assert torch.equal(got, generate(ours, ids, mask, dynamic(**settings)))
    assert (got[1, 9 + 4:] == 98).all()


def test_prompts_beyond_the_context_are_refused_with_the_static_cache_too():
    model = GPTLMHeadModel(GPTConfig(**SMALL)).eval()
    for settings in (static(max_new_tokens=10), static(max_new_tokens=10, compile=True)):
        with pytest.raises(UserError, match="after a prompt of 60 tokens goes beyond the model's context of 64"):
            generate(model, torch.ones(1, 60, dtype=torch.long), config=settings)
    with pytest.raises(UserError, match="a cache of 65 positions is beyond the model's context of 64"):
        StaticCache(model.config, 1, 65, "cpu", torch.float32)


@pytest.mark.parametrize("settings, message", [
    (dict(compile=True, num_beams=2), "compile (--compile) compiles the static cache's decode step"),
    (dict(compile=True, cache_implementation="dynamic"), "does not go with num_beams > 1"),
    (dict(compile=True, use_cache=False), "use_cache=False"),
    (dict(cache_implementation="paged"), "cache_implementation must be one of static, dynamic, got 'paged'")])
def test_settings_the_static_cache_cannot_run_are_one_line_errors(settings, message):
    model = GPTLMHeadModel(GPTConfig(**SMALL)).eval()
    with pytest.raises(UserError, match=re.escape(message)):
        generate(model, torch.tensor([[1, 2]]), config=GenerationConfig(**settings))


def test_a_family_without_a_static_cache_is_refused_compile_and_generates_with_the_dynamic_one():
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(vocab_size=50, d_model=16, d_kv=4, d_ff=24, num_layers=1,
                                                num_heads=4, decoder_start_token_id=0)).eval()
    with pytest.raises(UserError, match="has no static key/value cache whose decode step could be compiled"):
        generate(model, torch.tensor([[5, 6, 1]]), config=GenerationConfig(max_new_tokens=3, compile=True))
    assert generate(model, torch.tensor([[5, 6, 1]]), config=GenerationConfig(max_new_tokens=3)).shape == (1, 4)


@pytest.mark.slow
def test_the_compiled_decode_step_is_traced_once_and_replayed_without_recompiling(aot_eager):
    torch.manual_seed(0)
    model = GPTLMHeadModel(GPTConfig(**SMALL, pre_layer_norm=True, initializer_range=0.3)).eval()
    ids, mask = left_padded([9, 5])
    compiled = generate(model, ids, mask, static(max_new_tokens=31, compile=True))  # 30 decode steps after the prompt
    assert counters["stats"]["unique_graphs"] == 1
    assert torch.equal(compiled, generate(model, ids, mask, dynamic(max_new_tokens=31)))
    # Another call whose prompt and tokens fit the cache (40 positions, held as 64) reuses the cache
    # and the compiled step: other prompts, other lengths, sampling, nothing is compiled again.
    ids, mask = left_padded([12, 3], seed=5)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for settings in (dict(max_new_tokens=40), dict(max_new_tokens=20, do_sample=True)):
            compiled = generate(model, ids, mask, static(compile=True, **settings), torch.Generator().manual_seed(2))
            assert torch.equal(compiled, generate(model, ids, mask, dynamic(**settings), torch.Generator().manual_seed(2)))
    assert counters["stats"]["unique_graphs"] == 1
    # A cache made under inference_mode (as a benchmark runs), then generation outside it: a new cache.
    greedy = generate(model, ids[:1], mask[:1], dynamic(max_new_tokens=20))
    with torch.inference_mode():
        assert torch.equal(generate(model, ids[:1], mask[:1], static(max_new_tokens=20, compile=True)), greedy)
    assert torch.equal(generate(model, ids[:1], mask[:1], static(max_new_tokens=20, compile=True)), greedy)
