"""Models kept along one pre-training run, and the FLOPs of a training step."""

import pytest
import torch
from safetensors.torch import load_file

from bertology.claims.checkpoints import doubling_steps, pretrained_at_steps, training_flops_per_step
from bertology.claims.experiment import Experiment
from bertology.models.bert import BertConfig


def test_kept_steps_double_up_to_the_budget():
    assert doubling_steps(1024, 5) == [64, 128, 256, 512, 1024]
    assert doubling_steps(30, 2) == [15, 30]
    with pytest.raises(ValueError):
        doubling_steps(4, 5)


def test_flops_count_the_products_of_each_objective():
    config = BertConfig(vocab_size=10, hidden_size=4, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8)
    # per token: a layer 2 x (4 H^2 + 2 H I) + 2 x 2 x T x H = 288 at T = 2; the LM head 2 x (H E + E V) = 112
    assert training_flops_per_step(config, "roberta", rows=1, seq_len=2) == pytest.approx(3 * (288 + 0.15 * 112) * 2)
    assert training_flops_per_step(config, "clm", rows=1, seq_len=2) == pytest.approx(3 * (288 + 112) * 2)
    assert training_flops_per_step(config, "roberta", rows=8, seq_len=2) == \
        8 * training_flops_per_step(config, "roberta", rows=1, seq_len=2)
    mini = BertConfig.from_preset("mini", vocab_size=30522)
    mlm, electra, clm = (training_flops_per_step(mini, objective, rows=32, seq_len=64)
                         for objective in ("roberta", "electra", "clm"))
    assert mlm == pytest.approx(54.8e9, rel=0.01)  # 8.9M FLOPs per token forward, x3, x 2,048 tokens
    assert 1.0 < electra / mlm < 1.1  # a 1/4-wide generator and the detector on top of the same encoder
    assert 2.3 < clm / mlm < 2.6  # the vocabulary head at every position, not 15%
    with pytest.raises(ValueError):
        training_flops_per_step(mini, "t5", rows=1, seq_len=64)


@pytest.mark.slow
def test_one_run_keeps_a_model_at_each_step_and_is_cached(tmp_path, data_dir):
    data_dir / "wikitext-2-raw/wiki.valid.raw"
    logged = []
    experiment = Experiment(tmp_path / "out", data_dir.root, True, [0], tmp_path / "cache", log=logged.append)
    settings = {"preset": "tiny", "objective": "electra", "max_seq_len": 32, "batch_size": 4, "seed": 0}
    run = pretrained_at_steps(experiment, [4, 2], **settings)
    assert run.steps == [2, 4] and list(run.models()) == [2, 4]
    final, last, first = (load_file(path / "model.safetensors") for path in (run.folder, run.model(4), run.model(2)))
    assert set(last) == set(final) and all(torch.equal(last[k], final[k]) for k in final)  # the run's own model
    assert not all(torch.equal(first[k], final[k]) for k in final)  # two steps earlier: other weights
    assert (run.model(2) / "vocab.txt").exists()
    assert not (run.folder / "checkpoints").exists()  # the optimizer states are gone once the models are written
    assert set(run.held_out()) == {2, 4} and "rtd_auc" in run.held_out()[4]
    assert run.flops_per_step() > 0
    assert pretrained_at_steps(experiment, [2, 4], **settings).folder == run.folder
    assert "from the cache" in logged[-1]
