"""Pre-training objectives: small modules over the one encoder, chosen by name.

| name      | what it trains                                   | paper                         |
|-----------|--------------------------------------------------|-------------------------------|
| `bert`    | masked LM + next-sentence prediction             | Devlin et al. 2019            |
| `roberta` | masked LM only, full-sentence packing            | Liu et al. 2019               |
| `albert`  | masked LM + sentence-order prediction            | Lan et al. 2020               |
| `electra` | a small MLM generator + replaced-token detection | Clark et al. 2020             |
| `clm`     | left-to-right LM with a causal mask              | Radford et al. 2018 (GPT)     |
| `t5`      | span corruption: an encoder-decoder writes the   | Raffel et al. 2020 (T5)       |
|           | spans dropped from its input                     |                               |
| `clm`     | (`--arch awd-lstm`) the same over a token stream | Merity et al. 2018, Howard &  |
|           | read by an LSTM that carries its state           | Ruder 2018 (ULMFiT)           |
| `bilm`    | (`--arch elmo`) a forward and a backward LSTM LM | Peters et al. 2018 (ELMo)     |
|           | over the stream and its reverse                  |                               |
| `plm`     | (`--arch xlnet`) permutation LM: the last 1/6 of | Yang et al. 2019 (XLNet)      |
|           | a random factorisation order, two-stream; with   | Dai et al. 2019 (Transformer- |
|           | `--mem-len`, over the stream with memory         | XL)                           |

An objective knows no model family: it asks the family's spec (models/base.py's `FamilySpec`)
for the model it trains, by role (`pretraining_models`): "masked_lm" and "masked_lm_with_pair"
(BERT's heads), "causal_lm", "replaced_token_detection" (ELECTRA's three parts),
"span_corruption", "permutation_lm", "bidirectional_lm". So `clm` trains BERT's encoder under a
causal mask (the BERT paper's LTR baseline), GPT's decoder, or, for a family that reads a token
stream (`reads_stream`: ULMFiT's AWD-LSTM), its LSTM over the stream with a carried state
(`RecurrentLMObjective`); `bilm` trains ELMo's two LSTM language models; `t5` trains T5's
encoder-decoder (data/span_corruption.py); `plm` trains XLNet (data/permutation.py), on
independent sequences or, with a memory, on the token stream with Transformer-XL's recurrence.
A family lists the objectives it takes by name in its spec; `OBJECTIVES` below is the registry.

Each objective prepares its batch (masking is dynamic: fresh for every batch, drawn
from the generator it is given; or static, BERT's: a batch's `mask_seeds`, one per instance,
fix each instance's mask, for the objectives in MASKING_OBJECTIVES), computes its loss, and
returns counts from which the training loop derives accuracies. `model_to_save()` is the model written to disk,
in transformers' layout, which `bertology finetune` and transformers both load."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..data.padding import pad_rows
from ..data.permutation import permutation_targets, with_memory
from ..data.pretraining import mask_tokens
from ..data.span_corruption import corrupt_spans, random_spans_noise_mask
from ..errors import UserError
from ..models import family_with_model_type
from ..models.base import FamilySpec, ModelOutput
from ..ops import IGNORE_INDEX
from .loop import Batch, StepOutput, accuracy_counts


def ranked_pair_counts(name: str, scores: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """{name_correct, name_total} for the area under the ROC curve (AUC) of `scores` (N,) against
    bool `targets` (N,): the (positive, negative) pairs that the scores put in the right order
    (ties count half: the Mann-Whitney U statistic) and the number of such pairs.

    Summed over micro-batches, correct / total is the AUC over the pairs within each micro-batch.
    It needs no threshold: a detector whose scores rank replaced tokens above original ones shows
    it here while its probabilities are still all below 0.5 (ELECTRA's release reports `disc_auc`).
    """
    ordered, order = scores.double().sort()
    # Tied scores share the mean of their 1-based ranks: (low + 1 + high) / 2 for a tie at sorted places [low, high).
    low = torch.searchsorted(ordered, ordered, side="left")
    high = torch.searchsorted(ordered, ordered, side="right")
    positive = targets[order]
    num_positive = positive.sum().double()
    num_negative = positive.numel() - num_positive
    correct = ((low + 1 + high).double() / 2)[positive].sum() - num_positive * (num_positive + 1) / 2
    return {f"{name}_correct": correct, f"{name}_total": num_positive * num_negative}


def lm_counts(out: ModelOutput, labels: torch.Tensor, name: str) -> dict[str, torch.Tensor]:
    """The metric counts of a language model's output at its labelled positions (see training/loop.py):
    argmax hits and the loss summed over the positions, named `name`."""
    total = (labels != IGNORE_INDEX).sum()
    return {f"{name}_correct": out.masked_lm_correct, f"{name}_total": total,
            f"{name}_loss_sum": out.masked_lm_loss.detach() * total}


class MaskedLMObjective(nn.Module):
    """BERT, RoBERTa and ALBERT: masked LM, optionally with NSP or SOP on [CLS] (`pair_task`).

    `model` is the family's masked LM (with the pair head when `pair_task` is given): called with
    input_ids, attention_mask, token_type_ids and labels (and `next_sentence_label`), it returns
    the loss, `masked_lm_loss` and `masked_lm_correct` (and `seq_relationship_logits`)."""

    def __init__(self, model: nn.Module, pair_task: str | None, mask_token_id: int, mlm_probability: float = 0.15,
                 max_predictions: int | None = None, whole_word: bool = False):
        super().__init__()
        self.pair_task = pair_task
        self.model = model
        self.masking = dict(vocab_size=model.config.vocab_size, mask_token_id=mask_token_id,
                            mlm_probability=mlm_probability, max_predictions=max_predictions)
        self.whole_word = whole_word

    def prepare(self, batch: Batch, generator: torch.Generator) -> Batch:
        """Choose and corrupt 15% of the tokens (80% [MASK], 10% random, 10% kept); with the batch's
        `mask_seeds` (B,), each row by its own seed (static masking), else all from `generator`."""
        ids, labels = mask_tokens(batch["input_ids"], batch["special_mask"], generator=generator,
                                  word_continuation=batch.get("word_continuation") if self.whole_word else None,
                                  row_seeds=batch.get("mask_seeds"), **self.masking)
        return {**batch, "input_ids": ids, "labels": labels}

    def forward(self, batch: Batch) -> StepOutput:
        """Loss = MLM cross-entropy at the masked positions (+ the pair task's)."""
        pair = {"next_sentence_label": batch["pair_labels"]} if self.pair_task else {}
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=batch["labels"], **pair)
        counts = lm_counts(out, batch["labels"], "mlm")
        if self.pair_task:
            counts.update(accuracy_counts(self.pair_task, out.seq_relationship_logits.detach().argmax(-1),
                                          batch["pair_labels"]))
        return StepOutput(out.loss, counts)

    def model_to_save(self) -> nn.Module:
        """The masked LM (BertForPreTraining with the NSP/SOP head, or BertForMaskedLM)."""
        return self.model


class CausalLMObjective(nn.Module):
    """GPT's objective: each position predicts the next token, seeing only the past.

    `model` is the family's causal LM, called with input_ids, attention_mask and labels. A model
    whose class sets `shifts_labels` (GPT's, as transformers') takes the inputs as its labels and
    shifts them itself; any other (BERT's encoder under a causal mask) takes them shifted."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.shifted_here = not getattr(model, "shifts_labels", False)

    def prepare(self, batch: Batch, generator: torch.Generator) -> Batch:
        """Labels are the inputs (shifted left by one unless the model shifts them); padding, and the
        last position when shifted here, carry none."""
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
        if self.shifted_here:
            labels = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE_INDEX)], dim=1)
        return {**batch, "labels": labels}

    def forward(self, batch: Batch) -> StepOutput:
        """Loss = next-token cross-entropy; counts give accuracy and perplexity."""
        out = self.model(batch["input_ids"], batch["attention_mask"], labels=batch["labels"])
        scored = batch["labels"] if self.shifted_here else batch["labels"][:, 1:]
        return StepOutput(out.loss, lm_counts(out, scored, "lm"))

    def model_to_save(self) -> nn.Module:
        """The causal LM (a GPT, or BertForMaskedLM whose config says `causal: true`)."""
        return self.model


class CarriedState(nn.Module):
    """An LSTM stack's state carried from one stream batch to the next, kept in buffers so that
    a checkpoint holds it and a resumed run continues exactly where it stopped.

    `widths` gives each layer's (h, c) widths; `rows` is the micro-batch size."""

    def __init__(self, widths: list[tuple[int, int]], rows: int):
        super().__init__()
        self.layers = len(widths)
        for index, (h_width, c_width) in enumerate(widths):
            self.register_buffer(f"h{index}", torch.zeros(1, rows, h_width))
            self.register_buffer(f"c{index}", torch.zeros(1, rows, c_width))

    def get(self, new_stream: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The state to start this batch from: None (zeros) at an epoch's first batch, else copies
        of the buffers (the LSTM keeps its initial state for the backward pass; `set` changes them)."""
        if bool(new_stream):
            return None
        return [(getattr(self, f"h{i}").clone(), getattr(self, f"c{i}").clone()) for i in range(self.layers)]

    def set(self, state: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep the (detached) state a batch ended in."""
        for index, (h, c) in enumerate(state):
            getattr(self, f"h{index}").copy_(h)
            getattr(self, f"c{index}").copy_(c)


class RecurrentLMObjective(nn.Module):
    """ULMFiT's language-model objective (its stages 1 and 2): an AWD-LSTM reads a token stream
    (data/token_stream.py) left to right, each batch continuing the last row by row, the state
    restarting at each epoch's first batch (`new_stream`). `rows` is the micro-batch size.

    `model` is the family's recurrent LM: called with input_ids, its state (a list of (h, c), or None
    for zeros) and labels, it returns the loss (with AR and TAR), the argmax hits and the new
    `recurrent_state`; `state_widths()` gives each layer's (h, c) widths.
    """

    directions = ("lm",)  # the metric name of each reading direction (held-out evaluation)

    def __init__(self, model: nn.Module, rows: int):
        super().__init__()
        self.model = model
        self.state = CarriedState(model.state_widths(), rows)

    def prepare(self, batch: Batch, generator: torch.Generator) -> Batch:
        """Stream batches come with their labels (the next tokens)."""
        return batch

    def score(self, batch: Batch, direction: int, state: list | None) -> ModelOutput:
        """One stream window read from `state` (None: zeros): the loss, hits and the state it ends in."""
        return self.model(batch["input_ids"], state, labels=batch["labels"])

    def forward(self, batch: Batch) -> StepOutput:
        """Loss = next-token cross-entropy + AR + TAR; counts give accuracy and perplexity."""
        out = self.score(batch, 0, self.state.get(batch["new_stream"]))
        self.state.set(out.recurrent_state)
        return StepOutput(out.loss, lm_counts(out, batch["labels"], "lm"))

    def model_to_save(self) -> nn.Module:
        """The recurrent language model (models/awd_lstm.py's AWDLSTMLMHeadModel)."""
        return self.model


class BidirectionalLMObjective(nn.Module):
    """ELMo's biLM objective: the forward LSTMs read the token stream left to right and predict
    the next token, the backward ones read the reversed stream (`backward_` keys) and predict the
    previous one; each direction carries its own state. Loss = the mean of the two cross-entropies;
    counts give each direction's accuracy and perplexity."""

    directions = ("forward_lm", "backward_lm")  # the metric name of each reading direction

    def __init__(self, model: nn.Module, rows: int):
        super().__init__()
        self.model = model
        widths = model.state_widths()
        self.forward_state, self.backward_state = CarriedState(widths, rows), CarriedState(widths, rows)

    def prepare(self, batch: Batch, generator: torch.Generator) -> Batch:
        """Stream batches come with their labels."""
        return batch

    def score(self, batch: Batch, direction: int, state: list | None) -> ModelOutput:
        """One window of the stream (direction 0) or of its reverse (1), read from `state`."""
        return self.model.direction_loss(batch["input_ids"], batch["labels"], direction == 1, state)

    def forward(self, batch: Batch) -> StepOutput:
        """Loss = the mean of the two directions' next-token cross-entropies."""
        counts, losses = {}, []
        for prefix, state, backward in (("", self.forward_state, False), ("backward_", self.backward_state, True)):
            labels = batch[f"{prefix}labels"]
            out = self.model.direction_loss(batch[f"{prefix}input_ids"], labels, backward,
                                            state.get(batch[f"{prefix}new_stream"]))
            state.set(out.recurrent_state)
            losses.append(out.loss)
            counts.update(lm_counts(out, labels, "backward_lm" if backward else "forward_lm"))
        return StepOutput((losses[0] + losses[1]) / 2, counts)

    def model_to_save(self) -> nn.Module:
        """The biLM with its softmax (models/elmo.py's ELMoLMHeadModel)."""
        return self.model


class SpanCorruptionObjective(nn.Module):
    """T5's objective (models/t5.py): drop ~15% of each text in spans (mean length 3), one
    sentinel per span in the input; the decoder writes each sentinel and its span."""

    def __init__(self, model: nn.Module, sentinel_ids: list[int], noise_density: float = 0.15,
                 mean_span_length: float = 3.0):
        super().__init__()
        self.model = model
        self.sentinel_ids = sentinel_ids
        self.noise_density, self.mean_span_length = noise_density, mean_span_length

    def prepare(self, batch: Batch, generator: torch.Generator) -> Batch:
        """[CLS] text [SEP] rows -> input_ids, attention_mask (B, S): the corrupted texts + eos;
        labels (B, T): the targets + eos, -100 after. eos is [SEP], as at the end of every
        training text; the rows' [SEP]s between documents stay in the text."""
        eos = batch["input_ids"].new_tensor([self.model.config.eos_token_id])
        inputs, targets = [], []
        for row, length in zip(batch["input_ids"], batch["attention_mask"].sum(1).tolist()):
            text = row[1:length - 1]
            if len(text) < 2:  # the corpus's last few tokens: nothing to drop and keep
                corrupted, target = text, text[:0]
            else:
                noise = random_spans_noise_mask(len(text), self.noise_density, self.mean_span_length, generator)
                corrupted, target = corrupt_spans(text, noise, self.sentinel_ids)
            inputs.append(torch.cat([corrupted, eos]).tolist())
            targets.append(torch.cat([target, eos]).tolist())
        encoder = pad_rows(inputs, [[]] * len(inputs), self.model.config.pad_token_id)
        labels = pad_rows(targets, [[]] * len(targets), IGNORE_INDEX)["input_ids"]
        return {"input_ids": encoder["input_ids"], "attention_mask": encoder["attention_mask"], "labels": labels}

    def forward(self, batch: Batch) -> StepOutput:
        """Loss = the targets' cross-entropy (teacher forcing); counts give accuracy and perplexity
        over every target token (`lm`), and accuracy over the dropped tokens alone (`span`): the
        sentinels and eos around them are easy to predict and would flatter the model.

        `span_word`: at the dropped tokens, the best guess among the words alone (sentinels and eos
        excluded). A span's length is nowhere in the input, so at every dropped token the next
        sentinel competes with the word and often wins the argmax; this is the accuracy to hold
        against a baseline that is told where the dropped words are (always the most frequent one).
        """
        out = self.model(batch["input_ids"], batch["attention_mask"], labels=batch["labels"])
        labels = batch["labels"][batch["labels"] != IGNORE_INDEX]
        structure = torch.tensor(self.sentinel_ids + [self.model.config.eos_token_id], device=labels.device)
        dropped = ~torch.isin(labels, structure)
        logits = out.logits.detach()  # (N, V): the target positions'
        hits = (logits.argmax(-1) == labels) & dropped
        word_hits = (logits.index_fill(-1, structure, float("-inf")).argmax(-1) == labels) & dropped
        return StepOutput(out.loss, {**lm_counts(out, batch["labels"], "lm"), "span_correct": hits.sum(),
                                     "span_total": dropped.sum(), "span_word_correct": word_hits.sum(),
                                     "span_word_total": dropped.sum()})

    def model_to_save(self) -> nn.Module:
        """The encoder-decoder (models/t5.py's T5ForConditionalGeneration, transformers' layout)."""
        return self.model


class Memory(NamedTuple):
    """XLNet's memory of a token stream (Transformer-XL's segment recurrence), for the next segment.

    states: (layers, B, M, D) per layer, the content-stream states (that layer's input) of the
        last M positions each row has read, detached: the memory has no gradient.
    remembered: (B,) how many of the M, counted from the end, belong to the document each row is
        reading (0: nothing; the positions before them are an earlier document's, or never read).
    """

    states: torch.Tensor
    remembered: torch.Tensor


def remembered_positions(document_starts: torch.Tensor, remembered: torch.Tensor, mem_len: int) -> torch.Tensor:
    """(B,): of the memory left by a segment, the positions that belong to the document each row
    ends in: those from the row's last document start ([CLS]) on, or, with none in the segment,
    the whole segment and what was remembered before it; at most `mem_len`.

    document_starts (B, T) bool; remembered (B,) as `Memory.remembered` before the segment."""
    length = document_starts.shape[1]
    positions = torch.arange(length, device=document_starts.device)
    last_start = torch.where(document_starts, positions, -1).amax(1)  # (B,), -1: no start in the segment
    return torch.where(last_start >= 0, length - last_start, remembered + length).clamp(max=mem_len)


class CarriedMemory(nn.Module):
    """XLNet's `Memory` carried from one stream batch to the next, kept in buffers (as
    `CarriedState` keeps an LSTM's) so that a checkpoint holds it and a resumed run continues
    exactly where it stopped. `rows` is the micro-batch size."""

    def __init__(self, layers: int, rows: int, mem_len: int, width: int):
        super().__init__()
        self.register_buffer("states", torch.zeros(layers, rows, mem_len, width))
        self.register_buffer("remembered", torch.zeros(rows, dtype=torch.long))

    def get(self, new_stream: torch.Tensor) -> Memory | None:
        """The memory to read this batch after: None (nothing) at an epoch's first batch, else the
        buffers themselves (no copy: the model concatenates them, keeping nothing that `set` changes)."""
        return None if bool(new_stream) else Memory(self.states, self.remembered)

    def set(self, memory: Memory) -> None:
        """Keep the (detached) memory a batch left."""
        self.states.copy_(memory.states)
        self.remembered.copy_(memory.remembered)


class PermutationLMObjective(nn.Module):
    """XLNet's objective (models/xlnet.py, data/permutation.py): per sequence a random factorisation
    order, the last 1/6 of it predicted by the query stream from the tokens before it in the order.

    `mem_len` 0: each sequence is trained on its own, batches of independent sequences, and no
    memory (`mems`) is carried from one batch to the next.

    `mem_len` M > 0 (`pretrain --mem-len`), Transformer-XL's segment recurrence as XLNet pre-trains
    with it: the batches are a token stream (data/token_stream.py), row r of each batch continuing
    row r of the one before, each document opened by [CLS] (the config's `bos_token_id`). Each layer's
    content states of the last M positions a row has read, detached, are the memory its next segment
    reads after: both streams of every token see all of their document's memory; only the segment is
    permuted (`with_memory`). A token never sees another document, in the memory or the segment,
    so a row's memory is reset where its stream opens a new document, and all of it at an epoch's
    first batch (`new_stream`). The memory lives in buffers (`CarriedMemory`) of `rows` rows."""

    def __init__(self, model: nn.Module, rows: int = 1, mem_len: int = 0):
        super().__init__()
        config = model.config
        if mem_len and config.bos_token_id is None:
            raise ValueError("a stream with memory needs the config's bos_token_id: the token opening each document")
        if mem_len and config.reuse_len:
            raise ValueError("the memory continues the stream: reuse_len must be unset (all of a segment is remembered)")
        self.mem_len = mem_len
        self.model = model
        self.memory = CarriedMemory(config.n_layer, rows, mem_len, config.d_model) if mem_len else None

    def prepare(self, batch: Batch, generator: torch.Generator) -> Batch:
        """Sample the orders: perm_mask (B, T, T), target_mapping (B, P, T) and labels (B, P). Without
        memory, of collated sequences ([CLS] and [SEP] are context, never targets); with memory, of a
        stream batch (data/token_stream.py), whose [CLS]s, one per document, give `document_starts`
        (B, T) bool and are context too, all of one segment (token type 0)."""
        if self.memory is None:
            plm = permutation_targets(batch["input_ids"], batch["attention_mask"], batch["special_mask"], generator)
            return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                    "token_type_ids": batch["token_type_ids"], **plm}
        ids = batch["input_ids"]
        starts = ids == self.model.config.bos_token_id
        plm = permutation_targets(ids, batch["attention_mask"], starts, generator)
        return {"input_ids": ids, "attention_mask": batch["attention_mask"], "token_type_ids": torch.zeros_like(ids),
                "document_starts": starts, "new_stream": batch["new_stream"], **plm}

    def read(self, batch: Batch, memory: Memory | None) -> tuple[StepOutput, Memory]:
        """One stream segment (a prepared batch) read after `memory` (None: nothing read before) ->
        (the loss and counts, as `forward`'s; the memory for the next segment)."""
        remembered = memory.remembered if memory is not None else torch.zeros_like(batch["input_ids"][:, 0])
        # A memory with nothing to see is no memory: the segment alone, as without --mem-len.
        mems = list(memory.states) if memory is not None and bool(remembered.any()) else None
        perm_mask = with_memory(batch["perm_mask"], batch["document_starts"], remembered,
                                mems[0].shape[1] if mems else 0)
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], perm_mask,
                         batch["target_mapping"], mems=mems, use_mems=True, labels=batch["labels"])
        states = torch.stack(out.mems)  # (layers, B, M', D), M' = min(M + T, mem_len), detached by the model
        states = F.pad(states, (0, 0, self.mem_len - states.shape[2], 0))  # never read: zeros, hidden
        carried = Memory(states, remembered_positions(batch["document_starts"], remembered, self.mem_len))
        return StepOutput(out.loss, lm_counts(out, batch["labels"], "permutation_lm")), carried

    def forward(self, batch: Batch) -> StepOutput:
        """Loss = the targets' cross-entropy; counts give their accuracy and perplexity (`permutation_lm`).
        With memory, the segment is read after the carried memory, which it then replaces."""
        if self.memory is None:
            out = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                             batch["perm_mask"], batch["target_mapping"], use_mems=False, labels=batch["labels"])
            return StepOutput(out.loss, lm_counts(out, batch["labels"], "permutation_lm"))
        step, memory = self.read(batch, self.memory.get(batch["new_stream"]))
        self.memory.set(memory)
        return step

    def model_to_save(self) -> nn.Module:
        """The permutation LM (models/xlnet.py's XLNetLMHeadModel, transformers' layout; its config's
        `mem_len` is the memory trained with)."""
        return self.model


ELECTRA_MASKING = {"bert": (0.8, 0.1), "release": (0.85, 0.0)}  # the generator's input: [MASK] and random shares


@torch.compiler.disable  # a generator seeded from the batch: compiled, each seed would be a new graph
def sample_tokens(logits: torch.Tensor, temperature: float, seed: torch.Tensor) -> torch.Tensor:
    """One token drawn from each row of logits (N, V) at `temperature`, from a generator seeded by
    `seed` (1,) -> ids (N,)."""
    sampler = torch.Generator(logits.device).manual_seed(int(seed))
    probabilities = (logits.float() / temperature).softmax(-1)
    sampled = torch.multinomial(probabilities, 1, generator=sampler).squeeze(-1)
    torch._dynamo.maybe_mark_dynamic(sampled, 0)  # N, the masked count, differs from batch to batch
    return sampled


class ElectraObjective(nn.Module):
    """ELECTRA (Clark et al. 2020): a small generator fills the masked positions with its samples;
    the discriminator predicts, at every token, whether it was replaced.

    The two share their token, position and segment embeddings and the embeddings' LayerNorm,
    as the release does. Loss = generator MLM loss + `discriminator_weight` (50, as in the paper)
    x discriminator loss. The saved model is the discriminator's encoder.

    Options the paper studies: `generator_size`, the generator's width as a share of the
    discriminator's; `temperature` of its sampling (above 1: more and harder-to-spot
    replacements); `masking`, the generator's input: "bert" (80% [MASK], 10% random, 10% kept)
    or "release" (85% [MASK], 15% kept).
    """

    def __init__(self, models: tuple[nn.Module, nn.Module, nn.Module], mask_token_id: int,
                 discriminator_weight: float = 50.0, mlm_probability: float = 0.15, max_predictions: int | None = None,
                 temperature: float = 1.0, masking: str = "bert"):
        super().__init__()
        # the family's three parts (its spec's "replaced_token_detection"), embeddings already shared
        self.discriminator, self.detector, self.generator = models
        config = self.discriminator.config
        self.discriminator_weight = discriminator_weight
        self.temperature = temperature
        mask_share, random_share = ELECTRA_MASKING[masking]
        self.masking = dict(vocab_size=config.vocab_size, mask_token_id=mask_token_id, mlm_probability=mlm_probability,
                            max_predictions=max_predictions, replace_with_mask=mask_share,
                            replace_with_random=random_share)

    def prepare(self, batch: Batch, generator: torch.Generator) -> Batch:
        """Mask as for BERT (static masking too); also draw the seed for sampling the generator's tokens,
        from `generator` either way: the generator's samples stay fresh for every batch."""
        ids, labels = mask_tokens(batch["input_ids"], batch["special_mask"], generator=generator,
                                  row_seeds=batch.get("mask_seeds"), **self.masking)
        seed = torch.randint(0, 2**62, (1,), generator=generator)
        return {**batch, "input_ids": ids, "labels": labels, "sampling_seed": seed}

    def forward(self, batch: Batch) -> StepOutput:
        """Generator MLM loss + weighted per-token replaced/original loss."""
        labels = batch["labels"]
        masked = labels != IGNORE_INDEX
        generated = self.generator(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=labels)
        gen_loss, gen_logits, counts = generated.loss, generated.logits, lm_counts(generated, labels, "mlm")
        with torch.no_grad():  # sampling from the generator: no gradient flows through it
            sampled = sample_tokens(gen_logits, self.temperature, batch["sampling_seed"])
            corrupted = batch["input_ids"].clone()
            corrupted[masked] = sampled
            original = batch["input_ids"].clone()
            original[masked] = labels[masked]
            replaced = (corrupted != original).float()  # a sample equal to the original counts as original
        hidden = self.discriminator(corrupted, batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
        logits = self.detector(hidden).float()  # (B, T)
        real = (batch["attention_mask"] == 1) & ~batch["special_mask"]
        disc_loss = F.binary_cross_entropy_with_logits(logits[real], replaced[real])
        loss = gen_loss + self.discriminator_weight * disc_loss
        counts["rtd_loss_sum"] = disc_loss.detach() * real.sum()
        counts.update(electra_diagnostics(logits.detach(), replaced.bool(), sampled, labels, real,
                                          batch["attention_mask"] == 1))
        return StepOutput(loss, counts)

    def model_to_save(self) -> nn.Module:
        """The discriminator's encoder (a plain BertModel)."""
        return self.discriminator


def electra_diagnostics(logits: torch.Tensor, replaced: torch.Tensor, sampled: torch.Tensor, labels: torch.Tensor,
                        real: torch.Tensor, attention: torch.Tensor) -> dict[str, torch.Tensor]:
    """The counts behind ELECTRA's metrics, ours and the release's (run_pretraining.py's metric_fn).

    Args:
        logits: (B, T) the detector's logits; replaced: (B, T) bool, the token differs from the original.
        sampled: (N,) the generator's samples at the N masked positions, in order; labels: (B, T)
            the originals there, IGNORE_INDEX elsewhere.
        real: (B, T) bool, text tokens (no padding, [CLS] or [SEP]); attention: (B, T) bool, no padding.
    Returns counts for: `rtd_accuracy` and `rtd_balanced_accuracy` (the mean of the recall on
    replaced and on original tokens, chance 0.5) over real tokens; `sampled_masked_lm_accuracy`
    (samples equal to the original); `rtd_replaced_share` (replaced among real tokens: the
    detector's base rate); AUCs, threshold-free, since at a base rate of ~15% the probabilities
    stay below 0.5 long after the detector ranks replaced tokens higher: `rtd_auc` over real
    tokens, `rtd_masked_auc` over the masked positions only (does it tell a wrong sample from a
    right one?), and the release's `disc_auc`, over every position with padding as an original
    token of probability 0 (it also counts [CLS] and [SEP], so it runs higher than ours).
    """
    masked = labels != IGNORE_INDEX
    predicted, target = logits[real] > 0, replaced[real]
    counts = accuracy_counts("rtd", predicted, target)
    counts.update({"rtd_replaced_correct": (predicted & target).sum(), "rtd_replaced_total": target.sum(),
                   "rtd_original_correct": (~predicted & ~target).sum(), "rtd_original_total": (~target).sum(),
                   "rtd_replaced_share_count": target.sum(), "rtd_replaced_share_total": real.sum()})
    counts.update(accuracy_counts("sampled_masked_lm", sampled, labels[masked]))
    counts.update(ranked_pair_counts("rtd_auc", logits[real], target))
    counts.update(ranked_pair_counts("rtd_masked_auc", logits[masked], replaced[masked]))
    release_probs = torch.sigmoid(logits) * attention  # as the release: disc_probs * input_mask
    counts.update(ranked_pair_counts("disc_auc", release_probs.flatten(), (replaced & attention).flatten()))
    return counts


# ----- the registry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Objective:
    """A pre-training objective as `pretrain` runs it, registered by name in `OBJECTIVES`.

    `build(spec, config, mask_token_id, options)` makes the objective module over the model the
    family's spec gives for `role`; `options` are the PretrainConfig fields named in `options`
    (its flags: `pretrain` refuses them for every other objective).
    """

    name: str
    description: str
    build: Callable[[FamilySpec, Any, int | None, dict[str, Any]], nn.Module]
    role: str  # the model it trains: a key of the family spec's `pretraining_models`
    data_format: str  # "pairs" (BERT's segment pairs), "full_sentences" (RoBERTa), "contiguous" or "stream"
    pair_task: str | None = None  # "nsp", "sop" or None
    options: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()  # the held-out metrics worth plotting
    masks_tokens: bool = False  # masks tokens (`mask_tokens`), so takes static masks and whole-word masking
    # (options, config, tokenizer, seq_len) -> None: what can only be checked once the model's config
    # and vocabulary are known, a one-line error before any training.
    check: Callable[[dict[str, Any], Any, Any, int], None] | None = None


OBJECTIVES: dict[str, Objective] = {}


def register(objective: Objective) -> None:
    """Add an objective to the registry (a plug-in's, or a test's)."""
    OBJECTIVES[objective.name] = objective


def _model(spec: FamilySpec, role: str, config: Any, *args: Any) -> nn.Module:
    """The family's model for a pre-training role."""
    return spec.pretraining_models[role](config, *args)


_MASKING = ("whole_word_masking", "static_masks", "max_predictions")
# What the data gives every objective, used by those that need it: the micro-batch's rows (a stream's
# carried state), the vocabulary's sentinels (span corruption).
DATA_OPTIONS = ("rows", "sentinel_ids")


def _masked_lm(pair_task: str | None, role: str):
    def build(spec: FamilySpec, config: Any, mask_token_id: int | None, options: dict[str, Any]) -> nn.Module:
        return MaskedLMObjective(_model(spec, role, config), pair_task, mask_token_id,
                                   max_predictions=options.get("max_predictions"),
                                   whole_word=options.get("whole_word_masking", False))
    return build


def _causal_lm(spec: FamilySpec, config: Any, mask_token_id: int | None, options: dict[str, Any]) -> nn.Module:
    model = _model(spec, "causal_lm", config)
    return RecurrentLMObjective(model, options.get("rows", 1)) if spec.reads_stream else CausalLMObjective(model)


def _electra(spec: FamilySpec, config: Any, mask_token_id: int | None, options: dict[str, Any]) -> nn.Module:
    return ElectraObjective(_model(spec, "replaced_token_detection", config, options.get("generator_size", 0.25)),
                   mask_token_id, max_predictions=options.get("max_predictions"),
                   temperature=options.get("generator_temperature", 1.0), masking=options.get("electra_masking", "bert"))


def _span_corruption(spec: FamilySpec, config: Any, mask_token_id: int | None, options: dict[str, Any]) -> nn.Module:
    return SpanCorruptionObjective(_model(spec, "span_corruption", config), options.get("sentinel_ids") or [],
                          options.get("noise_density", 0.15), options.get("mean_span_length", 3.0))


def _bidirectional_lm(spec: FamilySpec, config: Any, mask_token_id: int | None, options: dict[str, Any]) -> nn.Module:
    return BidirectionalLMObjective(_model(spec, "bidirectional_lm", config), options.get("rows", 1))


def _permutation_lm(spec: FamilySpec, config: Any, mask_token_id: int | None, options: dict[str, Any]) -> nn.Module:
    mem_len = options.get("mem_len", 0)
    model = _model(spec, "permutation_lm", replace(config, mem_len=mem_len) if mem_len else config)
    return PermutationLMObjective(model, options.get("rows", 1), mem_len)


def _check_span_corruption(options: dict[str, Any], config: Any, tokenizer: Any, seq_len: int) -> None:
    """The vocabulary must hold a sentinel for every span a text loses (and one more, a target may end with)."""
    spans = max(round(round(seq_len * options["noise_density"]) / options["mean_span_length"]), 1)
    if spans + 1 > len(tokenizer.sentinel_token_ids):
        raise UserError(f"--seq-len {seq_len} with --noise-density {options['noise_density']} and --mean-span-length "
                        f"{options['mean_span_length']} drops {spans} spans per text: more than the tokenizer's "
                        f"{len(tokenizer.sentinel_token_ids)} sentinels allow")


def _check_permutation_lm(options: dict[str, Any], config: Any, tokenizer: Any, seq_len: int) -> None:
    """A memory continues the stream: no segment part may be reused."""
    if options.get("mem_len") and config.reuse_len:
        raise UserError(f"--mem-len remembers whole segments of the stream: unset the model's reuse_len "
                        f"({config.reuse_len})")


for _objective in (
    Objective("bert", "masked LM + next-sentence prediction", _masked_lm("nsp", "masked_lm_with_pair"),
              "masked_lm_with_pair", "pairs", "nsp", _MASKING, ("mlm_accuracy", "nsp_accuracy"), True),
    Objective("roberta", "masked LM over full sentences", _masked_lm(None, "masked_lm"), "masked_lm",
              "full_sentences", None, _MASKING, ("mlm_accuracy",), True),
    Objective("albert", "masked LM + sentence order", _masked_lm("sop", "masked_lm_with_pair"), "masked_lm_with_pair",
              "pairs", "sop", (*_MASKING, "sop_balance"), ("mlm_accuracy", "sop_accuracy"), True),
    Objective("electra", "replaced-token detection", _electra, "replaced_token_detection", "pairs", None,
              ("static_masks", "max_predictions", "generator_size", "generator_temperature", "electra_masking"),
              ("mlm_accuracy", "rtd_auc"), True),
    Objective("clm", "left-to-right LM", _causal_lm, "causal_lm", "contiguous", metrics=("lm_accuracy",)),
    Objective("t5", "span corruption", _span_corruption, "span_corruption", "contiguous",
              options=("noise_density", "mean_span_length"),
              metrics=("span_accuracy", "span_word_accuracy", "lm_accuracy"), check=_check_span_corruption),
    Objective("bilm", "ELMo's forward and backward LSTM LMs", _bidirectional_lm, "bidirectional_lm", "stream",
              metrics=("forward_lm_accuracy", "backward_lm_accuracy")),
    Objective("plm", "XLNet's permutation LM", _permutation_lm, "permutation_lm", "contiguous", options=("mem_len",),
              metrics=("permutation_lm_accuracy",), check=_check_permutation_lm),
):
    register(_objective)


def build_objective(name: str, config: Any, mask_token_id: int | None, **options: Any) -> nn.Module:
    """The objective module called `name` (see OBJECTIVES) over a model of `config`'s family, which
    must list it among its objectives; `options`: the objective's settings (max_predictions,
    whole_word_masking, generator_size, ..., and for a token stream `rows`, its micro-batch size).

    Example: `build_objective("roberta", BertConfig.from_preset("tiny", vocab_size=100), mask_token_id=4)`.
    """
    if name not in OBJECTIVES:
        raise UserError(f"unknown objective {name!r}; choose one of {', '.join(OBJECTIVES)}")
    family = family_with_model_type(config.model_type)
    if name not in family.spec.objectives:
        raise UserError(f"--arch {family.name} trains with {' or '.join(family.spec.objectives) or 'no objective'} "
                        f"(`pretrain --objective`), not {name}")
    unknown = set(options) - set(OBJECTIVES[name].options) - set(DATA_OPTIONS)
    if unknown:
        raise TypeError(f"the {name} objective takes no option {', '.join(sorted(unknown))}")
    return OBJECTIVES[name].build(family.spec, config, mask_token_id, options)
