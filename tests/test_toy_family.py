"""A new model family is one file: this test is one, and every command runs it.

`ToyConfig`, the toy models and `SPEC` below are all a family needs (models/base.py's
`ConfigFile`, `PreTrainedModel` and `FamilySpec`); `register` adds it to the registry as a
plug-in would. Nothing outside this file knows the toy exists, yet it pre-trains with the masked
LM objective (`--arch toy`), fine-tunes on a labelled task, evaluates, predicts, serves a request,
embeds and explains, through the real command line and HTTP app. The layers test
(tests/test_layers.py) and the leak test (tests/test_family_leaks.py) keep it that way.
"""

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import keyword_sentence, run_cli
from torch import nn

from bertology.models import FAMILIES, Family, register
from bertology.models.base import ConfigFile, FamilySpec, ModelOutput, PreTrainedModel
from bertology.ops import IGNORE_INDEX, cross_entropy_with_accuracy


@dataclass
class ToyConfig(ConfigFile):
    """A stack of `num_hidden_layers` residual tanh layers over token and position embeddings."""

    MODEL_TYPE: ClassVar[str] = "toy"
    WHAT: ClassVar[str] = "a toy encoder"

    vocab_size: int = 100
    hidden_size: int = 16
    num_hidden_layers: int = 2
    max_position_embeddings: int = 128
    num_labels: int = 2
    id2label: dict[int, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def sizes(cls, layers: int, width: int) -> dict[str, Any]:
        return dict(num_hidden_layers=layers, hidden_size=width // 8)


class ToyPreTrainedModel(PreTrainedModel):
    config_class = ToyConfig
    backbone = "toy"


class ToyModel(ToyPreTrainedModel):
    def __init__(self, config: ToyConfig):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layers = nn.ModuleList(nn.Linear(config.hidden_size, config.hidden_size)
                                    for _ in range(config.num_hidden_layers))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, output_hidden_states=False):
        x = self.embeddings(input_ids) + self.positions(torch.arange(input_ids.shape[1], device=input_ids.device))
        states = [x]
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
            states.append(x)
        return ModelOutput(last_hidden_state=x, hidden_states=tuple(states) if output_hidden_states else None)


class ToyForMaskedLM(ToyPreTrainedModel):
    def __init__(self, config: ToyConfig):
        super().__init__(config)
        self.toy = ToyModel(config)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        hidden = self.toy(input_ids).last_hidden_state
        if labels is None:
            return ModelOutput(logits=self.head(hidden))
        scored = labels != IGNORE_INDEX
        logits = self.head(hidden[scored])
        loss, correct = cross_entropy_with_accuracy(logits, labels[scored])
        return ModelOutput(loss=loss, logits=logits, masked_lm_loss=loss, masked_lm_correct=correct)


class ToyForSequenceClassification(ToyPreTrainedModel):
    def __init__(self, config: ToyConfig):
        super().__init__(config)
        self.toy = ToyModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        mask = (torch.ones_like(input_ids) if attention_mask is None else attention_mask).unsqueeze(-1).float()
        hidden = self.toy(input_ids).last_hidden_state
        logits = self.classifier((hidden * mask).sum(1) / mask.sum(1))
        loss = None if labels is None else F.cross_entropy(logits, labels)
        return ModelOutput(loss=loss, logits=logits)


def layer_of(name: str) -> int | None:
    if match := re.search(r"(?:^|\.)layers\.(\d+)\.", name):
        return int(match.group(1)) + 1
    return 0 if re.search(r"(?:^|\.)(embeddings|positions)\.", name) else None


SPEC = FamilySpec(
    config_class=ToyConfig,
    model_classes={cls.__name__: cls for cls in (ToyModel, ToyForMaskedLM, ToyForSequenceClassification)},
    default_class=ToyModel,
    describe=lambda c: f"toy encoder ({c.num_hidden_layers} layers, {c.hidden_size} wide)",
    objectives=("roberta",),
    pretraining_models={"masked_lm": ToyForMaskedLM},
    context_length=lambda c: c.max_position_embeddings,
    heads={"sequence": ToyForSequenceClassification},
    heads_note="a toy encoder is fine-tuned here for sequence tasks",
    finetune_modes=("finetune",),
    feature_encoder=lambda directory, config: ToyModel.from_pretrained(directory, config=config),
    feature_layers=lambda c: c.num_hidden_layers,
    feature_width=lambda c: c.hidden_size,
    input_vectors=lambda stack: stack.embeddings.weight,
    layer_of=layer_of,
    num_layers=lambda model: len(model.toy.layers),
)


@pytest.fixture
def toy_registered():
    register(Family("toy", __name__, ("toy",), "a toy encoder: residual tanh layers"))
    yield
    del FAMILIES["toy"]


@pytest.mark.slow
def test_a_family_defined_here_runs_through_every_command(toy_registered, keyword_task, capsys, tmp_path):
    pretrained, finetuned = tmp_path / "pretrained", tmp_path / "finetuned"
    rng = random.Random(0)
    corpus = tmp_path / "corpus.txt"  # 200 documents of three sentences, blank lines between them
    corpus.write_text("\n\n".join("\n".join(keyword_sentence(rng, rng.random() < 0.5) for _ in range(3))
                                   for _ in range(200)) + "\n")
    status, out, err = run_cli(capsys, "pretrain", "--arch", "toy", "--corpus", corpus, "--vocab-size", "400", "--preset", "tiny", "--seq-len", "32",
                               "--batch-size", "8", "--max-steps", "30", "--eval-every", "15", "--eval-fraction", "0.1",
                               "--cache-dir", tmp_path / "cache", "--out", pretrained, "--no-progress")
    assert status == 0, err
    assert "pre-trained a tiny toy encoder (2 layers, 16 wide) with the roberta objective" in out
    assert json.loads((pretrained / "config.json").read_text())["architectures"] == ["ToyForMaskedLM"]

    status, out, err = run_cli(capsys, "finetune", "--task", "classification", "--model", pretrained,
                               "--train-file", keyword_task / "train.csv", "--dev-file", keyword_task / "dev.csv",
                               "--epochs", "2", "--lr", "1e-2", "--out", finetuned, "--precision", "fp32",
                               "--no-progress")
    assert status == 0, err
    trained = json.loads((finetuned / "eval_results.json").read_text())
    assert json.loads((finetuned / "config.json").read_text())["architectures"] == ["ToyForSequenceClassification"]

    status, out, err = run_cli(capsys, "evaluate", "--model", finetuned, "--data", keyword_task / "dev.csv",
                               "--task", "classification", "--precision", "fp32", "--out", tmp_path / "eval.json")
    assert status == 0, err
    assert json.loads((tmp_path / "eval.json").read_text())["accuracy"] == pytest.approx(trained["accuracy"])

    texts = tmp_path / "texts.txt"
    texts.write_text("an excellent film\na story with music\n")
    status, out, err = run_cli(capsys, "predict", "--model", finetuned, "--input", texts, "--out", tmp_path / "p.tsv")
    assert status == 0, err
    assert len((tmp_path / "p.tsv").read_text().splitlines()) == 3  # a header and one label per text

    from fastapi.testclient import TestClient

    from bertology.uses.serve import ServeConfig, create_app, load_served

    with TestClient(create_app(load_served(str(finetuned), "fp32"), ServeConfig(model=str(finetuned)))) as client:
        answer = client.post("/predict", json={"texts": ["an excellent film"]})
        assert answer.status_code == 200, answer.text
        assert set(answer.json()["predictions"][0]) == {"label", "scores"}
        assert client.get("/info").json()["family"] == "toy"

    status, out, err = run_cli(capsys, "embed", "--model", pretrained, "--input", texts, "--out",
                               tmp_path / "vectors.npy")
    assert status == 0, err
    assert np.load(tmp_path / "vectors.npy").shape == (2, 16)

    status, out, err = run_cli(capsys, "explain", "senses", "--model", pretrained, "--word", "bank", "--out",
                               tmp_path / "senses.png")
    assert status == 0, err
    assert (tmp_path / "senses.png").stat().st_size > 0
    status, out, err = run_cli(capsys, "explain", "attention", "--model", pretrained, "--text", "a bank",
                               "--out", tmp_path / "attention.png")
    assert status == 2 and "has no attention maps to draw" in err  # what its spec does not declare, refused
