"""Training TagLM's tagger: `bertology finetune --task conll2003 --arch taglm [--lm ELMO_DIR] [--vectors DIR]`.

Peters et al. 2017 (models/taglm.py): a BiLSTM-CRF over word embeddings and a character CNN,
with a frozen biLM's top states joined after the first BiLSTM. Without `--lm` it is the
paper's baseline, the same tagger without the biLM; the claim is the difference.

The vocabulary is the training words seen at least twice (a word seen once stays unknown, so
the unknown-word row trains on real rare words), plus, with `--vectors`, every word of
those static vectors, whose rows start from their vectors (the paper starts from Senna's).
The biLM runs once over every sentence (it is frozen, as in the paper) and its states are
kept for all epochs and seeds. The loop, the per-epoch dev evaluation (entity F1 by seqeval,
the CRF's Viterbi paths), the best-model choice and resuming are the other task recipes'.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UserError
from ..inference.modeldir import describe_task, open_static_vectors
from ..inference.predict import score
from ..inference.tagging import BiLMStates, Tagger, tagger_inputs, viterbi_tags
from ..models.static import StaticVectors, normalize_word
from ..models.taglm import PAD_WORD, UNKNOWN_WORD, TagLMConfig, TagLMForTokenClassification
from ..ops import IGNORE_INDEX
from ..tasks.inputs import InputSettings
from ..tasks.readers import TaskSpec
from ..training.loop import Trainer
from .task_training import BestModel, EpochBatches, TaskModule, epoch_train_config, fit_and_finish

MIN_WORD_COUNT = 2  # training words seen fewer times are [UNK], which so learns a vector


@dataclass
class TaggerData:
    """A tagging task's sentences, the tagger's vocabulary and the biLM's states, shared by seeds."""

    spec: TaskSpec
    train: list  # TokenExample
    dev: dict[str, list]
    words: list[str]  # the tagger's vocabulary ([PAD], [UNK], then by frequency)
    vectors: StaticVectors | None
    lm: BiLMStates | None
    train_states: list[torch.Tensor] | None  # per sentence (words, lm width), fp16
    dev_states: dict[str, list[torch.Tensor]] | None
    tokenizer: None = None  # the tagger has no piece tokenizer of its own (BestModel saves none)


def check_tagging_task(spec: TaskSpec) -> None:
    """TagLM tags words: a one-line error for any other kind of task."""
    if spec.kind != "token":
        raise UserError(f"--arch taglm is a sequence tagger (conll2003 or your own tagging files); {spec.name} "
                        f"is a {spec.kind}-level task")


def vocabulary(train: list, lowercase: bool, vectors: StaticVectors | None) -> list[str]:
    """[PAD], [UNK], the training words seen MIN_WORD_COUNT times or more (most frequent first),
    then the static vectors' other words."""
    counts = Counter(normalize_word(word, lowercase) for example in train for word in example.words)
    words = [PAD_WORD, UNKNOWN_WORD] + [w for w, n in counts.most_common() if n >= MIN_WORD_COUNT]
    if vectors is not None:
        known = set(words)
        words += [w for w in vectors.words if w not in known]
    return words


OPTIONS = "--lm DIR gives it a biLM, --vectors DIR its starting word vectors"  # for finetune's messages


def prepare_run(cfg, spec: TaskSpec, train: list, dev: dict[str, list]) -> TaggerData:
    """`finetune --arch taglm`'s data: `prepare_tagger_data` with the run's --lm and --vectors."""
    return prepare_tagger_data(spec, train, dev, cfg.lm, cfg.vectors)


def describe_run(cfg) -> str:
    """What a `finetune --arch taglm` run trained, for its summary line."""
    return "trained TagLM's tagger " + (f"reading the biLM {cfg.lm}" if cfg.lm else "without a biLM")


def prepare_tagger_data(spec: TaskSpec, train: list, dev: dict[str, list], lm_dir: str | None,
                        vectors_dir: str | None) -> TaggerData:
    """Read the biLM and static vectors once, build the vocabulary and run the biLM over every sentence."""
    check_tagging_task(spec)
    vectors = None
    if vectors_dir:
        vectors = open_static_vectors(vectors_dir, "--vectors")
    lm = BiLMStates(lm_dir) if lm_dir else None
    train = [e for e in train if e.words]  # a sentence without words has nothing to tag or learn from
    lowercase = vectors.config.lowercase if vectors is not None else True
    words = vocabulary(train, lowercase, vectors)
    train_states = dev_states = None
    if lm is not None:
        print(f"running the biLM over {len(train) + sum(map(len, dev.values())):,} sentences", file=sys.stderr)
        train_states = [s.half() for s in lm([e.words for e in train])]
        dev_states = {split: [s.half() for s in lm([e.words for e in examples])] for split, examples in dev.items()}
    return TaggerData(spec, train, dev, words, vectors, lm, train_states, dev_states)


def new_tagger(data: TaggerData) -> TagLMForTokenClassification:
    """A freshly initialised tagger for the data's labels, vocabulary and biLM; word rows the static
    vectors know start from them (the rest uniform in +-sqrt(3 / width), as Lample et al. start theirs)."""
    labels = data.spec.labels
    width = data.vectors.hidden_size if data.vectors is not None else TagLMConfig.word_embedding_dim
    config = TagLMConfig(word_vocab_size=len(data.words), word_embedding_dim=width,
                         lowercase=data.vectors.config.lowercase if data.vectors is not None else True,
                         lm_size=data.lm.width if data.lm is not None else 0, num_labels=len(labels),
                         id2label=dict(enumerate(labels)))
    model = TagLMForTokenClassification(config, data.words)
    with torch.no_grad():
        table = model.word_embeddings.weight
        bound = (3 / width) ** 0.5
        table.uniform_(-bound, bound)
        if data.vectors is not None:
            rows = [(i, data.vectors.index[w]) for i, w in enumerate(data.words) if w in data.vectors.index]
            table[torch.tensor([i for i, _ in rows])] = data.vectors.vectors[torch.tensor([j for _, j in rows])].float()
        table[0] = 0.0  # [PAD]
    return model


def training_batch(model: TagLMForTokenClassification, examples: list, states: list[torch.Tensor] | None,
                   label_ids: dict[str, int]) -> dict[str, torch.Tensor]:
    """A padded batch of sentences with their tag ids (-100 on padding) and biLM states."""
    batch = tagger_inputs(model, [e.words for e in examples], states)
    labels = torch.full_like(batch["word_ids"], IGNORE_INDEX)
    for row, example in enumerate(examples):
        labels[row, : len(example.tags)] = torch.tensor([label_ids[tag] for tag in example.tags])
    batch["labels"] = labels
    return batch


def train_run(cfg, data: TaggerData, seed: int, out: Path) -> dict:
    """Train one seed of the tagger into `out`; returns the best dev results."""
    if cfg.lr < 1e-4:
        print(f"--lr {cfg.lr:g} is a fine-tuning rate; TagLM's tagger trains from scratch (the paper: Adam at "
              "1e-3, as the documentation's example uses)", file=sys.stderr)
    torch.manual_seed(seed)
    model = new_tagger(data)
    describe_task(model.config, data.spec, InputSettings())  # evaluate and predict read the task from config.json
    label_ids = {label: i for i, label in enumerate(data.spec.labels)}

    def make_batch(rows: list[int]) -> dict:
        states = [data.train_states[i] for i in rows] if data.train_states is not None else None
        return training_batch(model, [data.train[i] for i in rows], states, label_ids)

    batches = EpochBatches([len(e.words) for e in data.train], cfg.batch_size, seed, make_batch)
    best = BestModel(out, data, cfg.resume)
    tagger = Tagger(model, data.lm)

    def evaluate(module: TaskModule) -> dict:
        results = {}
        for split, examples in data.dev.items():
            states = data.dev_states[split] if data.dev_states is not None else None
            predictions = viterbi_tags(model, [e.words for e in examples], states, cfg.eval_batch_size)
            results.update(score(data.spec, examples, predictions, split))
        return best.update(results, tagger, trainer.step)

    trainer = Trainer(TaskModule(model), epoch_train_config(cfg, batches.steps_per_epoch, seed, "fp32"), out,
                      batches, evaluate)
    fit_and_finish(trainer, cfg, data.spec, out)
    return best.results
