"""`bertology generate`: continue prompts with a GPT (pretrain --arch gpt, or transformers' GPT-1 /
GPT-2 directory with bertology's tokenizer files).

A prompt is encoded as the model saw its training text, [CLS] then the WordPiece tokens, and
the continuation ends at [SEP] (the end of a document in training), at a stop string, or after
--max-new-tokens. Prompts go through the model in left-padded batches (inference/generation.py).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import __version__
from ..config import setting
from ..data.corpus import text_lines
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..files import atomic_path
from ..inference.generation import GenerationConfig, generate
from ..inference.modeldir import load_model
from ..models import family_of
from ..models.gpt import GPTLMHeadModel
from ..text import is_invisible


@dataclass
class GenerateConfig:
    """What to continue and how: the settings of `bertology generate` (transformers' names)."""

    model: str = setting(required=True, metavar="MODEL", model_dir=True,
                         help="a GPT model directory (bertology pretrain --arch gpt)")
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


def load_generator(model_dir: str | Path) -> tuple[GPTLMHeadModel, Tokenizer]:
    """A GPT and its tokenizer; any other model is a one-line error saying why it cannot generate."""
    model = load_model(model_dir)
    if not isinstance(model, GPTLMHeadModel):
        family = family_of(model_dir)
        raise UserError(f"{model_dir}: a {family.name} model, which does not generate text; generate needs a GPT "
                        "(bertology pretrain --arch gpt)")
    return model, Tokenizer.from_pretrained(model_dir)


def _cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """The text before the first stop string, and whether there was one."""
    ends = [text.find(s) for s in stop if s and s in text]
    return (text[:min(ends)], True) if ends else (text, False)


def _continuation(tokenizer: Tokenizer, prompt_ids: list[int], new_ids: list[int]) -> str:
    """The text the new tokens add to the prompt's (a "##" piece joins the prompt's last word)."""
    before = tokenizer.decode(prompt_ids)
    after = tokenizer.decode(prompt_ids + new_ids)
    return after[len(before):] if after.startswith(before) else " " + tokenizer.decode(new_ids)


def generate_text(model: GPTLMHeadModel, tokenizer: Tokenizer, prompts: list[str], config: GenerationConfig,
                  stop: list[str] | None = None, batch_size: int = 8, seed: int = 0) -> list[str]:
    """The continuation of each prompt, as text (the prompt itself left out).

    Each prompt is [CLS] + its WordPieces; generation ends at [SEP], a `stop` string (left out
    of the text) or config.max_new_tokens. A prompt that is empty or does not fit the model's
    context with max_new_tokens more is a one-line error naming it.
    """
    stop = [s for s in stop or [] if s]
    # A copy: the caller's settings are not changed by this tokenizer's ids.
    config = dataclasses.replace(config, eos_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id)
    config.validate()
    context = model.config.n_positions
    encoded = []
    for number, prompt in enumerate(prompts, start=1):
        ids = [tokenizer.cls_token_id] + tokenizer.encode(prompt, add_special_tokens=False, truncation=False)
        if is_invisible(prompt) or len(ids) == 1:
            raise UserError(f"prompt {number} is empty: give some text to continue")
        if len(ids) + config.max_new_tokens > context:
            raise UserError(f"prompt {number} has {len(ids)} tokens: with --max-new-tokens {config.max_new_tokens} it "
                            f"does not fit the model's context of {context} tokens")
        encoded.append(ids)
    generator = torch.Generator().manual_seed(seed)
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
            if tokenizer.sep_token_id in row:  # the end of the text, then padding
                row = row[:row.index(tokenizer.sep_token_id)]
            while row and row[-1] == tokenizer.pad_token_id:  # padding after a stop string
                row.pop()
            texts.append(_cut_at_stop(_continuation(tokenizer, ids, row), stop)[0])
    return texts


@dataclass
class TextGenerator:
    """A loaded GPT directory, ready for prompts: what `bertology serve` answers on /generate."""

    model_dir: str
    model: GPTLMHeadModel
    tokenizer: Tokenizer

    @classmethod
    def load(cls, model_dir: str | Path) -> TextGenerator:
        """Load a GPT directory (any other family is a one-line error, as in load_generator)."""
        return cls(str(model_dir), *load_generator(model_dir))

    def generate(self, prompts: list[str], config: GenerationConfig, stop: list[str] | None = None,
                 batch_size: int = 8, seed: int = 0) -> list[str]:
        """The continuation of each prompt (see generate_text)."""
        return generate_text(self.model, self.tokenizer, prompts, config, stop, batch_size, seed)

    def describe(self) -> dict:
        """What /info reports about the model."""
        config = self.model.config
        return {"model_dir": self.model_dir, "task": None, "kind": "generation", "model_type": config.model_type,
                "parameters": sum(p.numel() for p in self.model.parameters()), "context": config.n_positions,
                "precision": "fp32", "version": __version__}


def run_generate(cfg: GenerateConfig) -> list[dict]:
    """Continue every prompt of --prompt and --input; print each prompt with its continuation
    and, with --out, write them as JSON lines. Returns the records."""
    prompts = list(cfg.prompt)
    if cfg.input:
        if not Path(cfg.input).is_file():
            raise UserError(f"{cfg.input}: no such file")
        prompts += [line for _, line in text_lines(Path(cfg.input)) if not is_invisible(line)]
    if not prompts:
        raise UserError("nothing to continue: give --prompt TEXT or --input FILE")
    model, tokenizer = load_generator(cfg.model)
    config = GenerationConfig(max_new_tokens=cfg.max_new_tokens, do_sample=cfg.do_sample, temperature=cfg.temperature,
                              top_k=cfg.top_k, top_p=cfg.top_p, num_beams=cfg.num_beams)
    continuations = generate_text(model, tokenizer, prompts, config, cfg.stop, cfg.batch_size, cfg.seed)
    records = [{"prompt": p, "continuation": c} for p, c in zip(prompts, continuations)]
    for record in records:
        print(record["prompt"] + record["continuation"])
    if cfg.out:
        with atomic_path(Path(cfg.out)) as tmp:
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        print(f"wrote {len(records)} continuation(s) to {cfg.out}", file=sys.stderr)
    return records
