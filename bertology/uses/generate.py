"""`bertology generate`: continue prompts with a GPT, or transform inputs with a T5 (pretrain
--arch gpt / t5, or transformers' GPT-1, GPT-2 or T5 directory with bertology's tokenizer files).

GPT: a prompt is encoded as the model saw its training text, [CLS] (a byte-level BPE's
<|endoftext|>) then the tokens, and the continuation ends at [SEP] (<|endoftext|>: the end of a
document in training), at a stop string, or after --max-new-tokens; prompts go through the model
in left-padded batches (inference/generation.py).
T5: an input is its tokens then [SEP] (its end of text); the decoder writes the output until
[SEP], a stop string or --max-new-tokens. The output keeps T5's sentinels (<extra_id_0> ...),
so a span-corruption model's answer shows which span it fills.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .. import __version__
from ..config import MAX_SEED, Device, check_settings, setting
from ..data.corpus import text_lines
from ..data.padding import pad_rows
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import atomic_path
from ..inference.generation import GenerationConfig, compile_seconds, generate, is_encoder_decoder
from ..inference.modeldir import ModelDir, open_model_dir
from ..ops import resolve_device
from ..text import is_invisible, normalize_text


@dataclass
class GenerateConfig(Device):
    """What to continue and how: the settings of `bertology generate` (transformers' names)."""

    model: str = setting(required=True, metavar="MODEL", model_dir=True,
                         help="a GPT or T5 model directory (bertology pretrain --arch gpt / t5)")
    prompt: list[str] = setting([], metavar="TEXT", help="the prompts to continue (several after one flag); or "
                                                         "--input")
    input: str | None = setting(None, metavar="FILE", help="a text file with one prompt per line (default: none)")
    out: str | None = setting(None, metavar="FILE", output="file",
                              help="also write one JSON object per prompt here: prompt, continuation (default: "
                                   "print only)")
    max_new_tokens: int = setting(50, positive=True, help="the most tokens added to each prompt")
    do_sample: bool = setting(False, help="sample each token instead of taking the most probable one")
    temperature: float = setting(1.0, positive=True, help="sampling: divide the logits by this (below 1: bolder "
                                                          "choices of the likely, above 1: more diverse)")
    top_k: int | None = setting(None, positive=True, help="sampling: only the k most probable tokens (default: all)")
    top_p: float | None = setting(None, positive=True, help="sampling: only the most probable tokens whose "
                                                            "probabilities add up to this, in (0, 1] (default: all)")
    num_beams: int = setting(1, positive=True, help="beam search over this many continuations (1: none)")
    stop: list[str] = setting([], metavar="TEXT", help="end a continuation before the first of these strings")
    batch_size: int = setting(8, positive=True, help="prompts per forward pass")
    seed: int = setting(0, help="the random seed of sampling")
    compile: bool = setting(False, help="compile the decode step of greedy decoding and sampling (torch.compile; "
                                        "a CUDA graph on a GPU): the first call waits for the compiler, every "
                                        "token after it runs faster")


Generator = nn.Module  # a model of a family whose spec has `generation`: its language model (GPT) or T5


def load_generator(model_dir: str | Path | ModelDir, device: str = "auto") -> tuple[Generator, Tokenizer]:
    """A generating model (its family's spec has `generation`: a GPT, a T5) on `device` (the
    `--device` setting) and its tokenizer; any other model is a one-line error saying why it cannot
    generate. `model_dir` may be opened already."""
    opened = model_dir if isinstance(model_dir, ModelDir) else open_model_dir(model_dir)
    if opened.spec.generation is None:
        raise UserError(f"{model_dir}: a {opened.family.name} model, which does not generate text; generate needs a "
                        "GPT or a T5 (bertology pretrain --arch gpt / t5)")
    model = opened.load_model()
    if type(model) is not opened.spec.default_class:
        raise UserError(f"{model_dir}: a {type(model).__name__} (fine-tuned with a task head), which does not "
                        f"generate text; generate takes the {opened.spec.default_class.__name__} it started from")
    return model.to(resolve_device(device)), opened.tokenizer()


def _cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """The text before the first stop string, and whether there was one."""
    ends = [text.find(s) for s in stop if s and s in text]
    return (text[:min(ends)], True) if ends else (text, False)


def _continuation(tokenizer: Tokenizer, prompt_ids: list[int], new_ids: list[int]) -> str:
    """The text the new tokens add to the prompt's (a "##" piece joins the prompt's last word)."""
    before = tokenizer.decode(prompt_ids)
    after = tokenizer.decode(prompt_ids + new_ids)
    return after[len(before):] if after.startswith(before) else " " + tokenizer.decode(new_ids)


def _encode_prompts(model: Generator, tokenizer: Tokenizer, prompts: list[str], max_new_tokens: int) -> list[list[int]]:
    """Each prompt's ids: [CLS] + tokens for a GPT, tokens + [SEP] for a T5. An empty prompt, or
    one that does not fit the model's context (a GPT: with max_new_tokens more), is a one-line error."""
    encoder_decoder = is_encoder_decoder(model)
    context = model.config.n_positions
    if encoder_decoder and max_new_tokens + 1 > context:
        raise UserError(f"--max-new-tokens {max_new_tokens} is longer than the model's decoder limit of {context - 1} "
                        "tokens (n_positions, the start token included)")
    encoded = []
    for number, prompt in enumerate(prompts, start=1):
        tokens = tokenizer.encode(prompt, add_special_tokens=False, truncation=False)
        if is_invisible(prompt) or not tokens:
            raise UserError(f"prompt {number} is empty: give some text to {'transform' if encoder_decoder else 'continue'}")
        ids = tokens + [tokenizer.end_token_id] if encoder_decoder else [tokenizer.start_token_id] + tokens
        if encoder_decoder and len(ids) > context:
            raise UserError(f"prompt {number} has {len(ids)} tokens: more than the model's input limit of {context} "
                            "tokens (n_positions)")
        if not encoder_decoder and len(ids) + max_new_tokens > context:
            raise UserError(f"prompt {number} has {len(ids)} tokens: with --max-new-tokens {max_new_tokens} it "
                            f"does not fit the model's context of {context} tokens")
        encoded.append(ids)
    return encoded


def _generated_ids(row: list[int], tokenizer: Tokenizer) -> list[int]:
    """New token ids up to the end of text ([SEP]), without the padding after a stop string."""
    if tokenizer.end_token_id in row:
        row = row[:row.index(tokenizer.end_token_id)]
    while row and row[-1] == tokenizer.pad_token_id:
        row = row[:-1]
    return row


def _transform(model: Generator, tokenizer: Tokenizer, encoded: list[list[int]],
               config: GenerationConfig, stop: list[str], batch_size: int, generator: torch.Generator) -> list[str]:
    """An encoder-decoder's output for each encoded input, as text (sentinels kept)."""
    def text_of(ids: list[int]) -> str:
        return tokenizer.decode([i for i in ids if i != tokenizer.pad_token_id], skip_special_tokens=False)

    texts = []
    for start in range(0, len(encoded), batch_size):
        batch = encoded[start:start + batch_size]
        padded = pad_rows(batch, [[]] * len(batch), tokenizer.pad_token_id)

        def stopped(new: torch.Tensor) -> torch.Tensor:
            return torch.tensor([_cut_at_stop(text_of(row.tolist()), stop)[1] for row in new])

        output = generate(model, padded["input_ids"], padded["attention_mask"], config, generator,
                          stopping=stopped if stop else None)
        texts += [_cut_at_stop(text_of(_generated_ids(row, tokenizer)), stop)[0] for row in output[:, 1:].tolist()]
    return texts


def generate_text(model: Generator, tokenizer: Tokenizer, prompts: list[str], config: GenerationConfig,
                  stop: list[str] | None = None, batch_size: int = 8, seed: int = 0) -> list[str]:
    """A GPT's continuation of each prompt (the prompt itself left out), or a T5's output for
    each input, as text.

    GPT: each prompt is [CLS] + its tokens. T5: its tokens + [SEP]. Generation ends at [SEP],
    a `stop` string (left out of the text) or config.max_new_tokens. A prompt that is empty or
    does not fit the model's context is a one-line error naming it.
    """
    prompts = [normalize_text(prompt) for prompt in prompts]  # the readers' rules, lone surrogates included
    stop = [normalize_text(s) for s in stop or [] if s]
    # A copy: the caller's settings are not changed by this tokenizer's ids.
    config = dataclasses.replace(config, eos_token_id=tokenizer.end_token_id, pad_token_id=tokenizer.pad_token_id)
    config.validate()
    if type(seed) is not int or not 0 <= seed <= MAX_SEED:
        raise UserError(f"seed (--seed) must be an integer from 0 to {MAX_SEED:,}, got {seed!r}")
    encoded = _encode_prompts(model, tokenizer, prompts, config.max_new_tokens)
    generator = torch.Generator().manual_seed(seed)
    if is_encoder_decoder(model):
        return _transform(model, tokenizer, encoded, config, stop, batch_size, generator)
    texts = []
    for start in range(0, len(encoded), batch_size):
        batch = encoded[start:start + batch_size]
        width = max(len(ids) for ids in batch)
        input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(ids)) + ids for ids in batch])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch])

        def stopped(new: torch.Tensor) -> torch.Tensor:
            return torch.tensor([_cut_at_stop(_continuation(tokenizer, ids, row.tolist()), stop)[1]
                                 for ids, row in zip(batch, new)])

        output = generate(model, input_ids, mask, config, generator, stopping=stopped if stop else None)
        for ids, row in zip(batch, output[:, width:].tolist()):
            texts.append(_cut_at_stop(_continuation(tokenizer, ids, _generated_ids(row, tokenizer)), stop)[0])
    return texts


@dataclass
class TextGenerator:
    """A loaded GPT or T5 directory, ready for prompts: what `bertology serve` answers on /generate."""

    model_dir: str
    family: str
    model: Generator
    tokenizer: Tokenizer

    @classmethod
    def load(cls, model_dir: str | Path, device: str = "auto") -> TextGenerator:
        """Load a GPT or T5 directory (any other family is a one-line error, as in load_generator)."""
        return cls.open(open_model_dir(model_dir), device)

    @classmethod
    def open(cls, model_dir: ModelDir, device: str = "auto") -> TextGenerator:
        """`load` of a directory already opened (its config.json read), its model on `device`."""
        return cls(str(model_dir.path), model_dir.family.name, *load_generator(model_dir, device))

    def generate(self, prompts: list[str], config: GenerationConfig, stop: list[str] | None = None,
                 batch_size: int = 8, seed: int = 0) -> list[str]:
        """The continuation (GPT) or output (T5) of each prompt (see generate_text)."""
        return generate_text(self.model, self.tokenizer, prompts, config, stop, batch_size, seed)

    def describe(self) -> dict:
        """What /info reports about the model."""
        config = self.model.config
        return {"model_dir": self.model_dir, "task": None, "kind": "generation", "model_type": config.model_type,
                "encoder_decoder": is_encoder_decoder(self.model),
                "parameters": sum(p.numel() for p in self.model.parameters()), "context": config.n_positions,
                "precision": "fp32", "version": __version__}


def run_generate(cfg: GenerateConfig) -> list[dict]:
    """Continue (GPT) or transform (T5) every prompt of --prompt and --input; print each prompt
    with its continuation, or each output, and with --out write them as JSON lines ({prompt,
    continuation} or {prompt, output}). Returns the records."""
    check_settings(cfg)  # --out among them: a folder there fails now, not after generating
    prompts = list(cfg.prompt)
    if cfg.input:
        if not Path(cfg.input).is_file():
            raise UserError(f"{cfg.input}: no such file")
        prompts += [line for _, line in text_lines(Path(cfg.input)) if not is_invisible(line)]
    prompts = [normalize_text(prompt) for prompt in prompts]  # printed and written as generated from
    if not prompts:
        raise UserError("nothing to continue: give --prompt TEXT or --input FILE")
    model, tokenizer = load_generator(cfg.model, cfg.device)
    config = GenerationConfig(max_new_tokens=cfg.max_new_tokens, do_sample=cfg.do_sample, temperature=cfg.temperature,
                              top_k=cfg.top_k, top_p=cfg.top_p, num_beams=cfg.num_beams, compile=cfg.compile)
    generated = generate_text(model, tokenizer, prompts, config, cfg.stop, cfg.batch_size, cfg.seed)
    if compile_seconds(model) is not None:
        print(f"compiling took {compile_seconds(model):.1f} s (the first decode step, compiled and run)",
              file=sys.stderr)
    if is_encoder_decoder(model):
        records = [{"prompt": p, "output": o} for p, o in zip(prompts, generated)]
        lines = [record["output"] for record in records]
    else:
        records = [{"prompt": p, "continuation": c} for p, c in zip(prompts, generated)]
        lines = [record["prompt"] + record["continuation"] for record in records]
    for line in lines:
        print(line)
    if cfg.out:
        with atomic_path(Path(cfg.out)) as tmp:
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        print(f"wrote {len(records)} continuation(s) to {cfg.out}", file=sys.stderr)
    return records
