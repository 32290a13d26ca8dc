"""Text-to-text fine-tuning: a T5 learns a task as input and target strings.

T5 (Raffel et al. 2020) casts every task as text: the input names the task and its fields,
the target is the answer written out, and the model is trained with the same cross-entropy
as in pre-training. The casts, T5's own for GLUE and SQuAD and an entity span sequence for
CoNLL-2003, and how outputs are read back, are inference/text_to_text.py's.

The dev score is the task's official metric on the *decoded* text: the model generates
greedily and its output is read back as a label, a score, an answer or tags. An output that
cannot be read (T5's "invalid" predictions) counts as wrong: a label other than the gold one,
the middle of a score's range, for SQuAD an empty output (no prediction: 0); CoNLL keeps the
entities of an output that it can place. Their share is reported as `invalid`.

Inputs longer than --max-seq-len are cut at the end (no windows here). A training example
whose answer was in the part cut off (SQuAD's answer span, a CoNLL entity's words) is dropped
and counted; on each dev split `inputs_cut` and `answers_cut` report the shares of inputs cut
and of questions or sentences whose answer went with the cut (every gold answer, for SQuAD).
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
from ..inference.modeldir import describe_task
from ..inference.predict import score
from ..inference.text_to_text import (
    Inputs,
    casting_for,
    content_ids,
    encode_inputs,
    generation_inputs,
    open_directory,
    predict_text,
)
from ..models.t5 import T5Config, T5ForConditionalGeneration
from ..ops import IGNORE_INDEX
from ..tasks.inputs import InputSettings
from ..tasks.readers import TaskSpec
from ..training.loop import StepOutput, Trainer
from ..training.tasks import BestModel, EpochBatches, RunData, epoch_train_config, fit_and_finish


def encode_targets(casting, tokenizer: Tokenizer, examples: list, max_target: int) -> list[list[int]]:
    """Token ids of the targets, [SEP] last. A target longer than `max_target` is a one-line error."""
    targets = []
    for example, ids in zip(examples, content_ids(tokenizer, [casting.target(e) for e in examples])):
        if len(ids) + 1 > max_target:
            raise UserError(f"{example.where}: the target {casting.target(example)!r} is {len(ids) + 1} tokens "
                            f"with its end; the decoder takes {max_target} (n_positions)")
        targets.append(ids + [tokenizer.sep_token_id])
    return targets


@dataclass
class TextPairs:
    """A task's training examples as token ids, encoded once for every seed (RunData.train_encoded)."""

    inputs: list[list[int]]
    targets: list[list[int]]
    too_long: int  # inputs cut to --max-seq-len (those dropped included)
    dropped: int  # examples left out because their answer was in the part cut off


class TextToTextModule(nn.Module):
    """The loop's view of a T5 being fine-tuned: the targets' cross-entropy."""

    def __init__(self, model: T5ForConditionalGeneration):
        super().__init__()
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """input_ids, attention_mask (B, S) and labels (B, T; -100 after each target) -> the loss."""
        return StepOutput(self.model(batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss, {})


def decode_examples(model: T5ForConditionalGeneration, tokenizer: Tokenizer, casting, examples: list,
                    prepared: tuple[Inputs, list[int]], batch_size: int) -> list[tuple]:
    """Generate for every example from its `generation_inputs` and read each output back:
    [(prediction, valid)]."""
    inputs, limits = prepared
    texts = predict_text(model, tokenizer, inputs.ids, limits, batch_size)
    return [casting.parse(text, example) for text, example in zip(texts, examples)]


def dev_generation_inputs(model: T5ForConditionalGeneration, data: RunData, casting) -> dict[str, tuple]:
    """`generation_inputs` of every dev split."""
    return {split: generation_inputs(data.tokenizer, casting, examples, data.settings.max_seq_len,
                                     model.config.n_positions) for split, examples in data.dev.items()}


def evaluate_text_to_text(model: T5ForConditionalGeneration, data: RunData, casting, batch_size: int,
                          prepared: dict[str, tuple]) -> dict[str, float]:
    """The task's metrics on every dev split from the decoded outputs (inputs from
    `dev_generation_inputs`), the share of invalid ones, and for SQuAD and CoNLL the shares of
    inputs cut and of answers cut with them."""
    results = {}
    for split, examples in data.dev.items():
        parsed = decode_examples(model, data.tokenizer, casting, examples, prepared[split], batch_size)
        inputs = prepared[split][0]
        results.update(score(data.spec, examples, casting.collect(examples, [p for p, _ in parsed]), split))
        suffix = "" if split == "dev" else f"_{split.removeprefix('dev_')}"
        results[f"invalid{suffix}"] = sum(not valid for _, valid in parsed) / len(parsed)
        if casting.answers_in_input:
            results[f"inputs_cut{suffix}"] = sum(inputs.cut) / len(examples)
            results[f"answers_cut{suffix}"] = sum(inputs.answer_cut) / len(examples)
    return results


def evaluate_directory(model_dir: str, spec: TaskSpec, settings: InputSettings, split: str, examples: list,
                       batch_size: int) -> dict[str, float]:
    """`bertology evaluate` for a T5 fine-tuned here: the split's metrics from decoded answers."""
    model, tokenizer, casting = open_directory(model_dir, spec, settings)
    data = RunData(spec, tokenizer, settings, [], {split: examples}, None)
    return evaluate_text_to_text(model, data, casting, batch_size, dev_generation_inputs(model, data, casting))


def predict_directory(model_dir: str, spec: TaskSpec, settings: InputSettings, examples: list,
                      batch_size: int) -> list | dict[str, str]:
    """`bertology predict` for a T5 fine-tuned here: the predictions as `predict` gives them (labels or
    scores, tag sequences, or {question id: answer}); how many outputs were invalid, and what
    stands in for them, goes to stderr."""
    model, tokenizer, casting = open_directory(model_dir, spec, settings)
    prepared = generation_inputs(tokenizer, casting, examples, settings.max_seq_len, model.config.n_positions)
    parsed = decode_examples(model, tokenizer, casting, examples, prepared, batch_size)
    predictions = casting.collect(examples, [prediction for prediction, _ in parsed])
    if spec.kind == "span":
        predictions = {example.qid: predictions.get(example.qid, "") for example in examples}
    invalid = sum(not valid for _, valid in parsed)
    if invalid:
        print(f"{invalid:,} of {len(examples):,} outputs could not be read as answers; in their place: "
              f"{casting.stand_in}", file=sys.stderr)
    return predictions


def prepare_text_to_text(model_dir: str, spec: TaskSpec, train: list, dev: dict[str, list],
                         settings: InputSettings) -> RunData:
    """A T5's task data: the training examples cast and encoded once for every seed, those whose
    answer a cut input lost dropped (a target longer than the decoder is a one-line error before
    any work), the dev examples as they are."""
    tokenizer = Tokenizer.from_pretrained(model_dir)
    decoder_limit = T5Config.load(model_dir).n_positions
    casting = casting_for(spec, tokenizer, settings)
    inputs = encode_inputs(casting, tokenizer, train, settings.max_seq_len, training=True)
    kept = [i for i, lost in enumerate(inputs.answer_cut) if not lost]
    cut, dropped = sum(inputs.cut), len(train) - len(kept)
    if cut:
        lost = f"; {dropped:,} of them lost their answer with it and were dropped" if casting.answers_in_input else ""
        print(f"{cut:,} of {len(train):,} training inputs are longer than {settings.max_seq_len} tokens and were cut"
              f"{lost}", file=sys.stderr)
    if not kept:
        raise UserError(f"every training example lost its answer to the cut at --max-seq-len {settings.max_seq_len}")
    train = [train[i] for i in kept]
    targets = encode_targets(casting, tokenizer, train, decoder_limit)
    unread = sum(not casting.reads_back(tokenizer.decode(ids), example) for ids, example in zip(targets, train))
    if unread:
        print(f"{unread:,} of {len(train):,} training targets do not read back as their answer through the model's "
              "vocabulary (characters it lacks, or words it spells alike)", file=sys.stderr)
    return RunData(spec, tokenizer, settings, train, dev,
                   TextPairs([inputs.ids[i] for i in kept], targets, cut, dropped))


def finetune_text_to_text(cfg, data: RunData, seed: int, out: Path) -> dict:
    """Fine-tune the T5 in cfg.model text to text for one seed into `out` (`data` from
    prepare_text_to_text); returns the best dev results."""
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration.from_pretrained(cfg.model)
    casting = casting_for(data.spec, data.tokenizer, data.settings)
    inputs, targets = data.train_encoded.inputs, data.train_encoded.targets
    describe_task(model.config, data.spec, data.settings)

    def make_batch(rows: list[int]) -> dict:
        encoder = pad_rows([inputs[i] for i in rows], [[]] * len(rows), data.tokenizer.pad_token_id)
        labels = pad_rows([targets[i] for i in rows], [[]] * len(rows), IGNORE_INDEX)["input_ids"]
        return {"input_ids": encoder["input_ids"], "attention_mask": encoder["attention_mask"], "labels": labels}

    batches = EpochBatches([len(ids) for ids in inputs], cfg.batch_size, seed, make_batch)
    best = BestModel(out, data, cfg.resume)
    prepared = dev_generation_inputs(model, data, casting)  # encoded once, not at every evaluation

    def evaluate(module: TextToTextModule) -> dict:
        return best.update(evaluate_text_to_text(module.model, data, casting, cfg.eval_batch_size, prepared),
                           module.model, trainer.step)

    trainer = Trainer(TextToTextModule(model), epoch_train_config(cfg, batches.steps_per_epoch, seed, cfg.precision),
                      out, batches, evaluate)
    fit_and_finish(trainer, cfg, data.spec, out)
    return best.results
