"""Pre-training objectives: small modules over the one encoder, chosen by name.

| name      | what it trains                                   | paper                         |
|-----------|--------------------------------------------------|-------------------------------|
| `bert`    | masked LM + next-sentence prediction             | Devlin et al. 2019            |
| `roberta` | masked LM only, full-sentence packing            | Liu et al. 2019               |
| `albert`  | masked LM + sentence-order prediction            | Lan et al. 2020               |
| `electra` | a small MLM generator + replaced-token detection | Clark et al. 2020             |
| `clm`     | left-to-right LM with a causal mask              | Radford et al. 2018 (GPT)     |

Each objective prepares its batch (masking is dynamic: fresh for every batch, drawn
from the generator it is given), computes its loss, and returns counts from which the
training loop derives accuracies. `model_to_save()` is the model written to disk: a
transformers-compatible BERT that `bertology finetune` and transformers both load."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ..data.pretraining import mask_tokens
from ..models.bert import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertModel,
    BertPreTrainedModel,
    ClassificationHead,
    ModelOutput,
    activation,
    init_module,
)
from ..ops import IGNORE_INDEX, Linear
from .loop import Batch, StepOutput, accuracy_counts


@dataclass
class ObjectiveSpec:
    """How a pre-training objective (objectives.py) wants its data: the packing format and the pair task."""

    data_format: str  # "pairs" (BERT's segment pairs), "full_sentences" (RoBERTa) or "contiguous"
    pair_task: str | None  # "nsp", "sop" or None


OBJECTIVES: dict[str, ObjectiveSpec] = {
    "bert": ObjectiveSpec("pairs", "nsp"),
    "roberta": ObjectiveSpec("full_sentences", None),
    "albert": ObjectiveSpec("pairs", "sop"),
    "electra": ObjectiveSpec("pairs", None),
    "clm": ObjectiveSpec("contiguous", None),
}




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


class MaskedLanguageModel(nn.Module):
    """BERT, RoBERTa and ALBERT: masked LM, optionally with NSP or SOP on [CLS]."""

    def __init__(self, config: BertConfig, pair_task: str | None, mask_token_id: int, mlm_probability: float = 0.15, max_predictions: int | None = None, whole_word: bool = False):
        super().__init__()
        self.pair_task = pair_task
        self.model = BertForPreTraining(config) if pair_task else BertForMaskedLM(config)
        self.masking = dict(vocab_size=config.vocab_size, mask_token_id=mask_token_id,
                            mlm_probability=mlm_probability, max_predictions=max_predictions)
        self.whole_word = whole_word

    def prepare(self, batch: Batch, generator: torch.Generator) -> Batch:
        """Choose and corrupt 15% of the tokens (80% [MASK], 10% random, 10% kept)."""
        ids, labels = mask_tokens(batch["input_ids"], batch["special_mask"], generator=generator,
                                  word_continuation=batch.get("word_continuation") if self.whole_word else None,
                                  **self.masking)
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

    def model_to_save(self) -> BertPreTrainedModel:
        """BertForPreTraining (with the NSP/SOP head) or BertForMaskedLM."""
        return self.model


class CausalLanguageModel(nn.Module):
    """GPT's objective on the same encoder: each position predicts the next token, seeing only the past."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.model = BertForMaskedLM(replace(config, causal=True))

    def prepare(self, batch: Batch, generator: torch.Generator) -> Batch:
        """Labels are the inputs shifted left by one; padding and the last position carry none."""
        ids = batch["input_ids"]
        labels = torch.full_like(ids, IGNORE_INDEX)
        labels[:, :-1] = ids[:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, IGNORE_INDEX)
        return {**batch, "labels": labels}

    def forward(self, batch: Batch) -> StepOutput:
        """Loss = next-token cross-entropy; counts give accuracy and perplexity."""
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=batch["labels"])
        return StepOutput(out.loss, lm_counts(out, batch["labels"], "lm"))

    def model_to_save(self) -> BertPreTrainedModel:
        """The causal BertForMaskedLM (its config says `causal: true`)."""
        return self.model


class ReplacedTokenDetector(nn.Module):
    """ELECTRA's discriminator head: dense + activation + one logit per token (replaced or not)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act)
        self.out = ClassificationHead(config.hidden_size, 1, dropout=0.0)
        for module in self.modules():
            init_module(module, config.initializer_range)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, T) logits."""
        return self.out(self.act(self.dense(hidden))).squeeze(-1)


def electra_generator_config(config: BertConfig, divisor: int = 4) -> BertConfig:
    """The generator: the discriminator's depth at 1/`divisor` of its width (ELECTRA's best ratio),
    reading the discriminator's embeddings (same width E) through its own projection."""
    hidden = max(32, config.hidden_size // divisor)
    return replace(config, hidden_size=hidden, num_attention_heads=max(1, hidden // 64),
                   intermediate_size=4 * hidden, embedding_size=config.embedding_width)


class Electra(nn.Module):
    """ELECTRA (Clark et al. 2020): a small generator fills the masked positions with its samples;
    the discriminator predicts, at every token, whether it was replaced.

    The two share their token, position and segment embeddings. Loss = generator MLM loss +
    `discriminator_weight` (50, as in the paper) x discriminator loss. The saved model is the
    discriminator's encoder.
    """

    def __init__(self, config: BertConfig, mask_token_id: int, discriminator_weight: float = 50.0, mlm_probability: float = 0.15,
                 max_predictions: int | None = None):
        super().__init__()
        self.discriminator = BertModel(config, add_pooling_layer=False)
        self.detector = ReplacedTokenDetector(config)
        self.generator = BertForMaskedLM(electra_generator_config(config))
        for table in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
            setattr(self.generator.bert.embeddings, table, getattr(self.discriminator.embeddings, table))
        self.discriminator_weight = discriminator_weight
        self.masking = dict(vocab_size=config.vocab_size, mask_token_id=mask_token_id,
                            mlm_probability=mlm_probability, max_predictions=max_predictions)

    def prepare(self, batch: Batch, generator: torch.Generator) -> Batch:
        """Mask as for BERT; also draw the seed for sampling the generator's tokens."""
        ids, labels = mask_tokens(batch["input_ids"], batch["special_mask"], generator=generator, **self.masking)
        seed = torch.randint(0, 2**62, (1,), generator=generator)
        return {**batch, "input_ids": ids, "labels": labels, "sampling_seed": seed}

    def forward(self, batch: Batch) -> StepOutput:
        """Generator MLM loss + weighted per-token replaced/original loss."""
        labels = batch["labels"]
        masked = labels != IGNORE_INDEX
        generated = self.generator(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=labels)
        gen_loss, gen_logits, counts = generated.loss, generated.logits, lm_counts(generated, labels, "mlm")
        with torch.no_grad():  # sampling from the generator: no gradient flows through it
            sampler = torch.Generator(gen_logits.device).manual_seed(int(batch["sampling_seed"]))
            sampled = torch.multinomial(gen_logits.float().softmax(-1), 1, generator=sampler).squeeze(-1)
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
        predicted = logits[real] > 0
        target = replaced[real].bool()
        counts.update(accuracy_counts("rtd", predicted, target))
        counts["rtd_loss_sum"] = disc_loss.detach() * target.numel()
        # Recall on replaced and on original tokens: their mean is the balanced accuracy (chance 0.5).
        counts["rtd_replaced_correct"] = (predicted & target).sum()
        counts["rtd_replaced_total"] = target.sum()
        counts["rtd_original_correct"] = (~predicted & ~target).sum()
        counts["rtd_original_total"] = (~target).sum()
        # Threshold-free: at a base rate of ~15% replaced, the probabilities stay below 0.5 (so the
        # balanced accuracy at 0.5) long after the detector has started to rank replaced tokens higher.
        counts.update(ranked_pair_counts("rtd_auc", logits[real].detach(), target))
        return StepOutput(loss, counts)

    def model_to_save(self) -> BertPreTrainedModel:
        """The discriminator's encoder, a plain BertModel."""
        return self.discriminator


def build_objective(name: str, config: BertConfig, mask_token_id: int, whole_word: bool = False, max_predictions: int | None = None) -> nn.Module:
    """The objective module called `name` (see OBJECTIVES) over an encoder of `config`."""
    if name in ("bert", "roberta", "albert"):
        return MaskedLanguageModel(config, OBJECTIVES[name].pair_task, mask_token_id,
                                   max_predictions=max_predictions, whole_word=whole_word)
    if name == "electra":
        return Electra(config, mask_token_id, max_predictions=max_predictions)
    if name == "clm":
        return CausalLanguageModel(config)
    raise ValueError(f"unknown objective {name!r}")
