"""Text-to-text fine-tuning: a T5 learns a sequence task as input and target strings.

T5 (Raffel et al. 2020) casts every task as text: the input names the task and its fields,
the target is the answer written out, and the model is trained with the same cross-entropy
as in pre-training. The casting is T5's own for GLUE:

    sst2 sentence: a gorgeous, witty movie                     -> positive
    mrpc sentence1: ... sentence2: ...                         -> equivalent
    stsb sentence1: ... sentence2: ...                         -> 3.8   (the score rounded to 0.2)

Other classification tasks write their label names (GLUE's 0/1 tasks as T5's words). The
dev score is the task's official metric on the *decoded* text: the model generates greedily,
its output is read back as a label or a number, and an output that is neither (T5's "invalid"
predictions) counts as wrong: as a label other than the gold one, or for a score as the middle
of the range. Their share is reported as `invalid`.

Token-level and span tasks (CoNLL as a tagged string, SQuAD as question/context -> answer)
are not cast yet: finetune refuses them for a T5 with a one-line error.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..data.padding import pad_rows
from ..data.tokenizer import Tokenizer
from ..errors import UserError
from ..inference.generation import GenerationConfig, generate
from ..inference.modeldir import describe_task
from ..inference.predict import score
from ..models.t5 import T5Config, T5ForConditionalGeneration
from ..ops import IGNORE_INDEX
from ..tasks.inputs import InputSettings
from ..tasks.readers import SequenceExample, TaskSpec
from ..training.loop import StepOutput, Trainer
from ..training.tasks import BestModel, EpochBatches, RunData, epoch_train_config, fit_and_finish

# T5's words for GLUE's numbered labels (its preprocessors' label names).
VERBALIZERS = {
    "sst2": {"0": "negative", "1": "positive"},
    "mrpc": {"0": "not_equivalent", "1": "equivalent"},
    "qqp": {"0": "not_duplicate", "1": "duplicate"},
    "cola": {"0": "unacceptable", "1": "acceptable"},
    "wnli": {"0": "not_entailment", "1": "entailment"},
}
SCORE_STEP = 0.2  # STS-B's targets: the score rounded to the nearest 0.2, as T5 does


@dataclass
class Casting:
    """How one task's examples become input and target strings, and outputs become labels."""

    spec: TaskSpec

    def __post_init__(self) -> None:
        if self.spec.kind != "sequence":
            raise UserError(f"{self.spec.name}: text-to-text fine-tuning casts sequence tasks (classification, "
                            f"regression) here; {self.spec.kind}-level tasks are not cast yet (use a BERT)")
        names = VERBALIZERS.get(self.spec.name) or {label: label.replace("_", " ") for label in self.spec.labels or ()}
        self.words = names
        self.labels_of = {word: label for label, word in names.items()}

    def source(self, example: SequenceExample) -> str:
        """The input: the task's name and its fields ("sst2 sentence: ...")."""
        if self.spec.pair:
            return f"{self.spec.name} sentence1: {example.text_a} sentence2: {example.text_b}"
        return f"{self.spec.name} sentence: {example.text_a}"

    def target(self, example: SequenceExample) -> str:
        """The answer as text: a label's word, or a score rounded to SCORE_STEP."""
        if self.spec.regression:
            return f"{round(float(example.label) / SCORE_STEP) * SCORE_STEP:.1f}"
        return self.words[str(example.label)]

    def parse(self, text: str, example: SequenceExample) -> tuple[str | float, bool]:
        """(the prediction an output means, whether it was valid). Invalid outputs count as wrong."""
        text = text.strip()
        if self.spec.regression:
            try:
                return float(text), True
            except ValueError:
                low, high = self.spec.label_range or (0.0, 1.0)
                return (low + high) / 2, False
        if text in self.labels_of:
            return self.labels_of[text], True
        return next(label for label in self.spec.labels if label != str(example.label)), False

    def answer_tokens(self, tokenizer: Tokenizer) -> int:
        """The most tokens an answer needs (the longest label word, or a score such as "3.8"),
        its end included: what generation is allowed, plus one token of slack."""
        answers = ["5.0"] if self.spec.regression else list(self.words.values())
        return max(len(tokenizer.encode(answer, add_special_tokens=False, truncation=False)) for answer in answers) + 2


@dataclass
class TextPairs:
    """A task's training examples as token ids, encoded once for every seed (RunData.train_encoded)."""

    inputs: list[list[int]]
    targets: list[list[int]]
    too_long: int  # inputs cut to --max-seq-len


def encode_pairs(casting: Casting, tokenizer: Tokenizer, examples: list[SequenceExample], max_input: int,
                 max_target: int | None) -> tuple[list[list[int]], list[list[int]] | None, int]:
    """Token ids of the inputs (cut to max_input, [SEP] last) and of the targets ([SEP] last),
    and how many inputs were cut. A target longer than `max_target` is a one-line error."""
    inputs, targets, cut = [], [] if max_target else None, 0
    for example in examples:
        ids = tokenizer.encode(casting.source(example), add_special_tokens=False, truncation=False)
        cut += len(ids) > max_input - 1
        inputs.append(ids[:max_input - 1] + [tokenizer.sep_token_id])
        if max_target:
            target = tokenizer.encode(casting.target(example), add_special_tokens=False, truncation=False)
            if len(target) + 1 > max_target:
                raise UserError(f"{example.where}: the target {casting.target(example)!r} is {len(target) + 1} tokens "
                                f"with its end; the decoder takes {max_target} (n_positions)")
            targets.append(target + [tokenizer.sep_token_id])
    return inputs, targets, cut


class TextToTextModule(nn.Module):
    """The loop's view of a T5 being fine-tuned: the targets' cross-entropy."""

    def __init__(self, model: T5ForConditionalGeneration):
        super().__init__()
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """input_ids, attention_mask (B, S) and labels (B, T; -100 after each target) -> the loss."""
        return StepOutput(self.model(batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss, {})


@torch.no_grad()
def predict_text(model: T5ForConditionalGeneration, tokenizer: Tokenizer, inputs: list[list[int]],
                 max_new_tokens: int, batch_size: int = 64) -> list[str]:
    """Greedy outputs, decoded up to the end of text, for encoded inputs."""
    settings = GenerationConfig(max_new_tokens=max_new_tokens, eos_token_id=tokenizer.sep_token_id,
                                pad_token_id=tokenizer.pad_token_id)
    texts = []
    for start in range(0, len(inputs), batch_size):
        batch = pad_rows(inputs[start:start + batch_size], [[]] * len(inputs[start:start + batch_size]),
                         tokenizer.pad_token_id)
        for row in generate(model, batch["input_ids"], batch["attention_mask"], settings)[:, 1:].tolist():
            row = row[:row.index(tokenizer.sep_token_id)] if tokenizer.sep_token_id in row else row
            texts.append(tokenizer.decode(row))
    return texts


def evaluate_text_to_text(model: T5ForConditionalGeneration, data: RunData, casting: Casting, max_input: int,
                          max_new_tokens: int, batch_size: int) -> dict[str, float]:
    """The task's metrics on every dev split from the decoded outputs, and the share of invalid ones."""
    results = {}
    for split, examples in data.dev.items():
        inputs, _, _ = encode_pairs(casting, data.tokenizer, examples, max_input, None)
        parsed = [casting.parse(text, example) for text, example in
                  zip(predict_text(model, data.tokenizer, inputs, max_new_tokens, batch_size), examples)]
        results.update(score(data.spec, examples, [prediction for prediction, _ in parsed], split))
        suffix = "" if split == "dev" else f"_{split.removeprefix('dev_')}"
        results[f"invalid{suffix}"] = sum(not valid for _, valid in parsed) / len(parsed)
    return results


def evaluate_directory(model_dir: str, spec: TaskSpec, settings: InputSettings, split: str, examples: list,
                       batch_size: int) -> dict[str, float]:
    """`bertology evaluate` for a T5 fine-tuned here: the split's metrics from decoded answers."""
    model = T5ForConditionalGeneration.from_pretrained(model_dir)
    tokenizer = Tokenizer.from_pretrained(model_dir)
    casting = Casting(spec)
    data = RunData(spec, tokenizer, settings, [], {split: examples}, None)
    return evaluate_text_to_text(model, data, casting, settings.max_seq_len, casting.answer_tokens(tokenizer),
                                 batch_size)


def prepare_text_to_text(model_dir: str, spec: TaskSpec, train: list, dev: dict[str, list],
                         settings: InputSettings) -> RunData:
    """A T5's task data: the training examples cast and encoded once for every seed (a target
    longer than the decoder is a one-line error before any work), the dev examples as they are."""
    tokenizer = Tokenizer.from_pretrained(model_dir)
    decoder_limit = T5Config.load(model_dir).n_positions
    inputs, targets, cut = encode_pairs(Casting(spec), tokenizer, train, settings.max_seq_len, decoder_limit)
    if cut:
        print(f"{cut:,} of {len(inputs):,} training inputs are longer than {settings.max_seq_len} tokens and were cut",
              file=sys.stderr)
    return RunData(spec, tokenizer, settings, train, dev, TextPairs(inputs, targets, cut))


def finetune_text_to_text(cfg, data: RunData, seed: int, out: Path) -> dict:
    """Fine-tune the T5 in cfg.model text to text for one seed into `out` (`data` from
    prepare_text_to_text); returns the best dev results."""
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration.from_pretrained(cfg.model)
    casting = Casting(data.spec)
    max_input = data.settings.max_seq_len
    inputs, targets = data.train_encoded.inputs, data.train_encoded.targets
    max_new_tokens = casting.answer_tokens(data.tokenizer)
    describe_task(model.config, data.spec, data.settings)

    def make_batch(rows: list[int]) -> dict:
        encoder = pad_rows([inputs[i] for i in rows], [[]] * len(rows), data.tokenizer.pad_token_id)
        labels = pad_rows([targets[i] for i in rows], [[]] * len(rows), IGNORE_INDEX)["input_ids"]
        return {"input_ids": encoder["input_ids"], "attention_mask": encoder["attention_mask"], "labels": labels}

    batches = EpochBatches([len(ids) for ids in inputs], cfg.batch_size, seed, make_batch)
    best = BestModel(out, data, cfg.resume)

    def evaluate(module: TextToTextModule) -> dict:
        values = evaluate_text_to_text(module.model, data, casting, max_input, max_new_tokens, cfg.eval_batch_size)
        return best.update(values, module.model, trainer.step)

    trainer = Trainer(TextToTextModule(model), epoch_train_config(cfg, batches.steps_per_epoch, seed, cfg.precision),
                      out, batches, evaluate)
    fit_and_finish(trainer, cfg, data.spec, out)
    return best.results
