"""The `--device` setting (config.Device, ops.resolve_device): every command that places a model
takes it, `cuda` without a GPU is a one-line error, and `cpu` is honoured where a GPU is seen.

This machine has no GPU, so "a GPU is seen" is made up: torch.cuda.is_available() patched to say
True. Any place that still puts a model on the GPU by itself then fails ("Torch not compiled with
CUDA enabled"), so these tests catch a place that does not ask the setting.
"""

import pytest
import torch
from helpers import run_cli, save_task_model, save_tiny_gpt

from bertology.cli import COMMANDS
from bertology.config import Device
from bertology.errors import UserError
from bertology.ops import resolve_device

# The commands that place no model: vocabularies and static vectors (gensim, or GloVe on the CPU), and `info`.
NO_MODEL_PLACED = {"tokenizer train", "info", "static train", "static evaluate", "static neighbors"}
NO_GPU = not torch.cuda.is_available()


def test_every_command_that_places_a_model_takes_device_and_says_so(capsys):
    placing = [command for command in COMMANDS if command.name not in NO_MODEL_PLACED]
    assert len(placing) == len(COMMANDS) - len(NO_MODEL_PLACED)
    assert all(issubclass(command.settings_class(), Device) for command in placing)  # one declaration
    assert not any(issubclass(command.settings_class(), Device) for command in COMMANDS if command not in placing)
    for name in ("embed", "pretrain", "serve"):
        status, out, _ = run_cli(capsys, name, "--help")
        assert status == 0 and "--device {auto,cpu,cuda}" in out
        assert "cuda without a GPU is an error" in " ".join(out.split())


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_one_line_before_any_work(capsys, tmp_path, tiny_model):
    (tmp_path / "in.txt").write_text("a line\n", encoding="utf-8")
    for argv in (["embed", "--model", tiny_model, "--input", tmp_path / "in.txt", "--out", tmp_path / "v.npy"],
                 ["finetune", "--task", "sst2", "--model", tiny_model, "--out", tmp_path / "run"],
                 ["generate", "--model", tiny_model, "--prompt", "hello"]):
        status, out, err = run_cli(capsys, *argv, "--device", "cuda")
        assert status == 2 and out == ""
        assert err == ("bertology: error: --device cuda: PyTorch sees no CUDA device (this PyTorch is built for the "
                       "CPU only); use --device cpu or auto\n"), err
    assert not (tmp_path / "v.npy").exists() and not (tmp_path / "run").exists()
    with pytest.raises(UserError, match="sees no CUDA device"):
        resolve_device("cuda:1")


def test_auto_is_the_gpu_when_one_is_seen_and_the_cpu_otherwise(monkeypatch):
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == resolve_device(None) == torch.device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.fixture
def a_gpu_is_seen(monkeypatch):
    """torch.cuda.is_available() says True: "auto" means CUDA, which this machine cannot use."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.mark.slow
@pytest.mark.usefixtures("a_gpu_is_seen")
def test_cpu_is_honoured_where_a_gpu_is_seen(capsys, tmp_path, tiny_model, minilm_dir):
    """Each kind of place a model is put: the training loop (with its checkpoint's RNG states),
    a fine-tuned model's runner, a feature encoder (embed), a generator, the server's loader."""
    from bertology.inference.runners import open_runner
    from bertology.training.loop import StepOutput, TrainConfig, Trainer
    from bertology.uses.generate import load_generator
    from bertology.uses.serve import load_served

    (tmp_path / "in.txt").write_text("one line\nanother line\n", encoding="utf-8")
    status, _, err = run_cli(capsys, "embed", "--model", tiny_model, "--input", tmp_path / "in.txt",
                             "--out", tmp_path / "v.npy", "--device", "cpu", "--no-progress")
    assert status == 0, err

    class Module(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(3))

        def forward(self, batch):
            return StepOutput((self.weight * batch["x"]).sum(), {})

    batch = {"x": torch.ones(3), "attention_mask": torch.ones(1, 3)}
    trainer = Trainer(Module(), TrainConfig(max_steps=2, device="cpu", progress=False), tmp_path / "run",
                      lambda step: [batch])
    assert trainer.device == torch.device("cpu") and trainer.fit() == "completed"

    task_model = save_task_model(tmp_path / "sst2", minilm_dir, "sst2")
    runner = open_runner(task_model, "fp32", "cpu")
    assert next(runner.model.parameters()).device.type == "cpu"
    served = load_served(str(task_model), "fp32", "cpu")
    assert [answer["label"] in ("0", "1") for answer in served.predict(["a fine film", "dull"])] == [True, True]
    gpt = save_tiny_gpt(tmp_path / "gpt")
    model, _ = load_generator(gpt, "cpu")
    assert next(model.parameters()).device.type == "cpu"
    status, out, err = run_cli(capsys, "generate", "--model", gpt, "--prompt", "the", "--max-new-tokens", "3",
                               "--device", "cpu")
    assert status == 0 and out.startswith("the"), err
