"""Text generation from a left-to-right language model or an encoder-decoder: greedy, sampling, beam search.

The names and defaults are transformers' `generate`: greedy unless `do_sample` (then
`temperature`, `top_k`, `top_p` shape the distribution, in that order) or `num_beams` > 1.
A key/value cache makes each new token cost one position's work (`use_cache=False` recomputes
the whole sequence every step, for comparison). Prompts of different lengths go in one batch
left-padded: the model counts positions from each prompt's first real token, so a padded
prompt continues exactly as it would alone. An encoder-decoder (T5) encodes its input once;
its decoder starts from `decoder_start_token_id` and generates as a decoder-only model does,
attending to the encoder states (their keys and values cached too).

Greedy decoding and sampling use the family's static cache where its spec has one
(`cache_implementation="static"`, the default): keys and values preallocated for the prompt and
every new token, written in place, so that each new token runs at the same shapes. `compile=True`
compiles that one decode step (torch.compile; on a GPU, mode "reduce-overhead" captures it as a
CUDA graph and replays it for every token, one launch instead of hundreds: what a small model at
batch 1 spends its time on). Beam search reorders its cache's rows at every step and keeps the
cache that grows by concatenation, as does a family without a static cache (T5).
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import UserError
from ..memory import FP32_BYTES, check_fits
from ..models import spec_for
from ..ops import position_ids_for


# Beam search divides a score by length ** length_penalty: beyond this, a length of 2 already
# divides by zero or overflows (transformers' values lie in -2 .. 2).
MAX_LENGTH_PENALTY = 10.0
CACHE_IMPLEMENTATIONS = ("static", "dynamic")


@dataclass
class GenerationConfig:
    """How to continue a prompt (transformers' names)."""

    max_new_tokens: int = 20
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    num_beams: int = 1
    length_penalty: float = 1.0  # beam search: a finished hypothesis scores sum(log p) / length ** this
    eos_token_id: int | None = None
    pad_token_id: int | None = None  # written after a sequence's end of text (default: eos, else 0)
    use_cache: bool = True
    # "static": greedy and sampling write a preallocated cache in place, where the family has one;
    # "dynamic": the cache grows by concatenation (beam search and T5 always use this one).
    cache_implementation: str = "static"
    compile: bool = False  # torch.compile the static cache's decode step (CUDA graphs on a GPU)

    def validate(self) -> None:
        """One-line errors naming the setting, before any work."""
        if type(self.max_new_tokens) is not int or self.max_new_tokens < 1:
            raise UserError(f"max_new_tokens (--max-new-tokens) must be a positive integer, got {self.max_new_tokens!r}")
        if not 0 < self.temperature < math.inf:  # inf would sample uniformly; nan fails every comparison
            raise UserError(f"temperature (--temperature) must be positive and finite, got {self.temperature!r}")
        if self.top_k is not None and (type(self.top_k) is not int or self.top_k < 1):
            raise UserError(f"top_k (--top-k) must be a positive integer, got {self.top_k!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise UserError(f"top_p (--top-p) must be in (0, 1], got {self.top_p!r}")
        if type(self.num_beams) is not int or self.num_beams < 1:
            raise UserError(f"num_beams (--num-beams) must be a positive integer, got {self.num_beams!r}")
        if self.num_beams > 1 and self.do_sample:
            raise UserError("num_beams > 1 (--num-beams) with do_sample (--do-sample): choose beam search or sampling")
        if not -MAX_LENGTH_PENALTY <= self.length_penalty <= MAX_LENGTH_PENALTY:
            raise UserError(f"length_penalty must be a number from {-MAX_LENGTH_PENALTY} to {MAX_LENGTH_PENALTY}, "
                            f"got {self.length_penalty!r}")
        if self.cache_implementation not in CACHE_IMPLEMENTATIONS:
            raise UserError(f"cache_implementation must be one of {', '.join(CACHE_IMPLEMENTATIONS)}, "
                            f"got {self.cache_implementation!r}")
        if self.compile and (self.num_beams > 1 or not self.use_cache or self.cache_implementation == "dynamic"):
            raise UserError("compile (--compile) compiles the static cache's decode step of greedy decoding and "
                            "sampling: it does not go with num_beams > 1 (--num-beams), use_cache=False or a "
                            "dynamic cache")

    @property
    def padding_id(self) -> int:
        """The id written after a sequence has ended."""
        if self.pad_token_id is not None:
            return self.pad_token_id
        return self.eos_token_id if self.eos_token_id is not None else 0


def filter_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """Sampling's warping of next-token logits (B, V): divide by `temperature`, keep the `top_k`
    largest, then the smallest set whose probability reaches `top_p` (nucleus); the rest -inf.

    The logits are shifted so that each row's largest is 0 before the division (the distribution
    is the same): a tiny temperature then makes the rest -inf, not every logit +-inf and NaN.
    """
    logits = (logits - logits.max(-1, keepdim=True).values) / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probabilities = ordered.softmax(-1)
        before = probabilities.cumsum(-1) - probabilities  # the mass of the tokens ranked above each one
        drop = before >= top_p
        drop[:, 0] = False  # the most probable token always stays (a top_p of 1e-300 is 0 in float32)
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


def _step(model, ids: torch.Tensor, mask: torch.Tensor, past, use_cache: bool,
          encoded: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, list | None]:
    """Next-token logits (B, V) and the new cache; with a cache only the new tokens are fed.
    Decoder-only: positions count from each sequence's first real token, so left padding
    changes nothing. Encoder-decoder: `encoded` holds the encoder states (B, S, D) and mask (B, S)."""
    if encoded is not None:
        states, encoder_mask = encoded
        fed = ids.shape[1] if past is None or not use_cache else 1
        out = model(attention_mask=encoder_mask, decoder_input_ids=ids[:, -fed:], encoder_outputs=states,
                    past_key_values=past if use_cache else None)
        return out.logits[:, -1].float(), out.past_key_values if use_cache else None
    positions = position_ids_for(mask)
    if not use_cache:
        return model(ids, mask, position_ids=positions).logits[:, -1].float(), None
    fed = ids.shape[1] if past is None else 1
    out = model(ids[:, -fed:], mask, position_ids=positions[:, -fed:], past_key_values=past)
    return out.logits[:, -1].float(), out.past_key_values


def decode_step(model, cache, attention_mask: torch.Tensor, positions: torch.Tensor, input_ids: torch.Tensor,
                cache_position: torch.Tensor) -> torch.Tensor:
    """The next-token logits (B, V), fp32, after the new tokens input_ids (B, T), whose keys and
    values go into the static `cache` at cache_position (T,); attention_mask (1 = a real token) and
    positions (each token's position id) are (B, L) over the cache's L positions. One token at a
    time (T = 1), every call has the same shapes: the step that `compile` captures once."""
    out = model(input_ids, attention_mask, position_ids=positions.index_select(1, cache_position),
                past_key_values=cache, cache_position=cache_position)
    return out.logits[:, -1].float()


@dataclass
class _Compiled:
    """A model's compiled decode step, and the static cache it last ran on (kept for the next
    generation that fits it: the same buffers, so nothing is compiled or captured again; one
    generation at a time per model, as the command line runs them)."""

    step: Callable[..., torch.Tensor]
    cache: Any = None
    seconds: float | None = None  # its first call, compiled and run (a CUDA graph is captured at the second)


# model -> its compiled decode step; dropped with the model.
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class StaticDecoding:
    """The model calls of greedy decoding and sampling over the family's static cache: the prompts
    (B, T) in one call, then one new token per call at fixed shapes, compiled with `compile`.

    The cache holds the prompt and max_new_tokens more (compiled: rounded up to a power of two, at
    most the model's context, and reused by later calls that fit, so that the command's batches of
    prompts of varying lengths share one compiled step). Positions after the prompt count as real tokens: a
    row that has ended keeps computing, but its tokens are replaced by padding, as in the dynamic path.
    """

    def __init__(self, model, mask: torch.Tensor, max_new_tokens: int, compile: bool):
        batch, prompt_length = mask.shape
        length = prompt_length + max_new_tokens
        parameter = next(model.parameters())
        make_cache = spec_for(model.config).static_cache
        if compile:
            compiled = _COMPILED.get(model)
            if compiled is None:
                # On a GPU "reduce-overhead" replays the step as a CUDA graph; fullgraph: a graph break
                # would split the capture, so it is an error rather than a silent slow path.
                mode = "reduce-overhead" if parameter.device.type == "cuda" else None
                compiled = _COMPILED[model] = _Compiled(torch.compile(decode_step, fullgraph=True, mode=mode))
            cache = compiled.cache
            # (Buffers made under inference_mode cannot be written outside it, and the other way round.)
            if (cache is None or cache.max_batch_size != batch or cache.max_cache_len < length
                    or cache.layers[0][0].device != parameter.device or cache.layers[0][0].dtype != parameter.dtype
                    or cache.layers[0][0].is_inference() != torch.is_inference_mode_enabled()):
                context = spec_for(model.config).context_length(model.config) or length
                cache = compiled.cache = make_cache(model.config, batch, min(1 << (length - 1).bit_length(), context),
                                                    parameter.device, parameter.dtype)
            self.cache, self.compiled = cache, compiled
        else:
            self.cache, self.compiled = make_cache(model.config, batch, length, parameter.device, parameter.dtype), None
        self.model = model
        self.mask = mask.new_ones(batch, self.cache.max_cache_len)
        self.mask[:, :prompt_length] = mask
        self.positions = position_ids_for(self.mask)
        self.cache_positions = torch.arange(self.cache.max_cache_len, device=mask.device)
        self.filled = 0

    @staticmethod
    def applies(model, config: GenerationConfig) -> bool:
        """Whether `config` decodes greedily or samples over the family's static cache, rather than
        over the dynamic one (beam search, `use_cache=False`, a family without one)."""
        return (config.use_cache and config.cache_implementation != "dynamic" and config.num_beams == 1
                and spec_for(model.config).static_cache is not None)

    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The next-token logits (B, V), fp32, after the prompts (the first call) or the last new
        tokens (B, 1)."""
        cache_position = self.cache_positions[self.filled:self.filled + input_ids.shape[1]]
        self.filled += input_ids.shape[1]
        if self.compiled is None or input_ids.shape[1] > 1:  # the prompt: its length varies, so it runs eagerly
            return decode_step(self.model, self.cache, self.mask, self.positions, input_ids, cache_position)
        torch.compiler.cudagraph_mark_step_begin()  # a new replay: the last one's logits have been read
        start = time.perf_counter()
        logits = self.compiled.step(self.model, self.cache, self.mask, self.positions, input_ids, cache_position)
        if self.compiled.seconds is None:
            self.compiled.seconds = time.perf_counter() - start
        return logits


def compile_seconds(model) -> float | None:
    """How long the first call of `model`'s compiled decode step took (compiling it included), or
    None if generation has not compiled it."""
    compiled = _COMPILED.get(model)
    return compiled.seconds if compiled is not None else None


@torch.no_grad()
def generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
             config: GenerationConfig | None = None, generator: torch.Generator | None = None,
             stopping: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Continue each prompt.

    Args:
        model: a left-to-right LM: model(ids (B, T), mask (B, S), past_key_values=...) -> .logits (B, T, V);
            or an encoder-decoder (a config with `decoder_start_token_id`, and `model.encode`).
        input_ids: (B, T) prompts, left-padded when their lengths differ; an encoder-decoder's
            inputs, padded either side.
        attention_mask: (B, T), 1 = a real token (default: all real).
        generator: the random source of sampling, for reproducible samples.
        stopping: greedy and sampling: called after each step with the new tokens so far (B, n);
            returns (B,) bool, True for a sequence to end there (stop strings use it).
    Returns:
        (B, T + n) the prompts followed by n <= max_new_tokens new tokens; a sequence that ended
        (eos) early is filled with the padding id. An encoder-decoder's rows are its decoder's,
        (B, 1 + n): decoder_start_token_id, then the new tokens (as transformers' generate).
    """
    config = config or GenerationConfig()
    config.validate()
    if input_ids.shape[1] == 0:
        raise UserError("the prompt is empty: give at least one token")
    check_fits_model(model, input_ids.shape, config)
    if config.compile and not StaticDecoding.applies(model, config):
        raise UserError(f"compile (--compile): {spec_for(model.config).describe(model.config)} has no static "
                        "key/value cache whose decode step could be compiled")
    device = next(model.parameters()).device  # the prompts go where the model is
    input_ids = input_ids.to(device)
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.to(device, input_ids.dtype)
    model.eval()
    encoded = None
    if is_encoder_decoder(model):
        encoded = (model.encode(input_ids, mask), mask)
        input_ids = input_ids.new_full((len(input_ids), 1), model.config.decoder_start_token_id)
        mask = torch.ones_like(input_ids)
    if config.num_beams > 1:
        return _beam_search(model, input_ids, mask, config, encoded)
    static = None
    if StaticDecoding.applies(model, config):
        static = StaticDecoding(model, mask, config.max_new_tokens, config.compile)
    ids, past = input_ids, None
    unseen = input_ids  # what the static cache has not read: the prompts, then each step's new tokens
    finished = torch.zeros(len(ids), dtype=torch.bool, device=ids.device)
    for _ in range(config.max_new_tokens):
        if static is not None:
            logits = static(unseen)
        else:
            logits, past = _step(model, ids, mask, past, config.use_cache, encoded)
        if config.do_sample:
            probabilities = filter_logits(logits, config.temperature, config.top_k, config.top_p).softmax(-1)
            # Drawn where the generator is (a CPU one by default): the same seed gives the same samples on any device.
            where = generator.device if generator is not None else device
            chosen = torch.multinomial(probabilities.to(where), 1, generator=generator).squeeze(1).to(device)
        else:
            chosen = logits.argmax(-1)
        chosen = chosen.masked_fill(finished, config.padding_id)
        ids = torch.cat([ids, chosen[:, None]], dim=1)
        unseen = chosen[:, None]  # (B, 1), not a slice of ids: the same strides at every step, so no recompilation
        if static is None:
            mask = torch.cat([mask, (~finished).to(mask.dtype)[:, None]], dim=1)
        if config.eos_token_id is None and stopping is None:
            continue  # nothing ends a row early: no need to wait for the device to say whether all have
        if config.eos_token_id is not None:
            finished |= chosen == config.eos_token_id
        if stopping is not None:
            finished |= stopping(ids[:, input_ids.shape[1]:]).to(device)
        if finished.all():
            break
    return ids


def check_fits_model(model, prompts: tuple[int, int], config: GenerationConfig) -> None:
    """One-line errors, before any work, for settings the model cannot run on `prompts` (B, T):
    more beams than its vocabulary has tokens or the memory holds (each step's B x beams rows of
    logits, their log-probabilities and the candidates), or (a decoder-only model) a prompt and
    its new tokens beyond its positions."""
    batch, prompt_length = prompts
    vocab_size = model.config.vocab_size
    if config.num_beams > vocab_size:
        raise UserError(f"num_beams (--num-beams) {config.num_beams} is more than the model's {vocab_size:,} tokens")
    check_fits(3 * FP32_BYTES * batch * config.num_beams * vocab_size,
               f"num_beams (--num-beams) {config.num_beams} for {batch} prompt(s) over {vocab_size:,} tokens")
    positions = spec_for(model.config).context_length(model.config)
    if not is_encoder_decoder(model) and positions and prompt_length + config.max_new_tokens > positions:
        raise UserError(f"max_new_tokens (--max-new-tokens) {config.max_new_tokens} after a prompt of {prompt_length} "
                        f"tokens goes beyond the model's context of {positions} positions (n_positions)")


def is_encoder_decoder(model) -> bool:
    """Whether `model` encodes an input and decodes from a start token (T5), rather than continuing a
    prompt: its family's spec says how it generates."""
    return spec_for(model.config).generation == "seq2seq"


def _beam_search(model, input_ids: torch.Tensor, mask: torch.Tensor, config: GenerationConfig,
                 encoded: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Beam search: keep the num_beams most probable continuations of each prompt; a hypothesis
    that emits eos is finished and scored sum(log p) / length ** length_penalty (length of the
    new tokens). A prompt is done when it has num_beams finished hypotheses and no running one
    can still beat them, or at max_new_tokens (then the running beams compete too).
    Returns the best hypothesis per prompt, (B, T + n), shorter ones padded."""
    batch, beams = len(input_ids), config.num_beams
    ids = input_ids.repeat_interleave(beams, dim=0)  # (B * beams, T)
    mask = mask.repeat_interleave(beams, dim=0)
    if encoded is not None:  # a prompt's beams share its encoder states: no reordering needed later
        encoded = tuple(t.repeat_interleave(beams, dim=0) for t in encoded)
    scores = torch.full((batch, beams), float("-inf"), device=ids.device)
    scores[:, 0] = 0.0  # the beams start identical: count only one of them
    finished: list[list[tuple[float, torch.Tensor]]] = [[] for _ in range(batch)]
    done = [False] * batch
    past = None
    for step in range(1, config.max_new_tokens + 1):
        logits, past = _step(model, ids, mask, past, config.use_cache, encoded)
        vocab = logits.shape[-1]
        candidates = (scores[:, :, None] + logits.log_softmax(-1).view(batch, beams, vocab)).view(batch, -1)
        top_scores, top = candidates.topk(2 * beams, dim=1)  # enough to refill the beams after eos ones leave
        next_scores = torch.full_like(scores, float("-inf"))
        next_beam = torch.zeros(batch, beams, dtype=torch.long, device=ids.device)
        next_token = torch.full((batch, beams), config.padding_id, dtype=torch.long, device=ids.device)
        for b in range(batch):
            kept = 0
            for score, index in zip(top_scores[b].tolist(), top[b].tolist()):
                beam, token = divmod(index, vocab)
                if done[b] or kept == beams or score == float("-inf"):
                    break
                if token == config.eos_token_id:
                    hypothesis = torch.cat([ids[b * beams + beam, input_ids.shape[1]:], ids.new_tensor([token])])
                    finished[b].append((score / step ** config.length_penalty, hypothesis))
                    continue
                next_scores[b, kept], next_beam[b, kept], next_token[b, kept] = score, beam, token
                kept += 1
            finished[b] = sorted(finished[b], key=lambda item: -item[0])[:beams]
            best_running = next_scores[b, 0].item() / step ** config.length_penalty
            if len(finished[b]) == beams and finished[b][-1][0] >= best_running:
                done[b] = True
        if all(done):
            break
        rows = (torch.arange(batch, device=ids.device)[:, None] * beams + next_beam).view(-1)
        ids = torch.cat([ids[rows], next_token.view(-1, 1)], dim=1)
        mask = torch.cat([mask[rows], torch.ones_like(mask[:, :1])], dim=1)
        if past is not None:
            past = [tuple(t[rows] for t in layer) for layer in past]
        scores = next_scores
    results = []
    for b in range(batch):
        pool = list(finished[b])
        if not done[b]:  # out of steps: the running beams are candidates too
            length = ids.shape[1] - input_ids.shape[1]
            pool += [(scores[b, k].item() / max(length, 1) ** config.length_penalty,
                      ids[b * beams + k, input_ids.shape[1]:]) for k in range(beams)
                     if scores[b, k] > float("-inf")]
        best = max(pool, key=lambda item: item[0])[1]
        results.append(torch.cat([input_ids[b], best]))
    width = max(len(r) for r in results)
    return torch.stack([torch.cat([r, r.new_full((width - len(r),), config.padding_id)]) for r in results])
