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
from ..inference.modeldir import ModelDir, describe_task, open_model_dir
from ..inference.text_to_text import (
    casting_for,
    content_ids,
    decode_examples,
    encode_inputs,
    generation_inputs,
    split_metrics,
)
from ..ops import IGNORE_INDEX
from ..tasks.inputs import InputSettings
from ..tasks.readers import TaskSpec
from ..training.loop import StepOutput, Trainer
from .task_training import BestModel, EpochBatches, RunData, epoch_train_config, fit_and_finish


def encode_targets(casting, tokenizer: Tokenizer, examples: list, max_target: int) -> list[list[int]]:
    """Token ids of the targets, the end of text last ([SEP]; T5's </s>). A target longer than
    `max_target` is a one-line error."""
    targets = []
    for example, ids in zip(examples, content_ids(tokenizer, [casting.target(e) for e in examples])):
        if len(ids) + 1 > max_target:
            raise UserError(f"{example.where}: the target {casting.target(example)!r} is {len(ids) + 1} tokens "
                            f"with its end; the decoder takes {max_target} (n_positions)")
        targets.append(ids + [tokenizer.end_token_id])
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

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """input_ids, attention_mask (B, S) and labels (B, T; -100 after each target) -> the loss."""
        return StepOutput(self.model(batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss, {})


def dev_generation_inputs(model: nn.Module, data: RunData, casting) -> dict[str, tuple]:
    """`generation_inputs` of every dev split."""
    return {split: generation_inputs(data.tokenizer, casting, examples, data.settings.max_seq_len,
                                     model.config.n_positions) for split, examples in data.dev.items()}


def evaluate_text_to_text(model: nn.Module, data: RunData, casting, batch_size: int,
                          prepared: dict[str, tuple]) -> dict[str, float]:
    """The task's metrics on every dev split from the decoded outputs (inputs from
    `dev_generation_inputs`; see inference/text_to_text.py's `split_metrics`)."""
    results = {}
    for split, examples in data.dev.items():
        parsed = decode_examples(model, data.tokenizer, casting, examples, prepared[split], batch_size)
        results.update(split_metrics(data.spec, casting, examples, prepared[split], parsed, split))
    return results


def prepare_text_to_text(opened: ModelDir, spec: TaskSpec, train: list, dev: dict[str, list],
                         settings: InputSettings) -> RunData:
    """A T5's task data: the training examples cast and encoded once for every seed, those whose
    answer a cut input lost dropped (a target longer than the decoder is a one-line error before
    any work), the dev examples as they are."""
    tokenizer = opened.tokenizer()
    decoder_limit = opened.spec.context_length(opened.config)
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
    model = open_model_dir(cfg.model).load_model()
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
